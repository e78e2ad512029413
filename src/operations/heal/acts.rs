//! heal's operator-side act: the restart recorded in `heal.json` before etcd restarts.

use async_trait::async_trait;

use crate::exec::Transports;
use crate::operations::remediation::{load_records, save_records};
use crate::operations::runner::LocalAct;
use crate::state::StateDir;

/// Writes `lastRestart` of the member: the ladder restarts once per `retryPeriod`.
pub struct RecordRestart {
    pub state: StateDir,
    pub member: String,
    pub now: u64,
}

#[async_trait]
impl LocalAct for RecordRestart {
    fn describe(&self) -> String {
        format!(
            "record the restart of {} in {} (lastRestart: heal restarts once per retryPeriod)",
            self.member,
            self.state.path.join("heal.json").display()
        )
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        let mut r = load_records(&self.state);
        r.members.entry(self.member.clone()).or_default().last_restart = Some(self.now);
        save_records(&self.state, &r)?;
        Ok(serde_json::json!({ "lastRestart": self.now }))
    }
}
