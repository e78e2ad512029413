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
    let text = crate::bounded::read_to_string(record_path(state, host), crate::bounded::TEXT).ok()?;
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
        let Ok(text) = crate::bounded::read_to_string(e.path(), crate::bounded::TEXT) else {
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

/// The hosts in maintenance to complete, in the order given, so that quorum returns: with
/// `running` members whose etcd runs (and are not in maintenance) of `voters`, and `away` the
/// hosts whose etcd the maintenance stopped (intact data, fenced). `None` when quorum needs no
/// maintenance completed, or completing all of them would not be enough.
pub fn completing_restores_quorum(voters: usize, running: usize, away: &[String]) -> Option<Vec<String>> {
    let quorum = crate::etcd::safety::quorum(voters);
    if voters == 0 || running >= quorum || running + away.len() < quorum {
        return None;
    }
    Some(away[..quorum - running].to_vec())
}

/// The advice when quorum is lost and completing a maintenance brings it back (heal and recover
/// print it first, before anything about `hactl up` or `hactl recover`).
pub fn complete_first_advice(hosts: &[String]) -> String {
    let cmds: Vec<String> = hosts
        .iter()
        .map(|h| format!("`hactl maintenance complete {h}`"))
        .collect();
    format!(
        "completing the maintenance of {} restores quorum (its etcd data is intact, stopped and fenced by the maintenance): run {} first; it ends by naming the members still down and what to run for them",
        hosts.join(", "),
        cmds.join(", then ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completing_a_maintenance_restores_quorum_only_when_it_is_enough() {
        let away = vec!["cp1".to_string()];
        // 3 members: cp1 in maintenance, cp2 dead, cp3 runs: completing cp1 makes 2 of 3.
        assert_eq!(completing_restores_quorum(3, 1, &away), Some(away.clone()));
        // Quorum without it: nothing to complete first.
        assert_eq!(completing_restores_quorum(3, 2, &away), None);
        // 5 members, one running: one maintenance is not enough.
        assert_eq!(completing_restores_quorum(5, 1, &away), None);
        let two = vec!["cp1".to_string(), "cp2".to_string()];
        assert_eq!(completing_restores_quorum(5, 1, &two), Some(two.clone()));
        assert_eq!(
            completing_restores_quorum(5, 2, &two),
            Some(vec!["cp1".to_string()])
        );
        assert!(complete_first_advice(&away).contains("`hactl maintenance complete cp1` first"));
    }

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
