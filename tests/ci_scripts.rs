//! The CI scripts' own decisions, run for real on small inputs: which skipped tests fail a run as
//! root (`scripts/check-skips.sh`), and which command `scripts/readme-lab.sh` takes from the
//! README (the line CI runs verbatim). Neither needs root nor changes the machine.

use std::path::Path;
use std::process::{Command, Output};

fn script(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name)
}

fn said(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `check-skips.sh LOG UID` on a log holding `lines`.
fn check_skips(lines: &str, uid: u32) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("test.log");
    std::fs::write(&log, lines).unwrap();
    Command::new(script("check-skips.sh"))
        .arg(&log)
        .arg(uid.to_string())
        .output()
        .unwrap()
}

const NEXTEST_LINES: &str = "        PASS [   1.2s] hactl::etcd_labs hosts::hosts_boot\n     Summary [ 10.0s] 3 tests run: 3 passed, 2 skipped\n";

#[test]
fn as_root_every_skip_fails_the_run_unless_the_machine_cannot_run_the_test() {
    // Nothing skipped (nextest's own "skipped" count is not a skip line).
    let out = check_skips(NEXTEST_LINES, 0);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));

    // Skips a script could have prevented: each is named and the run fails.
    let log = format!(
        "{NEXTEST_LINES}SKIPPED vagrant_lab: scripts/vagrant-deps.sh could not install Vagrant\n\
         SKIPPED kube_up: HACTL_KUBE_BIN_DIR is not set\n\
         SKIPPED hosts_boot: needs root\n"
    );
    let out = check_skips(&log, 0);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for name in ["vagrant_lab", "kube_up", "hosts_boot"] {
        assert!(stderr.contains(&format!("  SKIPPED {name}: ")), "{}", said(&out));
    }

    // One the machine itself cannot run: listed, and the run goes on.
    let machine = "SKIPPED vagrant_lab: this machine cannot run it: no /dev/net/tun\n";
    let out = check_skips(&format!("{NEXTEST_LINES}{machine}"), 0);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no /dev/net/tun"),
        "{}",
        said(&out)
    );

    // Both kinds: the other one still fails it.
    let out = check_skips(&format!("{machine}SKIPPED kube_up: no binaries\n"), 0);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
}

#[test]
fn not_root_skips_are_counted_and_allowed() {
    let out = check_skips(
        "SKIPPED hosts_boot: needs root\nSKIPPED recover: needs root\n",
        1000,
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("2 skipped test(s), allowed because this run is not root"),
        "{}",
        said(&out)
    );
}

fn readme_command(readme: &Path) -> Output {
    Command::new(script("readme-lab.sh"))
        .arg("--print")
        .env("HACTL_README", readme)
        .output()
        .unwrap()
}

#[test]
fn the_readme_command_ci_runs_is_the_one_under_two_commands() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let out = readme_command(&readme);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let command = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let text = std::fs::read_to_string(&readme).unwrap();
    assert!(
        text.lines().any(|l| l == command),
        "{command:?} is not a line of README.md"
    );
    assert!(command.contains(" lab up"), "{command}");

    // Only the block under that heading counts, and its first line that is not a comment.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("README.md");
    std::fs::write(
        &other,
        "# x\n```sh\nhactl lab up --name wrong\n```\n### Two commands\ntext\n```sh\n# 1. comment\n\nscripts/a.sh && hactl lab up --name right\nscripts/b.sh\n```\n",
    )
    .unwrap();
    let out = readme_command(&other);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "scripts/a.sh && hactl lab up --name right\n",
        "{}",
        said(&out)
    );
}

#[test]
fn a_readme_without_the_block_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let readme = dir.path().join("README.md");
    // The heading is there, but the block sits under another one.
    std::fs::write(
        &readme,
        "## Two commands\ntext\n## Later\n```sh\nhactl lab up\n```\n",
    )
    .unwrap();
    let out = readme_command(&readme);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("has no shell block with a command under the heading \"Two commands\""),
        "{}",
        said(&out)
    );
    // A block whose first command brings up no lab is refused too: CI's check would mean nothing.
    std::fs::write(&readme, "## Two commands\n```sh\ncargo build\n```\n").unwrap();
    let out = readme_command(&readme);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not bring up a lab"),
        "{}",
        said(&out)
    );
}
