//! R0's decisions, pure: from what each host holds (its assessment), what the operator asked for
//! ([`Options`]), the recorded high-water mark and the chosen source, everything a recover does
//! ([`Decisions`]) or the refusal that stops it. Table-tested below, like `heal::decide`.
//!
//! Invariant: nothing here reads a host or a file; a refusal names its rule, what was seen and
//! what to run instead, and nothing has changed when one is returned.

use std::collections::{BTreeMap, BTreeSet};

use super::Mode as RecoverMode;
use crate::exit::{self, Refusal};
use crate::hwm::{self, Hwm};
use crate::inventory::{Inventory, Role};

use super::assess::HostAssessment;
use super::{Bump, Decisions, Gate, Source};
use crate::old_members::probe::HostSeen;
use crate::old_members::record::{History, HostState};

/// What R0 learned from the hosts: the reachable etcd hosts' assessments, in inventory order, and
/// why the others did not answer; the member history and what its other hosts showed.
#[derive(Debug, Clone, Default)]
pub struct Assessed {
    pub hosts: Vec<HostAssessment>,
    pub down: BTreeMap<String, String>,
    /// Every host that held a member (`<state>/members.json`, or derived).
    pub history: History,
    /// What the reachable hosts of the history that are not etcd hosts of the inventory (the
    /// old members) showed, in inventory order.
    pub old: Vec<HostSeen>,
    /// The nodes that are not etcd hosts (workers, control planes without a member), in
    /// inventory order: those that answered with a kubelet unit installed, and those that did
    /// not answer.
    pub node_kubelets: Vec<String>,
    pub nodes_down: Vec<String>,
}

impl Assessed {
    fn reachable(&self, host: &str) -> bool {
        self.hosts.iter().any(|a| a.host == host)
    }
}

/// What the operator asked for (`hactl recover`'s flags), and the run's id and clock.
#[derive(Debug, Clone)]
pub struct Options {
    pub run: String,
    pub now: time::OffsetDateTime,
    pub mode: RecoverMode,
    pub members: Vec<(String, std::net::IpAddr)>,
    pub confirm_dead: Vec<String>,
    pub force_destructive: bool,
    pub accept_data_loss_window: Option<std::time::Duration>,
    pub bump_revision: Option<u64>,
    pub accept_revision_rewind: bool,
    /// Hosts with a maintenance record not yet at Complete: their etcd was stopped on purpose,
    /// data intact, and `hactl maintenance complete HOST` starts it.
    pub in_maintenance: Vec<String>,
}

/// The members of the new cluster and the hosts left out, with lines to show the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    pub targets: Vec<String>,
    pub confirmed_dead: Vec<String>,
    /// Old members (hosts of the history that are not etcd hosts) that answer: fenced for good
    /// in R1.5, before the new cluster starts.
    pub old_fenced: Vec<String>,
    /// Old members attested dead: fenced when they answer again.
    pub old_attested: Vec<String>,
    pub notes: Vec<String>,
}

/// How R0.3 sees an old member: running, its data intact, healthy with a leader.
fn old_view(s: &HostSeen) -> super::MemberView {
    super::MemberView {
        host: s.host.clone(),
        running: s.etcd_running(),
        intact: s.data_member,
        healthy_with_leader: s.healthy && s.status.is_some_and(|st| st.leader != 0),
    }
}

/// What starts the stopped members whose data is intact: `hactl maintenance complete` for a host
/// in maintenance (first), and `hactl up` only when every host answers (it refuses otherwise).
fn restorable_advice(intact: &[String], down: &[String], in_maintenance: &[String]) -> String {
    let maint: Vec<String> = intact
        .iter()
        .filter(|h| in_maintenance.contains(h))
        .cloned()
        .collect();
    let mut out = String::new();
    if !maint.is_empty() {
        out.push_str(&format!(
            "Start the stopped members instead: {}.",
            crate::operations::maintenance_record::complete_first_advice(&maint)
        ));
        if down.is_empty() {
            out.push_str(" Any other stopped member: `hactl up`.");
        } else {
            out.push_str(&format!(
                " {} does not answer: heal or replace it once quorum is back.",
                down.join(", ")
            ));
        }
    } else if down.is_empty() {
        out.push_str("Start the stopped members instead (`hactl up` starts members whose data is intact).");
    } else {
        out.push_str(&format!(
            "Start the stopped members instead: `systemctl start etcd` on each of {} (`hactl up` needs every host to answer and {} does not); then replace {} (`hactl replace MEMBER --host SPARE --confirm-dead MEMBER`).",
            intact.join(", "),
            down.join(", "),
            down.join(", ")
        ));
    }
    out
}

