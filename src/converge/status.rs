//! The cluster's status (`hactl status`): the etcd cluster's health as the members see it,
//! through SSH tunnels, beside the load balancers, the control plane, backups and certificates.
//!
//! Invariant: read-only on the hosts (the one local write is the high-water mark,
//! [`record_hwm`]). A status with problems is degraded: no single leader, a member unreachable or
//! unhealthy, an alarm raised, and the like.

use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;

use crate::etcd::client::{self, MemberStatus};
use crate::etcd::{self as etcd_paths};
use crate::exec::connect::ConnectSettings;
use crate::inventory::{Host, Inventory, Role};
use crate::pki;
use crate::state::{StateDir, StateView};

/// The `kind` of `hactl status -o json`'s document.
pub const JSON_KIND: &str = "Status";

/// The JSON document of `hactl status -o json` (schema in docs/reference/json.md); what no
/// member told is `null`, never `""` or `0`.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub cluster: String,
    /// Hex cluster ID, as etcdctl prints it; empty (`null`) when no member answered.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub cluster_id: String,
    /// The leader's member name (or hex ID when it has no name yet); empty (`null`) when none.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub leader: String,
    /// 0 (`null`) when no member answered.
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub raft_term: u64,
    /// 0 (`null`) when no member answered.
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub revision: i64,
    pub members: Vec<MemberRow>,
    pub alarms: Vec<AlarmRow>,
    pub certificates: Vec<CertRow>,
    /// Why the cluster is degraded; empty when it is healthy.
    pub problems: Vec<String>,
    /// The VIP, HAProxy's backends, /readyz through the VIP (`null` without load balancers).
    /// Every key is always there: a section the inventory does not configure is `null`.
    pub load_balancers: Option<crate::load_balancer::status::LoadBalancerStatus>,
    /// The Kubernetes control plane, when the inventory has a kubernetes section (else `null`).
    pub kubernetes: Option<crate::kubernetes::status::KubernetesStatus>,
    /// Per etcd host, the newest good scheduled backup (`spec.backup`; empty when disabled).
    pub backups: Vec<crate::backup::BackupRow>,
    /// `spec.backup.remote`: the newest copy there and its age (`null` without a remote).
    pub backup_remote: Option<crate::backup_remote::RemoteStatus>,
    /// Zombies, old members whose fence is due or awaited, peers of another cluster dialling the
    /// members ([`crate::old_members::Finding`]); empty when there are none.
    pub old_members: Vec<crate::old_members::Finding>,
}

impl ClusterStatus {
    /// `status`'s exit code: 7 for a zombie (or an old member whose fence is due, or a peer of
    /// another cluster dialling the members), else 5 for any other problem, else 0.
    pub fn exit_code(&self) -> i32 {
        if crate::old_members::decide::any_problem(&self.old_members) {
            crate::exit::ZOMBIE
        } else if self.problems.is_empty() {
            crate::exit::OK
        } else {
            crate::exit::DEGRADED
        }
    }
}

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    pub name: String,
    pub id: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
    /// Has published its name (a member added but never started has not).
    pub started: bool,
    /// In the inventory (false: a member the inventory does not know).
    pub in_inventory: bool,
    pub healthy: bool,
    /// What the member's own status answer told: 0 or empty (`null`) when it gave none.
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub latency_ms: f64,
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub db_size_bytes: i64,
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub version: String,
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub raft_index: u64,
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub raft_applied_index: u64,
    pub errors: Vec<String>,
    /// Whether the other members see it healthy (their own health check, run on a healthy
    /// member host); `null` when hactl reached it itself or no peer could be asked.
    pub healthy_from_peers: Option<bool>,
}

/// How `status` judges a member from its two vantage points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberVerdict {
    /// hactl reached it and it answered a linearizable read.
    Healthy,
    /// hactl cannot reach it from this machine, but its peers see it healthy: the problem is
    /// between the operator and the member, not in the cluster.
    UnreachableFromOperatorOnly,
    /// Unhealthy as far as anyone can tell (the peers agree, or none could be asked).
    Unhealthy,
}

/// The verdict on one member: `operator_healthy` from hactl's own tunnel, `peers` from a
/// healthy member host's health check (`None` when no peer answered).
pub fn classify(operator_healthy: bool, peers: Option<bool>) -> MemberVerdict {
    match (operator_healthy, peers) {
        (true, _) => MemberVerdict::Healthy,
        (false, Some(true)) => MemberVerdict::UnreachableFromOperatorOnly,
        (false, _) => MemberVerdict::Unhealthy,
    }
}

