//! The one cluster lock between two operator machines (issue 22, item 4): on a lab of 3 etcd
//! members, machine A (the lab's state directory) and machine B (a copy of it, as a second
//! workstation holds it; `HACTL_MACHINE_ID` tells the two apart on this one host) run hactl
//! against the same hosts. Only the hosts are shared, so only the lock taken on them can keep the
//! two apart:
//! - A's `maintenance start cp1` runs (paused with SIGSTOP after its first step, so the race is
//!   deterministic): B's `up` and `maintenance start cp2` are refused (exit 3) naming A's command
//!   and run, and B changes nothing on any host or in its state directory; A then finishes;
//! - A dies after a step (`HACTL_CRASH_AFTER`): B is still refused (it cannot see A's process, so
//!   it offers `--steal-lock`), while A's own next run, on the machine where the dead process ran,
//!   takes the lock over; then B runs;
//! - the real race: A's `maintenance start cp1` and B's `maintenance start cp2` start at the same
//!   moment: exactly one runs, the other is refused (exit 3) naming the holder, its command and
//!   start time, changes nothing and takes nothing over; again with both on one machine id (two
//!   state directories on one workstation), where the holder's live process is never taken over.
//!
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use cli_support::text;
use lab_support::TestLab;

const HOSTS: [&str; 3] = ["cp1", "cp2", "cp3"];

/// `hactl ARGS` as machine `machine`, with its own state directory.
fn on(machine: &str, inv: &Path, state: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--state-dir", state.to_str().unwrap()]);
    let mut env = env.to_vec();
    env.push(("HACTL_MACHINE_ID", machine));
    cli_support::run(Some(inv), &all, &env, None)
}

/// What B must not change: on each host the etcd unit's state, the run journals and the lock's
/// owner; the member list; and every file of B's state directory.
fn snapshot(lab: &TestLab, state_b: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for h in HOSTS {
        out.push(format!(
            "{h}: {}",
            lab.exec(
                h,
                &[
                    "sh",
                    "-c",
                    "systemctl is-active etcd; ls /var/lib/hactl/runs 2>/dev/null; cat /var/lib/hactl/locks/cluster/owner.json 2>/dev/null; true",
                ],
            )
            .stdout
            .iter()
            .map(|b| *b as char)
            .collect::<String>()
        ));
    }
    out.push(lab.exec_ok("cp3", &["/usr/local/sbin/hactl-etcdctl", "member", "list"]));
    let mut files = Vec::new();
    let mut todo = vec![state_b.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            // The lock's own directory stays, empty.
            if p != state_b.join("locks") {
                files.push(p.display().to_string());
            }
        }
    }
    files.sort();
    out.extend(files);
    out
}

/// Asserts B was refused by A's lock, naming it, and offered `--steal-lock` only for a holder it
/// cannot see.
fn assert_refused_by(o: &Output, run: &str) {
    assert_eq!(o.status.code(), Some(3), "{}", text(o));
    let t = text(o);
    assert!(t.contains("cluster lock on host cp1 is held by"), "{t}");
    assert!(t.contains("`hactl maintenance start cp1`"), "{t}");
    assert!(t.contains(&format!("run {run}")), "{t}");
    assert!(t.contains("wait for it to finish"), "{t}");
    assert!(t.contains(&format!("--steal-lock {run}")), "{t}");
}

