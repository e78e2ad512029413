//! `<state>/members.json`: every host that has held an etcd member of this cluster, of which
//! cluster ID, and whether hactl has fenced it for good since.
//!
//! Written by the commands that change membership (`up` after a run that joined or bootstrapped
//! members, or fenced an old one; `recover`, `replace`, `remove` and heal's fence of an old
//! member), read by `recover` (every host here that is not fenced is a member to account for),
//! `up`, `heal` and `status` (an old member attested dead is fenced the moment it answers again).
//!
//! A state directory from before this file existed has none: [`load`] then derives the record
//! from what the directory holds ([`derive`]): the etcd peer certificate the PKI issued to every
//! host that ever had the etcd role (`pki/etcd/peer-<host>.crt`, never pruned; its SAN carries
//! the address), the inventory's etcd hosts, and the journals of replace and remove runs that
//! fenced the member they took out. `known_hosts` records addresses, not roles, so it cannot tell
//! a member's host from a load balancer and is not read.
//!
//! Invariant: reading never writes (`status` and every dry run stay read-only: a derived record
//! lives in memory until a mutating command saves it); a host's state only moves towards fenced
//! unless a later run makes it a member again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::inventory::{Inventory, Role};
use crate::state::{StateDir, StateError, StateView};

/// The file in the state directory.
pub const FILE: &str = "members.json";
/// Its `kind`.
pub const KIND: &str = "MemberHistory";

/// What hactl knows of a host that held a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub enum HostState {
    /// Holds a member of the current cluster (as last recorded).
    #[default]
    Member,
    /// Held a member of this or an earlier cluster and left it without hactl fencing it (or
    /// nothing says it did): a recover must account for it.
    Old,
    /// Attested powered off (`--confirm-dead`) while its member was taken out: fenced the
    /// moment it answers again (`hactl up`, `hactl heal`; `hactl status` names the command).
    AwaitingFence,
    /// Fenced for good: its etcd (and control-plane units) stopped, disabled and fenced, its
    /// data dir moved aside.
    Fenced,
}

impl HostState {
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Member => "member",
            HostState::Old => "old",
            HostState::AwaitingFence => "awaitingFence",
            HostState::Fenced => "fenced",
        }
    }
}

/// One host's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct HostRecord {
    /// Its address when it held the member (empty when unknown).
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub state: HostState,
    /// Every cluster ID (hex) it held a member of, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// The member ID (hex) it held in the newest of them, when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub member_id: String,
    /// What wrote the state: `up`, `recover <run>`, `replace <run>`, `remove <run>`,
    /// `heal <run>`, `derived`.
    #[serde(default)]
    pub by: String,
    /// When (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
    /// Where its data dir went when it was fenced.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data_aside: String,
}

/// The whole record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    pub api_version: String,
    pub kind: String,
    /// The current cluster's ID (hex), as last recorded; empty when unknown.
    #[serde(default)]
    pub cluster_id: String,
    /// Per host name.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostRecord>,
    /// Derived from an older state directory rather than read from [`FILE`].
    #[serde(skip)]
    pub derived: bool,
}

impl Default for History {
    fn default() -> Self {
        History {
            api_version: crate::inventory::API_VERSION.to_string(),
            kind: KIND.to_string(),
            cluster_id: String::new(),
            hosts: BTreeMap::new(),
            derived: false,
        }
    }
}

/// A member as a writer saw it: its host, the host's address and the member ID (hex) when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub host: String,
    pub address: String,
    pub member_id: String,
}