/// The problem line for a member that is not [`MemberVerdict::Healthy`].
pub fn member_problem(row: &MemberRow) -> Option<String> {
    match classify(row.healthy, row.healthy_from_peers) {
        MemberVerdict::Healthy => None,
        MemberVerdict::UnreachableFromOperatorOnly => Some(format!(
            "member {} does not answer hactl from this machine ({}), but its peers see it healthy: \
             check the network between this machine and {} (SSH, then etcd's client port through \
             the tunnel); the cluster itself is not degraded by it",
            row.name,
            row.errors.join("; "),
            row.name
        )),
        MemberVerdict::Unhealthy => Some(format!(
            "member {} is unhealthy: {}",
            row.name,
            row.errors.join("; ")
        )),
    }
}

/// The revision to raise the high-water mark to: whenever one leader answered (a degraded
/// cluster with a leader still commits writes, and recover's estimate needs them), never
/// without one.
pub fn hwm_revision(status: &ClusterStatus) -> Option<i64> {
    (!status.leader.is_empty() && status.revision > 0).then_some(status.revision)
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AlarmRow {
    pub member_id: String,
    pub alarm: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertRow {
    /// Path stem in the state directory's pki/, e.g. `etcd/server-cp1`.
    pub name: String,
    /// RFC 3339.
    pub not_after: String,
    pub days_left: i64,
}

const TIMEOUT: Duration = Duration::from_secs(5);

/// Raises the revision high-water mark when a leader answered (recover sizes its bump and its
/// data-loss estimate from it); a failure to write it is only logged.
pub fn record_hwm(state: &StateDir, status: &ClusterStatus) {
    if let Some(revision) = hwm_revision(status) {
        let seen = crate::hwm::Hwm::now(revision, &status.cluster_id, "status");
        if let Err(e) = crate::hwm::record(state, seen) {
            tracing::warn!("could not record the high-water mark: {e}");
        }
    }
}

/// Reads the cluster's status through every reachable etcd host.
pub async fn gather(
    inv: &Inventory,
    state: &StateView,
    connect: &ConnectSettings,
) -> anyhow::Result<ClusterStatus> {
    let pki_dir = state.path.join("pki");
    let tls = client::client_tls(&pki_dir)?;
    let hosts: Vec<&Host> = inv.with_role(Role::Etcd);
    let conns = crate::exec::connect::connect(state, &hosts, connect).await;
    let mut results: Vec<(MemberStatus, Option<client::MemberClient>)> =
        futures::stream::iter(hosts.iter().map(|h| {
            let conn = conns.get(&h.name).cloned();
            let tls = tls.clone();
            async move {
                let unreachable = |why: String| MemberStatus {
                    host: h.name.clone(),
                    errors: vec![why],
                    ..MemberStatus::default()
                };
                let t = match conn {
                    Some(Ok(t)) => t,
                    Some(Err(e)) => return (unreachable(format!("ssh: {e}")), None),
                    None => return (unreachable("ssh: not connected".into()), None),
                };
                match client::connect(t.as_ref(), inv.etcd.client_port, &tls, TIMEOUT).await {
                    Ok(mut c) => {
                        let mut s = client::member_status(&mut c, TIMEOUT).await;
                        if s.is_learner && s.errors.is_empty() {
                            s.healthy = true; // learners serve status, not linearizable reads
                        }
                        (s, Some(c))
                    }
                    Err(e) => (unreachable(format!("{:#}", anyhow::Error::from(e))), None),
                }
            }
        }))
        .buffered(connect.concurrency.max(1))
        .collect()
        .await;
    let per_host: Vec<MemberStatus> = results.iter().map(|(s, _)| s.clone()).collect();
    let mut status = ClusterStatus {
        cluster: inv.name.clone(),
        ..ClusterStatus::default()
    };
    // Member list and alarms from the first healthy voter.
    let source = per_host.iter().position(|s| s.healthy && !s.is_learner);
    let mut list = None;
    let mut alarms = Vec::new();
    if let Some(i) = source {
        if let Some(c) = results[i].1.as_mut() {
            {
                if let Ok(Ok(resp)) = tokio::time::timeout(TIMEOUT, c.client.member_list()).await {
                    status.cluster_id = resp
                        .header()
                        .map(|h| format!("{:x}", h.cluster_id()))
                        .unwrap_or_default();
                    list = Some(resp.members().to_vec());
                }
                if let Ok(Ok(resp)) = tokio::time::timeout(
                    TIMEOUT,
                    c.client
                        .alarm(etcd_client::AlarmAction::Get, etcd_client::AlarmType::None, None),
                )
                .await
                {
                    for a in resp.alarms() {
                        alarms.push(AlarmRow {
                            member_id: format!("{:x}", a.member_id()),
                            alarm: format!("{:?}", a.alarm()).to_uppercase(),
                        });
                    }
                }
            }
        }
    }
    let leaders: std::collections::BTreeSet<&str> = per_host
        .iter()
        .filter(|s| !s.leader.is_empty())
        .map(|s| s.leader.as_str())
        .collect();
    status.raft_term = per_host.iter().map(|s| s.raft_term).max().unwrap_or(0);
    status.revision = per_host.iter().map(|s| s.revision).max().unwrap_or(0);
    let mut rows = Vec::new();
    for (host, s) in hosts.iter().zip(&per_host) {
        let url = etcd_paths::peer_url(inv, host);
        let m = list
            .as_ref()
            .and_then(|l| l.iter().find(|m| m.peer_urls().contains(&url)));
        rows.push(MemberRow {
            name: host.name.clone(),
            id: m.map(|m| format!("{:x}", m.id())).unwrap_or_else(|| s.id.clone()),
            peer_urls: m
                .map(|m| m.peer_urls().to_vec())
                .unwrap_or_else(|| vec![url.clone()]),
            client_urls: m.map(|m| m.client_urls().to_vec()).unwrap_or_default(),
            is_learner: m.map(|m| m.is_learner()).unwrap_or(s.is_learner),
            started: m.map(|m| !m.name().is_empty()).unwrap_or(s.healthy),
            in_inventory: true,
            healthy: s.healthy,
            latency_ms: s.latency_ms,
            db_size_bytes: s.db_size_bytes,
            version: s.version.clone(),
            raft_index: s.raft_index,
            raft_applied_index: s.raft_applied_index,
            errors: s.errors.clone(),
            healthy_from_peers: None,
        });
        if list.is_some() && m.is_none() {
            status.problems.push(format!(
                "{} is in the inventory but not a member of the cluster: run `hactl up` to join it",
                host.name
            ));
        }
    }
    if let Some(list) = &list {
        for m in list {
            if !rows.iter().any(|r| r.id == format!("{:x}", m.id())) {
                status.problems.push(format!(
                    "member {:x} ({}) is not in the inventory: add its host back, or remove it with `hactl remove NAME`",
                    m.id(),
                    if m.name().is_empty() { "unstarted" } else { m.name() }
                ));
                rows.push(MemberRow {
                    name: m.name().to_string(),
                    id: format!("{:x}", m.id()),
                    peer_urls: m.peer_urls().to_vec(),
                    client_urls: m.client_urls().to_vec(),
                    is_learner: m.is_learner(),
                    started: !m.name().is_empty(),
                    in_inventory: false,
                    ..MemberRow::default()
                });
            }
        }
    }
    match leaders.len() {
        0 => status
            .problems
            .push("no leader: the cluster has lost quorum or no member answered".into()),
        1 => {
            let id = *leaders.iter().next().unwrap_or(&"");
            status.leader = rows
                .iter()
                .find(|r| r.id == id)
                .map(|r| r.name.clone())
                .unwrap_or_else(|| id.to_string());
        }
        _ => status.problems.push(format!(
            "members disagree about the leader: {}",
            leaders.into_iter().collect::<Vec<_>>().join(", ")
        )),
    }
    // A member hactl cannot reach is asked about from a healthy member host (the peer vantage
    // point), so that the operator's own partition is not reported as the member's failure.
    if rows.iter().any(|r| r.in_inventory && !r.healthy) {
        let observers: Vec<(String, std::sync::Arc<dyn crate::exec::Transport>)> = hosts
            .iter()
            .zip(&per_host)
            .filter(|(_, s)| s.healthy && !s.is_learner)
            .filter_map(|(h, _)| match conns.get(&h.name) {
                Some(Ok(t)) => Some((h.name.clone(), t.clone())),
                _ => None,
            })
            .collect();
        if !observers.is_empty() {
            match crate::etcd::health::observe(&observers).await {
                Ok(obs) => {
                    for (host, r) in hosts.iter().zip(rows.iter_mut()) {
                        if !r.healthy {
                            r.healthy_from_peers = peers_verdict(&obs, &etcd_paths::peer_url(inv, host));
                        }
                    }
                }
                Err(e) => tracing::debug!("no peer view of the unhealthy members: {e}"),
            }
        }
    }
    for r in rows.iter().filter(|r| r.in_inventory) {
        status.problems.extend(member_problem(r));
    }
    for a in &alarms {
        status
            .problems
            .push(format!("alarm {} on member {}", a.alarm, a.member_id));
    }
    // Any etcd on an inventory host that is not of this cluster, any old member whose fence is
    // due, any peer of another cluster the members' logs show dialling them.
    let current = crate::old_members::Current {
        cluster_id: u64::from_str_radix(&status.cluster_id, 16).ok(),
        member_urls: list
            .iter()
            .flatten()
            .flat_map(|m| m.peer_urls().iter().cloned())
            .collect(),
    };
    let old = crate::old_members::gather(inv, state, state.into(), connect, &conns, &current).await;
    status.problems.extend(
        old.findings
            .iter()
            .filter(|f| f.problem)
            .map(|f| f.problem_line()),
    );
    status.old_members = old.findings;
    status.members = rows;
    status.alarms = alarms;
    status.certificates = certificate_rows(&pki_dir);
    if inv.backup.enabled {
        status.backups = crate::backup::gather(&hosts, &conns, &inv.backup.dir).await;
        status
            .problems
            .extend(crate::backup::stale_problem(&status.backups, inv.backup.interval));
        if let Some(remote) = &inv.backup.remote {
            let r = crate::backup_remote::status(state.into(), remote, &inv.name, connect).await;
            if let Some(e) = &r.error {
                status.problems.push(format!("backup remote: {e}"));
            }
            status.backup_remote = Some(r);
        }
    }
    if inv.kubernetes.is_some() {
        let cps = inv.with_role(Role::ControlPlane);
        let cp_conns = crate::exec::connect::connect(state, &cps, connect).await;
        let k = crate::kubernetes::status::gather(inv, &pki_dir, &cp_conns).await;
        status.problems.extend(k.problems.iter().cloned());
        status.kubernetes = Some(k);
    }
    // The threshold `up` renews at (spec.pki.renewBeforeDays), so a warning means `up` is due.
    let renew_before = i64::from(inv.pki.renew_before_days);
    for c in status.certificates.iter().filter(|c| c.days_left < renew_before) {
        status.problems.push(if c.name.ends_with("/ca") {
            format!(
                "CA certificate {} expires in {} days (pki.renewBeforeDays is {renew_before}): CAs are not renewed automatically; plan a CA rotation",
                c.name, c.days_left
            )
        } else {
            format!(
                "certificate {} expires in {} days (pki.renewBeforeDays is {renew_before}): run `hactl certs renew {}` or `hactl up` to re-issue it",
                c.name, c.days_left, c.name
            )
        });
    }
    if let Some(lb) = crate::load_balancer::status::gather(inv, state, connect).await {
        status.problems.extend(lb.problems.iter().cloned());
        status.load_balancers = Some(lb);
    }
    Ok(status)
}

/// Whether the peers of `obs` see the member with `peer_url` healthy; `None` when it is not in
/// their member list.
pub fn peers_verdict(obs: &crate::etcd::health::Observation, peer_url: &str) -> Option<bool> {
    obs.members
        .members
        .iter()
        .find(|m| m.peer_urls.iter().any(|u| u == peer_url))
        .map(|m| obs.is_healthy(m))
}

/// Every certificate under `pki/`, soonest expiry first.
pub fn certificate_rows(pki_dir: &std::path::Path) -> Vec<CertRow> {
    let now = time::OffsetDateTime::now_utc();
    let mut rows = Vec::new();
    for sub in ["etcd", "kubernetes", "front-proxy"] {
        let Ok(entries) = fs_err::read_dir(pki_dir.join(sub)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("crt") {
                continue;
            }
            let Ok(pem) = crate::bounded::read_to_string(&path, crate::bounded::TEXT) else {
                continue;
            };
            let Ok(info) = pki::inspect(&pem) else { continue };
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
            rows.push(CertRow {
                name: format!("{sub}/{stem}"),
                not_after: info
                    .not_after
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default(),
                days_left: (info.not_after - now).whole_days(),
            });
        }
    }
    rows.sort_by(|a, b| a.days_left.cmp(&b.days_left).then(a.name.cmp(&b.name)));
    rows
}

fn human_size(bytes: i64) -> String {
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

/// The human table.
pub fn table(s: &ClusterStatus) -> String {
    let mut out = format!(
        "cluster {}  id {}  leader {}  term {}  revision {}\n\n",
        s.cluster,
        if s.cluster_id.is_empty() {
            "?"
        } else {
            &s.cluster_id
        },
        if s.leader.is_empty() { "NONE" } else { &s.leader },
        s.raft_term,
        s.revision
    );
    out.push_str(&format!(
        "{:<10} {:<16} {:<7} {:<7} {:<9} {:>9} {:>9} {:<8} {:>15}  {}\n",
        "MEMBER",
        "ID",
        "ROLE",
        "STARTED",
        "HEALTH",
        "LATENCY",
        "DB",
        "VERSION",
        "RAFT IDX/APPLIED",
        "PEER / CLIENT URL"
    ));
    for m in &s.members {
        out.push_str(&format!(
            "{:<10} {:<16} {:<7} {:<7} {:<9} {:>9} {:>9} {:<8} {:>15}  {} {}\n",
            m.name,
            m.id,
            if m.is_learner { "learner" } else { "voter" },
            if m.started { "yes" } else { "no" },
            match classify(m.healthy, m.healthy_from_peers) {
                MemberVerdict::Healthy => "healthy",
                // Healthy to its peers; only this machine cannot reach it.
                MemberVerdict::UnreachableFromOperatorOnly => "NO-ROUTE",
                MemberVerdict::Unhealthy => "UNHEALTHY",
            },
            if m.healthy && !m.is_learner {
                format!("{:.1} ms", m.latency_ms)
            } else {
                "-".into()
            },
            if m.db_size_bytes > 0 {
                human_size(m.db_size_bytes)
            } else {
                "-".into()
            },
            if m.version.is_empty() { "-" } else { &m.version },
            format!("{}/{}", m.raft_index, m.raft_applied_index),
            m.peer_urls.join(","),
            m.client_urls.join(","),
        ));
    }
    out.push_str(&format!(
        "\nalarms: {}\n",
        if s.alarms.is_empty() {
            "none".to_string()
        } else {
            s.alarms
                .iter()
                .map(|a| format!("{} on {}", a.alarm, a.member_id))
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));
    if let Some(first) = s.certificates.first() {
        out.push_str(&format!(
            "certificates: {} (soonest: {} in {} days)\n",
            s.certificates.len(),
            first.name,
            first.days_left
        ));
    }
    if !s.backups.is_empty() {
        out.push_str(&crate::backup::table(&s.backups));
        if let Some(r) = &s.backup_remote {
            out.push_str(&crate::backup_remote::table(r));
        }
    }
    if let Some(lb) = &s.load_balancers {
        out.push_str(&crate::load_balancer::status::table(lb));
    }
    if let Some(k) = &s.kubernetes {
        out.push_str(&crate::kubernetes::status::table(k));
    }
    out.push_str(&crate::old_members::notes(&s.old_members));
    if s.problems.is_empty() {
        out.push_str("state: healthy\n");
    } else {
        out.push_str("state: DEGRADED\n");
        for p in &s.problems {
            out.push_str(&format!("  - {p}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, healthy: bool, peers: Option<bool>) -> MemberRow {
        MemberRow {
            name: name.into(),
            healthy,
            healthy_from_peers: peers,
            errors: if healthy {
                vec![]
            } else {
                vec!["ssh: connection timed out".into()]
            },
            ..MemberRow::default()
        }
    }

    #[test]
    fn a_member_only_the_operator_cannot_reach_is_not_called_unhealthy() {
        // (hactl's own view, the peers' view) -> verdict
        let table = [
            (true, None, MemberVerdict::Healthy),
            (true, Some(false), MemberVerdict::Healthy),
            (false, Some(true), MemberVerdict::UnreachableFromOperatorOnly),
            (false, Some(false), MemberVerdict::Unhealthy),
            (false, None, MemberVerdict::Unhealthy),
        ];
        for (operator, peers, want) in table {
            assert_eq!(classify(operator, peers), want, "{operator} {peers:?}");
        }
        assert_eq!(member_problem(&row("cp1", true, None)), None);
        let only_here = member_problem(&row("cp3", false, Some(true))).unwrap();
        assert!(
            only_here.starts_with("member cp3 does not answer hactl from this machine (ssh: connection timed out), but its peers see it healthy"),
            "{only_here}"
        );
        assert!(!only_here.contains("unhealthy"), "{only_here}");
        assert_eq!(
            member_problem(&row("cp3", false, Some(false))).unwrap(),
            "member cp3 is unhealthy: ssh: connection timed out"
        );
        assert_eq!(
            member_problem(&row("cp3", false, None)).unwrap(),
            "member cp3 is unhealthy: ssh: connection timed out"
        );
    }

    #[test]
    fn the_high_water_mark_is_recorded_whenever_a_leader_answered() {
        let healthy = ClusterStatus {
            leader: "cp1".into(),
            revision: 1200,
            ..ClusterStatus::default()
        };
        assert_eq!(hwm_revision(&healthy), Some(1200));
        // Degraded (a member down, an alarm) but with a leader: still recorded.
        let degraded = ClusterStatus {
            problems: vec!["member cp3 is unhealthy: ssh: connection timed out".into()],
            ..healthy.clone()
        };
        assert_eq!(hwm_revision(&degraded), Some(1200));
        // No leader (lost quorum, or members disagree): nothing to trust.
        let no_leader = ClusterStatus {
            leader: String::new(),
            ..degraded.clone()
        };
        assert_eq!(hwm_revision(&no_leader), None);
        let nothing = ClusterStatus {
            revision: 0,
            ..healthy
        };
        assert_eq!(hwm_revision(&nothing), None);
    }

    /// A peer observation (the probe's format, as in `etcd::health`'s recorded tests) from cp1,
    /// with cp3's health check passing, then failing.
    #[test]
    fn the_peers_verdict_is_read_from_a_healthy_member_hosts_observation() {
        let text = |cp3_health: &str| {
            format!(
                r#"== members
{{"header":{{"cluster_id":1,"member_id":11,"raft_term":2}},"members":[{{"ID":11,"name":"cp1","peerURLs":["https://10.0.0.11:2380"],"clientURLs":["https://10.0.0.11:2379"]}},{{"ID":13,"name":"cp3","peerURLs":["https://10.0.0.13:2380"],"clientURLs":["https://10.0.0.13:2379"]}}]}}

== health
[{{"endpoint":"https://10.0.0.11:2379","health":true}},{cp3_health}]
"#
            )
        };
        let up = crate::etcd::health::parse(
            "cp1",
            &text(r#"{"endpoint":"https://10.0.0.13:2379","health":true}"#),
        )
        .unwrap();
        assert_eq!(peers_verdict(&up, "https://10.0.0.13:2380"), Some(true));
        let down = crate::etcd::health::parse(
            "cp1",
            &text(
                r#"{"endpoint":"https://10.0.0.13:2379","health":false,"error":"context deadline exceeded"}"#,
            ),
        )
        .unwrap();
        assert_eq!(peers_verdict(&down, "https://10.0.0.13:2380"), Some(false));
        assert_eq!(peers_verdict(&up, "https://10.0.0.99:2380"), None, "not a member");
    }

    #[test]
    fn a_zombie_exits_7_before_any_other_problem() {
        let zombie = crate::old_members::Finding {
            kind: crate::old_members::Kind::Zombie,
            host: Some("cp1".into()),
            cluster_id: None,
            member_id: None,
            refused_by: vec![],
            refusals: 0,
            recorded: None,
            detail: "x".into(),
            command: "y".into(),
            problem: true,
            fenceable: true,
        };
        let note = crate::old_members::Finding {
            kind: crate::old_members::Kind::AwaitingFence,
            problem: false,
            ..zombie.clone()
        };
        let mut s = ClusterStatus::default();
        assert_eq!(s.exit_code(), crate::exit::OK);
        s.old_members = vec![note];
        assert_eq!(s.exit_code(), crate::exit::OK, "a note is not a problem");
        s.problems = vec!["member cp3 is unhealthy".into()];
        assert_eq!(s.exit_code(), crate::exit::DEGRADED);
        s.old_members.push(zombie);
        assert_eq!(s.exit_code(), crate::exit::ZOMBIE);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["oldMembers"][1]["kind"], "zombie");
        assert_eq!(json["oldMembers"][0]["kind"], "awaitingFence");
        assert!(json["oldMembers"][1].get("fenceable").is_none());
        assert!(table(&s).contains("note: old member cp1: x"), "{}", table(&s));
    }
}
