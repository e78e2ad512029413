//! Configure etcd members: certificates, helper scripts, the unit and (for a member without
//! data) its initial env; `systemctl daemon-reload` when the unit changed. Starts nothing.

use super::etcd_files::{initial_env, member_files};
use super::{differs, uploads_needed, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{RemoteCommand, Step};

pub struct ConfigureEtcd;

impl Phase for ConfigureEtcd {
    fn title(&self) -> &'static str {
        "Configure etcd members"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let f = ctx.facts(host);
        let files = member_files(host, ctx)?;
        let unit_changed = files
            .iter()
            .any(|u| u.path == crate::etcd::UNIT_PATH && differs(f, u));
        // An etcd.service of the operator's own in /etc/systemd/system is kept once.
        let mut steps: Vec<Step> = files.iter().filter_map(|u| super::keep_original(f, u)).collect();
        steps.extend(uploads_needed(f, files));
        if let Some(env) = initial_env(host, ctx)? {
            if differs(f, &env) {
                steps.push(Step::Upload(env));
            }
        }
        if unit_changed {
            steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
        }
        Ok(steps)
    }
}
