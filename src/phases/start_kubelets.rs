//! Static-pod mode only: start the kubelets that run the control plane, before it. On every
//! control-plane host: the kernel settings, containerd, the images (the control-plane images
//! too), the kubelet ([`super::start_nodes::kubelet_steps`], which `start_nodes` then leaves out
//! for these hosts). A kubelet runs the pods of its static-pod directory with no apiserver to
//! talk to, and registers its Node once one answers; `start_kubernetes` then writes the
//! manifests. In systemd mode this phase plans nothing: the kubelets start after the control
//! plane, with the other node components. Like `start_nodes`, it rolls one host at a time when
//! it restarts a running kubelet or containerd (the static pods keep running meanwhile).

use super::start_nodes::{kubelet_steps, plan_rolling, runs_control_plane};
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory};
use crate::plan::{PlannedPhase, Step};

pub struct StartKubelets;

impl Phase for StartKubelets {
    fn title(&self) -> &'static str {
        "Start the kubelets that run the control plane"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.node_hosts()
            .into_iter()
            .filter(|h| runs_control_plane(inv, h))
            .collect()
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        kubelet_steps(host, ctx)
    }
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        plan_rolling(self, ctx)
    }
}
