//! What the probes and the member history say, pure: which inventory hosts run an etcd that is
//! not of the current cluster (a zombie), which old members attested dead answer again (a fence
//! is due), which peers the members' logs show dialling them with another cluster ID, and the
//! command that fences each ([`classify`]); which old hosts a recover must fence or have
//! attested ([`recover_accounting`]). Table-tested below from recorded probe output.
//!
//! Invariant: nothing here reads a host or a file; every finding that is a problem names the
//! command that ends it.

use serde::Serialize;

use super::probe::HostSeen;
use super::record::{History, HostState};

/// The current cluster as its members describe it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Current {
    /// Its ID, when a member answered (else the history's, when recorded).
    pub cluster_id: Option<u64>,
    /// Every member's peer URLs.
    pub member_urls: Vec<String>,
}

/// One inventory host, as the probe saw it (`seen: None`: it did not answer).
#[derive(Debug, Clone)]
pub struct HostInput<'a> {
    pub name: &'a str,
    pub etcd_role: bool,
    pub peer_url: String,
    /// The configured data dir (`etcd.dataDir`).
    pub data_dir: &'a str,
    pub seen: Option<&'a HostSeen>,
}

/// What a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// An etcd that is not of the current cluster runs on an inventory host.
    Zombie,
    /// An old member attested dead answers again: its fence is due.
    FenceDue,
    /// A member's log shows a peer of another cluster dialling it, on no host hactl can see.
    Dialling,
    /// An old member attested dead does not answer yet (a note, not a problem).
    AwaitingFence,
}

/// One old member or zombie (`hactl status -o json`: `oldMembers[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub kind: Kind,
    /// The inventory host, when known (`null`: a dialler on no host hactl knows).
    pub host: Option<String>,
    /// The foreign etcd's cluster ID and member ID (hex), when known (else `null`).
    pub cluster_id: Option<String>,
    pub member_id: Option<String>,
    /// The current members whose logs show it refused, and how many times in the window.
    pub refused_by: Vec<String>,
    pub refusals: u64,
    /// The member history's state of the host (`member`, `old`, `awaitingFence`, `fenced`;
    /// `null` when it has no record).
    pub recorded: Option<&'static str>,
    /// For people: what was seen.
    pub detail: String,
    /// The command that fences it (empty, `null`, for a note).
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub command: String,
    /// Whether it is a problem (`status` exits 7); false for a note.
    pub problem: bool,
    /// heal may fence it: on a reachable inventory host.
    #[serde(skip)]
    pub fenceable: bool,
}

impl Finding {
    /// The line `status` prints among its problems.
    pub fn problem_line(&self) -> String {
        let who = self.host.as_deref().unwrap_or("an unknown host");
        let mut s = match self.kind {
            Kind::Zombie => format!("zombie etcd on {who}: {}", self.detail),
            Kind::FenceDue => format!(
                "old member {who} answers again and is not fenced: {}",
                self.detail
            ),
            Kind::Dialling => format!("a peer of another cluster dials the members: {}", self.detail),
            Kind::AwaitingFence => format!("old member {who}: {}", self.detail),
        };
        if !self.command.is_empty() {
            s.push_str(&format!(": {}", self.command));
        }
        s
    }
}

const HEAL: &str =
    "`hactl heal --once` fences it (its etcd stopped, disabled and fenced, its data dir moved aside)";

fn hex(id: u64) -> String {
    format!("{id:x}")
}

