//! Restart running etcd members whose unit or certificates changed, one at a time: each restart
//! waits for the whole cluster to be healthy before, and for the member and the cluster after,
//! so the cluster never loses quorum; a member that does not come back stops the rollout.

use std::time::Duration;

use super::etcd_files::member_files;
use super::{differs, Ctx, Phase, PlanError};
use crate::etcd::{probe, UNIT};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{Parallelism, RemoteCommand, Step};

pub struct RollEtcd;

/// Files whose change needs a restart (scripts and the client certificate do not).
fn needs_restart(path: &str) -> bool {
    path == crate::etcd::UNIT_PATH
        || [".crt", ".key"].iter().any(|ext| path.ends_with(ext)) && !path.contains("/client.")
}

impl Phase for RollEtcd {
    fn title(&self) -> &'static str {
        "Restart changed etcd members"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    /// One at a time: each restart is a planned disruption of a quorum member.
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn disruptive(&self) -> bool {
        true
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        if !ctx.etcd.running.contains(&host.name) || !ctx.etcd.has_data.contains(&host.name) {
            return Ok(vec![]);
        }
        let f = ctx.facts(host);
        let changed = member_files(host, ctx)?
            .iter()
            .any(|u| needs_restart(&u.path) && differs(f, u));
        if !changed {
            return Ok(vec![]);
        }
        Ok(vec![
            Step::Wait(probe::cluster_healthy(
                &format!("before restarting {}", host.name),
                Duration::from_secs(30),
            )),
            Step::Run(RemoteCommand::new(["systemctl", "restart", UNIT])),
            Step::Wait(probe::member_healthy(&host.name, Duration::from_secs(60))),
            Step::Wait(probe::cluster_healthy(
                &format!("after restarting {}", host.name),
                Duration::from_secs(60),
            )),
        ])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_unit_and_member_certificates_need_a_restart() {
        assert!(super::needs_restart("/etc/systemd/system/etcd.service"));
        assert!(super::needs_restart("/etc/hactl/pki/etcd/peer.key"));
        assert!(super::needs_restart("/etc/hactl/pki/etcd/ca.crt"));
        assert!(!super::needs_restart("/etc/hactl/pki/etcd/client.crt"));
        assert!(!super::needs_restart("/usr/local/sbin/hactl-etcdctl"));
    }
}
