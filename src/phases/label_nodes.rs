//! Label the control-plane Nodes with the role names their minor uses (`kubernetes::gates`):
//! NodeRestriction forbids a kubelet to set `node-role.kubernetes.io/*` on its own Node, so
//! hactl sets them through the API, from the operator machine, once the Node registered. (The
//! matching taints are registered by the kubelet itself: `--register-with-taints`.)
//!
//! Planned from the labels the facts read on each Node: a Node that carries them plans nothing.

use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::kubernetes::node;
use crate::plan::{ApiRequest, Step};

pub struct LabelNodes;

impl Phase for LabelNodes {
    fn title(&self) -> &'static str {
        "Label the control-plane Nodes (through the API)"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.node_hosts()
            .into_iter()
            .filter(|h| h.has(Role::ControlPlane))
            .collect()
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        let missing = node::missing_labels(host, kube, ctx.facts(host));
        if missing.is_empty() {
            return Ok(vec![]);
        }
        Ok(vec![Step::Api(ApiRequest::merge_patch(
            node::node_path(&host.name),
            node::labels_patch(&missing),
        ))])
    }
}
