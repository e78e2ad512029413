//! Running the `hactl` binary from integration tests, shared by the test files.
//!
//! `support::cli` in the lab test binaries (see `support/mod.rs`); a test file that needs only this
//! includes it alone with `#[path = "support/cli.rs"] mod cli_support;` (it uses no other support
//! module).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The `hactl` binary built for these tests, with the variables tests set for one command
/// (`HACTL_CRASH_AFTER`, `HACTL_MACHINE_ID`, and the timeouts `HACTL_PROMOTE_TIMEOUT_SECS` and
/// `HACTL_NODE_READY_TIMEOUT_SECS`) cleared, so a crash request or a short timeout never leaks
/// into the next command; a caller that wants one sets it afterwards.
pub fn hactl_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hactl"));
    for var in [
        "HACTL_CRASH_AFTER",
        "HACTL_PROMOTE_TIMEOUT_SECS",
        "HACTL_NODE_READY_TIMEOUT_SECS",
        "HACTL_MACHINE_ID",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The one runner of the `hactl` binary built for these tests: `hactl ARGS [-i INV]` with extra
/// environment and, when given, `stdin` piped in (else stdin is closed). The test-only variables
/// are cleared ([`hactl_command`]) unless `env` sets them. Logs the exit code and output to stderr
/// (shown when the test fails).
pub fn run(inv: Option<&Path>, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut cmd = hactl_command();
    cmd.args(args);
    if let Some(inv) = inv {
        cmd.arg("-i").arg(inv);
    }
    cmd.envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run hactl");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(text.as_bytes())
            .expect("write hactl's stdin");
    }
    let out = child.wait_with_output().expect("wait for hactl");
    eprintln!("hactl {args:?} {env:?} -> {}", text(&out));
    // stderr is a pipe here, never a terminal: plain lines, no progress bar, no colour.
    assert!(
        !out.stderr.contains(&0x1b),
        "hactl {args:?} wrote escape codes to a pipe: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `hactl ARGS` (the arguments name the inventory themselves, if any).
pub fn hactl(args: &[&str]) -> Output {
    run(None, args, &[], None)
}

/// `hactl ARGS -i INV`.
pub fn hactl_in(inv: &Path, args: &[&str]) -> Output {
    run(Some(inv), args, &[], None)
}

/// `hactl ARGS -i INV` with extra environment.
pub fn hactl_env(inv: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    run(Some(inv), args, env, None)
}

/// Exit code (or the signal that ended it), stdout and stderr, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "exit {:?} ({})\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `hactl up --yes`, which must succeed; returns its stdout.
pub fn up_ok(inventory: &Path) -> String {
    let out = hactl(&["up", "-i", inventory.to_str().unwrap(), "--yes"]);
    assert!(out.status.success(), "hactl up failed:\n{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `hactl status -o json`: its exit code and document.
pub fn status_json(inventory: &Path) -> (i32, serde_json::Value) {
    let out = hactl(&["status", "-i", inventory.to_str().unwrap(), "-o", "json"]);
    let json =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("status JSON: {e}\n{}", text(&out)));
    (out.status.code().unwrap_or(-1), json)
}

/// Runs `hactl ARGS` (stdin closed, stdout discarded, the test-only variables cleared) and sends
/// it SIGINT, as Ctrl-C would, at the first line of its stderr that `when` accepts; reads the
/// rest of its stderr and waits for it. Returns its exit code and everything it wrote to stderr
/// (also logged to stderr); fails the test when no line was accepted.
pub fn interrupted(args: &[&str], when: impl Fn(&str) -> bool) -> (Option<i32>, String) {
    use std::io::BufRead as _;
    use std::process::Stdio;
    let mut child = hactl_command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (mut seen, mut line, mut sent) = (String::new(), String::new(), false);
    while stderr.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        if !sent && when(&line) {
            let pid = child.id().to_string();
            let kill = Command::new("kill").args(["-INT", &pid]).status().unwrap();
            assert!(kill.success(), "kill -INT {pid}: {kill}");
            sent = true;
        }
        line.clear();
    }
    let status = child.wait().unwrap();
    eprintln!("interrupted hactl {} ({status}):\n{seen}", args.join(" "));
    assert!(sent, "no line to interrupt at came:\n{seen}");
    (status.code(), seen)
}