/// Every finding about old members and zombies, hosts in inventory order, then the diallers.
pub fn classify(current: &Current, history: &History, hosts: &[HostInput<'_>]) -> Vec<Finding> {
    let current_id = current
        .cluster_id
        .or_else(|| u64::from_str_radix(&history.cluster_id, 16).ok());
    let mut out: Vec<Finding> = Vec::new();
    for h in hosts {
        let recorded = history.state_of(h.name);
        let base = |kind: Kind, detail: String| Finding {
            kind,
            host: Some(h.name.to_string()),
            cluster_id: None,
            member_id: None,
            refused_by: Vec::new(),
            refusals: 0,
            recorded: recorded.map(HostState::as_str),
            detail,
            command: String::new(),
            problem: true,
            fenceable: false,
        };
        let Some(s) = h.seen else {
            if recorded == Some(HostState::AwaitingFence) {
                let by = &history.hosts[h.name].by;
                let mut f = base(
                    Kind::AwaitingFence,
                    format!("attested dead by {by}; it does not answer, and is fenced the moment it does (`hactl up` or `hactl heal --once`)"),
                );
                f.problem = false;
                out.push(f);
            }
            continue;
        };
        if let Some(f) = zombie(h, s, current_id, current) {
            out.push(Finding {
                recorded: recorded.map(HostState::as_str),
                ..f
            });
            continue;
        }
        if recorded == Some(HostState::AwaitingFence) && !s.fenced_for_good() {
            let by = &history.hosts[h.name].by;
            let mut f = base(
                Kind::FenceDue,
                format!("attested dead by {by}, it answers again with {}", leftovers(s)),
            );
            f.command = fence_command(h.etcd_role);
            f.fenceable = true;
            out.push(f);
        }
    }
    diallers(current_id, history, hosts, &mut out);
    out
}

/// What is left of an old member on a host that answers: its data, its enabled unit.
fn leftovers(s: &HostSeen) -> String {
    let mut parts = Vec::new();
    if s.data_member {
        parts.push("its data dir still holding the old member");
    }
    if s.unit(crate::etcd::UNIT)
        .is_some_and(|u| u.installed() && u.enabled == "enabled")
    {
        parts.push("etcd enabled to start at boot");
    }
    if s.unit(crate::etcd::UNIT)
        .is_some_and(|u| u.installed() && !s.fenced.contains(crate::etcd::UNIT))
    {
        parts.push("no fence on etcd");
    }
    if parts.is_empty() {
        "its old units in place".into()
    } else {
        parts.join(", ")
    }
}

fn fence_command(etcd_role: bool) -> String {
    if etcd_role {
        format!("{HEAL}; then `hactl up` joins it to the cluster")
    } else {
        format!("{HEAL}, as does `hactl up`")
    }
}

/// A zombie on one host: an etcd process whose data (its WAL's metadata) is of another cluster;
/// failing that, one that answers as a member of another cluster, one that runs on a host
/// without the etcd role whose peer URL is in no current member list, or one started beside the
/// member's own on hactl's data.
fn zombie(h: &HostInput<'_>, s: &HostSeen, current_id: Option<u64>, current: &Current) -> Option<Finding> {
    if !s.etcd_running() {
        return None;
    }
    let cur = current_id?;
    let in_list = current.member_urls.iter().any(|u| u == &h.peer_url);
    let unit_main = s.unit(crate::etcd::UNIT).map(|u| u.main_pid).unwrap_or(0);
    let on_hactl_data = |d: &str| d == h.data_dir || d.starts_with(&format!("{}.hactl-", h.data_dir));
    let mk = |detail: String, cluster: Option<u64>, member: Option<u64>| Finding {
        kind: Kind::Zombie,
        host: Some(h.name.to_string()),
        cluster_id: cluster.map(hex),
        member_id: member.filter(|m| *m != 0).map(hex),
        refused_by: Vec::new(),
        refusals: 0,
        recorded: None,
        detail,
        command: fence_command(h.etcd_role),
        problem: true,
        fenceable: true,
    };
    let serving = |cluster: u64| match s.status {
        Some(st) if st.cluster_id == cluster && st.leader != 0 && s.healthy => {
            ", WITH A LEADER: an old cluster that accepts writes"
        }
        Some(st) if st.cluster_id == cluster => ", without a leader",
        _ => ", not serving (without its peers it never becomes ready)",
    };
    // The data each process runs on says whose member it is, serving or not.
    if let Some(p) = s
        .processes
        .iter()
        .find(|p| p.wal.is_some_and(|w| w.cluster_id != cur))
    {
        let w = p.wal.expect("found with a WAL");
        return Some(mk(
            format!(
                "etcd member {} of cluster {} runs here (pid {} on {}; the cluster is {}){}",
                hex(w.member_id),
                hex(w.cluster_id),
                p.pid,
                p.data_dir,
                hex(cur),
                serving(w.cluster_id)
            ),
            Some(w.cluster_id),
            Some(w.member_id),
        ));
    }
    let unknown: Vec<&super::probe::EtcdProcess> = s.processes.iter().filter(|p| p.wal.is_none()).collect();
    let procs = |ps: &[&super::probe::EtcdProcess]| {
        ps.iter()
            .map(|p| format!("pid {} on {}", p.pid, p.data_dir))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let strays: Vec<&super::probe::EtcdProcess> = unknown
        .iter()
        .copied()
        .filter(|p| p.pid != unit_main && on_hactl_data(&p.data_dir))
        .collect();
    match s.status {
        Some(st) if st.cluster_id != cur => Some(mk(
            format!(
                "etcd member {} of cluster {} answers here ({}; the cluster is {}){}",
                hex(st.member_id),
                hex(st.cluster_id),
                procs(&s.processes.iter().collect::<Vec<_>>()),
                hex(cur),
                serving(st.cluster_id)
            ),
            Some(st.cluster_id),
            Some(st.member_id),
        )),
        None if !h.etcd_role && !in_list && (!unknown.is_empty() || s.processes.is_empty()) => Some(mk(
            format!(
                "etcd runs here ({}) on a host without the etcd role whose member is in no current member list; its cluster is unknown",
                if s.processes.is_empty() {
                    "its unit".to_string()
                } else {
                    procs(&unknown)
                }
            ),
            None,
            None,
        )),
        _ if unit_main > 0 && !strays.is_empty() => Some(mk(
            format!(
                "an etcd besides the member's own runs on old data ({}), cluster unknown",
                procs(&strays)
            ),
            None,
            None,
        )),
        _ => None,
    }
}

/// Peers refused for another cluster ID in the current members' logs: merged into the zombie
/// they are (same member ID, or same cluster ID on a host of the history), or a finding of
/// their own.
fn diallers(current_id: Option<u64>, history: &History, hosts: &[HostInput<'_>], out: &mut Vec<Finding>) {
    let Some(cur) = current_id else { return };
    let cur_hex = hex(cur);
    // (remote member, remote cluster) -> (count, refused by)
    let mut seen: Vec<(Option<String>, String, u64, Vec<String>)> = Vec::new();
    for h in hosts.iter().filter(|h| h.etcd_role) {
        let Some(s) = h.seen else { continue };
        // Only a current member's refusals count (a log line of an earlier lineage on this
        // host says nothing about today).
        if s.status.is_none_or(|st| st.cluster_id != cur) {
            continue;
        }
        for r in &s.refused {
            if r.remote_cluster.eq_ignore_ascii_case(&cur_hex)
                || r.local_cluster
                    .as_deref()
                    .is_some_and(|l| !l.eq_ignore_ascii_case(&cur_hex))
            {
                continue;
            }
            match seen
                .iter_mut()
                .find(|(m, c, _, _)| *m == r.remote_member && *c == r.remote_cluster)
            {
                Some(e) => {
                    e.2 += r.count;
                    e.3.push(h.name.to_string());
                }
                None => seen.push((
                    r.remote_member.clone(),
                    r.remote_cluster.clone(),
                    r.count,
                    vec![h.name.to_string()],
                )),
            }
        }
    }
    for (member, cluster, count, by) in seen {
        // The zombie a probe found already?
        if let Some(z) = out.iter_mut().find(|f| {
            f.kind == Kind::Zombie
                && match (&member, &f.member_id) {
                    (Some(m), Some(fm)) => m.eq_ignore_ascii_case(fm),
                    _ => f
                        .cluster_id
                        .as_deref()
                        .is_some_and(|c| c.eq_ignore_ascii_case(&cluster)),
                }
        }) {
            z.refusals += count;
            z.refused_by.extend(by);
            continue;
        }
        let host = member
            .as_deref()
            .and_then(|m| history.host_of_member(m))
            .map(str::to_string);
        let input = host.as_deref().and_then(|h| hosts.iter().find(|i| i.name == h));
        let who = member
            .as_deref()
            .map(|m| format!("member {m} of cluster {cluster}"))
            .unwrap_or_else(|| format!("a member of cluster {cluster}"));
        let (detail, command) = match (&host, input) {
            (Some(h), Some(i)) if i.seen.is_none() => (
                format!("{who} (recorded on {h}, which does not answer hactl) dialled {} {count} times in the last {}s", by.join(", "), super::probe::LOG_WINDOW_SECS),
                format!("make {h} reachable so `hactl heal --once` can fence it, or power it off"),
            ),
            (Some(h), Some(_)) => (
                format!("{who} (recorded on {h}) dialled {} {count} times in the last {}s", by.join(", "), super::probe::LOG_WINDOW_SECS),
                format!("stop the etcd that runs there on old data; `hactl heal --once` fences {h} once it sees it"),
            ),
            (Some(h), None) => (
                format!("{who} (recorded on {h}, not in the inventory) dialled {} {count} times in the last {}s", by.join(", "), super::probe::LOG_WINDOW_SECS),
                format!("add {h} back to the inventory with `roles: []` and run `hactl heal --once` to fence it, or power it off"),
            ),
            (None, _) => (
                format!("{who} dialled {} {count} times in the last {}s, from a host hactl does not know", by.join(", "), super::probe::LOG_WINDOW_SECS),
                "find the host that runs it (an old member restarted on old data): add it to the inventory with `roles: []` and run `hactl heal --once` to fence it, or stop its etcd".to_string(),
            ),
        };
        out.push(Finding {
            kind: Kind::Dialling,
            host,
            cluster_id: Some(cluster),
            member_id: member,
            refused_by: by,
            refusals: count,
            recorded: None,
            detail,
            command,
            problem: true,
            fenceable: false,
        });
    }
}

/// Whether any finding is a problem: `status` then exits [`crate::exit::ZOMBIE`].
pub fn any_problem(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.problem)
}

/// What a recover must do about the hosts of the member history that are not among its
/// targets: fence the reachable ones for good, have the others attested with `--confirm-dead`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Reachable hosts to fence for good before the new cluster starts (inventory order).
    pub fence: Vec<String>,
    /// Unreachable ones the operator attested dead: fenced when they answer again.
    pub attested: Vec<String>,
    /// Unreachable ones nobody attested: the recover refuses until `--confirm-dead` names them.
    pub unattested: Vec<String>,
    /// Hosts of the history that are not in the inventory and not attested (hactl cannot
    /// reach them to fence them).
    pub not_in_inventory: Vec<String>,
}

/// [`Accounting`] from the history, the inventory's host names (in order), the recover's targets
/// and the inventory etcd hosts (those R1 handles itself), who answered, and `--confirm-dead`.
///
/// Every host the history holds that is not fenced for good is accounted for; a fenced one is
/// fenced again when it answers (the fence is idempotent) and needs no attestation when it does
/// not.
pub fn recover_accounting(
    history: &History,
    inventory: &[&str],
    etcd_hosts: &[&str],
    reachable: &dyn Fn(&str) -> bool,
    confirm_dead: &[String],
) -> Accounting {
    let mut a = Accounting::default();
    let mut names: Vec<&str> = inventory
        .iter()
        .copied()
        .filter(|h| history.hosts.contains_key(*h))
        .collect();
    names.extend(
        history
            .hosts
            .keys()
            .map(String::as_str)
            .filter(|h| !inventory.contains(h)),
    );
    for h in names {
        if etcd_hosts.contains(&h) {
            continue; // R1.2–R1.4 fence it, and it becomes a member of the new cluster
        }
        let fenced = history.state_of(h) == Some(HostState::Fenced);
        let attested = confirm_dead.iter().any(|c| c == h);
        if !inventory.contains(&h) {
            if !fenced && !attested {
                a.not_in_inventory.push(h.to_string());
            } else if attested && !fenced {
                a.attested.push(h.to_string());
            }
            continue;
        }
        if reachable(h) {
            a.fence.push(h.to_string());
        } else if attested {
            a.attested.push(h.to_string());
        } else if !fenced {
            a.unattested.push(h.to_string());
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::super::probe::{self, tests::MEMBER_WITH_REFUSALS, tests::ZOMBIE};
    use super::super::record::{HostRecord, Seen};
    use super::*;

    const CUR: u64 = 13647126678164213893; // bd64556880bc1085

    fn history() -> History {
        let mut h = History::default();
        let seen = |host: &str, id: &str| Seen {
            host: host.into(),
            address: String::new(),
            member_id: id.into(),
        };
        h.record_members(
            "21bd56d8369216f",
            &[seen("cp1", "262decdf70888a6"), seen("cp2", "2"), seen("cp3", "3")],
            "up",
            "t0",
        );
        h.record_members(
            &hex(CUR),
            &[seen("spare1", "a1684e3e1918715d")],
            "recover r1",
            "t1",
        );
        h.mark_fenced("cp1", "", "recover r1", "t1", "/var/lib/etcd.hactl-retired-r1");
        h.mark_fenced("cp2", "", "recover r1", "t1", "");
        h.mark_awaiting_fence("cp3", "", "recover r1", "t1");
        h
    }

    fn input<'a>(name: &'a str, etcd: bool, seen: Option<&'a HostSeen>) -> HostInput<'a> {
        HostInput {
            name,
            etcd_role: etcd,
            peer_url: format!("https://{name}:2380"),
            data_dir: "/var/lib/etcd",
            seen,
        }
    }

    fn current() -> Current {
        Current {
            cluster_id: Some(CUR),
            member_urls: vec!["https://spare1:2380".into()],
        }
    }

    #[test]
    fn a_zombie_on_a_fenced_host_is_found_and_merged_with_the_refusals_it_caused() {
        let zombie = probe::parse("cp1", ZOMBIE);
        let member = probe::parse("spare1", MEMBER_WITH_REFUSALS);
        let f = classify(
            &current(),
            &history(),
            &[
                input("cp1", false, Some(&zombie)),
                input("spare1", true, Some(&member)),
            ],
        );
        // The zombie (with its 1184 refusals), and the capnslog line's dialler of its own.
        assert_eq!(f.len(), 2, "{f:#?}");
        let z = &f[0];
        assert_eq!((z.kind, z.host.as_deref()), (Kind::Zombie, Some("cp1")));
        assert_eq!(z.cluster_id.as_deref(), Some("21bd56d8369216f"));
        assert_eq!(z.member_id.as_deref(), Some("262decdf70888a6"));
        assert_eq!(
            (z.refusals, z.refused_by.as_slice()),
            (1184, &["spare1".to_string()][..])
        );
        assert_eq!(z.recorded, Some("fenced"));
        assert!(z.fenceable && z.problem);
        let line = z.problem_line();
        assert!(line.starts_with("zombie etcd on cp1: etcd member 262decdf70888a6 of cluster 21bd56d8369216f runs here (pid 143 on /var/lib/etcd.hactl-retired-20261124-045856-1b19"), "{line}");
        assert!(line.contains("`hactl heal --once` fences it"), "{line}");
        let d = &f[1];
        assert_eq!((d.kind, d.host.as_deref()), (Kind::Dialling, None));
        assert_eq!(d.cluster_id.as_deref(), Some("6f1f0ddab2c3e4f1"));
        assert!(d.problem && !d.fenceable);
        assert!(d.command.contains("roles: []"), "{}", d.command);
        assert!(any_problem(&f));
    }

    #[test]
    fn a_dialler_recorded_on_an_unreachable_host_names_it() {
        let member = probe::parse("spare1", MEMBER_WITH_REFUSALS);
        let mut h = history();
        h.hosts.get_mut("cp3").unwrap().member_id = "262decdf70888a6".into();
        h.hosts.get_mut("cp1").unwrap().member_id.clear();
        let f = classify(
            &current(),
            &h,
            &[input("cp3", false, None), input("spare1", true, Some(&member))],
        );
        // cp3 awaits its fence (a note), and its refusals name it.
        assert_eq!(f[0].kind, Kind::AwaitingFence);
        assert!(!f[0].problem);
        let d = f
            .iter()
            .find(|x| x.kind == Kind::Dialling && x.host.is_some())
            .unwrap();
        assert_eq!(d.host.as_deref(), Some("cp3"));
        assert!(d.detail.contains("which does not answer hactl"), "{}", d.detail);
    }

    #[test]
    fn an_attested_host_that_answers_is_due_its_fence_and_a_clean_one_is_nothing() {
        let back = probe::parse(
            "cp3",
            "unit etcd.service LoadState=loaded ActiveState=inactive UnitFileState=enabled MainPID=0 \ndata member\ndata exists\n",
        );
        let f = classify(&current(), &history(), &[input("cp3", false, Some(&back))]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, Kind::FenceDue);
        assert!(
            f[0].detail.contains("data dir still holding the old member"),
            "{}",
            f[0].detail
        );
        assert!(f[0].command.contains("as does `hactl up`"), "{}", f[0].command);
        // Fenced by hand (or by an earlier heal): nothing to say.
        let clean = probe::parse(
            "cp3",
            "unit etcd.service LoadState=loaded ActiveState=inactive UnitFileState=disabled MainPID=0 \nfence etcd.service\n",
        );
        assert!(classify(&current(), &history(), &[input("cp3", false, Some(&clean))]).is_empty());
    }

    #[test]
    fn a_current_member_is_never_a_zombie_and_an_unknown_cluster_protects_etcd_hosts() {
        let member = probe::parse("spare1", MEMBER_WITH_REFUSALS);
        let only = classify(
            &current(),
            &History::default(),
            &[input("spare1", true, Some(&member))],
        );
        assert!(only.iter().all(|f| f.kind == Kind::Dialling), "{only:#?}");
        // An etcd host whose etcd runs without answering: status's member lines cover it.
        let silent = probe::parse(
            "spare2",
            "unit etcd.service LoadState=loaded ActiveState=active UnitFileState=enabled MainPID=7 \nproc 7 /var/lib/etcd\n",
        );
        assert!(classify(
            &current(),
            &History::default(),
            &[input("spare2", true, Some(&silent))]
        )
        .is_empty());
        // The same on a host without the etcd role and not in the member list: a zombie.
        let f = classify(
            &current(),
            &History::default(),
            &[input("cp9", false, Some(&silent))],
        );
        assert_eq!(f[0].kind, Kind::Zombie);
        assert!(f[0].cluster_id.is_none());
        // ... but not when its peer URL is a current member's (status names it "not in the
        // inventory": `hactl remove`).
        let cur = Current {
            cluster_id: Some(CUR),
            member_urls: vec!["https://cp9:2380".into()],
        };
        assert!(classify(&cur, &History::default(), &[input("cp9", false, Some(&silent))]).is_empty());
        // No current cluster known at all (no member answered, nothing recorded): no verdict.
        let z = probe::parse("cp1", ZOMBIE);
        assert!(classify(
            &Current::default(),
            &History::default(),
            &[input("cp1", false, Some(&z))]
        )
        .is_empty());
        // ... but the history's cluster ID serves when no member answered.
        let f = classify(&Current::default(), &history(), &[input("cp1", false, Some(&z))]);
        assert_eq!(f[0].kind, Kind::Zombie);
    }

    #[test]
    fn a_second_etcd_beside_a_current_member_on_old_data_is_a_zombie() {
        let text = "unit etcd.service LoadState=loaded ActiveState=active UnitFileState=enabled MainPID=7 \nproc 7 /var/lib/etcd\nproc 9 /var/lib/etcd.hactl-pre-r1\nproc 11 /srv/other-etcd\ndata member\nstatus [{\"Status\":{\"header\":{\"cluster_id\":13647126678164213893,\"member_id\":1},\"leader\":1}}]\n";
        let s = probe::parse("spare1", text);
        let f = classify(
            &current(),
            &History::default(),
            &[input("spare1", true, Some(&s))],
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].detail.contains("/var/lib/etcd.hactl-pre-r1"),
            "{}",
            f[0].detail
        );
        assert!(
            !f[0].detail.contains("/srv/other-etcd"),
            "not hactl's: {}",
            f[0].detail
        );
        assert!(
            f[0].command.contains("then `hactl up` joins it"),
            "{}",
            f[0].command
        );
    }

    #[test]
    fn recover_accounts_for_every_unfenced_host_of_the_history() {
        let mut h = History::default();
        for (name, state) in [
            ("cp1", HostState::Member),
            ("cp2", HostState::Member),
            ("cp3", HostState::Member),
            ("old9", HostState::Old),
            ("gone", HostState::Fenced),
            ("lost", HostState::Old),
        ] {
            h.hosts.insert(
                name.into(),
                HostRecord {
                    state,
                    ..HostRecord::default()
                },
            );
        }
        let inventory = ["cp1", "cp2", "cp3", "old9", "spare1", "spare2"];
        let etcd = ["spare1", "spare2"];
        // cp3 is off; lost is not in the inventory.
        let up = |n: &str| n != "cp3";
        let a = recover_accounting(&h, &inventory, &etcd, &up, &[]);
        assert_eq!(a.fence, ["cp1", "cp2", "old9"]);
        assert_eq!(a.unattested, ["cp3"]);
        assert_eq!(a.not_in_inventory, ["lost"]);
        assert!(a.attested.is_empty());
        let a = recover_accounting(&h, &inventory, &etcd, &up, &["cp3".into(), "lost".into()]);
        assert_eq!(a.attested, ["cp3", "lost"]);
        assert!(a.unattested.is_empty() && a.not_in_inventory.is_empty());
        // A host that is an etcd host of the inventory is R1's, whatever the history says.
        let a = recover_accounting(&h, &inventory, &["cp1", "cp2", "cp3"], &up, &[]);
        assert_eq!(a.fence, ["old9"]);
        assert!(a.unattested.is_empty());
        // A fenced host that does not answer needs no attestation; one that answers is fenced again.
        let a = recover_accounting(&h, &["gone", "cp1"], &["cp1"], &|_| false, &[]);
        assert!(a.unattested.is_empty() && a.fence.is_empty());
        let a = recover_accounting(&h, &["gone", "cp1"], &["cp1"], &|_| true, &[]);
        assert_eq!(a.fence, ["gone"]);
    }
}
