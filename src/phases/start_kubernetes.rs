//! Start control-plane components that are not running: in systemd mode enable and start each
//! unit that is not active; in static-pod mode write the manifest of each component that has
//! none yet. Each waits for its health endpoint. Hosts start together: nothing serves yet on a
//! host whose apiserver is not running (HAProxy's health check already keeps it out).
//!
//! A host whose control plane runs in the other mode ([`other_mode`]) is left to
//! [`super::switch_mode`]: a switch is not a start (the old runners stop first, one host at a
//! time with the API up).

use std::time::Duration;

use super::configure_kubernetes::uploads;
use super::install_kubernetes::control_plane_hosts;
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, KubernetesMode};
use crate::kubernetes::{probe, Component};
use crate::plan::{RemoteCommand, Step};

pub struct StartKubernetes;

/// The inventory's name of `mode`.
pub fn mode_name(mode: KubernetesMode) -> &'static str {
    match mode {
        KubernetesMode::Systemd => "systemd",
        KubernetesMode::StaticPod => "static-pod",
    }
}

/// The mode the host's control plane runs in when it is not `mode` (a unit enabled or running
/// in static-pod mode, a manifest in systemd mode): switching needs more than a start (the old
/// runners stopped, one host at a time with the API up), which [`super::switch_mode`] does.
pub fn other_mode(mode: KubernetesMode, f: &crate::facts::HostFacts) -> Option<&'static str> {
    let other = match mode {
        KubernetesMode::StaticPod => Component::ALL.iter().any(|c| {
            f.units
                .get(&c.unit())
                .is_some_and(|u| u.active == "active" || u.enabled == "enabled")
        }),
        KubernetesMode::Systemd => Component::ALL
            .iter()
            .any(|c| f.files.contains_key(&c.manifest_path())),
    };
    other.then(|| match mode {
        KubernetesMode::StaticPod => mode_name(KubernetesMode::Systemd),
        KubernetesMode::Systemd => mode_name(KubernetesMode::StaticPod),
    })
}

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
        if other_mode(kube.mode, f).is_some() {
            // switch_mode's, one host at a time.
            return Ok(vec![]);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{FileState, HostFacts, UnitState};

    #[test]
    fn a_control_plane_running_in_the_other_mode_is_a_switch() {
        let none = HostFacts::default();
        assert_eq!(other_mode(KubernetesMode::StaticPod, &none), None);
        assert_eq!(other_mode(KubernetesMode::Systemd, &none), None);

        let mut units = HostFacts::default();
        units.units.insert(
            Component::Scheduler.unit(),
            UnitState {
                active: "inactive".into(),
                enabled: "enabled".into(),
                ..UnitState::default()
            },
        );
        assert_eq!(other_mode(KubernetesMode::StaticPod, &units), Some("systemd"));
        assert_eq!(other_mode(KubernetesMode::Systemd, &units), None);
        // A unit that is neither enabled nor running (disabled after a switch) is no switch.
        units.units.get_mut(&Component::Scheduler.unit()).unwrap().enabled = "disabled".into();
        assert_eq!(other_mode(KubernetesMode::StaticPod, &units), None);

        let mut manifest = HostFacts::default();
        manifest
            .files
            .insert(Component::ApiServer.manifest_path(), FileState::default());
        assert_eq!(other_mode(KubernetesMode::Systemd, &manifest), Some("static-pod"));
        assert_eq!(other_mode(KubernetesMode::StaticPod, &manifest), None);
    }
}
