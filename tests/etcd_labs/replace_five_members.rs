//! Acceptance tests B6, B7, B12, C3 and C6 (docs/recovery.md, "Acceptance tests") on one lab of five
//! control-plane hosts (real systemd, sshd, etcd) with a 2 MiB backend quota, scenarios in turn,
//! each leaving five healthy voters. Needs root; without it prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;
use crate::support::members;

use std::time::Duration;

use cli_support::text;
use lab_support::{eventually, TestLab};
use members::{at_url, ctl, hactl, hactl_env, learners, member_id, members, newest_run, set_inventory};

const HOSTS: [&str; 5] = ["cp1", "cp2", "cp3", "cp4", "cp5"];

/// Five healthy voters named cp1..cp5, no learner.
fn assert_five(lab: &TestLab) {
    let ok = eventually(Duration::from_secs(60), || {
        ctl(lab, "cp1", &["endpoint", "health", "--cluster"]).0
    });
    assert!(ok, "{}", ctl(lab, "cp1", &["endpoint", "health", "--cluster"]).1);
    let list = members(lab, "cp1");
    let mut names: Vec<&str> = list.iter().filter_map(|l| l.split(", ").nth(2)).collect();
    names.sort();
    assert_eq!(names, HOSTS, "{list:?}");
    assert!(
        list.iter().all(|l| l.ends_with(", false")),
        "a learner is left: {list:?}"
    );
}

/// The members of cp1..cp4 answer a health check (a linearizable read, so a leader exists):
/// what a test waits for after stopping cp5's etcd, whose members' election (when cp5 led) takes
/// as long as the machine makes it.
fn assert_four_healthy(lab: &TestLab) {
    let endpoints = format!(
        "--endpoints={}",
        HOSTS[..4]
            .iter()
            .map(|h| format!("https://{}:2379", lab.ip(h)))
            .collect::<Vec<_>>()
            .join(",")
    );
    let health = || ctl(lab, "cp1", &[&endpoints, "endpoint", "health"]);
    let ok = eventually(Duration::from_secs(60), || health().0);
    assert!(ok, "cp1..cp4 not healthy with cp5 down: {}", health().1);
}

/// `kill -9` of cp5's etcd and its data dir gone; then the four others serve.
fn wipe_cp5(lab: &TestLab) {
    lab.exec_ok(
        "cp5",
        &[
            "sh",
            "-c",
            "systemctl kill -s KILL etcd; systemctl stop etcd; rm -rf /var/lib/etcd",
        ],
    );
    assert_four_healthy(lab);
}

