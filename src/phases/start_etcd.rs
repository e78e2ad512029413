//! Start etcd members that are installed but not running: every member at once on a bootstrap
//! (they must meet within one election window anyway), or stopped members whose data is intact.

use std::time::Duration;

use super::{Ctx, Phase, PlanError};
use crate::etcd::{probe, UNIT};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{RemoteCommand, Step};

pub struct StartEtcd;

impl Phase for StartEtcd {
    fn title(&self) -> &'static str {
        "Start etcd members"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        if ctx.etcd.joiners.contains(&host.name) {
            return Ok(vec![]); // joined one at a time, as a learner, by JoinEtcd
        }
        let f = ctx.facts(host);
        let unit = f.units.get(UNIT).cloned().unwrap_or_default();
        let mut steps = Vec::new();
        if unit.enabled != "enabled" {
            steps.push(Step::Run(RemoteCommand::new(["systemctl", "enable", UNIT])));
        }
        if unit.active != "active" {
            // --no-block: a bootstrapping member is ready only once a quorum has started.
            steps.push(Step::Run(RemoteCommand::new([
                "systemctl",
                "start",
                "--no-block",
                UNIT,
            ])));
            steps.push(Step::Wait(probe::member_healthy(
                &host.name,
                Duration::from_secs(90),
            )));
        }
        Ok(steps)
    }
}
