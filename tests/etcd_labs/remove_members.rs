//! `hactl remove` on a lab of five control-plane hosts and two load balancers (real etcd, HAProxy,
//! keepalived): the inventory drops cp4 and cp5 (kept with `roles: []`), `plan` and `up` refuse
//! and name `hactl remove`, two removals take the cluster from 5 to 3 members while a writer
//! through the VIP keeps writing with no failed write, the data dirs are renamed aside and etcd
//! fenced there, HAProxy no longer lists them, `up` then has nothing to do, and removing a third
//! member (down to 2) is refused by R-remove (exit 2).
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;
use crate::support::members;
use crate::support::writer as writer_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cli_support::text;
use lab_support::{eventually, TestLab};
use members::{hactl, members, set_inventory};
use writer_support::VipWriter;

/// `host` keeps its place in the inventory with `roles: []` (what the operator does before
/// `hactl remove`, so hactl can still reach it).
fn drop_roles(lab: &TestLab, inv: &std::path::Path, host: &str) {
    let a = lab.ip(host);
    set_inventory(inv, |t| {
        let out = t.replace(
            &format!("address: \"{a}\"\n    prefixLength: 24\n    roles:\n    - etcd\n    - control-plane"),
            &format!("address: \"{a}\"\n    prefixLength: 24\n    roles: []"),
        );
        assert_ne!(out, t, "no roles of {host} found in the inventory");
        out
    });
}

fn names(lab: &TestLab, from: &str) -> Vec<String> {
    let mut v: Vec<String> = members(lab, from)
        .iter()
        .filter_map(|l| l.split(", ").nth(2).map(str::to_string))
        .collect();
    v.sort();
    v
}

/// `hactl remove MEMBER --yes`, sent SIGINT (Ctrl-C) once its third step has started: exit 4,
/// naming the step it stopped before and the command that resumes it. Returns the run.
fn interrupted_removal(inv: &std::path::Path, member: &str) -> String {
    let (code, seen) = crate::support::cli::interrupted(
        &["remove", member, "--yes", "-i", inv.to_str().unwrap()],
        |line| line.starts_with("step 3/"),
    );
    assert_eq!(code, Some(4), "{seen}");
    assert!(
        seen.contains("interrupt: stopping after the steps under way"),
        "{seen}"
    );
    assert!(seen.contains("remove interrupted before step"), "{seen}");
    let run = seen
        .split(&format!("{member} --resume "))
        .nth(1)
        .and_then(|r| r.split('`').next())
        .unwrap_or_else(|| panic!("no resume command: {seen}"))
        .to_string();
    assert!(run.starts_with("remove-"), "{run}");
    run
}

