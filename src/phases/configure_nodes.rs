//! Configure the node components on every control-plane and worker host: the trust file,
//! certificates, keys and kubeconfigs of the kubelet and kube-proxy, the kubelet's config file,
//! containerd's configuration (the distribution's kept as `.hactl-orig` first), the kernel
//! settings, the units, the pod network script and, once the host's Node has its pod CIDR, the
//! CNI configuration and the routes to the other nodes; then `systemctl daemon-reload` when a
//! unit changed. Starts and restarts nothing (see `start_nodes`).

use super::{differs, keep_original, uploads_needed, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::kubernetes::node::{self, NodeFiles};
use crate::kubernetes::{files::CA_CRT, KubernetesPlanError};
use crate::plan::{RemoteCommand, Step};

pub struct ConfigureNodes;

/// The host's node files ([`node::node_files`]) from the context.
pub fn files(host: &Host, ctx: &Ctx<'_>) -> Result<NodeFiles, PlanError> {
    let inputs = ctx.kubernetes.ok_or(KubernetesPlanError::MissingInputs)?;
    let images = node::node_images(ctx.inv, inputs)?;
    Ok(node::node_files(host, ctx.inv, ctx.pki, &images, ctx.facts)?)
}

impl Phase for ConfigureNodes {
    fn title(&self) -> &'static str {
        "Configure the node components"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.node_hosts()
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let f = ctx.facts(host);
        let files = files(host, ctx)?;
        let mut steps = Vec::new();
        // A control-plane host's trust file is the control plane's, written by its own phase.
        let own = |u: &&crate::plan::Upload| !(host.has(Role::ControlPlane) && u.path == CA_CRT);
        steps.extend(uploads_needed(
            f,
            files.config.iter().filter(own).cloned().collect(),
        ));
        for u in &files.containerd {
            steps.extend(keep_original(f, u));
        }
        steps.extend(uploads_needed(f, files.containerd.clone()));
        steps.extend(uploads_needed(f, files.kernel.clone()));
        steps.extend(uploads_needed(f, files.scripts.clone()));
        steps.extend(uploads_needed(f, files.network.clone()));
        let unit_changed = files.units.iter().any(|u| differs(f, u));
        steps.extend(uploads_needed(f, files.units.clone()));
        if unit_changed {
            steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
        }
        Ok(steps)
    }
}
