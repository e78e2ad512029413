//! Deploy the cluster DNS (`kubernetes.dns`): the CoreDNS objects of [`crate::kubernetes::dns`],
//! each sent by server-side apply through the API once the control plane and the Nodes are up.
//!
//! Planned from what planning read through the API ([`Ctx::dns`]): nothing when every object is
//! hactl's and current; a refusal (exit 2) when an object of the same name is someone else's or
//! the Service's address would have to change. Without `kubernetes.dns` nothing is planned, and
//! objects an earlier run applied are left in place (removing the section does not delete a
//! running DNS; `kubectl delete` does).

use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::kubernetes::dns::{self, DnsFacts};
use crate::plan::Step;

pub struct DeployDns;

impl Phase for DeployDns {
    fn title(&self) -> &'static str {
        "Deploy the cluster DNS (CoreDNS, through the API)"
    }
    /// The first control-plane host, in whose name the requests are listed (they go through
    /// whichever apiserver answers first).
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::ControlPlane).into_iter().take(1).collect()
    }
    fn steps(&self, _host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(spec) = ctx.inv.kubernetes.as_ref().and_then(|k| k.dns.as_ref()) else {
            return Ok(vec![]);
        };
        let unread = DnsFacts::Unknown("not read".into());
        let facts = ctx.dns.unwrap_or(&unread);
        Ok(dns::decide(spec, facts)?.into_iter().map(Step::Api).collect())
    }
}
