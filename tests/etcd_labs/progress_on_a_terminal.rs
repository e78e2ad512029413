//! Progress on long work, on the terminal side: on a terminal (script(1) gives hactl one) `up`
//! shows the phase under way of how many and each host's step of how many, and `recover` its
//! step of how many. The other side (no escape code on a pipe) is checked for every hactl run of
//! every test by `support/cli.rs`.
//!
//! Needs root for the lab; without it prints `SKIPPED`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::process::Output;
use std::time::Duration;

use cli_support::text;
use lab_support::{eventually, TestLab};

/// `hactl ARGS -i INV` on a terminal: script(1) puts the command's stdout and stderr, both on
/// the terminal, on its own stdout, returned here as text.
fn on_a_terminal(lab: &TestLab, args: &str) -> (Output, String) {
    let line = format!(
        "{} {args} -i {}",
        env!("CARGO_BIN_EXE_hactl"),
        lab.inventory().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("NO_COLOR")
        // A terminal that can redraw: a CI job may run with TERM=dumb or none, which makes
        // hactl (rightly) print plain lines even on a terminal.
        .env("TERM", "xterm")
        .output()
        .expect("script");
    let screen = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("the terminal showed for {args}:\n{screen}");
    (out, screen)
}

#[test]
fn up_and_recover_on_a_terminal_show_step_counters_and_a_pipe_gets_plain_lines() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIPPED up_and_recover_on_a_terminal_show_step_counters_and_a_pipe_gets_plain_lines: script(1) is missing (apt-get install bsdutils)");
        return;
    }
    let Some(lab) = TestLab::up("up_on_a_terminal", 3, 0, 0, "trixie") else {
        return;
    };
    let (out, screen) = on_a_terminal(&lab, "up --yes");
    assert!(out.status.success(), "{}", text(&out));
    assert!(screen.contains("up: done in"), "{screen}");
    assert!(screen.contains('\u{1b}'), "no bar drawn on a terminal: {screen}");
    // The phase counter ("[1/N] <first phase>") and a host's step counter ("  cp1 [ 1/M] …").
    assert!(screen.contains("[1/"), "no phase counter: {screen}");
    assert!(
        ["cp1", "cp2", "cp3"]
            .iter()
            .any(|h| screen.contains(&format!("  {h} ["))),
        "no host counter: {screen}"
    );
    // The log lines are there too, whole, above the bars.
    assert!(screen.contains("== "), "{screen}");

    // On a pipe the same command prints plain lines (support/cli.rs fails on any escape code).
    let out = cli_support::run(Some(lab.inventory()), &["up", "--yes"], &[], None);
    assert!(out.status.success(), "{}", text(&out));

    // A snapshot saved on a terminal (a lab's few KiB stream in less than a frame, so the bar
    // may not be drawn at all), then quorum lost and a recover on a terminal: its step counter.
    let tmp = tempfile::tempdir().unwrap();
    let (out, screen) = on_a_terminal(
        &lab,
        &format!("etcd snapshot save --out {}", tmp.path().display()),
    );
    assert!(out.status.success(), "{screen}");
    let snap = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "db"))
        .expect("a snapshot file");
    for h in ["cp2", "cp3"] {
        lab.exec(h, &["systemctl", "kill", "-s", "KILL", "etcd.service"]);
        lab.exec(h, &["systemctl", "stop", "etcd.service"]);
        lab.exec_ok(h, &["rm", "-rf", "/var/lib/etcd"]);
    }
    assert!(eventually(Duration::from_secs(20), || {
        let out = lab.exec("cp1", &["curl", "-s", "-m", "2", "http://127.0.0.1:2381/health"]);
        !String::from_utf8_lossy(&out.stdout).contains("\"health\":\"true\"")
    }));
    let snap = snap.to_str().unwrap();
    let dry = cli_support::run(
        Some(lab.inventory()),
        &["recover", "--from-snapshot", snap, "--dry-run", "-o", "json"],
        &[],
        None,
    );
    assert!(dry.status.success(), "{}", text(&dry));
    let plan: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    let steps = plan["steps"].as_array().unwrap();
    let (out, screen) = on_a_terminal(&lab, &format!("recover --from-snapshot {snap} --yes"));
    assert!(out.status.success(), "{screen}");
    // `[ 1/24] R0.4@cp1 check the snapshot …` (the title cut to the terminal's width): some
    // step of how many (a step done within a frame may never be drawn).
    let counters: Vec<String> = steps
        .iter()
        .map(|st| format!("/{}] {} ", steps.len(), st["id"].as_str().unwrap()))
        .collect();
    assert!(
        counters.iter().any(|c| screen.contains(c)),
        "no step counter like {:?}: {screen}",
        counters[0]
    );
    assert!(screen.contains("recover: run "), "{screen}");
}
