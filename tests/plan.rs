//! Plans built from recorded facts, without hosts: what `up` would do on fresh hosts, on a
//! converged cluster (nothing), and when the inventory grows (learner joins, one at a time).

use std::collections::BTreeMap;
use std::path::Path;

use hactl::etcd::{Header, Member, MemberList};
use hactl::facts::{FileState, HostFacts, UnitState};
use hactl::inventory::{self, Inventory};
use hactl::phases::{self, Ctx, EtcdView, PlanError};
use hactl::plan::{Plan, Step};

fn inventory(hosts: usize, dir: &Path) -> Inventory {
    let mut yaml = String::from(
        "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: plantest\nspec:\n  ssh:\n    agent: true\n  hosts:\n",
    );
    for i in 1..=hosts {
        yaml.push_str(&format!(
            "    - {{ name: cp{i}, address: 10.0.0.1{i}, roles: [etcd, control-plane] }}\n"
        ));
    }
    yaml.push_str(&format!("  stateDir: {}\n", dir.display()));
    inventory::load_str(&dir.join("plantest.yaml"), &yaml).unwrap()
}

fn fixed_now() -> time::OffsetDateTime {
    time::macros::datetime!(2026-11-22 00:00 UTC)
}

/// Facts of hosts with the distribution's etcd (and curl, which hactl's probes run) installed and
/// nothing of hactl's.
fn fresh_facts(inv: &Inventory) -> BTreeMap<String, HostFacts> {
    inv.hosts
        .iter()
        .map(|h| {
            let mut f = HostFacts {
                etcd_user: true,
                data_dir: Some(FileState {
                    sha256: String::new(),
                    mode: 0o700,
                    owner: "etcd".into(),
                    group: "etcd".into(),
                    mtime: 0,
                }),
                ..HostFacts::default()
            };
            f.binaries.insert("etcd".into(), "/usr/bin/etcd".into());
            f.binaries.insert("etcdctl".into(), "/usr/bin/etcdctl".into());
            f.binaries.insert("curl".into(), "/usr/bin/curl".into());
            (h.name.clone(), f)
        })
        .collect()
}

/// What the hosts report after `plan` ran: every uploaded file in place, etcd running with data.
fn converged(
    plan: &Plan,
    mut facts: BTreeMap<String, HostFacts>,
    members: &MemberList,
) -> BTreeMap<String, HostFacts> {
    for phase in &plan.phases {
        for hs in &phase.hosts {
            let f = facts.get_mut(&hs.host).unwrap();
            for step in &hs.steps {
                if let Step::Upload(u) = step {
                    f.files.insert(
                        u.path.clone(),
                        FileState {
                            sha256: u.sha256.clone(),
                            mode: u.mode,
                            owner: u.owner.clone(),
                            group: u.group.clone(),
                            mtime: 0,
                        },
                    );
                }
            }
        }
    }
    for f in facts.values_mut() {
        f.data_dir_has_member = true;
        f.units.insert(
            "etcd.service".into(),
            UnitState {
                active: "active".into(),
                main_pid: 42,
                enabled: "enabled".into(),
                started_monotonic_us: 0,
            },
        );
        f.units.insert(
            hactl::backup::TIMER.into(),
            UnitState {
                active: "active".into(),
                main_pid: 0,
                enabled: "enabled".into(),
                started_monotonic_us: 0,
            },
        );
        f.members = Some(members.clone());
    }
    facts
}

fn members(inv: &Inventory, n: usize) -> MemberList {
    MemberList {
        header: Header {
            cluster_id: 0xabc,
            member_id: 1,
            raft_term: 2,
            revision: 7,
        },
        members: inv
            .hosts
            .iter()
            .take(n)
            .enumerate()
            .map(|(i, h)| Member {
                id: 100 + i as u64,
                name: h.name.clone(),
                peer_urls: vec![hactl::etcd::peer_url(inv, h)],
                client_urls: vec![hactl::etcd::client_url(inv, h)],
                is_learner: false,
            })
            .collect(),
    }
}

fn build(inv: &Inventory, facts: &BTreeMap<String, HostFacts>) -> Result<Plan, PlanError> {
    let pki = hactl::pki::ensure(&inv.state_dir.join("pki"), inv, fixed_now()).unwrap();
    let view = EtcdView::from_facts(inv, facts)?;
    let ctx = Ctx::new(inv, &pki, facts).with_etcd(&view);
    phases::build(&hactl::converge::phases(), &ctx)
}

/// The plan text with key-dependent values (sizes, hashes) blanked, so it can be compared.
fn redacted(plan: &Plan) -> String {
    plan.to_string()
        .lines()
        .map(|l| match (l.find(" size="), l.find(" sha256=")) {
            (Some(a), Some(_)) => format!("{} size=… sha256=…", &l[..a]),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_fresh_cluster_plan_installs_configures_and_starts_every_member() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, dir.path());
    let plan = build(&inv, &fresh_facts(&inv)).unwrap();
    insta::assert_snapshot!(redacted(&plan));
}

#[test]
fn a_converged_cluster_plans_no_changes() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, dir.path());
    let fresh = fresh_facts(&inv);
    let plan = build(&inv, &fresh).unwrap();
    let facts = converged(&plan, fresh, &members(&inv, 3));
    let again = build(&inv, &facts).unwrap();
    assert!(again.is_empty(), "{again}");
    assert_eq!(again.to_string(), "no changes\n");
}