impl History {
    /// Records `members` as the membership of cluster `cluster_id` (hex): each becomes a member
    /// of it; a host recorded as a member of the current cluster that is not among them becomes
    /// [`HostState::Old`] (it left without a fence hactl knows of: a later run that fences it
    /// says so). Returns whether anything changed.
    pub fn record_members(&mut self, cluster_id: &str, members: &[Seen], by: &str, at: &str) -> bool {
        let before = self.clone();
        if !cluster_id.is_empty() {
            self.cluster_id = cluster_id.to_string();
        }
        for (name, r) in self.hosts.iter_mut() {
            if r.state == HostState::Member && !members.iter().any(|m| &m.host == name) {
                r.state = HostState::Old;
                r.by = by.to_string();
                r.at = at.to_string();
            }
        }
        for m in members {
            let r = self.hosts.entry(m.host.clone()).or_default();
            let changed = r.state != HostState::Member
                || (!m.address.is_empty() && r.address != m.address)
                || (!m.member_id.is_empty() && r.member_id != m.member_id)
                || (!cluster_id.is_empty() && r.clusters.last().map(String::as_str) != Some(cluster_id));
            if !changed {
                continue;
            }
            r.state = HostState::Member;
            if !m.address.is_empty() {
                r.address = m.address.clone();
            }
            if !m.member_id.is_empty() {
                r.member_id = m.member_id.clone();
            }
            if !cluster_id.is_empty() && r.clusters.last().map(String::as_str) != Some(cluster_id) {
                r.clusters.push(cluster_id.to_string());
            }
            r.data_aside.clear();
            r.by = by.to_string();
            r.at = at.to_string();
        }
        *self != before
    }

    /// `host` fenced for good by `by`, its data dir moved to `data_aside` (empty: none was
    /// there, and where an earlier fence moved it stays recorded).
    pub fn mark_fenced(&mut self, host: &str, address: &str, by: &str, at: &str, data_aside: &str) {
        let r = self.hosts.entry(host.to_string()).or_default();
        r.state = HostState::Fenced;
        if !address.is_empty() {
            r.address = address.to_string();
        }
        r.by = by.to_string();
        r.at = at.to_string();
        if !data_aside.is_empty() {
            r.data_aside = data_aside.to_string();
        }
    }

    /// `host` attested dead by `by`: to be fenced when it answers again. A fenced host stays
    /// fenced.
    pub fn mark_awaiting_fence(&mut self, host: &str, address: &str, by: &str, at: &str) {
        let r = self.hosts.entry(host.to_string()).or_default();
        if r.state == HostState::Fenced {
            return;
        }
        r.state = HostState::AwaitingFence;
        if !address.is_empty() {
            r.address = address.to_string();
        }
        r.by = by.to_string();
        r.at = at.to_string();
    }

    /// Hosts that held a member and are not fenced for good, in name order.
    pub fn unfenced(&self) -> impl Iterator<Item = (&String, &HostRecord)> {
        self.hosts.iter().filter(|(_, r)| r.state != HostState::Fenced)
    }

    /// The state of `host` (`None`: it never held a member as far as hactl knows).
    pub fn state_of(&self, host: &str) -> Option<HostState> {
        self.hosts.get(host).map(|r| r.state)
    }

    /// The host that held member `member_id` (hex) in any cluster.
    pub fn host_of_member(&self, member_id: &str) -> Option<&str> {
        self.hosts
            .iter()
            .find(|(_, r)| !r.member_id.is_empty() && r.member_id.eq_ignore_ascii_case(member_id))
            .map(|(h, _)| h.as_str())
    }
}

/// The record of `state`: [`FILE`], or (none yet) derived from the directory ([`derive`]).
/// Never writes.
pub fn load(state: &StateView, inv: &Inventory) -> History {
    match state.read(FILE) {
        Ok(Some(text)) => match serde_json::from_str::<History>(&text) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(
                    "{}: not a member history ({e}); deriving one from the state directory",
                    state.file(FILE).display()
                );
                derive(state, inv)
            }
        },
        _ => derive(state, inv),
    }
}

/// Saves `history` (0600, atomically).
pub fn save(state: &StateDir, history: &History) -> Result<(), StateError> {
    let text = serde_json::to_string_pretty(history).map_err(std::io::Error::other)?;
    state.write_file(FILE, format!("{text}\n").as_bytes(), 0o600)?;
    Ok(())
}

/// Loads the record, lets `change` edit it, and saves it when it changed (or was derived).
pub fn update(
    state: &StateDir,
    inv: &Inventory,
    change: impl FnOnce(&mut History),
) -> Result<History, StateError> {
    let mut h = load(&state.view(), inv);
    let before = h.clone();
    change(&mut h);
    if h != before || h.derived {
        h.derived = false;
        save(state, &h)?;
    }
    Ok(h)
}