#[test]
fn five_members_crash_resume_nospace_budget_and_cancel() {
    let name = "five_members_crash_resume_nospace_budget_and_cancel";
    let Some(lab) = TestLab::up(name, 5, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let state = inv.parent().unwrap().join("state");
    let t = std::fs::read_to_string(&inv).unwrap();
    let line = t
        .lines()
        .find(|l| l.trim() == "source: package")
        .expect("etcd source line");
    let indent = &line[..line.len() - line.trim_start().len()];
    let t = t.replacen(line, &format!("{line}\n{indent}quotaBackendBytes: 2097152"), 1);
    std::fs::write(&inv, t).unwrap();
    // B6 needs maxRetry failures: two keep the test short (the default is 3).
    set_inventory(&inv, |t| format!("{t}  heal:\n    maxRetry: 2\n"));
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(o.status.success());
    assert_five(&lab);

    // --- C3: N=5, budget 2. Default concurrency 1; --max-unavailable 2 lets a second host in
    // only while every member is healthy (U=0); a third is refused.
    assert!(hactl(
        &inv,
        &["maintenance", "start", "--yes", "cp1", "--max-unavailable", "2"]
    )
    .status
    .success());
    let o = hactl(&inv, &["maintenance", "start", "--yes", "cp2"]);
    assert_eq!(o.status.code(), Some(2), "C3: default concurrency is 1");
    assert!(hactl(
        &inv,
        &["maintenance", "start", "--yes", "cp2", "--max-unavailable", "2"]
    )
    .status
    .success());
    let o = hactl(
        &inv,
        &["maintenance", "start", "--yes", "cp3", "--max-unavailable", "2"],
    );
    assert_eq!(o.status.code(), Some(2), "C3: a third host");
    assert!(text(&o).contains("R-maint"), "{}", text(&o));
    assert!(hactl(&inv, &["maintenance", "complete", "cp2"]).status.success());
    assert!(hactl(&inv, &["maintenance", "complete", "cp1"]).status.success());
    assert_five(&lab);
    // U=1 (cp5's etcd stopped by hand): one host still fits, a second does not.
    lab.exec_ok("cp5", &["systemctl", "stop", "etcd"]);
    assert_four_healthy(&lab);
    assert!(hactl(
        &inv,
        &["maintenance", "start", "--yes", "cp1", "--max-unavailable", "2"]
    )
    .status
    .success());
    let o = hactl(
        &inv,
        &["maintenance", "start", "--yes", "cp2", "--max-unavailable", "2"],
    );
    assert_eq!(o.status.code(), Some(2), "C3: --max-unavailable 2 with U=1");

    // --- C6: complete right after start goes straight to Complete; nothing left stopped.
    lab.exec_ok("cp5", &["systemctl", "start", "etcd"]);
    assert!(hactl(&inv, &["maintenance", "complete", "cp1"]).status.success());
    for h in ["cp1", "cp5"] {
        assert!(lab
            .exec(h, &["systemctl", "is-active", "--quiet", "etcd"])
            .status
            .success());
    }
    let o = hactl(&inv, &["maintenance", "complete", "cp1"]);
    assert!(text(&o).contains("not in maintenance"), "{}", text(&o));
    assert_five(&lab);

    // --- B12: NOSPACE is an alert, never a replacement.
    let before = members(&lab, "cp1");
    let mut exceeded = false;
    for _ in 0..100 {
        // 100 kB values through stdin (an argument that long exceeds the exec limit).
        let o = lab.exec(
            "cp1",
            &[
                "sh",
                "-c",
                "head -c 100000 /dev/zero | tr '\\0' x | /usr/local/sbin/hactl-etcdctl put fill",
            ],
        );
        let (ok, out) = (o.status.success(), text(&o));
        if !ok {
            assert!(out.contains("database space exceeded"), "{out}");
            exceeded = true;
            break;
        }
    }
    assert!(exceeded, "the 2 MiB quota was never hit");
    let o = hactl(&inv, &["heal", "--once"]);
    assert!(
        text(&o).contains("NOSPACE: run hactl etcd maintenance --compact --defrag --disarm"),
        "{}",
        text(&o)
    );
    assert_eq!(
        members(&lab, "cp1"),
        before,
        "heal changed the membership on NOSPACE"
    );
    // A dry run prints the steps; without --yes and no terminal, a refusal that names --yes.
    // Neither changes anything: the alarm is still raised.
    let nospace = ["etcd", "maintenance", "--compact", "--defrag", "--disarm"];
    let o = hactl(&inv, &[&nospace[..], &["--dry-run"]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("defrag") && text(&o).contains("alarm disarm"),
        "{}",
        text(&o)
    );
    let o = hactl(&inv, &nospace);
    assert_eq!(o.status.code(), Some(hactl::exit::NEEDS_INPUT), "{}", text(&o));
    assert!(text(&o).contains("--yes"), "{}", text(&o));
    let (_, alarms) = ctl(&lab, "cp1", &["alarm", "list"]);
    assert!(alarms.contains("NOSPACE"), "{alarms}");
    let o = hactl(&inv, &[&nospace[..], &["--yes"]].concat());
    assert!(o.status.success());
    assert!(
        ctl(&lab, "cp1", &["put", "after-nospace", "ok"]).0,
        "writes fail after disarm"
    );
    let (_, alarms) = ctl(&lab, "cp1", &["alarm", "list"]);
    assert!(alarms.trim().is_empty(), "{alarms}");

    // --- B7: crash after representative steps, then --resume; never two members at cp5's URL.
    let url = format!("https://{}:2380", lab.ip("cp5"));
    for step in ["P2", "P3", "P4", "P5", "P6"] {
        wipe_cp5(&lab);
        let o = hactl_env(
            &inv,
            &["replace", "cp5", "--reuse-host", "--yes"],
            &[("HACTL_CRASH_AFTER", step)],
        );
        assert_eq!(o.status.code(), Some(137), "B7: crash after {step}: {}", text(&o));
        assert!(
            at_url(&lab, "cp1", &url) <= 1,
            "B7: two members at {url} after a crash at {step}"
        );
        let run = newest_run(&state, "replace-");
        let o = hactl(&inv, &["replace", "cp5", "--reuse-host", "--resume", &run]);
        assert_eq!(o.status.code(), Some(0), "B7: resume after {step}: {}", text(&o));
        assert_eq!(at_url(&lab, "cp1", &url), 1);
        assert_five(&lab);
    }
    // After P7 (a voter), P8 and P9 (skipped here: no load balancer, no Kubernetes; a crash
    // after a skipped step is a crash all the same), resumed one after the other.
    wipe_cp5(&lab);
    let o = hactl_env(
        &inv,
        &["replace", "cp5", "--reuse-host", "--yes"],
        &[("HACTL_CRASH_AFTER", "P7")],
    );
    assert_eq!(o.status.code(), Some(137), "B7: crash after P7: {}", text(&o));
    let run = newest_run(&state, "replace-");
    for (step, next) in [("P7", Some("P8")), ("P8", Some("P9")), ("P9", None)] {
        assert_eq!(at_url(&lab, "cp1", &url), 1, "B7: after a crash at {step}");
        assert!(
            learners(&lab, "cp1").is_empty(),
            "B7: the voter is a learner again after {step}"
        );
        let env: Vec<(&str, &str)> = next.map(|n| ("HACTL_CRASH_AFTER", n)).into_iter().collect();
        let o = hactl_env(&inv, &["replace", "cp5", "--reuse-host", "--resume", &run], &env);
        let want = if next.is_some() { 137 } else { 0 };
        assert_eq!(
            o.status.code(),
            Some(want),
            "B7: resume after {step}: {}",
            text(&o)
        );
    }
    assert_five(&lab);
    // After P1: cp5 leads and is healthy (a replace of a healthy member on its own host);
    // P1 moved leadership away, then the run died.
    let cp5 = member_id(&lab, "cp1", "cp5").unwrap();
    let all = HOSTS
        .iter()
        .map(|h| format!("https://{}:2379", lab.ip(h)))
        .collect::<Vec<_>>()
        .join(",");
    let endpoints = format!("--endpoints={all}");
    let led = eventually(Duration::from_secs(30), || {
        ctl(&lab, "cp1", &[&endpoints, "move-leader", &cp5]).0
    });
    assert!(led, "{}", ctl(&lab, "cp1", &[&endpoints, "endpoint", "status"]).1);
    // The new leader serves reads through every member before the replace looks.
    assert_five(&lab);
    let o = hactl_env(
        &inv,
        &["replace", "cp5", "--reuse-host", "--yes"],
        &[("HACTL_CRASH_AFTER", "P1")],
    );
    assert_eq!(o.status.code(), Some(137), "B7: crash after P1: {}", text(&o));
    let (_, status) = ctl(&lab, "cp1", &[&endpoints, "endpoint", "status"]);
    let leader_line = status.lines().find(|l| l.contains(", true, ")).unwrap_or("");
    assert!(
        !leader_line.contains(&format!("{}:2379", lab.ip("cp5"))),
        "B7: cp5 still leads after P1: {status}"
    );
    let run = newest_run(&state, "replace-");
    let o = hactl(&inv, &["replace", "cp5", "--reuse-host", "--resume", &run]);
    assert_eq!(o.status.code(), Some(0), "B7: resume after P1: {}", text(&o));
    assert_eq!(at_url(&lab, "cp1", &url), 1);
    assert_ne!(member_id(&lab, "cp1", "cp5").unwrap(), cp5);
    assert_five(&lab);

    // --- B6: a learner that never catches up. The learner is frozen with SIGSTOP of its etcd
    // (the lab image has no iptables/nft to drop port 2380, and a learner cut off only from peer
    // traffic after it caught up still looks in sync to etcd's promote check while nothing is
    // written). To freeze it after P6 started it and before P7, deterministically, the run is
    // crashed after P6 and resumed with a short promote timeout.
    for attempt in 1..=2u32 {
        let o = hactl_env(
            &inv,
            &["replace", "cp5", "--reuse-host", "--yes"],
            &[("HACTL_CRASH_AFTER", "P6")],
        );
        assert_eq!(o.status.code(), Some(137), "B6 attempt {attempt}: {}", text(&o));
        assert_eq!(learners(&lab, "cp1").len(), 1, "B6: the learner was added");
        lab.exec_ok(
            "cp5",
            &["sh", "-c", "kill -STOP $(systemctl show -p MainPID --value etcd)"],
        );
        let run = newest_run(&state, "replace-");
        let o = hactl_env(
            &inv,
            &["replace", "cp5", "--reuse-host", "--resume", &run],
            &[("HACTL_PROMOTE_TIMEOUT_SECS", "4")],
        );
        assert_eq!(o.status.code(), Some(4), "B6 attempt {attempt}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("retryCount={attempt}")),
            "B6 attempt {attempt}: {}",
            text(&o)
        );
        assert!(
            learners(&lab, "cp1").is_empty(),
            "B6: the learner was not removed"
        );
        assert_eq!(members(&lab, "cp1").len(), 4, "B6: {:?}", members(&lab, "cp1"));
        assert_eq!(at_url(&lab, "cp1", &url), 0);
        let o = lab.exec(
            "cp5",
            &["sh", "-c", "systemctl is-active --quiet etcd || pgrep -x etcd"],
        );
        assert!(
            !o.status.success(),
            "B6: the learner's etcd still runs: {}",
            text(&o)
        );
        let heal: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(state.join("heal.json")).unwrap()).unwrap();
        assert_eq!(heal["members"]["cp5"]["retryCount"], attempt, "{heal}");
    }
    // maxRetry (2) failures within minHealthyPeriod: the next replace is refused, nothing changes.
    let before = members(&lab, "cp1");
    let o = hactl(&inv, &["replace", "cp5", "--reuse-host", "--yes"]);
    assert_eq!(o.status.code(), Some(2), "B6: {}", text(&o));
    assert!(
        text(&o).contains("retry limit") && text(&o).contains("retry-limit"),
        "{}",
        text(&o)
    );
    assert_eq!(members(&lab, "cp1"), before);
    // The operator resets the record (as the refusal says) and the replace goes through.
    let path = state.join("heal.json");
    let mut heal: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    heal["members"].as_object_mut().unwrap().remove("cp5");
    std::fs::write(&path, heal.to_string()).unwrap();
    let o = hactl(&inv, &["replace", "cp5", "--reuse-host", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_five(&lab);
    lab.down().unwrap();
}