#[test]
fn a_changed_unit_restarts_running_members_one_at_a_time_with_health_gates() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, dir.path());
    let fresh = fresh_facts(&inv);
    let plan = build(&inv, &fresh).unwrap();
    let mut facts = converged(&plan, fresh, &members(&inv, 3));
    for f in facts.values_mut() {
        f.files
            .get_mut("/etc/systemd/system/etcd.service")
            .unwrap()
            .sha256 = "old".into();
    }
    let roll = build(&inv, &facts).unwrap();
    let text = roll.to_string();
    assert!(roll.is_disruptive());
    assert!(
        text.contains("== Restart changed etcd members (one host at a time)"),
        "{text}"
    );
    let restarts: Vec<usize> = ["cp1", "cp2", "cp3"]
        .iter()
        .map(|h| {
            text.find(&format!("{h}: run systemctl restart etcd.service"))
                .unwrap()
        })
        .collect();
    assert!(restarts.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert_eq!(
        text.matches("every etcd member is healthy (before restarting")
            .count(),
        3,
        "{text}"
    );
}

#[test]
fn growing_three_to_five_plans_one_learner_join_after_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let inv5 = inventory(5, dir.path());
    let fresh = fresh_facts(&inv5);
    let plan = build(&inv5, &fresh).unwrap();
    // cp1..cp3 run a cluster; cp4 and cp5 are new.
    let mut facts = converged(&plan, fresh.clone(), &members(&inv5, 3));
    for h in ["cp4", "cp5"] {
        facts.insert(h.to_string(), fresh[h].clone());
    }
    let grow = build(&inv5, &facts).unwrap();
    insta::assert_snapshot!(redacted(&grow));
    // cp5's initial cluster names the three members and cp4, which joins just before it.
    let env = grow.phases[0]
        .hosts
        .iter()
        .find(|h| h.host == "cp5")
        .unwrap()
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Upload(u) if u.path == "/etc/hactl/etcd-initial.env" => {
                Some(String::from_utf8(u.content.in_memory().unwrap().to_vec()).unwrap())
            }
            _ => None,
        })
        .unwrap();
    assert!(env.contains("ETCD_INITIAL_CLUSTER=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380,cp4=https://10.0.0.14:2380,cp5=https://10.0.0.15:2380\n"), "{env}");
    assert!(env.contains("ETCD_INITIAL_CLUSTER_STATE=existing\n"), "{env}");
}

#[test]
fn a_member_whose_data_vanished_is_refused_with_the_replace_command() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, dir.path());
    let fresh = fresh_facts(&inv);
    let plan = build(&inv, &fresh).unwrap();
    let mut facts = converged(&plan, fresh, &members(&inv, 3));
    let cp2 = facts.get_mut("cp2").unwrap();
    cp2.data_dir_has_member = false;
    cp2.units.clear();
    cp2.members = None;
    let err = build(&inv, &facts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "etcd member cp2 is in the cluster but its data dir /var/lib/etcd holds no data: run `hactl replace cp2 --reuse-host` to re-add it"
    );
}

#[test]
fn members_reporting_different_clusters_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, dir.path());
    let fresh = fresh_facts(&inv);
    let plan = build(&inv, &fresh).unwrap();
    let mut facts = converged(&plan, fresh, &members(&inv, 3));
    facts
        .get_mut("cp3")
        .unwrap()
        .members
        .as_mut()
        .unwrap()
        .header
        .cluster_id = 0xdef;
    let err = build(&inv, &facts).unwrap_err();
    assert!(err.to_string().contains("cluster IDs abc, def"), "{err}");
}

#[test]
fn disabling_backups_disables_the_timer_and_keeps_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(3, dir.path());
    let fresh = fresh_facts(&inv);
    let plan = build(&inv, &fresh).unwrap();
    let facts = converged(&plan, fresh, &members(&inv, 3));
    inv.backup.enabled = false;
    let again = build(&inv, &facts).unwrap();
    let text = again.to_string();
    assert_eq!(
        text.lines().filter(|l| !l.starts_with("==")).collect::<Vec<_>>(),
        [
            "cp1: run systemctl disable --now hactl-etcd-backup.timer",
            "cp2: run systemctl disable --now hactl-etcd-backup.timer",
            "cp3: run systemctl disable --now hactl-etcd-backup.timer",
        ],
        "{text}"
    );
    // A changed interval rewrites the timer, reloads systemd and restarts the running timer.
    inv.backup.enabled = true;
    inv.backup.interval_text = "600s".into();
    let changed = build(&inv, &facts).unwrap().to_string();
    let cp1: Vec<&str> = changed.lines().filter(|l| l.starts_with("cp1:")).collect();
    assert_eq!(cp1.len(), 3, "{changed}");
    assert!(
        cp1[0].starts_with("cp1: write /etc/systemd/system/hactl-etcd-backup.timer"),
        "{changed}"
    );
    assert_eq!(cp1[1], "cp1: run systemctl daemon-reload");
    assert_eq!(cp1[2], "cp1: run systemctl restart hactl-etcd-backup.timer");
}