/// The record of a state directory that has no [`FILE`] yet (see the module's comment).
pub fn derive(state: &StateView, inv: &Inventory) -> History {
    let certs = peer_certificate_hosts(&state.file("pki/etcd"));
    let fenced = fenced_by_journals(state);
    derive_from(inv, &certs, &fenced)
}

/// [`derive`] from what was read: `certs` (host → address from its peer certificate) and
/// `fenced` (host → the run that fenced it), pure.
pub fn derive_from(
    inv: &Inventory,
    certs: &BTreeMap<String, String>,
    fenced: &BTreeMap<String, String>,
) -> History {
    let mut h = History {
        derived: true,
        ..History::default()
    };
    let etcd: Vec<&str> = inv
        .with_role(Role::Etcd)
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    for (name, address) in certs {
        let address = inv
            .host(name)
            .map(|h| h.address.to_string())
            .unwrap_or_else(|| address.clone());
        let (state, by) = if etcd.contains(&name.as_str()) {
            (HostState::Member, "derived".to_string())
        } else if let Some(run) = fenced.get(name) {
            (HostState::Fenced, format!("derived from {run}"))
        } else {
            (HostState::Old, "derived".to_string())
        };
        h.hosts.insert(
            name.clone(),
            HostRecord {
                address,
                state,
                by,
                ..HostRecord::default()
            },
        );
    }
    for name in etcd {
        h.hosts.entry(name.to_string()).or_insert_with(|| HostRecord {
            address: inv.host(name).map(|h| h.address.to_string()).unwrap_or_default(),
            state: HostState::Member,
            by: "derived".into(),
            ..HostRecord::default()
        });
    }
    h
}

/// Host → address of every `peer-<host>.crt` in `dir` (the address is the certificate's first
/// IP SAN other than 127.0.0.1; empty when it has none).
fn peer_certificate_hosts(dir: &std::path::Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs_err::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(host) = name.strip_prefix("peer-").and_then(|n| n.strip_suffix(".crt")) else {
            continue;
        };
        // Moved aside by recover's certificate check (`<cert>.hactl-pre-<run>`): not a host.
        if host.contains(".hactl-") {
            continue;
        }
        let address = fs_err::read_to_string(e.path())
            .ok()
            .and_then(|pem| crate::pki::inspect(&pem).ok())
            .and_then(|info| {
                info.sans
                    .iter()
                    .filter_map(|s| s.parse::<std::net::IpAddr>().ok())
                    .find(|ip| !ip.is_loopback())
                    .map(|ip| ip.to_string())
            })
            .unwrap_or_default();
        out.insert(host.to_string(), address);
    }
    out
}

