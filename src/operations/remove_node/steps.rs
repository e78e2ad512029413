//! The steps of a node removal, as data for the journaled runner: each with a postcondition, so
//! `--resume` (or a second run) skips what is done and `--dry-run` prints the exact commands.
//!
//! Order: the Node is cordoned and drained while its kubelet still runs (its pods go elsewhere,
//! PodDisruptionBudgets respected), then its node components stop, the Node is deleted (a running
//! kubelet would register it again), its data is moved aside and hactl's files removed, and the
//! remaining nodes drop their route to it.
//!
//! Invariant: pure. Remote steps are built here; operator-side steps are the acts of `acts.rs`.

use std::sync::Arc;

use super::acts::{DeleteNode, Drain, Inputs, Reroute};
use super::decide::Decisions;
use crate::kubernetes::node;
use crate::operations::runner::{JournaledStep, StepCode};
use crate::plan::RemoteCommand;

crate::step_codes! {
    /// The steps of a node removal, in order.
    pub enum Rn {
        /// Cordoned, and every evictable pod evicted (budgets respected).
        Drain = "RN1",
        /// Its kubelet, kube-proxy, pods, containerd and pod routes stopped.
        Stop = "RN2",
        /// The Node deleted from the API.
        DeleteNode = "RN3",
        /// Its data dirs moved aside, hactl's files removed.
        MoveAside = "RN4",
        /// The remaining nodes' routes without it.
        Reroute = "RN5",
    }
}

/// Read-only: neither the kubelet nor containerd runs on the host.
pub fn node_stopped() -> RemoteCommand {
    RemoteCommand::read_only([
        "sh",
        "-c",
        "! systemctl is-active -q \"$1\" && ! systemctl is-active -q \"$2\"",
        "hactl-node-stopped",
        node::KUBELET_UNIT,
        node::CONTAINERD_UNIT,
    ])
}

/// Read-only: no data dir of the node components is left in place, nor the kubelet's unit.
fn moved() -> RemoteCommand {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        "for d in \"$@\"; do [ ! -e \"$d\" ] || exit 1; done".to_string(),
        "hactl-node-moved".to_string(),
        node::KUBELET_UNIT_PATH.to_string(),
    ];
    argv.extend(node::DATA_DIRS.iter().map(|d| d.to_string()));
    RemoteCommand::read_only(argv)
}

/// Every file of the node layer hactl placed on a worker, removed.
fn remove_files(inputs: &Inputs) -> RemoteCommand {
    let mut argv = vec!["rm".to_string(), "-f".to_string(), "--".to_string()];
    if let Some(kube) = &inputs.inv.kubernetes {
        argv.extend(
            node::managed_paths(kube)
                .into_iter()
                .filter(|p| !p.starts_with("/usr/lib/cni/") && p != node::CONTAINERD_CONFIG),
        );
    }
    RemoteCommand::new(argv)
}

/// The steps of `d`.
pub fn build(d: &Decisions, inputs: &Arc<Inputs>) -> Vec<JournaledStep> {
    let mut steps = Vec::new();
    let drain = Arc::new(Drain {
        inputs: inputs.clone(),
        node: d.node.clone(),
        host_gone: d.host.is_none(),
    });
    steps.push(
        JournaledStep::new(Rn::Drain, format!("cordon and drain Node {}", d.node), None)
            .done_when_local(drain.clone())
            .local(drain),
    );
    if let Some(h) = &d.host {
        steps.push(
            JournaledStep::new(
                Rn::Stop.at(h),
                "stop the kubelet, kube-proxy, the pods, containerd and the pod routes",
                Some(h),
            )
            .done_when(node_stopped())
            .run(crate::converge::reset::stop_node_components()),
        );
    }
    let delete = Arc::new(DeleteNode {
        inputs: inputs.clone(),
        node: d.node.clone(),
    });
    steps.push(
        JournaledStep::new(Rn::DeleteNode, format!("delete Node {}", d.node), None)
            .done_when_local(delete.clone())
            .local(delete),
    );
    if let Some(h) = &d.host {
        steps.push(
            JournaledStep::new(
                Rn::MoveAside.at(h),
                format!(
                    "move the node data aside as <dir>.{} and remove hactl's node files",
                    d.aside()
                ),
                Some(h),
            )
            .done_when(moved())
            .run(crate::converge::reset::move_node_data(&d.aside()))
            .run(remove_files(inputs))
            .run(crate::converge::reset::give_back_command(node::CONTAINERD_CONFIG))
            .run(crate::converge::reset::remove_image_archives())
            .run(RemoteCommand::new(["systemctl", "daemon-reload"])),
        );
    }
    let reroute = Arc::new(Reroute {
        inputs: inputs.clone(),
    });
    steps.push(
        JournaledStep::new(Rn::Reroute, "route the remaining nodes without it", None)
            .done_when_local(reroute.clone())
            .local(reroute),
    );
    steps
}