/// A converged 3-member cluster running etcd `running`, whose package now provides `installed`,
/// with cp2 as the leader.
fn upgrade_facts(inv: &Inventory, running: &str, installed: &str) -> BTreeMap<String, HostFacts> {
    let fresh = fresh_facts(inv);
    let plan = build(inv, &fresh).unwrap();
    let list = members(inv, 3);
    let mut facts = converged(&plan, fresh, &list);
    for (i, h) in ["cp1", "cp2", "cp3"].iter().enumerate() {
        let f = facts.get_mut(*h).unwrap();
        f.etcd_binaries
            .insert("/usr/bin/etcd".into(), format!("etcd Version: {installed}"));
        let status = format!(
            r#"{{"header":{{"cluster_id":2748,"member_id":{},"revision":7,"raft_term":2}},"version":"{running}","leader":101}}"#,
            100 + i
        );
        f.etcd_status = Some(serde_json::from_str(&status).unwrap());
    }
    facts
}

#[test]
fn an_etcd_upgrade_checks_the_binaries_then_rolls_followers_first_and_the_leader_last() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, dir.path());
    let facts = upgrade_facts(&inv, "3.4.23", "3.5.16");
    let roll = build(&inv, &facts).unwrap();
    assert!(roll.is_disruptive());
    let text = redacted(&roll);
    insta::assert_snapshot!(text);
    let restarts: Vec<usize> = ["cp1", "cp3", "cp2"]
        .iter()
        .map(|h| {
            text.find(&format!("{h}: run systemctl restart etcd.service"))
                .unwrap()
        })
        .collect();
    assert!(
        restarts.windows(2).all(|w| w[0] < w[1]),
        "leader cp2 last: {text}"
    );
    // The binary check comes before the first restart.
    assert!(text.find("reports etcd 3.5.16").unwrap() < restarts[0], "{text}");
    // Running the declared version already: nothing to do.
    let done = upgrade_facts(&inv, "3.5.16", "3.5.16");
    assert!(build(&inv, &done).unwrap().is_empty());
}

#[test]
fn a_package_that_is_not_the_declared_version_is_refused_before_any_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(3, dir.path());
    inv.etcd.version = Some(semver::Version::new(3, 5, 17));
    let facts = upgrade_facts(&inv, "3.4.23", "3.5.16");
    let err = build(&inv, &facts).unwrap_err();
    assert!(err.is_refusal());
    assert!(
        err.to_string().starts_with("refused by rule U-binary: the etcd binary from the etcd-server package on cp1 is version 3.5.16, but the inventory declares etcd.version 3.5.17"),
        "{err}"
    );
}

#[test]
fn a_minor_skip_and_a_downgrade_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, dir.path());
    let err = build(&inv, &upgrade_facts(&inv, "3.4.23", "3.6.1")).unwrap_err();
    assert!(err.is_refusal());
    assert!(
        err.to_string()
            .starts_with("refused by rule U-skip: cp1 runs etcd 3.4.23 and the target is 3.6.1"),
        "{err}"
    );
    let err = build(&inv, &upgrade_facts(&inv, "3.5.16", "3.4.23")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("refused by rule U-downgrade: cp1 runs etcd 3.5.16 and the target is 3.4.23"),
        "{err}"
    );
}

#[test]
fn a_bundle_binary_that_is_not_the_declared_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(3, dir.path());
    let facts = upgrade_facts(&inv, "3.4.23", "3.4.23");
    inv.etcd.version = Some(semver::Version::new(3, 5, 16));
    inv.etcd.source = hactl::inventory::BinarySource::Bundle {
        dir: "/srv/etcd-3.5.17".into(),
    };
    let pki = hactl::pki::ensure(&inv.state_dir.join("pki"), &inv, fixed_now()).unwrap();
    let mut view = EtcdView::from_facts(&inv, &facts).unwrap();
    view.binary_version = Some(semver::Version::new(3, 5, 17));
    let bins = hactl::binaries::LocalBinaries {
        files: vec![("etcd".into(), hactl::plan::Blob::bytes(b"etcd 3.5.17".to_vec()))],
        origin: "bundle /srv/etcd-3.5.17".into(),
    };
    let ctx = Ctx::new(&inv, &pki, &facts)
        .with_etcd(&view)
        .with_binaries(Some(&bins));
    let err = phases::build(&hactl::converge::phases(), &ctx).unwrap_err();
    assert_eq!(err.to_string(), "refused by rule U-binary: the etcd binary from bundle /srv/etcd-3.5.17 is version 3.5.17, but the inventory declares etcd.version 3.5.16; nothing was restarted: make bundle /srv/etcd-3.5.17 provide etcd 3.5.16 (a bundle: its binaries; a package: the version apt installs), or set etcd.version to 3.5.17, and run again");
}
