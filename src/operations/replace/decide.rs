//! P0's decisions, pure (docs/recovery.md, "Replace and heal (P0–P10)"): from what the hosts
//! said (an [`Observation`], the member sets and cluster IDs in each host's facts, the etcd
//! versions) and the operator's inputs, the old member, the learner to clean up, the safety
//! rule's verdict, or a refusal naming its rule. Table-tested below.
//!
//! Invariant: no I/O. A resumed run passes the old member's ID it decided the first time, so a
//! voter that now sits at the same URL is the new one.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::etcd::health::Observation;
use crate::etcd::{hex_id, safety, Member};
use crate::exit::{self, Refusal};
use crate::inventory::HealSpec;
use crate::operations::remediation::Records;

/// What a replace acts on, decided once (P0) and kept in `runs/<run>/decisions.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decisions {
    pub run: String,
    /// The member being replaced.
    pub member: String,
    /// The host of the new member.
    pub replacement: String,
    /// `F1` (remove first) or `F2` (`--planned`: add first).
    pub flow: String,
    /// The old member when P0 saw it (`None`: already removed).
    pub old: Option<Member>,
    /// A foreign learner `--cleanup-learner` named: (ID, peer URL), removed first (P0.learner).
    pub cleanup_learner: Option<(u64, String)>,
    /// What P0 saw, for the journal and the operator.
    pub detail: String,
}

/// What [`decide`] needs besides the observation.
pub struct Inputs<'a> {
    pub run: &'a str,
    pub member: &'a str,
    pub replacement: &'a str,
    /// The peer URL of the member's host, when the inventory still lists it.
    pub target_url: Option<&'a str>,
    /// The replacement's peer URL.
    pub new_url: &'a str,
    pub planned: bool,
    /// The old member's ID a resumed run decided the first time.
    pub resumed_old: Option<u64>,
    /// `--cleanup-learner ID` (hex).
    pub cleanup_learner: Option<&'a str>,
    /// The member ID sets and cluster IDs every running member reported in its host's facts.
    pub member_sets: &'a BTreeSet<Vec<u64>>,
    pub cluster_ids: &'a BTreeSet<u64>,
    /// The etcd minor versions (`3.5`) the etcd hosts run.
    pub minors: &'a BTreeSet<String>,
    /// Members stopped by hactl maintenance, and the first maintenance under way (described).
    pub in_maintenance: &'a BTreeSet<String>,
    pub maintenance: Option<String>,
}

fn refused(message: String) -> Refusal {
    Refusal {
        code: exit::REFUSED,
        message,
    }
}

/// P0.10: `maxRetry` failed replacements of `member` within `minHealthyPeriod` stop further
/// attempts (KCP's loop protection), for replace as for heal.
pub fn retry_limit(
    records: &Records,
    policy: &HealSpec,
    member: &str,
    now: u64,
    heal_json: &str,
    peer_port: u16,
) -> Result<(), Refusal> {
    let Some(rec) = records.members.get(member) else {
        return Ok(());
    };
    let recent = rec
        .last_failure
        .is_some_and(|t| now.saturating_sub(t) < policy.min_healthy_period.as_secs());
    if rec.retry_count >= policy.max_retry && recent {
        return Err(refused(format!(
            "refused by retry-limit: {member} failed {} replacement(s) within minHealthyPeriod={}s (maxRetry={}), the retry limit; last error: {}. Find the cause first (the replacement host's disk, its peer traffic on port {peer_port}), then remove the `{member}` entry from {heal_json} (or wait for minHealthyPeriod to pass) and run again",
            rec.retry_count,
            policy.min_healthy_period.as_secs(),
            policy.max_retry,
            rec.last_error,
        )));
    }
    Ok(())
}

