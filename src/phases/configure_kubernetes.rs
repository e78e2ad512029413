//! Configure the control plane: certificates and keys, kubeconfigs, the encryption configuration,
//! the audit policy and (systemd mode) the three units, then `systemctl daemon-reload` when a
//! unit changed. Starts and restarts nothing; static-pod manifests are written by the start and
//! roll phases, since writing one is what (re)starts a pod.

use super::install_kubernetes::control_plane_hosts;
use super::{differs, uploads_needed, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, KubernetesMode};
use crate::kubernetes::{files, Component, KubernetesPlanError};
use crate::plan::{RemoteCommand, Step, Upload};

pub struct ConfigureKubernetes;

/// The host's files and, in systemd mode, its units.
pub fn uploads(host: &Host, ctx: &Ctx<'_>) -> Result<(Vec<Upload>, Vec<Upload>), PlanError> {
    let inputs = ctx.kubernetes.ok_or(KubernetesPlanError::MissingInputs)?;
    let host_files = files::host_files(host, ctx.inv, ctx.pki, inputs)?;
    let mut runners = Vec::new();
    for component in Component::ALL {
        runners.push(files::runner(component, host, ctx.inv, &host_files, inputs)?);
    }
    Ok((host_files, runners))
}

impl Phase for ConfigureKubernetes {
    fn title(&self) -> &'static str {
        "Configure the Kubernetes control plane"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        control_plane_hosts(inv)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        let f = ctx.facts(host);
        let (host_files, runners) = uploads(host, ctx)?;
        let mut steps = uploads_needed(f, host_files);
        if kube.mode == KubernetesMode::Systemd {
            let unit_changed = runners.iter().any(|u| differs(f, u));
            steps.extend(uploads_needed(f, runners));
            if unit_changed {
                steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
            }
        }
        Ok(steps)
    }
}
