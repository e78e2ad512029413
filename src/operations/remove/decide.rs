//! The decisions of `hactl remove` (pure, table-tested): which member, whether R-remove allows
//! it, which host is fenced, which member runs the membership commands and takes leadership.
//!
//! Invariant: no I/O. What the hosts said comes in as an [`Observation`] and the set of hosts
//! that answered; every refusal names its rule (or what it saw) and what to run instead.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::etcd::health::Observation;
use crate::etcd::{self, hex_id, safety};
use crate::exit::{self, Refusal};
use crate::inventory::{Inventory, Role};

/// What a removal acts on, decided once and kept in `runs/<run>/decisions.json` so `--resume`
/// builds the same steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decisions {
    pub cluster: String,
    pub run: String,
    /// The member's name (its former inventory host name).
    pub member: String,
    pub member_id: u64,
    pub peer_url: String,
    pub client_url: String,
    /// The member answered its health check when the run was decided.
    pub target_healthy: bool,
    /// The inventory host (kept with `roles: []`) to fence and move the data of; `None` when the
    /// operator attested with `--confirm-dead` that the machine is gone.
    pub host: Option<String>,
    /// A remaining etcd host whose member is healthy: it runs `member remove` and takes
    /// leadership when the target leads.
    pub observer: String,
    pub observer_id: u64,
    /// The numbers R-remove saw.
    pub numbers: String,
}

impl Decisions {
    /// Where the data dir goes on the target host: `<dataDir>.hactl-removed-<run>`.
    pub fn aside(&self, data_dir: &str) -> String {
        format!("{data_dir}.hactl-removed-{}", self.run)
    }
}

/// What [`decide`] needs besides the observation.
pub struct Inputs<'a> {
    pub inv: &'a Inventory,
    pub member: &'a str,
    pub run: &'a str,
    /// Hosts of the inventory that answered over SSH.
    pub reachable: &'a BTreeSet<String>,
    /// Members stopped by hactl maintenance (they count as unhealthy).
    pub in_maintenance: &'a BTreeSet<String>,
    pub confirm_dead: bool,
}

fn refused(code: i32, message: String) -> Refusal {
    Refusal { code, message }
}

