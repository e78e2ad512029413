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
}