/// Host → run, for the hosts a replace (`--host NEW`, its P2 done) or a remove (its etcd fence
/// done) fenced and moved aside, read from `runs/*/decisions` and journals.
fn fenced_by_journals(state: &StateView) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(runs) = fs_err::read_dir(state.file("runs")) else {
        return out;
    };
    for run in runs.flatten() {
        let dir = run.path();
        let id = run.file_name().to_string_lossy().into_owned();
        let Ok(decisions) = fs_err::read_to_string(dir.join("recover.json")) else {
            continue;
        };
        let Ok(d) = serde_json::from_str::<serde_json::Value>(&decisions) else {
            continue;
        };
        let journal = fs_err::read_to_string(dir.join("journal.jsonl")).unwrap_or_default();
        let done = |step: &str| {
            journal.lines().any(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .is_ok_and(|e| e["step"] == step && e["phase"] == "done")
            })
        };
        let member = d["member"].as_str().unwrap_or_default();
        if member.is_empty() {
            continue;
        }
        let moved = d["replacement"].as_str().is_some_and(|r| r != member);
        if (moved && done("P2")) || (id.starts_with("remove-") && done("RM6")) {
            out.insert(member.to_string(), id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Inventory {
        crate::inventory::load_str(
            std::path::Path::new("c.yaml"),
            concat!(
                "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  ssh:\n    agent: true\n",
                "  hosts:\n",
                "    - { name: cp1, address: 10.0.0.11, roles: [] }\n",
                "    - { name: cp2, address: 10.0.0.12, roles: [] }\n",
                "    - { name: spare1, address: 10.0.0.21, roles: [etcd] }\n",
                "    - { name: spare2, address: 10.0.0.22, roles: [etcd] }\n",
                "    - { name: spare3, address: 10.0.0.23, roles: [etcd] }\n",
                "  stateDir: /tmp/hactl-old-members-record-test\n",
            ),
        )
        .unwrap()
    }

    fn seen(host: &str, id: &str) -> Seen {
        Seen {
            host: host.into(),
            address: format!("10.0.0.{}", host.len()),
            member_id: id.into(),
        }
    }

    #[test]
    fn a_new_membership_makes_the_hosts_that_left_old() {
        let mut h = History::default();
        assert!(h.record_members("aa", &[seen("cp1", "1"), seen("cp2", "2")], "up", "t0"));
        assert!(!h.record_members("aa", &[seen("cp1", "1"), seen("cp2", "2")], "up", "t1"));
        // A recover onto spare1: cp1 and cp2 are old until a run says they are fenced.
        assert!(h.record_members("bb", &[seen("spare1", "9")], "recover r1", "t2"));
        assert_eq!(h.cluster_id, "bb");
        assert_eq!(h.state_of("cp1"), Some(HostState::Old));
        assert_eq!(h.hosts["spare1"].clusters, ["bb"]);
        assert_eq!(h.hosts["cp1"].clusters, ["aa"]);
        h.mark_fenced("cp1", "", "recover r1", "t3", "/var/lib/etcd.hactl-retired-r1");
        h.mark_awaiting_fence("cp2", "", "recover r1", "t3");
        // A fence is never undone by an attestation.
        h.mark_awaiting_fence("cp1", "", "recover r2", "t4");
        assert_eq!(h.state_of("cp1"), Some(HostState::Fenced));
        assert_eq!(
            h.unfenced().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["cp2", "spare1"]
        );
        assert_eq!(h.host_of_member("9"), Some("spare1"));
        // A fenced host that joins again is a member again, its aside dir forgotten.
        h.record_members("bb", &[seen("spare1", "9"), seen("cp1", "7")], "up", "t5");
        assert_eq!(h.state_of("cp1"), Some(HostState::Member));
        assert_eq!(h.hosts["cp1"].clusters, ["aa", "bb"]);
        assert!(h.hosts["cp1"].data_aside.is_empty());
        // Round trip through the file's JSON.
        let text = serde_json::to_string(&h).unwrap();
        assert!(text.contains("\"kind\":\"MemberHistory\""), "{text}");
        assert!(text.contains("\"state\":\"awaitingFence\""), "{text}");
        assert_eq!(serde_json::from_str::<History>(&text).unwrap(), h);
    }

    #[test]
    fn an_older_state_dir_is_derived_from_certificates_and_journals() {
        let certs: BTreeMap<String, String> = [
            ("cp1", "10.0.0.11"),
            ("cp2", "10.0.0.12"),
            ("gone", "10.0.0.99"),
            ("spare1", "10.0.0.21"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let fenced: BTreeMap<String, String> = [("cp2".to_string(), "replace-x".to_string())].into();
        let h = derive_from(&inv(), &certs, &fenced);
        assert!(h.derived);
        assert_eq!(h.state_of("spare1"), Some(HostState::Member));
        assert_eq!(h.state_of("cp1"), Some(HostState::Old));
        assert_eq!(h.state_of("cp2"), Some(HostState::Fenced));
        assert_eq!(h.hosts["cp2"].by, "derived from replace-x");
        // A host no longer in the inventory keeps the certificate's address.
        assert_eq!(h.hosts["gone"].address, "10.0.0.99");
        assert_eq!(h.state_of("gone"), Some(HostState::Old));
    }

    #[test]
    fn loading_derives_without_writing_and_update_saves() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let inv = inv();
        let h = load(&state.view(), &inv);
        assert!(h.derived);
        assert_eq!(h.state_of("spare1"), Some(HostState::Member));
        assert!(!state.file(FILE).exists(), "load wrote the file");
        update(&state, &inv, |h| {
            h.mark_fenced("cp1", "10.0.0.11", "recover r", "t", "")
        })
        .unwrap();
        let again = load(&state.view(), &inv);
        assert!(!again.derived);
        assert_eq!(again.state_of("cp1"), Some(HostState::Fenced));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs_err::metadata(state.file(FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