/// Decides a removal, or refuses: the member must be a voting member the inventory no longer
/// lists as an etcd host, R-remove (for a declared removal) must allow it, and its host must be
/// reachable as an inventory spare unless `--confirm-dead` says it is gone.
pub fn decide(obs: &Observation, i: &Inputs<'_>) -> Result<Decisions, Refusal> {
    let inv = i.inv;
    let Some(m) = obs.voters().find(|m| m.name == i.member) else {
        let names: Vec<&str> = obs.voters().map(|m| m.name.as_str()).collect();
        let learner = obs.learners().any(|m| m.name == i.member);
        let why = if learner {
            format!(
                "{} is a learner of etcd cluster {}, not a voting member: a learner is a join in progress (`hactl up` finishes it; `hactl replace MEMBER --cleanup-learner ID` removes a foreign one)",
                i.member, inv.name
            )
        } else {
            format!(
                "{} is not a member of etcd cluster {} (its members: {}): there is nothing to remove; if a removal of it stopped half way, continue it with `hactl remove {} --resume RUN`",
                i.member,
                inv.name,
                names.join(", "),
                i.member
            )
        };
        return Err(refused(exit::REFUSED, why));
    };
    let counts = obs.counts(i.in_maintenance, None);
    let target_healthy = obs.is_healthy(m);
    if let safety::Decision::Refused(r) = safety::r_remove_declared(&counts, target_healthy) {
        return Err(refused(exit::REFUSED, r.to_string()));
    }
    let listed = inv.host(i.member).filter(|h| h.has(Role::Etcd));
    let not_listed = crate::phases::members_not_in_inventory(inv, &obs.members);
    if listed.is_some() || !not_listed.iter().any(|x| x.id == m.id) {
        return Err(refused(
            exit::REFUSED,
            format!(
                "{} is still an etcd host of the inventory (its peer URL {} belongs to one): delete it from hosts, or keep it with `roles: []` so hactl can fence it, then run `hactl remove {}` again",
                i.member,
                m.peer_urls.join(","),
                i.member
            ),
        ));
    }
    let peer_url = m.peer_urls.first().cloned().unwrap_or_default();
    let client_url = m.client_urls.first().cloned().unwrap_or_default();
    let host = match inv.host(i.member) {
        Some(h) => {
            let url = etcd::peer_url(inv, h);
            if !m.peer_urls.contains(&url) {
                return Err(refused(
                    exit::REFUSED,
                    format!(
                        "host {} of the inventory is at {}, but member {} has peer URL {}: hactl would fence the wrong machine; correct the host's address",
                        h.name,
                        h.address,
                        i.member,
                        m.peer_urls.join(",")
                    ),
                ));
            }
            if i.reachable.contains(&h.name) {
                Some(h.name.clone())
            } else if i.confirm_dead {
                None
            } else {
                return Err(refused(
                    exit::NEEDS_INPUT,
                    format!(
                        "cannot reach {} over SSH to fence its etcd and move its data aside: bring it back, or, if the machine is gone for good, attest it with `hactl remove {m} --confirm-dead {m}`",
                        h.name,
                        m = i.member
                    ),
                ));
            }
        }
        None if i.confirm_dead => None,
        None => {
            return Err(refused(
                exit::NEEDS_INPUT,
                format!(
                    "{} is not in the inventory's hosts, so hactl cannot reach it to fence its etcd and move its data aside: keep it in hosts with `roles: []` (its address and ssh settings), or, if the machine is gone for good, attest it with `hactl remove {m} --confirm-dead {m}`",
                    i.member,
                    m = i.member
                ),
            ))
        }
    };
    let observer = inv
        .with_role(Role::Etcd)
        .into_iter()
        .filter(|h| i.reachable.contains(&h.name))
        .find_map(|h| {
            let url = etcd::peer_url(inv, h);
            obs.voters()
                .find(|x| x.peer_urls.contains(&url) && obs.is_healthy(x))
                .map(|x| (h.name.clone(), x.id))
        });
    let Some((observer, observer_id)) = observer else {
        return Err(refused(
            exit::REFUSED,
            format!(
                "refused by quorum: no reachable etcd host of the inventory has a healthy member ({}); bring members back with `hactl up`",
                counts.numbers()
            ),
        ));
    };
    Ok(Decisions {
        cluster: inv.name.clone(),
        run: i.run.to_string(),
        member: i.member.to_string(),
        member_id: m.id,
        peer_url,
        client_url,
        target_healthy,
        host,
        observer,
        observer_id,
        numbers: counts.numbers(),
    })
}

/// Whether the member's host also leaves the cluster's Nodes: the inventory has a kubernetes
/// section (every control-plane host ran a kubelet) and no longer gives the host a node role. A
/// host kept as a worker (`roles: [worker]`) keeps its Node.
pub fn node_leaves(inv: &Inventory, member: &str) -> bool {
    inv.kubernetes.is_some() && !inv.node_hosts().iter().any(|h| h.name == member)
}

/// The node removal that follows a member's removal when [`node_leaves`]: the same run, Node and
/// host (none when attested gone), so a resume rebuilds the same steps from [`Decisions`].
pub fn node_decisions(d: &Decisions) -> crate::operations::remove_node::Decisions {
    crate::operations::remove_node::Decisions {
        cluster: d.cluster.clone(),
        run: d.run.clone(),
        node: d.member.clone(),
        host: d.host.clone(),
        registered: true,
    }
}

