//! Start control-plane components that are not running: in systemd mode enable and start each
//! unit that is not active; in static-pod mode write the manifest of each component that has
//! none yet. Each waits for its health endpoint. Hosts start together: nothing serves yet on a
//! host whose apiserver is not running (HAProxy's health check already keeps it out).

use std::time::Duration;

use super::configure_kubernetes::uploads;
use super::install_kubernetes::control_plane_hosts;
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, KubernetesMode};
use crate::kubernetes::{probe, Component};
use crate::plan::{RemoteCommand, Step};

pub struct StartKubernetes;

impl Phase for StartKubernetes {
    fn title(&self) -> &'static str {
        "Start the Kubernetes control plane"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        control_plane_hosts(inv)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        let f = ctx.facts(host);
        let mut steps = Vec::new();
        match kube.mode {
            KubernetesMode::Systemd => {
                for component in Component::ALL {
                    let unit = f.units.get(&component.unit()).cloned().unwrap_or_default();
                    if unit.enabled != "enabled" {
                        steps.push(Step::Run(RemoteCommand::new([
                            "systemctl".to_string(),
                            "enable".to_string(),
                            component.unit(),
                        ])));
                    }
                    if unit.active != "active" {
                        steps.push(Step::Run(super::start_unit(&component.unit())));
                        // The first start of an apiserver bootstraps RBAC and priority classes.
                        steps.push(Step::Wait(probe::wait_healthy(
                            component,
                            host,
                            Duration::from_secs(180),
                        )));
                    }
                }
            }
            KubernetesMode::StaticPod => {
                let (_, manifests) = uploads(host, ctx)?;
                for (component, manifest) in Component::ALL.into_iter().zip(manifests) {
                    if !f.files.contains_key(&manifest.path) {
                        steps.push(Step::Upload(manifest));
                        // The kubelet may first pull the image.
                        steps.push(Step::Wait(probe::wait_healthy(
                            component,
                            host,
                            Duration::from_secs(600),
                        )));
                    }
                }
            }
        }
        Ok(steps)
    }
}