/// P0: every precondition hactl can see, or a refusal naming the rule.
pub fn decide(obs: &Observation, i: &Inputs<'_>) -> Result<Decisions, Refusal> {
    // Single cluster view: every running member reports the same cluster and member set.
    let mut ids = i.cluster_ids.clone();
    ids.extend(obs.cluster_ids());
    if ids.len() > 1 || i.member_sets.len() > 1 {
        return Err(refused(format!(
            "refused by single-cluster-view: members disagree ({} cluster IDs, {} different member sets); run `hactl status` and resolve it before changing membership",
            ids.len(),
            i.member_sets.len()
        )));
    }
    // The old member: a resumed run's by its ID; otherwise by name, else by its host's URL.
    let old: Option<Member> = match i.resumed_old {
        Some(id) => obs.by_id(id).cloned(),
        None => obs
            .by_name(i.member)
            .or_else(|| i.target_url.and_then(|u| obs.members.by_peer_url(u)))
            .filter(|m| !m.is_learner)
            .cloned(),
    };
    let new_member =
        |m: &&Member| m.peer_urls.iter().any(|u| u == i.new_url) && old.as_ref().is_none_or(|o| o.id != m.id);
    // Learners: ours (at the replacement's URL) is adopted; a foreign one blocks, unless named.
    let ours = obs.learners().find(new_member).map(|m| m.id);
    let foreign: Vec<&Member> = obs.learners().filter(|m| Some(m.id) != ours).collect();
    let mut cleanup = None;
    if let Some(l) = foreign.first() {
        let id = hex_id(l.id);
        if i.cleanup_learner != Some(id.as_str()) {
            return Err(refused(format!(
                "refused by no-transition: foreign learner {id} (peer URL {}) is in the cluster; etcd allows one learner, so no member can be added. If no hactl run owns it, remove it with `--cleanup-learner {id}` (removing a learner is quorum-neutral)",
                l.peer_urls.join(",")
            )));
        }
        cleanup = Some((l.id, l.peer_urls.first().cloned().unwrap_or_default()));
    }
    // The learner that is ours, or the one P0.learner removes, does not block the rules.
    let mut counts = obs.counts(i.in_maintenance, ours.or(cleanup.as_ref().map(|c| c.0)));
    counts.foreign_operation = i.maintenance.clone();
    let decision = match &old {
        Some(_) if i.planned => safety::r_add(&counts),
        Some(o) => safety::r_remove(&counts, obs.is_healthy(o)),
        None if obs.members.members.iter().any(|m| new_member(&m)) => safety::Decision::Allowed,
        None => safety::r_add(&counts),
    };
    if let safety::Decision::Refused(r) = decision {
        return Err(refused(r.to_string()));
    }
    // Versions: one minor everywhere.
    if i.minors.len() > 1 {
        return Err(refused(format!(
            "refused by versions: etcd hosts run different minor versions ({}); finish the upgrade first",
            i.minors.iter().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let detail = match &old {
        Some(o) => format!(
            "old member {} at {} ({}); {}",
            hex_id(o.id),
            o.peer_urls.join(","),
            if obs.is_healthy(o) { "healthy" } else { "unhealthy" },
            counts.numbers()
        ),
        None => format!("old member already removed; {}", counts.numbers()),
    };
    Ok(Decisions {
        run: i.run.to_string(),
        member: i.member.to_string(),
        replacement: i.replacement.to_string(),
        flow: if i.planned { "F2" } else { "F1" }.to_string(),
        old,
        cleanup_learner: cleanup,
        detail,
    })
}

/// What a replace does with the old host's Node (docs/recovery.md, "Replace and heal (P0–P10)").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldNode {
    /// Nothing: no kubernetes section, or the member stays on its host (`--reuse-host`), whose
    /// kubelet keeps its Node.
    Keep(String),
    /// Stop the node components on the old host (reachable), then delete its Node: a kubelet
    /// left running would keep reporting a Node nothing manages.
    StopThenDelete,
    /// Delete the Node only: the old host cannot be reached (gone, or attested dead), so nothing
    /// runs there to stop.
    DeleteOnly(String),
}

/// The old Node's fate, from whether the inventory has a kubernetes section, whether the member
/// moved to another host, and whether the old host is in the inventory and answered.
pub fn old_node(kubernetes: bool, moved: bool, old_host_reachable: bool) -> OldNode {
    if !kubernetes {
        return OldNode::Keep("no kubernetes section: no Node".into());
    }
    if !moved {
        return OldNode::Keep("the member stays on its host: its kubelet keeps its Node".into());
    }
    if old_host_reachable {
        OldNode::StopThenDelete
    } else {
        OldNode::DeleteOnly("the old host is not reachable: nothing runs there to stop".into())
    }
}

/// Whether P11 brings the replacement up as a Node (`hactl up`'s plan): with a kubernetes
/// section, when the member moved to another host that the inventory makes a node host. A member
/// re-created on its own host keeps the kubelet that runs there.
pub fn brings_up_node(kubernetes: bool, moved: bool, replacement_is_node: bool) -> bool {
    kubernetes && moved && replacement_is_node
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::health::parse;

    const IPS: [&str; 4] = ["10.9.0.11", "10.9.0.12", "10.9.0.13", "10.9.0.14"];

    /// cp1..cp3 (IDs 1..3); `down` answer no health check; `learner`: a learner (ID 9) at cp4's
    /// URL; cp1 leads.
    fn observation(down: &[usize], learner: bool) -> Observation {
        let mut members: Vec<String> = (1..=3)
            .map(|i| {
                format!(
                    r#"{{"ID":{i},"name":"cp{i}","peerURLs":["https://{ip}:2380"],"clientURLs":["https://{ip}:2379"]}}"#,
                    ip = IPS[i - 1]
                )
            })
            .collect();
        if learner {
            members.push(r#"{"ID":9,"peerURLs":["https://10.9.0.14:2380"],"isLearner":true}"#.into());
        }
        let status: Vec<String> = (1..=3)
            .filter(|i| !down.contains(i))
            .map(|i| {
                format!(
                    r#"{{"Endpoint":"https://{ip}:2379","Status":{{"header":{{"cluster_id":7,"member_id":{i},"revision":5,"raft_term":2}},"version":"3.5.16","dbSize":1,"leader":1,"raftIndex":9,"raftTerm":2,"raftAppliedIndex":9,"dbSizeInUse":1}}}}"#,
                    ip = IPS[i - 1]
                )
            })
            .collect();
        let health: Vec<String> = (1..=3)
            .map(|i| {
                format!(
                    r#"{{"endpoint":"https://{ip}:2379","health":{}}}"#,
                    !down.contains(&i),
                    ip = IPS[i - 1]
                )
            })
            .collect();
        let text = format!(
            "== members\n{{\"header\":{{\"cluster_id\":7,\"member_id\":1,\"raft_term\":2}},\"members\":[{}]}}\n\n== status\n[{}]\n\n== health\n[{}]\n\n== alarms\n",
            members.join(","),
            status.join(","),
            health.join(",")
        );
        parse("cp1", &text).unwrap()
    }

    struct Case {
        down: &'static [usize],
        learner: bool,
        member: &'static str,
        planned: bool,
        cleanup: Option<&'static str>,
        sets: usize,
        minors: &'static [&'static str],
        /// `Ok(old member's ID, cleanup?)` or `Err(a word of the refusal)`.
        want: Result<(Option<u64>, bool), &'static str>,
    }

    fn case(
        member: &'static str,
        down: &'static [usize],
        want: Result<(Option<u64>, bool), &'static str>,
    ) -> Case {
        Case {
            down,
            learner: false,
            member,
            planned: false,
            cleanup: None,
            sets: 1,
            minors: &["3.5"],
            want,
        }
    }

    #[test]
    fn p0_decides_the_old_member_or_refuses_naming_the_rule() {
        let cases = [
            // A failed member of three: R-remove allows it.
            case("cp3", &[3], Ok((Some(3), false))),
            // A healthy one on its own host (F1): R-remove with all three healthy allows it too.
            case("cp3", &[], Ok((Some(3), false))),
            // Two down of three: refused, quorum is lost.
            case("cp3", &[2, 3], Err("refused by quorum")),
            // Already removed: nothing to remove, R-add decides.
            case("cp9", &[], Ok((None, false))),
            Case {
                planned: true,
                ..case("cp3", &[], Ok((Some(3), false)))
            },
            // F2 needs every member healthy (R-add).
            Case {
                planned: true,
                ..case("cp3", &[3], Err("R-add"))
            },
            // A foreign learner blocks, unless named; named, it is cleaned up first.
            Case {
                learner: true,
                ..case("cp3", &[3], Err("--cleanup-learner 9"))
            },
            Case {
                learner: true,
                cleanup: Some("9"),
                ..case("cp3", &[3], Ok((Some(3), true)))
            },
            Case {
                sets: 2,
                ..case("cp3", &[3], Err("single-cluster-view"))
            },
            Case {
                minors: &["3.4", "3.5"],
                ..case("cp3", &[3], Err("versions"))
            },
        ];
        for (n, c) in cases.iter().enumerate() {
            let obs = observation(c.down, c.learner);
            let sets: BTreeSet<Vec<u64>> = (0..c.sets).map(|k| vec![k as u64]).collect();
            let minors: BTreeSet<String> = c.minors.iter().map(|s| s.to_string()).collect();
            let got = decide(
                &obs,
                &Inputs {
                    run: "replace-1",
                    member: c.member,
                    replacement: "cp4",
                    target_url: None,
                    new_url: "https://10.9.0.99:2380",
                    planned: c.planned,
                    resumed_old: None,
                    cleanup_learner: c.cleanup,
                    member_sets: &sets,
                    cluster_ids: &BTreeSet::new(),
                    minors: &minors,
                    in_maintenance: &BTreeSet::new(),
                    maintenance: None,
                },
            );
            match (&got, &c.want) {
                (Ok(d), Ok((old, cleanup))) => {
                    assert_eq!(d.old.as_ref().map(|m| m.id), *old, "case {n}");
                    assert_eq!(d.cleanup_learner.is_some(), *cleanup, "case {n}");
                    assert_eq!(d.flow, if c.planned { "F2" } else { "F1" });
                }
                (Err(r), Err(word)) => {
                    assert_eq!(r.code, exit::REFUSED, "case {n}");
                    assert!(r.message.contains(word), "case {n}: {}", r.message);
                }
                _ => panic!("case {n}: got {got:?}, want {:?}", c.want),
            }
        }
    }

    #[test]
    fn a_resumed_run_knows_its_old_member_by_id() {
        // The old member 3 was removed and a new voter took cp3's name: the resumed run's old
        // member is gone, not the new one.
        let obs = observation(&[], false);
        let sets = BTreeSet::new();
        let minors = BTreeSet::new();
        let i = Inputs {
            run: "replace-1",
            member: "cp3",
            replacement: "cp3",
            target_url: None,
            new_url: "https://10.9.0.13:2380",
            planned: false,
            resumed_old: Some(42),
            cleanup_learner: None,
            member_sets: &sets,
            cluster_ids: &BTreeSet::new(),
            minors: &minors,
            in_maintenance: &BTreeSet::new(),
            maintenance: None,
        };
        let d = decide(&obs, &i).unwrap();
        assert_eq!(d.old, None);
        assert!(d.detail.starts_with("old member already removed"), "{}", d.detail);
    }

    #[test]
    fn the_retry_limit_stops_a_member_that_failed_too_often_lately() {
        let policy = HealSpec::default();
        let mut records = Records::default();
        assert!(retry_limit(&records, &policy, "cp3", 1_000, "heal.json", 2380).is_ok());
        let r = records.members.entry("cp3".into()).or_default();
        r.retry_count = policy.max_retry;
        r.last_failure = Some(1_000);
        r.last_error = "learner did not catch up".into();
        let e = retry_limit(&records, &policy, "cp3", 1_001, "heal.json", 2380).unwrap_err();
        assert_eq!(e.code, exit::REFUSED);
        assert!(
            e.message.contains("retry-limit") && e.message.contains("retry limit"),
            "{}",
            e.message
        );
        let later = 1_000 + policy.min_healthy_period.as_secs();
        assert!(retry_limit(&records, &policy, "cp3", later, "heal.json", 2380).is_ok());
    }

    #[test]
    fn the_old_node_is_deleted_when_the_member_moved() {
        // (kubernetes, moved, reachable) → what happens to the old Node.
        let table = [
            ((false, true, true), "keep"),
            ((true, false, true), "keep"),
            ((true, false, false), "keep"),
            ((true, true, true), "stop+delete"),
            ((true, true, false), "delete"),
        ];
        for ((kube, moved, reachable), want) in table {
            let got = match old_node(kube, moved, reachable) {
                OldNode::Keep(_) => "keep",
                OldNode::StopThenDelete => "stop+delete",
                OldNode::DeleteOnly(_) => "delete",
            };
            assert_eq!(got, want, "kubernetes={kube} moved={moved} reachable={reachable}");
        }
    }

    #[test]
    fn the_replacement_becomes_a_node_only_when_the_member_moved_to_a_node_host() {
        // (kubernetes, moved, the replacement is a node host) → P11 runs.
        let table = [
            ((true, true, true), true),
            ((true, false, true), false),
            ((false, true, true), false),
            ((true, true, false), false),
        ];
        for ((kube, moved, node), want) in table {
            assert_eq!(
                brings_up_node(kube, moved, node),
                want,
                "kubernetes={kube} moved={moved} node={node}"
            );
        }
    }
}