#[test]
fn two_operator_machines_exclude_each_other_through_the_hosts_and_the_loser_changes_nothing() {
    let Some(lab) = TestLab::up("cluster_lock_two_machines", 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let state_a: PathBuf = inv.parent().unwrap().join("state");
    let o = on("machine-a", &inv, &state_a, &["up", "--yes"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    // Machine B: a copy of A's state directory.
    let state_b = inv.parent().unwrap().join("state-b");
    let o = Command::new("cp")
        .args(["-a", state_a.to_str().unwrap(), state_b.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = on("machine-b", &inv, &state_b, &["up", "--yes"], &[]);
    assert!(
        o.status.success() && text(&o).contains("no changes"),
        "{}",
        text(&o)
    );

    // A live holder: A's maintenance of cp1, paused after its first step.
    let mut a = cli_support::hactl_command()
        .args([
            "maintenance",
            "start",
            "cp1",
            "--yes",
            "-i",
            inv.to_str().unwrap(),
        ])
        .args(["--state-dir", state_a.to_str().unwrap()])
        .env("HACTL_MACHINE_ID", "machine-a")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = a.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    let mut run = None;
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("A's maintenance printed no step");
        if let Some(rest) = line.strip_prefix("maintenance start: run ") {
            run = rest.split_whitespace().next().map(str::to_string);
        }
        if line.starts_with("step 2/") {
            break;
        }
    }
    let run = run.expect("A named its run");
    let pid = a.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let before = snapshot(&lab, &state_b);
    assert!(
        before.iter().any(|l| l.contains(&run)),
        "A's lock is not on the hosts: {before:?}"
    );
    let o = on("machine-b", &inv, &state_b, &["up", "--yes"], &[]);
    assert_refused_by(&o, &run);
    let o = on(
        "machine-b",
        &inv,
        &state_b,
        &["maintenance", "start", "cp2", "--yes"],
        &[],
    );
    assert_refused_by(&o, &run);
    assert_eq!(
        snapshot(&lab, &state_b),
        before,
        "the refused machine changed something"
    );
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let status = a.wait().unwrap();
    let log = reader.join().unwrap();
    assert!(status.success(), "A's maintenance failed after the pause:\n{log}");
    let o = on(
        "machine-a",
        &inv,
        &state_a,
        &["maintenance", "complete", "cp1"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));

    // A dead holder: A's maintenance dies after stage Drain with the lock on the hosts.
    let o = on(
        "machine-a",
        &inv,
        &state_a,
        &["maintenance", "start", "cp1", "--yes"],
        &[("HACTL_CRASH_AFTER", "stage-Drain")],
    );
    assert_eq!(o.status.code(), Some(137), "{}", text(&o));
    let run = text(&o)
        .split("maintenance start: run ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("A named its run")
        .to_string();
    let before = snapshot(&lab, &state_b);
    let o = on("machine-b", &inv, &state_b, &["up", "--yes"], &[]);
    assert_refused_by(&o, &run);
    assert!(text(&o).contains("another machine"), "{}", text(&o));
    assert_eq!(
        snapshot(&lab, &state_b),
        before,
        "the refused machine changed something"
    );
    // On A's machine the holder's process is gone: proven dead, its lock is taken over.
    let o = on(
        "machine-a",
        &inv,
        &state_a,
        &["maintenance", "complete", "cp1"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("taking over") || text(&o).contains("took the cluster lock over"),
        "{}",
        text(&o)
    );
    for h in HOSTS {
        lab.exec_ok(h, &["test", "!", "-e", "/var/lib/hactl/locks/cluster"]);
    }
    let o = on("machine-b", &inv, &state_b, &["up", "--yes"], &[]);
    assert!(
        o.status.success() && text(&o).contains("no changes"),
        "{}",
        text(&o)
    );

    // The real race: both machines start a maintenance at the same moment, A of cp1 and B of
    // cp2; then the same again from one machine id (two state directories on one
    // workstation), where the loser can see that the winner's process is alive.
    for (a, b) in [("machine-a", "machine-b"), ("machine-a", "machine-a")] {
        race(&lab, &inv, (a, &state_a), (b, &state_b));
    }
    lab.down().unwrap();
}

/// Starts `maintenance start cp1` as machine `a` and `maintenance start cp2` as machine `b` at
/// once (each with its own state directory). Exactly one runs; the other is refused (exit 3)
/// naming the winner's command, run, operator and start time, changes nothing (its target
/// stays in service, no journal appears in its state directory) and takes nothing over; the
/// winner's maintenance is then completed.
fn race(lab: &TestLab, inv: &Path, a: (&str, &Path), b: (&str, &Path)) {
    let spawn = |(machine, state): (&str, &Path), host: &str| {
        cli_support::hactl_command()
            .args(["maintenance", "start", host, "--yes", "-i", inv.to_str().unwrap()])
            .args(["--state-dir", state.to_str().unwrap()])
            .env("HACTL_MACHINE_ID", machine)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let runs = |state: &Path| {
        std::fs::read_dir(state.join("runs"))
            .map(|d| d.flatten().count())
            .unwrap_or(0)
    };
    let before = (runs(a.1), runs(b.1));
    let (pa, pb) = (spawn(a, "cp1"), spawn(b, "cp2"));
    let (oa, ob) = (pa.wait_with_output().unwrap(), pb.wait_with_output().unwrap());
    let what = format!("{} vs {}", a.0, b.0);
    let (winner, loser, won, lost) = match (oa.status.code(), ob.status.code()) {
        (Some(0), Some(3)) => (a, b, ("cp1", &oa), ("cp2", &ob)),
        (Some(3), Some(0)) => (b, a, ("cp2", &ob), ("cp1", &oa)),
        other => panic!(
            "{what}: exactly one must run and the other be refused (exit 3), got {other:?}:\nA: {}\nB: {}",
            text(&oa),
            text(&ob)
        ),
    };
    let run = text(won.1)
        .split("maintenance start: run ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the winner named its run")
        .to_string();
    let t = text(lost.1);
    eprintln!(
        "race {what}: `maintenance start {}` ran (run {run}); `maintenance start {}` was refused: {}",
        won.0,
        lost.0,
        t.lines().find(|l| l.contains("held by")).unwrap_or_default()
    );
    for want in [
        "the cluster lock on host cp1 is held by".to_string(),
        format!("`hactl maintenance start {}`", won.0),
        format!("run {run}"),
        "since 20".to_string(),
        "wait for it to finish".to_string(),
    ] {
        assert!(t.contains(&want), "{what}: the refusal lacks {want:?}:\n{t}");
    }
    if winner.0 == loser.0 {
        assert!(t.contains("it is running on this machine"), "{what}: {t}");
        assert!(
            !t.contains("--steal-lock"),
            "{what}: a live holder offered for stealing: {t}"
        );
    }
    assert!(
        !t.contains("taking over") && !t.contains("took the cluster lock over"),
        "{what}: {t}"
    );
    // The loser changed nothing: its target serves, and no run of it was journaled.
    lab.exec_ok(lost.0, &["systemctl", "is-active", "etcd"]);
    // (An earlier maintenance of the host leaves its record at stage Complete.)
    let record = format!("/var/lib/hactl/maintenance/{}.json", lost.0);
    lab.exec_ok(
        lost.0,
        &[
            "sh",
            "-c",
            &format!("! [ -e {record} ] || grep -q '\"stage\": *\"Complete\"' {record}"),
        ],
    );
    let after = (runs(a.1), runs(b.1));
    let grew = |i: usize| {
        if i == 0 {
            after.0 - before.0
        } else {
            after.1 - before.1
        }
    };
    let (wi, li) = if winner.1 == a.1 { (0, 1) } else { (1, 0) };
    assert_eq!(
        (grew(wi), grew(li)),
        (1, 0),
        "{what}: runs journaled (winner, loser)"
    );
    let o = on(winner.0, inv, winner.1, &["maintenance", "complete", won.0], &[]);
    assert!(o.status.success(), "{}", text(&o));
    for h in HOSTS {
        lab.exec_ok(h, &["test", "!", "-e", "/var/lib/hactl/locks/cluster"]);
    }
}
