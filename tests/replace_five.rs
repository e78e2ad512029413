//! Acceptance tests B7, B12, C3 and C6 (../shared/specs/recovery.md §6.3–6.4) on one lab of five
//! control-plane hosts (real systemd, sshd, etcd) with a 2 MiB backend quota, scenarios in turn,
//! each leaving five healthy voters. Needs root; without it prints `SKIPPED <name>: needs root`.

#[path = "support/lab.rs"]
mod lab_support;

use std::process::{Command, Output};
use std::time::Duration;

use lab_support::{eventually, TestLab};

const HOSTS: [&str; 5] = ["cp1", "cp2", "cp3", "cp4", "cp5"];

fn hactl_env(inv: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .arg("-i")
        .arg(inv)
        .envs(env.iter().copied())
        .output()
        .expect("run hactl");
    eprintln!(
        "hactl {args:?} {env:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn hactl(inv: &std::path::Path, args: &[&str]) -> Output {
    hactl_env(inv, args, &[])
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ctl(lab: &TestLab, host: &str, args: &[&str]) -> (bool, String) {
    let mut argv = vec!["/usr/local/sbin/hactl-etcdctl"];
    argv.extend_from_slice(args);
    let o = lab.exec(host, &argv);
    (o.status.success(), text(&o))
}

fn members(lab: &TestLab, host: &str) -> Vec<String> {
    let (ok, out) = ctl(lab, host, &["member", "list"]);
    assert!(ok, "member list on {host}: {out}");
    out.lines().map(str::to_string).collect()
}

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

/// Members whose peer URL is `url` (B7: never two).
fn at_url(lab: &TestLab, url: &str) -> usize {
    members(lab, "cp1")
        .iter()
        .filter(|l| l.split(", ").nth(3) == Some(url))
        .count()
}

fn newest_run(state: &std::path::Path, prefix: &str) -> String {
    let mut runs: Vec<_> = std::fs::read_dir(state.join("runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .collect();
    runs.sort_by_key(|e| e.metadata().unwrap().modified().unwrap());
    runs.last().unwrap().file_name().to_string_lossy().to_string()
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
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(o.status.success());
    assert_five(&lab);

    // --- C3: N=5, budget 2. Default concurrency 1; --max-unavailable 2 lets a second host in
    // only while every member is healthy (U=0); a third is refused.
    assert!(
        hactl(&inv, &["maintenance", "start", "cp1", "--max-unavailable", "2"])
            .status
            .success()
    );
    let o = hactl(&inv, &["maintenance", "start", "cp2"]);
    assert_eq!(o.status.code(), Some(2), "C3: default concurrency is 1");
    assert!(
        hactl(&inv, &["maintenance", "start", "cp2", "--max-unavailable", "2"])
            .status
            .success()
    );
    let o = hactl(&inv, &["maintenance", "start", "cp3", "--max-unavailable", "2"]);
    assert_eq!(o.status.code(), Some(2), "C3: a third host");
    assert!(text(&o).contains("R-maint"), "{}", text(&o));
    assert!(hactl(&inv, &["maintenance", "complete", "cp2"]).status.success());
    assert!(hactl(&inv, &["maintenance", "complete", "cp1"]).status.success());
    assert_five(&lab);
    // U=1 (cp5's etcd stopped by hand): one host still fits, a second does not.
    lab.exec_ok("cp5", &["systemctl", "stop", "etcd"]);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        hactl(&inv, &["maintenance", "start", "cp1", "--max-unavailable", "2"])
            .status
            .success()
    );
    let o = hactl(&inv, &["maintenance", "start", "cp2", "--max-unavailable", "2"]);
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
    let o = hactl(
        &inv,
        &["etcd", "maintenance", "--compact", "--defrag", "--disarm"],
    );
    assert!(o.status.success());
    assert!(
        ctl(&lab, "cp1", &["put", "after-nospace", "ok"]).0,
        "writes fail after disarm"
    );
    let (_, alarms) = ctl(&lab, "cp1", &["alarm", "list"]);
    assert!(alarms.trim().is_empty(), "{alarms}");

    // --- B7: crash after representative steps, then --resume; never two members at cp5's URL.
    let url = format!("https://{}:2380", lab.ip("cp5"));
    for step in ["P2", "P3", "P5", "P6"] {
        lab.exec_ok(
            "cp5",
            &[
                "sh",
                "-c",
                "systemctl kill -s KILL etcd; systemctl stop etcd; rm -rf /var/lib/etcd",
            ],
        );
        std::thread::sleep(Duration::from_secs(6));
        let o = hactl_env(
            &inv,
            &["replace", "cp5", "--reuse-host"],
            &[("HACTL_CRASH_AFTER", step)],
        );
        assert_eq!(o.status.code(), Some(137), "B7: crash after {step}: {}", text(&o));
        assert!(
            at_url(&lab, &url) <= 1,
            "B7: two members at {url} after a crash at {step}"
        );
        let run = newest_run(&state, "replace-");
        let o = hactl(&inv, &["replace", "cp5", "--reuse-host", "--resume", &run]);
        assert_eq!(o.status.code(), Some(0), "B7: resume after {step}: {}", text(&o));
        assert_eq!(at_url(&lab, &url), 1);
        assert_five(&lab);
    }
    lab.down().unwrap();
}
