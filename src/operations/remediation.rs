//! Retry records of remediations: per etcd member, when it was first seen unhealthy, restarted,
//! remediated, and how many remediations failed. heal's ladder reads them; a `hactl replace`
//! counts as a remediation too, so both write them. They live in `heal.json` in the state dir.
//!
//! Invariant: the state dir is the source; a Node annotation is only a mirror of it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::state::StateDir;

/// Per-member remediation record, kept in `heal.json` in the state dir.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Unix seconds when both vantage points first saw it unhealthy (cleared when healthy).
    #[serde(default)]
    pub first_unhealthy: Option<u64>,
    #[serde(default)]
    pub last_restart: Option<u64>,
    #[serde(default)]
    pub last_remediation: Option<u64>,
    #[serde(default)]
    pub last_failure: Option<u64>,
    #[serde(default)]
    pub retry_count: u32,
    #[serde(default)]
    pub last_error: String,
    /// The annotation value last written to the member's Node (or found to have no Node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotated: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Records {
    #[serde(default)]
    pub members: BTreeMap<String, Record>,
}

/// Where the records live.
pub fn records_path(state: &StateDir) -> std::path::PathBuf {
    state.path.join("heal.json")
}

pub fn load_records(state: &StateDir) -> Records {
    crate::bounded::read_to_string(records_path(state), crate::bounded::TEXT)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

pub fn save_records(state: &StateDir, r: &Records) -> anyhow::Result<()> {
    state.write_secret("heal.json", serde_json::to_string_pretty(r)?.as_bytes())?;
    Ok(())
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A remediation of `member` failed: count a retry. Returns the new count.
pub fn record_failure(state: &StateDir, member: &str, error: &str) -> anyhow::Result<u32> {
    let mut r = load_records(state);
    let rec = r.members.entry(member.to_string()).or_default();
    rec.retry_count += 1;
    rec.last_failure = Some(unix_now());
    rec.last_remediation = Some(unix_now());
    rec.last_error = error.lines().last().unwrap_or("").chars().take(300).collect();
    let n = rec.retry_count;
    save_records(state, &r)?;
    Ok(n)
}

/// A remediation of `member` succeeded.
pub fn record_success(state: &StateDir, member: &str) -> anyhow::Result<()> {
    let mut r = load_records(state);
    let rec = r.members.entry(member.to_string()).or_default();
    rec.last_remediation = Some(unix_now());
    rec.first_unhealthy = None;
    save_records(state, &r)
}
