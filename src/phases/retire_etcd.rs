//! Disable etcd on hosts that no longer have the etcd role: a host whose member was replaced
//! elsewhere (`replace --host NEW` keeps it with `roles: []`) must not start a member of its own
//! at boot. The unit is disabled, not stopped: taking a member of the cluster out is `hactl
//! replace`'s or `hactl remove`'s job, never a side effect of `up`. An etcd there that is *not*
//! a member of the cluster (a zombie), or a host attested dead that answers again, is fenced for
//! good by `fence_old_members`, the phase before, and skipped here.
//!
//! Invariant: acts only on hactl's unit (its file at [`crate::etcd::UNIT_PATH`] is present) when
//! it is enabled, so a converged cluster plans nothing.

use super::{Ctx, Phase, PlanError};
use crate::backup::TIMER;
use crate::etcd::{UNIT, UNIT_PATH};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{RemoteCommand, Step};

pub struct RetireEtcd;

impl Phase for RetireEtcd {
    fn title(&self) -> &'static str {
        "Disable etcd on hosts without the etcd role"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.hosts.iter().filter(|h| !h.has(Role::Etcd)).collect()
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        if super::fence_old_members::why(host, ctx).is_some() {
            return Ok(vec![]); // fenced for good by the phase before
        }
        let f = ctx.facts(host);
        if !f.files.contains_key(UNIT_PATH) {
            return Ok(vec![]);
        }
        let enabled: Vec<&str> = [UNIT, TIMER]
            .into_iter()
            .filter(|u| f.units.get(*u).is_some_and(|s| s.enabled == "enabled"))
            .collect();
        if enabled.is_empty() {
            return Ok(vec![]);
        }
        let mut argv = vec!["systemctl", "disable"];
        argv.extend(enabled);
        Ok(vec![Step::Run(RemoteCommand::new(argv))])
    }
}