/// One line for the operator: what is removed and what R-remove saw.
pub fn summary(d: &Decisions) -> String {
    format!(
        "remove: member {} ({}, {}) of cluster {}, {}; R-remove allows it ({}); membership commands on {}\n",
        d.member,
        hex_id(d.member_id),
        d.peer_url,
        d.cluster,
        match &d.host {
            Some(h) => format!("fenced on its host {h}"),
            None => "its host attested gone (--confirm-dead): nothing fenced or moved there".into(),
        },
        d.numbers,
        d.observer
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::health::parse;

    const IPS: [&str; 5] = ["10.9.0.11", "10.9.0.12", "10.9.0.13", "10.9.0.14", "10.9.0.15"];

    /// An observation of cp1..cpN (IDs 1..N); `down` answer no health check; cp1 leads.
    fn observation(n: usize, down: &[usize]) -> Observation {
        let members: Vec<String> = (1..=n)
            .map(|i| {
                format!(
                    r#"{{"ID":{i},"name":"cp{i}","peerURLs":["https://{ip}:2380"],"clientURLs":["https://{ip}:2379"]}}"#,
                    ip = IPS[i - 1]
                )
            })
            .collect();
        let status: Vec<String> = (1..=n)
            .filter(|i| !down.contains(i))
            .map(|i| {
                format!(
                    r#"{{"Endpoint":"https://{ip}:2379","Status":{{"header":{{"cluster_id":7,"member_id":{i},"revision":5,"raft_term":2}},"version":"3.5.16","dbSize":1,"leader":1,"raftIndex":9,"raftTerm":2,"raftAppliedIndex":9,"dbSizeInUse":1}}}}"#,
                    ip = IPS[i - 1]
                )
            })
            .collect();
        let health: Vec<String> = (1..=n)
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

    /// An inventory with the hosts `etcd` as etcd hosts, and `spares` kept with `roles: []`.
    fn inventory(etcd: &[usize], spares: &[usize]) -> Inventory {
        let mut hosts = String::new();
        for i in 1..=5 {
            let roles = if etcd.contains(&i) {
                "[etcd, control-plane]"
            } else if spares.contains(&i) {
                "[]"
            } else {
                continue;
            };
            hosts.push_str(&format!(
                "    - name: cp{i}\n      address: {}\n      roles: {roles}\n",
                IPS[i - 1]
            ));
        }
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id");
        std::fs::write(&key, "k").unwrap();
        let text = format!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: t\nspec:\n  ssh:\n    keyFile: {}\n  hosts:\n{hosts}",
            key.display()
        );
        crate::inventory::load_str(&dir.path().join("c.yaml"), &text).unwrap()
    }

    fn run(
        obs: &Observation,
        inv: &Inventory,
        member: &str,
        reachable: &[&str],
        confirm_dead: bool,
    ) -> Result<Decisions, Refusal> {
        let reachable: BTreeSet<String> = reachable.iter().map(|s| s.to_string()).collect();
        decide(
            obs,
            &Inputs {
                inv,
                member,
                run: "remove-1",
                reachable: &reachable,
                in_maintenance: &BTreeSet::new(),
                confirm_dead,
            },
        )
    }

    const ALL: [&str; 5] = ["cp1", "cp2", "cp3", "cp4", "cp5"];

    #[test]
    fn five_to_four_is_allowed_and_fences_the_spare() {
        let d = run(
            &observation(5, &[]),
            &inventory(&[1, 2, 3], &[4, 5]),
            "cp4",
            &ALL,
            false,
        )
        .unwrap();
        assert_eq!(d.member_id, 4);
        assert_eq!(d.host.as_deref(), Some("cp4"));
        assert_eq!((d.observer.as_str(), d.observer_id), ("cp1", 1));
        assert!(d.target_healthy);
        assert_eq!(d.aside("/var/lib/etcd"), "/var/lib/etcd.hactl-removed-remove-1");
    }

    #[test]
    fn three_to_two_is_refused_by_r_remove() {
        // The inventory cannot list two etcd hosts (validation wants 3 or 5), so the operator
        // asks before editing it: the rule is checked before the inventory.
        let e = run(
            &observation(3, &[]),
            &inventory(&[1, 2, 3], &[]),
            "cp3",
            &ALL,
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, exit::REFUSED);
        assert!(e.message.contains("refused by R-remove"), "{}", e.message);
        assert!(e.message.contains("V′=2"), "{}", e.message);
    }

    #[test]
    fn quorum_with_the_unhealthy_members_must_hold() {
        // Five members, cp2 and cp3 down: removing healthy cp4 leaves H′=2 of V′=4, below 3.
        let e = run(
            &observation(5, &[2, 3]),
            &inventory(&[1, 2, 3], &[4, 5]),
            "cp4",
            &ALL,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("refused by R-remove"), "{}", e.message);
        // Removing the dead cp3 of five with only cp3 down is fine (H′=4 of V′=4).
        let d = run(
            &observation(5, &[3]),
            &inventory(&[1, 2, 4], &[3]),
            "cp3",
            &ALL,
            false,
        )
        .unwrap();
        assert!(!d.target_healthy);
    }

    #[test]
    fn a_host_that_is_not_a_member_is_named_so() {
        let e = run(
            &observation(5, &[]),
            &inventory(&[1, 2, 3], &[4, 5]),
            "cp9",
            &ALL,
            false,
        )
        .unwrap_err();
        assert!(
            e.message.contains("cp9 is not a member of etcd cluster t"),
            "{}",
            e.message
        );
        assert!(e.message.contains("cp1, cp2, cp3, cp4, cp5"), "{}", e.message);
    }

    #[test]
    fn a_member_the_inventory_still_lists_is_refused() {
        let e = run(
            &observation(5, &[]),
            &inventory(&[1, 2, 3, 4, 5], &[]),
            "cp4",
            &ALL,
            false,
        )
        .unwrap_err();
        assert!(
            e.message.contains("still an etcd host of the inventory"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_host_hactl_cannot_reach_needs_confirm_dead() {
        // Deleted from the inventory altogether.
        let e = run(
            &observation(5, &[]),
            &inventory(&[1, 2, 3], &[]),
            "cp4",
            &ALL,
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, exit::NEEDS_INPUT);
        assert!(e.message.contains("--confirm-dead"), "{}", e.message);
        let d = run(
            &observation(5, &[4]),
            &inventory(&[1, 2, 3], &[]),
            "cp4",
            &ALL,
            true,
        )
        .unwrap();
        assert_eq!(d.host, None);
        assert!(!d.target_healthy);
        // A spare that does not answer.
        let e = run(
            &observation(5, &[]),
            &inventory(&[1, 2, 3], &[4]),
            "cp4",
            &ALL[..3],
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, exit::NEEDS_INPUT);
    }

    #[test]
    fn the_node_leaves_with_the_member_unless_the_host_stays_a_node() {
        // (kubernetes section, cp4's roles or absent) -> its Node removed after the member
        let with = |cp4: Option<&str>, kubernetes: bool| {
            let mut hosts: String = (1..=3)
                .map(|i| {
                    format!("  - {{ name: cp{i}, address: 10.9.0.1{i}, roles: [etcd, control-plane] }}\n")
                })
                .collect();
            if let Some(roles) = cp4 {
                hosts.push_str(&format!(
                    "  - {{ name: cp4, address: 10.9.0.14, roles: {roles} }}\n"
                ));
            }
            let kube = if kubernetes {
                "  kubernetes:\n    version: 1.20.2\n    source: bundle\n    bundleDir: /\n"
            } else {
                ""
            };
            let text = format!(
                "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: t\nspec:\n  ssh:\n    agent: true\n  hosts:\n{hosts}{kube}"
            );
            crate::inventory::load_str(std::path::Path::new("/tmp/t.yaml"), &text).unwrap()
        };
        assert!(node_leaves(&with(Some("[]"), true), "cp4"));
        assert!(node_leaves(&with(None, true), "cp4"));
        assert!(!node_leaves(&with(Some("[worker]"), true), "cp4"));
        assert!(!node_leaves(&with(Some("[]"), false), "cp4"));
        assert!(!node_leaves(&with(None, false), "cp4"));

        let d = run(
            &observation(5, &[4]),
            &inventory(&[1, 2, 3], &[]),
            "cp4",
            &ALL,
            true,
        )
        .unwrap();
        let n = node_decisions(&d);
        assert_eq!(
            (n.node.as_str(), n.host.as_deref(), n.run.as_str()),
            ("cp4", None, d.run.as_str())
        );
        // The node data goes aside under the same suffix as the member's data dir.
        assert_eq!(d.aside("/var/lib/etcd"), format!("/var/lib/etcd.{}", n.aside()));
    }
}