fn refused(code: i32, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

/// R0.3 and the members: the quorum gate, unreachable hosts attested dead, `--members`.
pub fn targets(inv: &Inventory, assessed: &Assessed, opts: &Options) -> Result<Targets, Refusal> {
    let order: Vec<String> = inv.with_role(Role::Etcd).iter().map(|h| h.name.clone()).collect();
    let mut notes = Vec::new();
    // Every host that ever held a member is accounted for: the inventory's etcd hosts are R1's;
    // the others (old members) are fenced for good when they answer, attested when they do not.
    let history = &assessed.history;
    let inventory: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
    let etcd_names: Vec<&str> = order.iter().map(String::as_str).collect();
    let answers = |h: &str| assessed.old.iter().any(|s| s.host == h);
    let acc = crate::old_members::decide::recover_accounting(
        history,
        &inventory,
        &etcd_names,
        &answers,
        &opts.confirm_dead,
    );
    let old_views: Vec<super::MemberView> = assessed
        .old
        .iter()
        .filter(|s| acc.fence.contains(&s.host))
        .map(old_view)
        .collect();
    // R0.3 over the whole lineage: the etcd hosts and the old members; N is the larger of the
    // inventory's etcd hosts and the members the history records.
    let recorded = history
        .hosts
        .values()
        .filter(|r| r.state == HostState::Member)
        .count();
    let mut views: Vec<super::MemberView> = assessed.hosts.iter().map(|a| a.view()).collect();
    views.extend(old_views.iter().cloned());
    let old_names = |hosts: &[String]| -> Vec<String> {
        hosts
            .iter()
            .filter(|h| old_views.iter().any(|v| &v.host == *h))
            .cloned()
            .collect()
    };
    match super::quorum_gate(order.len().max(recorded), &views) {
        Gate::Proceed => {}
        Gate::QuorumPresent { healthy, quorum } => {
            let healthy_hosts: Vec<String> = views
                .iter()
                .filter(|v| v.healthy_with_leader)
                .map(|v| v.host.clone())
                .collect();
            let old = old_names(&healthy_hosts);
            if old.is_empty() {
                return Err(refused(
                    exit::REFUSED,
                    format!(
                        "quorum present: {healthy} members are healthy with a leader (quorum {quorum}); nothing was changed. \
                         Recover is for a lost quorum: replace failed members with `hactl replace <member>`"
                    ),
                ));
            }
            if !opts.force_destructive {
                return Err(refused(
                    exit::REFUSED,
                    format!(
                        "the old cluster still has quorum: {} answer healthy with a leader ({healthy} ≥ quorum {quorum}) \
                         although the inventory no longer gives them the etcd role; nothing was changed. A recover would \
                         leave it serving beside the new cluster (two clusters, one name) or throw its newer writes away. \
                         Ways out: move its members onto the new hosts one at a time with `hactl replace MEMBER --host NEW` \
                         (give NEW the member's roles in the inventory first; no write is lost); or, to restore anyway \
                         and fence the old members for good before the new cluster starts, run again with \
                         --force-destructive (you will be asked to type the cluster name)",
                        old.join(", ")
                    ),
                ));
            }
            notes.push(format!(
                "--force-destructive: the old cluster on {} still has quorum; R1.5 fences it for good before the new cluster starts",
                old.join(", ")
            ));
        }
        Gate::QuorumRestorable { intact, quorum } if !opts.force_destructive => {
            let old = old_names(&intact);
            if !old.is_empty() {
                return Err(refused(
                    exit::REFUSED,
                    format!(
                        "quorum restorable: {} hold intact data ({} ≥ quorum {quorum}), {} of them old members the \
                         inventory no longer gives the etcd role; nothing was changed. Starting them brings the cluster \
                         back with no data loss: give them their etcd role back and run `hactl up`, then move the members \
                         onto the new hosts with `hactl replace MEMBER --host NEW`. To restore onto the new hosts anyway \
                         (the old members fenced for good first), pass --force-destructive (you will be asked to type the \
                         cluster name)",
                        intact.join(", "),
                        intact.len(),
                        old.join(", ")
                    ),
                ));
            }
            return Err(refused(
                exit::REFUSED,
                format!(
                    "quorum restorable: {} hold intact data ({} ≥ quorum {quorum}); nothing was changed. {} To roll the \
                     cluster back to an older state anyway, pass --force-destructive (you will be asked to type the cluster name)",
                    intact.join(", "),
                    intact.len(),
                    restorable_advice(&intact, &assessed.down.keys().cloned().collect::<Vec<_>>(), &opts.in_maintenance)
                ),
            ));
        }
        Gate::QuorumRestorable { .. } => {
            notes.push("--force-destructive: proceeding although quorum could be restored".to_string())
        }
    }
    // Unreachable hosts must be attested dead before anything is stopped.
    let mut unattested: Vec<String> = assessed
        .down
        .keys()
        .filter(|h| !opts.confirm_dead.contains(h))
        .cloned()
        .collect();
    unattested.extend(acc.unattested.iter().cloned());
    if !unattested.is_empty() || !acc.not_in_inventory.is_empty() {
        let mut why = Vec::new();
        if !unattested.is_empty() {
            why.push(format!(
                "cannot reach {}: an unreachable member could come back as a zombie serving the old data. Power it off \
                 (or make sure it is)",
                unattested.join(", ")
            ));
        }
        if !acc.not_in_inventory.is_empty() {
            why.push(format!(
                "{} held a member (recorded in {}) and is not in the inventory, so hactl cannot reach it to fence it. \
                 Add it back to spec.hosts with `roles: []` so this recover fences it, or power it off",
                acc.not_in_inventory.join(", "),
                crate::old_members::record::FILE
            ));
        }
        let all: Vec<String> = unattested
            .iter()
            .chain(acc.not_in_inventory.iter())
            .cloned()
            .collect();
        return Err(refused(
            exit::NEEDS_INPUT,
            format!(
                "{}; nothing was changed. Then run again with --confirm-dead {} (a host attested dead is fenced the moment \
                 it answers again: `hactl up` or `hactl heal --once`)",
                why.join(". "),
                all.join(",")
            ),
        ));
    }
    for h in &opts.confirm_dead {
        if assessed.reachable(h) || acc.fence.contains(h) {
            notes.push(format!(
                "warning: {h} was attested dead but answers; it is fenced like the others"
            ));
        }
    }
    let confirmed_dead: Vec<String> = assessed.down.keys().cloned().collect();
    let mut targets: Vec<String> = order.iter().filter(|h| assessed.reachable(h)).cloned().collect();
    if !opts.members.is_empty() {
        targets = member_targets(inv, assessed, opts)?;
    }
    if targets.is_empty() {
        return Err(refused(exit::REFUSED, "no etcd host is reachable"));
    }
    Ok(Targets {
        targets,
        confirmed_dead,
        old_fenced: acc.fence,
        old_attested: acc.attested,
        notes,
    })
}

/// `--members`: checked against the inventory (every problem at once), and every member must be
/// reachable (it is restored or joined).
fn member_targets(inv: &Inventory, assessed: &Assessed, opts: &Options) -> Result<Vec<String>, Refusal> {
    let etcd_hosts: Vec<(String, std::net::IpAddr)> = inv
        .with_role(Role::Etcd)
        .iter()
        .map(|h| (h.name.clone(), h.address))
        .collect();
    let targets = super::validate_members(&etcd_hosts, &opts.members).map_err(|problems| {
        refused(
            exit::REFUSED,
            format!("nothing was changed:\n  {}", problems.join("\n  ")),
        )
    })?;
    let unreachable: Vec<&str> = targets
        .iter()
        .filter(|h| !assessed.reachable(h))
        .map(String::as_str)
        .collect();
    if !unreachable.is_empty() {
        return Err(refused(
            exit::REFUSED,
            format!(
                "--members names {}, which cannot be reached: nothing was changed. A member must be reachable to be \
                 restored or joined: bring it back, or leave it out of --members",
                unreachable.join(", ")
            ),
        ));
    }
    Ok(targets)
}

/// The high-water mark: the recorded one, the hosts' marks and the survivors' own revisions.
pub fn high_water_mark(recorded: Option<Hwm>, hosts: &[HostAssessment]) -> Option<Hwm> {
    let mut mark = recorded;
    for a in hosts {
        mark = hwm::max(mark, a.hwm.clone());
        if let Some(s) = &a.status {
            mark = hwm::max(
                mark,
                Some(Hwm::now(
                    s.header.revision,
                    &format!("{:x}", s.header.cluster_id),
                    &format!("survivor@{}", a.host),
                )),
            );
        }
    }
    mark
}

/// R0: everything the recover does, or the refusal that stops it (pure).
pub fn decide(
    inv: &Inventory,
    assessed: &Assessed,
    opts: &Options,
    recorded_hwm: Option<Hwm>,
    source: Source,
) -> Result<Decisions, Refusal> {
    let Targets {
        targets,
        confirmed_dead,
        old_fenced,
        old_attested,
        ..
    } = targets(inv, assessed, opts)?;
    let hosts = &assessed.hosts;
    let seed = match &source {
        Source::Member { host } => host.clone(),
        Source::File { .. } => targets[0].clone(),
    };
    if !targets.contains(&seed) {
        return Err(refused(
            exit::REFUSED,
            format!(
                "the source is member {seed}'s data, but --members leaves {seed} out (members: {}): nothing was changed. \
                 Add {seed} to --members, or recover from a snapshot file",
                targets.join(", ")
            ),
        ));
    }
    let Some(seed_a) = hosts.iter().find(|a| a.host == seed) else {
        return Err(refused(exit::FAILED, format!("seed {seed} was not assessed")));
    };
    // Restore tools: the same minor everywhere.
    let minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    let minors: BTreeSet<String> = hosts.iter().map(|a| minor(&a.etcd_version)).collect();
    if minors.len() > 1 {
        return Err(refused(
            exit::REFUSED,
            format!(
                "the hosts run different etcd minors ({}): a restore must use the cluster's own minor",
                minors.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    // R0.5: high-water mark and bump.
    let mark = high_water_mark(recorded_hwm, hosts);
    let snap_rev = match &source {
        Source::File { revision, .. } => *revision,
        Source::Member { host } => hosts
            .iter()
            .find(|a| &a.host == host)
            .and_then(|a| a.status.as_ref().map(|s| s.header.revision)),
    };
    // R0.4c: refuse a source older than the operator accepted, naming the estimated loss.
    let source_age = match &source {
        Source::File { time: Some(t), .. } => {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .ok()
                .map(|t| (opts.now - t).max(time::Duration::ZERO).unsigned_abs())
        }
        _ => None,
    };
    let estimate = super::LossEstimate {
        revisions: mark.as_ref().zip(snap_rev).map(|(m, r)| (m.revision - r).max(0)),
        hwm: mark.as_ref().map(|m| (m.revision, m.time.clone())),
        source_revision: snap_rev,
        source_age,
        source: match &source {
            Source::File { path, .. } => path.clone(),
            Source::Member { host } => format!("(member {host})"),
        },
    };
    super::data_loss_gate(&estimate, opts.accept_data_loss_window)
        .map_err(|m| refused(exit::NEEDS_INPUT, m))?;
    let bump = super::choose_bump_requested(
        opts.bump_revision,
        seed_a.tool_bumps,
        mark.as_ref().map(|m| m.revision),
        snap_rev,
        opts.accept_revision_rewind,
    )
    .map_err(|m| refused(exit::REFUSED, m))?;
    let token = super::token(&inv.name, &opts.run);
    let url = |h: &str| crate::etcd::peer_url(inv, inv.host(h).expect("targets come from the inventory"));
    let initial: Vec<(String, String)> = match opts.mode {
        RecoverMode::Seed => vec![(seed.clone(), url(&seed))],
        RecoverMode::All => targets.iter().map(|h| (h.clone(), url(h))).collect(),
    };
    let expected = format!("{:x}", super::cluster_id(&initial, &token));
    let converge = converge_reasons(inv, hosts, &targets, &confirmed_dead, &old_fenced, &old_attested);
    let min_revision = match bump {
        Bump::Restore { by } => snap_rev.unwrap_or(0) + by as i64,
        Bump::Emulated { target } => target,
        Bump::None => 0,
    };
    Ok(Decisions {
        run: opts.run.clone(),
        cluster: inv.name.clone(),
        mode: opts.mode,
        source,
        seed,
        targets,
        confirmed_dead,
        data_dirs: hosts
            .iter()
            .filter(|a| a.data_exists)
            .map(|a| a.host.clone())
            .collect(),
        kube_units: hosts
            .iter()
            .map(|a| (a.host.clone(), a.kube_units.clone()))
            .collect(),
        kubelets: hosts
            .iter()
            .filter(|a| a.kubelet)
            .map(|a| a.host.clone())
            .chain(assessed.node_kubelets.iter().cloned())
            .collect(),
        nodes_unreached: assessed.nodes_down.clone(),
        token,
        bump,
        hwm: mark,
        expected_cluster_id: expected,
        min_revision,
        tool: seed_a.tool.clone(),
        etcd_version: seed_a.etcd_version.clone(),
        kube_manifests: super::static_pod_manifests(
            inv,
            &hosts.iter().map(|a| a.host.clone()).collect::<Vec<_>>(),
        ),
        old_fenced,
        old_attested,
        converge,
    })
}

/// Why R7 brings the rest of the cluster to the inventory with `hactl up`'s plan once etcd is
/// back (empty: nothing is left for it, and R7 is not planned): a control-plane target without
/// the control plane installed (no apiserver runs there until then), load balancers that still
/// list the old members. R7 needs every host to answer, so with a member attested dead it is not
/// planned and the report names `hactl up` as what is left.
pub fn converge_reasons(
    inv: &Inventory,
    hosts: &[HostAssessment],
    targets: &[String],
    confirmed_dead: &[String],
    old_fenced: &[String],
    old_attested: &[String],
) -> Vec<String> {
    let mut reasons = Vec::new();
    if inv.kubernetes.is_some() {
        let bare: Vec<&str> = targets
            .iter()
            .filter(|t| inv.host(t).is_some_and(|h| h.has(Role::ControlPlane)))
            .filter(|t| {
                hosts
                    .iter()
                    .find(|a| &a.host == *t)
                    .is_some_and(|a| a.kube_units.is_empty() && a.manifests.is_empty())
            })
            .map(String::as_str)
            .collect();
        if !bare.is_empty() {
            reasons.push(format!(
                "no apiserver runs on {} until the control plane is installed there",
                bare.join(", ")
            ));
        }
    }
    let old: Vec<&str> = old_fenced
        .iter()
        .chain(old_attested)
        .map(String::as_str)
        .collect();
    let lbs: Vec<&str> = inv
        .with_role(Role::LoadBalancer)
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    if !old.is_empty() && !lbs.is_empty() {
        reasons.push(format!(
            "HAProxy on {} still sends clients to the old members {}",
            lbs.join(", "),
            old.join(", ")
        ));
    }
    if !confirmed_dead.is_empty() && !reasons.is_empty() {
        // `up` needs every host: what is left is the operator's, once they answer.
        return reasons
            .into_iter()
            .map(|r| {
                format!(
                    "{r} (`hactl up` once {} answers or leaves the inventory)",
                    confirmed_dead.join(", ")
                )
            })
            .collect();
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::recover::assess::{EndpointStatus, Header};

    const INV: &str = concat!(
        "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: lab\nspec:\n  ssh:\n    agent: true\n",
        "  hosts:\n",
        "    - { name: cp1, address: 10.0.0.11, roles: [etcd] }\n",
        "    - { name: cp2, address: 10.0.0.12, roles: [etcd] }\n",
        "    - { name: cp3, address: 10.0.0.13, roles: [etcd] }\n",
        "  stateDir: /tmp/hactl-recover-decide-test\n",
    );

    fn inv() -> Inventory {
        crate::inventory::load_str(std::path::Path::new("lab.yaml"), INV).unwrap()
    }

    /// A stopped member with intact data, etcd 3.5 with a tool that bumps.
    fn stopped(host: &str) -> HostAssessment {
        HostAssessment {
            host: host.into(),
            data_intact: true,
            data_exists: true,
            tool: "etcdutl".into(),
            tool_bumps: true,
            etcd_version: "3.5.16".into(),
            ..HostAssessment::default()
        }
    }

    /// A running member that answers with a leader.
    fn healthy(host: &str, revision: i64) -> HostAssessment {
        HostAssessment {
            etcd_active: true,
            health: true,
            status: Some(EndpointStatus {
                header: Header {
                    cluster_id: 0xabc,
                    revision,
                    ..Header::default()
                },
                leader: 7,
                ..EndpointStatus::default()
            }),
            ..stopped(host)
        }
    }

    fn wiped(host: &str) -> HostAssessment {
        HostAssessment {
            data_intact: false,
            data_exists: false,
            ..stopped(host)
        }
    }

    fn opts() -> Options {
        Options {
            run: "20261122-010203-abcd".into(),
            now: time::macros::datetime!(2026-11-22 01:02:03 UTC),
            mode: RecoverMode::Seed,
            members: vec![],
            confirm_dead: vec![],
            force_destructive: false,
            accept_data_loss_window: None,
            bump_revision: None,
            accept_revision_rewind: false,
            in_maintenance: vec![],
        }
    }

    #[test]
    fn quorum_restorable_through_a_maintenance_names_maintenance_complete_not_up() {
        let inv = inv();
        // maintenance start cp1, then cp2 lost power: cp1 stopped (fenced), cp3 runs alone.
        let a = assessed(vec![stopped("cp1"), stopped("cp3")], &["cp2"]);
        let o = Options {
            in_maintenance: vec!["cp1".into()],
            ..opts()
        };
        let r = targets(&inv, &a, &o).unwrap_err();
        assert_eq!(r.code, exit::REFUSED);
        assert!(
            r.message.contains("`hactl maintenance complete cp1` first"),
            "{}",
            r.message
        );
        assert!(!r.message.contains("`hactl up`"), "{}", r.message);
        // Without the maintenance, and cp2 unreachable: still no `hactl up` (it would refuse).
        let r = targets(&inv, &a, &opts()).unwrap_err();
        assert!(r.message.contains("systemctl start etcd"), "{}", r.message);
        assert!(!r.message.contains("(`hactl up` starts"), "{}", r.message);
    }

    fn assessed(hosts: Vec<HostAssessment>, down: &[&str]) -> Assessed {
        Assessed {
            hosts,
            down: down
                .iter()
                .map(|h| (h.to_string(), "connection refused".to_string()))
                .collect(),
            ..Assessed::default()
        }
    }

    fn member(host: &str) -> Source {
        Source::Member { host: host.into() }
    }

    fn file(revision: i64, time: &str) -> Source {
        Source::File {
            path: "/b/s.db".into(),
            sha256: "00".into(),
            size: 4096,
            skip_hash_check: false,
            revision: Some(revision),
            time: Some(time.into()),
        }
    }

    /// Each row: what the hosts say, the options, the source → the refusal's code and a word of
    /// its message, or the seed and targets.
    #[test]
    fn r0_decides_or_refuses_by_rule() {
        let inv = inv();
        type Row = (
            &'static str,
            Assessed,
            Options,
            Source,
            Result<(&'static str, &'static [&'static str]), (i32, &'static str)>,
        );
        let lost_two = assessed(vec![stopped("cp1"), wiped("cp2"), wiped("cp3")], &[]);
        let rows: Vec<Row> = vec![
            (
                "two of three healthy: quorum present, replace instead",
                assessed(vec![healthy("cp1", 10), healthy("cp2", 10), wiped("cp3")], &[]),
                opts(),
                member("cp1"),
                Err((exit::REFUSED, "quorum present")),
            ),
            (
                "two intact stopped members: quorum restorable, start them",
                assessed(vec![stopped("cp1"), stopped("cp2"), wiped("cp3")], &[]),
                opts(),
                member("cp1"),
                Err((exit::REFUSED, "quorum restorable")),
            ),
            (
                "restorable but forced: proceeds",
                assessed(vec![stopped("cp1"), stopped("cp2"), wiped("cp3")], &[]),
                Options {
                    force_destructive: true,
                    ..opts()
                },
                member("cp1"),
                Ok(("cp1", &["cp1", "cp2", "cp3"])),
            ),
            (
                "an unreachable host not attested dead",
                assessed(vec![stopped("cp1"), wiped("cp2")], &["cp3"]),
                opts(),
                member("cp1"),
                Err((exit::NEEDS_INPUT, "--confirm-dead cp3")),
            ),
            (
                "an unreachable host attested dead is left out",
                assessed(vec![stopped("cp1"), wiped("cp2")], &["cp3"]),
                Options {
                    confirm_dead: vec!["cp3".into()],
                    ..opts()
                },
                member("cp1"),
                Ok(("cp1", &["cp1", "cp2"])),
            ),
            (
                "the survivor seeds all three",
                lost_two.clone(),
                opts(),
                member("cp1"),
                Ok(("cp1", &["cp1", "cp2", "cp3"])),
            ),
            (
                "--members leaving out the survivor whose data is the source",
                lost_two.clone(),
                Options {
                    members: vec![("cp2".into(), "10.0.0.12".parse().unwrap())],
                    ..opts()
                },
                member("cp1"),
                Err((exit::REFUSED, "--members leaves cp1 out")),
            ),
            (
                "--members with a wrong address",
                lost_two.clone(),
                Options {
                    members: vec![("cp1".into(), "10.9.9.9".parse().unwrap())],
                    ..opts()
                },
                member("cp1"),
                Err((exit::REFUSED, "nothing was changed")),
            ),
            (
                "a snapshot file seeds the first target",
                lost_two.clone(),
                opts(),
                file(100, "2026-11-22T01:00:00Z"),
                Ok(("cp1", &["cp1", "cp2", "cp3"])),
            ),
            (
                "a snapshot older than the default window needs --accept-data-loss-window",
                lost_two.clone(),
                opts(),
                file(100, "2026-11-01T00:00:00Z"),
                Err((exit::NEEDS_INPUT, "accept-data-loss-window")),
            ),
            (
                "an old snapshot accepted by the operator",
                lost_two.clone(),
                Options {
                    accept_data_loss_window: Some(std::time::Duration::from_secs(60 * 86400)),
                    ..opts()
                },
                file(100, "2026-11-01T00:00:00Z"),
                Ok(("cp1", &["cp1", "cp2", "cp3"])),
            ),
            (
                "different etcd minors",
                assessed(
                    vec![
                        stopped("cp1"),
                        HostAssessment {
                            etcd_version: "3.4.30".into(),
                            ..wiped("cp2")
                        },
                        wiped("cp3"),
                    ],
                    &[],
                ),
                opts(),
                member("cp1"),
                Err((exit::REFUSED, "different etcd minors")),
            ),
        ];
        for (what, a, o, source, want) in rows {
            let got = decide(&inv, &a, &o, None, source);
            match (want, got) {
                (Ok((seed, targets)), Ok(d)) => {
                    assert_eq!(d.seed, seed, "{what}");
                    assert_eq!(d.targets, targets, "{what}");
                    assert_eq!(d.token, "hactl-lab-20261122-010203-abcd", "{what}");
                }
                (Err((code, word)), Err(r)) => {
                    assert_eq!(r.code, code, "{what}: {}", r.message);
                    assert!(r.message.contains(word), "{what}: {}", r.message);
                }
                (want, got) => panic!("{what}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    /// R5.4 restarts the kubelets of the etcd hosts that have one, then those of the other
    /// nodes that answered; the nodes that did not answer are named for the report.
    #[test]
    fn kubelets_are_the_members_then_the_other_nodes() {
        let inv = inv();
        let with_kubelet = |a: HostAssessment| HostAssessment { kubelet: true, ..a };
        let a = Assessed {
            node_kubelets: vec!["w1".into()],
            nodes_down: vec!["w2".into()],
            ..assessed(
                vec![
                    with_kubelet(stopped("cp1")),
                    wiped("cp2"),
                    with_kubelet(wiped("cp3")),
                ],
                &[],
            )
        };
        let d = decide(&inv, &a, &opts(), None, file(4000, "2026-11-22T01:00:00Z")).unwrap();
        assert_eq!(d.kubelets, ["cp1", "cp3", "w1"]);
        assert_eq!(d.nodes_unreached, ["w2"]);
    }

    #[test]
    fn the_bump_clears_the_highest_revision_seen() {
        let inv = inv();
        let a = assessed(vec![stopped("cp1"), wiped("cp2"), wiped("cp3")], &[]);
        let recorded = Some(Hwm::now(5000, "abc", "status"));
        let d = decide(&inv, &a, &opts(), recorded, file(4000, "2026-11-22T01:00:00Z")).unwrap();
        assert_eq!(d.hwm.as_ref().map(|h| h.revision), Some(5000));
        assert!(d.min_revision > 5000, "{:?} {}", d.bump, d.min_revision);
        // The same inputs give the same cluster: the ID is computed, not drawn.
        let again = decide(
            &inv,
            &a,
            &opts(),
            Some(Hwm::now(5000, "abc", "status")),
            file(4000, "2026-11-22T01:00:00Z"),
        )
        .unwrap();
        assert_eq!(d.expected_cluster_id, again.expected_cluster_id);
    }

    /// The cluster restored onto new hosts: old1–old3 held the members and have `roles: []`,
    /// cp1–cp3 (fresh) take their roles; lb1 balances; the history records old1–old3.
    const MOVED: &str = concat!(
        "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: lab\nspec:\n  ssh:\n    agent: true\n",
        "  hosts:\n",
        "    - { name: old1, address: 10.0.0.1, roles: [] }\n",
        "    - { name: old2, address: 10.0.0.2, roles: [] }\n",
        "    - { name: old3, address: 10.0.0.3, roles: [] }\n",
        "    - { name: cp1, address: 10.0.0.11, roles: [etcd] }\n",
        "    - { name: cp2, address: 10.0.0.12, roles: [etcd] }\n",
        "    - { name: cp3, address: 10.0.0.13, roles: [etcd] }\n",
        "    - { name: lb1, address: 10.0.0.31, roles: [load-balancer] }\n",
        "  vip: { address: 10.0.0.100 }\n",
        "  stateDir: /tmp/hactl-recover-decide-moved\n",
    );

    fn moved() -> (Inventory, History) {
        let inv = crate::inventory::load_str(std::path::Path::new("lab.yaml"), MOVED).unwrap();
        let mut h = History::default();
        let seen = |n: &str| crate::old_members::record::Seen {
            host: n.into(),
            address: String::new(),
            member_id: String::new(),
        };
        h.record_members(
            "ef37e8f2d14ac3c4",
            &[seen("old1"), seen("old2"), seen("old3")],
            "up",
            "t",
        );
        (inv, h)
    }

    /// An old member as the probe saw it: `healthy` with a leader, or stopped with `intact` data.
    fn old(host: &str, running_healthy: bool, intact: bool) -> HostSeen {
        let mut text = String::from("unit etcd.service LoadState=loaded ActiveState=");
        text.push_str(if running_healthy { "active" } else { "inactive" });
        text.push_str(" UnitFileState=enabled MainPID=0 \n");
        if running_healthy {
            text.push_str("proc 5 /var/lib/etcd\nhealth true\n");
            text.push_str("status [{\"Status\":{\"header\":{\"cluster_id\":17237502228374930372,\"member_id\":2},\"leader\":2}}]\n");
        }
        if intact {
            text.push_str("data member\ndata exists\n");
        }
        crate::old_members::probe::parse(host, &text)
    }

    fn fresh(host: &str) -> HostAssessment {
        HostAssessment {
            data_intact: false,
            data_exists: false,
            ..stopped(host)
        }
    }

    #[test]
    fn restoring_onto_new_hosts_accounts_for_every_old_member() {
        let (inv, history) = moved();
        let spares = || vec![fresh("cp1"), fresh("cp2"), fresh("cp3")];
        let with = |old: Vec<HostSeen>| Assessed {
            hosts: spares(),
            history: history.clone(),
            old,
            ..Assessed::default()
        };
        let src = || file(100, "2026-11-22T01:00:00Z");
        // The old cluster is fully healthy on old1–old3: refused, with the ways out.
        let healthy = with(vec![
            old("old1", true, true),
            old("old2", true, true),
            old("old3", true, true),
        ]);
        let r = decide(&inv, &healthy, &opts(), None, src()).unwrap_err();
        assert_eq!(r.code, exit::REFUSED, "{}", r.message);
        for w in [
            "the old cluster still has quorum: old1, old2, old3",
            "hactl replace MEMBER --host NEW",
            "--force-destructive",
        ] {
            assert!(r.message.contains(w), "{w}: {}", r.message);
        }
        // Forced: the plan fences all three before the new cluster starts.
        let forced = Options {
            force_destructive: true,
            ..opts()
        };
        let d = decide(&inv, &healthy, &forced, None, src()).unwrap();
        assert_eq!(d.old_fenced, ["old1", "old2", "old3"]);
        assert_eq!(d.targets, ["cp1", "cp2", "cp3"]);
        // Two old members stopped with their data: quorum restorable by starting them.
        let intact = with(vec![
            old("old1", false, true),
            old("old2", false, true),
            old("old3", false, false),
        ]);
        let r = decide(&inv, &intact, &opts(), None, src()).unwrap_err();
        assert!(
            r.message
                .contains("old members the inventory no longer gives the etcd role"),
            "{}",
            r.message
        );
        // One old member left with data (the disaster): proceeds, all three fenced.
        let lost = with(vec![
            old("old1", false, true),
            old("old2", false, false),
            old("old3", false, false),
        ]);
        let d = decide(&inv, &lost, &opts(), None, src()).unwrap();
        assert_eq!(d.old_fenced, ["old1", "old2", "old3"]);
        assert!(d.old_attested.is_empty());
        // The control plane is not there yet (no kubernetes section here), but HAProxy lists
        // the old members: R7 runs `up`'s plan.
        assert!(d.converges(), "{:?}", d.converge);
        assert!(
            d.converge[0].contains("HAProxy on lb1 still sends clients to the old members old1, old2, old3"),
            "{:?}",
            d.converge
        );
        // old3 powered off: refused until attested; attested, it awaits its fence.
        let off = with(vec![old("old1", false, true), old("old2", false, false)]);
        let r = decide(&inv, &off, &opts(), None, src()).unwrap_err();
        assert_eq!(r.code, exit::NEEDS_INPUT);
        assert!(
            r.message.contains("cannot reach old3") && r.message.contains("--confirm-dead old3"),
            "{}",
            r.message
        );
        let attested = Options {
            confirm_dead: vec!["old3".into()],
            ..opts()
        };
        let d = decide(&inv, &off, &attested, None, src()).unwrap();
        assert_eq!(
            (d.old_fenced.as_slice(), d.old_attested.as_slice()),
            (
                &["old1".to_string(), "old2".to_string()][..],
                &["old3".to_string()][..]
            )
        );
        // A host of the history that left the inventory: refused, with both ways out.
        let mut gone = off.clone();
        gone.history
            .hosts
            .insert("old9".into(), crate::old_members::record::HostRecord::default());
        let r = decide(&inv, &gone, &attested, None, src()).unwrap_err();
        assert!(
            r.message.contains("old9 held a member") && r.message.contains("roles: []"),
            "{}",
            r.message
        );
        assert!(r.message.contains("--confirm-dead old9"), "{}", r.message);
    }

    #[test]
    fn r7_is_planned_only_when_something_is_left_and_every_host_answers() {
        let yaml = concat!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: lab\nspec:\n  ssh:\n    agent: true\n",
            "  hosts:\n",
            "    - { name: cp1, address: 10.0.0.11, roles: [etcd, control-plane] }\n",
            "    - { name: cp2, address: 10.0.0.12, roles: [etcd, control-plane] }\n",
            "    - { name: cp3, address: 10.0.0.13, roles: [etcd, control-plane] }\n",
            "  kubernetes: { version: 1.31.4, source: release, releaseUrl: 'https://example.com/k.tar.gz',\n",
            "    sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa }\n",
            "  stateDir: /tmp/hactl-recover-decide-r7\n",
        );
        let inv = crate::inventory::load_str(std::path::Path::new("lab.yaml"), yaml).unwrap();
        let with_units = |h: &str| HostAssessment {
            kube_units: vec!["kube-apiserver.service".into()],
            ..fresh(h)
        };
        let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // In place: the control plane is there, nothing old: no R7.
        let hosts = [with_units("cp1"), with_units("cp2"), with_units("cp3")];
        assert!(converge_reasons(&inv, &hosts, &t(&["cp1", "cp2", "cp3"]), &[], &[], &[]).is_empty());
        // New hosts: no apiserver until the control plane is installed.
        let bare = [fresh("cp1"), fresh("cp2"), with_units("cp3")];
        let r = converge_reasons(&inv, &bare, &t(&["cp1", "cp2", "cp3"]), &[], &[], &[]);
        assert_eq!(
            r,
            ["no apiserver runs on cp1, cp2 until the control plane is installed there"]
        );
        // ... with a member attested dead, `up` cannot run: named as left for the operator.
        let r = converge_reasons(&inv, &bare, &t(&["cp1", "cp2"]), &t(&["cp3"]), &[], &[]);
        assert!(
            r[0].ends_with("(`hactl up` once cp3 answers or leaves the inventory)"),
            "{r:?}"
        );
    }
}
