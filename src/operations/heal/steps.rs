//! heal's restart as a step (pure: no I/O): the restart is recorded first (so the retry period
//! counts from it even if the process dies), then etcd restarts and must answer healthy.

use std::sync::Arc;
use std::time::Duration;

use super::acts::RecordRestart;
use crate::etcd;
use crate::operations::runner::{JournaledStep, StepCode};
use crate::plan::{RemoteCommand, Step};
use crate::state::StateDir;

crate::step_codes! {
    /// heal's own step (its replace is replace's steps).
    pub enum H {
        /// Restart etcd on the member, once per `retryPeriod`.
        Restart = "H1",
        /// Fence an old member for good: a zombie, or one attested dead that answers again.
        Fence = "H2",
    }
}

/// The one step of a restart of `member`, decided at `now` (unix seconds).
pub fn restart(state: &StateDir, member: &str, now: u64) -> Vec<JournaledStep> {
    vec![JournaledStep::new(
        H::Restart.at(member),
        format!("restart etcd on {member}"),
        Some(member),
    )
    .local(Arc::new(RecordRestart {
        state: state.clone(),
        member: member.to_string(),
        now,
    }))
    .step(Step::Run(RemoteCommand::new([
        "systemctl",
        "restart",
        "--no-block",
        etcd::UNIT,
    ])))
    .verify(etcd::probe::member_healthy(member, Duration::from_secs(60)))]
}

/// The one step of heal's fence of the old member on `host` (run `run`).
pub fn fence(
    inv: &crate::inventory::Inventory,
    state: &StateDir,
    host: &str,
    run: &str,
    why: &str,
    guard: crate::old_members::retire::Guard,
) -> Vec<JournaledStep> {
    vec![crate::operations::old_members::fence_step(
        H::Fence.at(host),
        inv,
        state,
        host,
        run,
        &format!("heal {run}"),
        why,
        guard,
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_records_itself_then_restarts_and_waits_for_health() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let steps = restart(&state, "cp2", 7);
        assert_eq!(steps.len(), 1);
        let text = steps[0].render(false);
        assert!(
            text.starts_with("[H1@cp2] restart etcd on cp2 (on cp2)\n"),
            "{text}"
        );
        let record = text.find("operator: record the restart of cp2").unwrap();
        let restart = text
            .find("run: systemctl restart --no-block etcd.service")
            .unwrap();
        assert!(record < restart, "{text}");
        assert!(text.contains("verify: "), "{text}");
    }

    #[test]
    fn a_fence_stops_checks_moves_aside_and_records() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let inv = crate::inventory::load_str(
            std::path::Path::new("c.yaml"),
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  ssh: {agent: true}\n  hosts:\n  - {name: cp1, address: 10.0.0.11, roles: [etcd]}\n  - {name: cp2, address: 10.0.0.12, roles: [etcd]}\n  - {name: cp3, address: 10.0.0.13, roles: [etcd]}\n  - {name: old1, address: 10.0.0.1, roles: []}\n",
        )
        .unwrap();
        let steps = fence(
            &inv,
            &state,
            "old1",
            "heal-fence-old1-x",
            "why",
            crate::old_members::retire::Guard::NotOfClusterOrSilent(11),
        );
        let text = steps[0].render(false);
        assert!(
            text.starts_with("[H2@old1] fence the old member on old1 for good"),
            "{text}"
        );
        assert!(
            text.contains("/var/lib/etcd.hactl-retired-heal-fence-old1-x"),
            "{text}"
        );
        assert!(text.contains("record old1 as fenced for good"), "{text}");
        assert!(text.contains("verify: "), "{text}");
    }
}