#[test]
fn remove_takes_five_members_to_three_under_a_vip_writer_and_refuses_two() {
    let name = "remove_takes_five_members_to_three_under_a_vip_writer_and_refuses_two";
    let Some(lab) = TestLab::up(name, 5, 2, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(names(&lab, "cp1"), ["cp1", "cp2", "cp3", "cp4", "cp5"]);

    // The inventory drops cp4 and cp5: plan and up refuse and name the command.
    drop_roles(&lab, &inv, "cp4");
    drop_roles(&lab, &inv, "cp5");
    for cmd in [&["plan"][..], &["up", "--yes"][..]] {
        let o = hactl(&inv, cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", text(&o));
        assert!(text(&o).contains("hactl remove cp"), "{cmd:?}: {}", text(&o));
    }
    // A dry run prints the steps and changes nothing.
    let o = hactl(&inv, &["remove", "cp4", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    for needle in [
        "[RM2@lb1]",
        "[RM6@cp4]",
        "member remove",
        "/var/lib/etcd.hactl-removed-remove-",
        "[RM10]",
    ] {
        assert!(plan.contains(needle), "no {needle} in the dry run:\n{plan}");
    }
    assert_eq!(names(&lab, "cp1").len(), 5);

    // As data: the one document of every dry run.
    let o = hactl(&inv, &["remove", "cp4", "--dry-run", "-o", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("remove --dry-run -o json");
    assert_eq!(doc["apiVersion"], "hactl.io/v1alpha1");
    assert_eq!(doc["kind"], "OperationPlan");
    assert_eq!(doc["operation"], "remove");
    assert_eq!(doc["decisions"]["member"], "cp4");
    let ids: Vec<&str> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"RM6@cp4") && ids.contains(&"RM10"), "{ids:?}");
    // Without --dry-run, -o json is a usage error: a live run never ignores it.
    assert_eq!(
        hactl(&inv, &["remove", "cp4", "-o", "json", "--yes"])
            .status
            .code(),
        Some(64)
    );
    assert_eq!(names(&lab, "cp1").len(), 5);

    let lab = Arc::new(lab);
    let writer = VipWriter::start(lab.clone(), "cp1", "remove");
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    // Ctrl-C while the removal of cp4 runs: it stops before its next step, says how to resume,
    // and the resume finishes the removal.
    let resume = interrupted_removal(&inv, "cp4");
    for member in ["cp4", "cp5"] {
        let t = Instant::now();
        let o = if member == "cp4" {
            hactl(&inv, &["remove", member, "--resume", &resume, "--yes"])
        } else {
            hactl(&inv, &["remove", member, "--yes"])
        };
        assert!(o.status.success(), "remove {member}: {}", text(&o));
        eprintln!("remove {member}: {:.1} s", t.elapsed().as_secs_f64());
    }
    std::thread::sleep(Duration::from_secs(2));
    let (writes, failed) = writer.stop();
    eprintln!(
        "5 → 3 in {:.1} s; writer through the VIP: {writes} writes, {failed} failed",
        started.elapsed().as_secs_f64()
    );
    assert!(writes > 20, "the writer barely ran: {writes}");
    assert_eq!(failed, 0, "writes through the VIP failed during the removals");
    assert_eq!(names(&lab, "cp1"), ["cp1", "cp2", "cp3"]);

    for host in ["cp4", "cp5"] {
        // etcd is fenced and stopped there; its data dir renamed aside, not deleted.
        let o = lab.exec(host, &["systemctl", "is-active", "etcd.service"]);
        assert!(!o.status.success(), "etcd still runs on {host}");
        lab.exec_ok(
            host,
            &[
                "test",
                "-e",
                "/etc/systemd/system/etcd.service.d/hactl-fence.conf",
            ],
        );
        lab.exec_ok(host, &["test", "!", "-e", "/var/lib/etcd"]);
        let aside = lab.exec_ok(host, &["sh", "-c", "ls -d /var/lib/etcd.hactl-removed-*"]);
        lab.exec_ok(host, &["test", "-d", &format!("{}/member", aside.trim())]);
        // Starting it is refused by the fence.
        let o = lab.exec(host, &["systemctl", "start", "etcd.service"]);
        assert!(!o.status.success(), "etcd started on {host} despite the fence");
    }
    for lb in ["lb1", "lb2"] {
        let stat = lab.exec_ok(lb, &["/usr/local/sbin/hactl-haproxy", "show stat"]);
        assert!(
            !stat.contains(",cp4,") && !stat.contains(",cp5,"),
            "{lb} still lists a removed server:\n{stat}"
        );
        assert!(eventually(Duration::from_secs(30), || lab
            .exec(
                lb,
                &["/usr/local/sbin/hactl-haproxy", "is", "etcd-client", "cp3", "UP"]
            )
            .status
            .success()));
    }
    // The inventory and the cluster agree now.
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no changes"), "{}", text(&o));
    // A second removal of the same member: it is not a member any more.
    let o = hactl(&inv, &["remove", "cp4", "--yes"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("cp4 is not a member of etcd cluster"),
        "{}",
        text(&o)
    );
    // Down to two: refused by R-remove, nothing changed.
    let o = hactl(&inv, &["remove", "cp3", "--yes"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("refused by R-remove"), "{}", text(&o));
    assert!(text(&o).contains("fewer than 3"), "{}", text(&o));
    assert_eq!(names(&lab, "cp1"), ["cp1", "cp2", "cp3"]);
}
