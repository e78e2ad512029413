//! The maintenance record: which host is out of service, at which stage, and what hactl stopped.
//!
//! It lives in the state dir (`maintenance/<host>.json`) and on the host
//! (`/var/lib/hactl/maintenance/<host>.json`). While a record has not reached
//! [`Stage::Complete`], the host's member counts as unhealthy in every budget, so heal, replace
//! and a second maintenance all read it here.
//!
//! Invariant: stages only go forward (Idle → Cordon → Drain → StopControlPlane → Complete); the
//! JSON spells each stage as its name, so records written before the enum read back unchanged.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::state::StateDir;

/// Where a host keeps its own copy of the record.
pub const HOST_RECORD_DIR: &str = "/var/lib/hactl/maintenance";

/// A stage of a host's maintenance, in the order they are entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Stage {
    Idle,
    Cordon,
    Drain,
    StopControlPlane,
    Complete,
}

impl Stage {
    /// The stage's name: in the record, the journal step `stage-<name>` and the Node annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Idle => "Idle",
            Stage::Cordon => "Cordon",
            Stage::Drain => "Drain",
            Stage::StopControlPlane => "StopControlPlane",
            Stage::Complete => "Complete",
        }
    }
    /// Whether `complete` at this stage cancels (nothing was stopped yet).
    pub fn cancels(self) -> bool {
        matches!(self, Stage::Idle | Stage::Cordon | Stage::Drain)
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A host in maintenance, as recorded in the state dir and on the host.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceRecord {
    pub host: String,
    pub stage: Stage,
    pub since: String,
    #[serde(default)]
    pub reason: String,
    /// Units hactl stopped, in stop order.
    #[serde(default)]
    pub stopped: Vec<String>,
}

/// Where the state dir keeps `host`'s record.
pub fn record_path(state: &StateDir, host: &str) -> std::path::PathBuf {
    state.path.join("maintenance").join(format!("{host}.json"))
}

/// `host`'s record, if it has one that parses.
pub fn read_record(state: &StateDir, host: &str) -> Option<MaintenanceRecord> {
    let text = std::fs::read_to_string(record_path(state, host)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Hosts with a maintenance record that has not reached `Complete`.
pub fn maintenance_records(state: &StateDir) -> BTreeMap<String, MaintenanceRecord> {
    let dir = state.path.join("maintenance");
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if let Ok(r) = serde_json::from_str::<MaintenanceRecord>(&text) {
            if r.stage != Stage::Complete {
                out.insert(r.host.clone(), r);
            }
        }
    }
    out
}

/// Member names in maintenance (their etcd may be stopped: counted unhealthy).
pub fn in_maintenance(state: &StateDir) -> BTreeSet<String> {
    maintenance_records(state).into_keys().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_read_and_write_as_their_names() {
        let text = r#"{"host":"cp1","stage":"StopControlPlane","since":"t","stopped":["etcd.service"]}"#;
        let r: MaintenanceRecord = serde_json::from_str(text).unwrap();
        assert_eq!(r.stage, Stage::StopControlPlane);
        assert_eq!(r.reason, "");
        let back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["stage"], "StopControlPlane");
        assert!(Stage::Idle < Stage::Cordon && Stage::Drain < Stage::Complete);
        assert!(Stage::Drain.cancels() && !Stage::StopControlPlane.cancels());
        assert!(
            serde_json::from_str::<MaintenanceRecord>(r#"{"host":"h","stage":"Later","since":"t"}"#).is_err()
        );
    }
}
