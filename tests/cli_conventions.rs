//! The conventions users know from other tools, checked on the built binary: usage errors with an
//! exit code of their own, `--version` naming the commit, shell completions, man pages, JSON from
//! `validate`, colour only on a terminal and never with `NO_COLOR`, `kubeconfig`, refusals that
//! need no host (replace's retry limit, a typo in a timeout variable) given before any host is
//! reached, and output to a closed pipe or a closed stream ending quietly with the command's own
//! exit code.

#[path = "support/cli.rs"]
mod cli_support;

use cli_support::{hactl, text};

/// sysexits' EX_USAGE; 2 is reserved for "refused by a safety rule".
const USAGE: i32 = 64;

#[test]
fn usage_errors_exit_64_and_help_and_version_exit_0() {
    for args in [
        &["completion", "tcsh"][..],
        &["no-such-command"],
        &["status", "--no-such-flag"],
        &["recover", "--auto", "--accept-data-loss-window", "1w"],
        // `-o json` is for the dry run's plan only.
        &["recover", "--auto", "-o", "json"],
        &["up", "-o", "json"],
        &["certs", "renew", "--all", "-o", "json"],
        &[],
    ] {
        let out = hactl(args);
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", text(&out));
        assert!(
            out.stdout.is_empty(),
            "{args:?}: usage errors go to stderr: {}",
            text(&out)
        );
    }
    let out = hactl(&["completion", "tcsh"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("possible values: bash, zsh, fish"),
        "{}",
        text(&out)
    );
    let out = hactl(&["--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = hactl(&["--version"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.starts_with(&format!("hactl {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
}

#[test]
fn completions_for_each_shell_and_man_pages_for_each_command() {
    for (shell, marker) in [
        ("bash", "_hactl()"),
        ("zsh", "#compdef hactl"),
        ("fish", "complete -c hactl"),
    ] {
        let out = hactl(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: no {marker:?} in\n{script}");
        assert!(script.contains("kubeconfig"), "{shell}: subcommands missing");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = hactl(&["man", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for page in [
        "hactl.1",
        "hactl-up.1",
        "hactl-etcd-snapshot-save.1",
        "hactl-maintenance-start.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page} is not a man page"
        );
    }
    let top = std::fs::read_to_string(dir.path().join("hactl.1")).unwrap();
    assert!(top.contains("(commit "), "the man page names the build");
}

#[test]
fn validate_reports_json() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    let out = hactl(&["init", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = hactl(&["validate", "-i", good.to_str().unwrap(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["apiVersion"], "hactl.io/v1alpha1");
    assert_eq!(json["kind"], "ValidationReport");
    assert_eq!(json["valid"], true);
    assert_eq!(json["cluster"], "example");
    assert_eq!(json["hosts"], 5);

    let bad = dir.path().join("bad.yaml");
    let text_of_good = std::fs::read_to_string(&good).unwrap();
    std::fs::write(
        &bad,
        text_of_good.replace("address: 10.0.0.12", "address: cp2.lan"),
    )
    .unwrap();
    let out = hactl(&["validate", "-i", bad.to_str().unwrap(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], false);
    assert!(json["cluster"].is_null() && json["hosts"].is_null(), "{json}");
    assert_eq!(json["problems"][0]["place"], "hosts[1].address");
    assert!(json["problems"][0]["message"]
        .as_str()
        .unwrap()
        .contains("hactl does not resolve names"));
}

/// The example inventory with every host on loopback and SSH on port 1, where nothing listens:
/// `check` then logs (with -vv) and fails fast without leaving this machine.
fn loopback_inventory(dir: &std::path::Path) -> std::path::PathBuf {
    let inv = dir.join("loopback.yaml");
    hactl(&["init", inv.to_str().unwrap()]);
    let text = std::fs::read_to_string(&inv)
        .unwrap()
        .replace("10.0.0.", "127.0.0.")
        .replace("    # port: 22", "    port: 1")
        .replace("        port: 22", "        port: 1");
    std::fs::write(&inv, text).unwrap();
    inv
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    let dir = tempfile::tempdir().unwrap();
    let inv = loopback_inventory(dir.path());
    // stderr is a pipe here: log lines, but no escape codes.
    let out = hactl(&["-vv", "check", "-i", inv.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DEBUG cp1: connecting to 127.0.0.11:1"),
        "{}",
        text(&out)
    );
    assert!(
        !out.stderr.contains(&0x1b),
        "escape codes on a pipe: {}",
        text(&out)
    );

    // On a terminal (script(1) gives the command one): colour, unless NO_COLOR is set.
    let on_terminal = |no_color: bool| {
        let line = format!(
            "{}{} -vv check -i {}",
            if no_color { "NO_COLOR=1 " } else { "" },
            env!("CARGO_BIN_EXE_hactl"),
            inv.display()
        );
        std::process::Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env_remove("NO_COLOR")
            .output()
    };
    let Ok(coloured) = on_terminal(false) else {
        eprintln!("SKIPPED colour_only_on_a_terminal_and_never_with_no_color (terminal part): script(1) is missing (apt-get install bsdutils)");
        return;
    };
    assert!(
        coloured.stdout.contains(&0x1b),
        "no colour on a terminal: {}",
        text(&coloured)
    );
    let plain = on_terminal(true).unwrap();
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("DEBUG cp1: connecting"),
        "{}",
        text(&plain)
    );
    assert!(
        !plain.stdout.contains(&0x1b),
        "colour despite NO_COLOR: {}",
        text(&plain)
    );
}

/// Every file under `dir`, relative, sorted: what a command that changes nothing leaves alone
/// (the cluster lock's directory, `locks/`, empty once the lock is given back, is left out).
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out.retain(|p| p != "locks");
    out
}

/// The operation manager's confirmation, on the built binary: without a terminal and without
/// `--yes` it needs input (exit 3); on a terminal, answering "n" declines (exit 6, not the 2 of a
/// safety refusal) and changes nothing. `certs rotate-ca` plans from the state directory alone,
/// so the hosts (unreachable here) are not needed to reach the question.
#[test]
fn answering_no_at_the_prompt_changes_nothing_and_exits_6() {
    let dir = tempfile::tempdir().unwrap();
    let path = loopback_inventory(dir.path());
    let inv = hactl::inventory::load(&path).unwrap();
    let state = hactl::state::StateDir::open(&inv.state_dir).unwrap();
    hactl::pki::ensure(&state.path.join("pki"), &inv, time::OffsetDateTime::now_utc()).unwrap();
    let before = tree(&state.path);
    let out = hactl(&["certs", "rotate-ca", "etcd", "-i", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("run again with --yes"), "{}", text(&out));
    assert_eq!(tree(&state.path), before);
    let line = format!(
        "{} certs rotate-ca etcd -i {}",
        env!("CARGO_BIN_EXE_hactl"),
        path.display()
    );
    let Ok(mut child) = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("SKIPPED answering_no_at_the_prompt_changes_nothing_and_exits_6 (terminal part): script(1) is missing (apt-get install bsdutils)");
        return;
    };
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    assert!(screen.contains("Proceed? [y/N]"), "{screen}");
    assert!(screen.contains("not confirmed: nothing was changed"), "{screen}");
    assert_eq!(
        tree(&state.path),
        before,
        "a declined run changed the state directory"
    );
}

#[test]
fn kubeconfig_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("cluster.yaml");
    hactl(&["init", inv.to_str().unwrap()]);
    let out = hactl(&["kubeconfig", "-i", inv.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no admin kubeconfig yet at")
            && String::from_utf8_lossy(&out.stderr).contains("writes it"),
        "{}",
        text(&out)
    );
    // Once `up` wrote it, it is printed as it is (stdout is a pipe here).
    let state = dir.path().join(".hactl/example");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("admin.kubeconfig"), "apiVersion: v1\nkind: Config\n").unwrap();
    let out = hactl(&["kubeconfig", "-i", inv.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(out.stdout, b"apiVersion: v1\nkind: Config\n");
}

/// The retry limit reads only the state dir: `replace` refuses at it (exit 2, naming the rule and
/// the record to remove) before it reaches any host, so a slow or unreachable host neither delays
/// nor hides the refusal. Every host here is on loopback port 1, where nothing listens.
#[test]
fn replace_refuses_at_the_retry_limit_before_reaching_any_host() {
    let dir = tempfile::tempdir().unwrap();
    let inv = loopback_inventory(dir.path());
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let records = format!(
        r#"{{"members":{{"cp1":{{"retryCount":3,"lastFailure":{now},"lastRemediation":{now},"lastError":"learner did not catch up"}}}}}}"#
    );
    std::fs::write(state.join("heal.json"), records).unwrap();
    let args = [
        "replace",
        "cp1",
        "--reuse-host",
        "--yes",
        "-i",
        inv.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let out = hactl(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr.contains("refused by retry-limit") && stderr.contains("heal.json"),
        "{}",
        text(&out)
    );
    assert!(!stderr.contains("cannot reach"), "{}", text(&out));
    // Below the limit the same command goes on to the hosts, and fails there.
    std::fs::write(state.join("heal.json"), r#"{"members":{}}"#).unwrap();
    let out = hactl(&args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach"),
        "{}",
        text(&out)
    );
}

/// A timeout variable holding a typo stops the command before it reaches any host (exit 1,
/// naming the variable, its value and the fix), never falling back to the default in silence:
/// `HACTL_PROMOTE_TIMEOUT_SECS` for `replace`, `HACTL_NODE_READY_TIMEOUT_SECS` for `up` and
/// `plan`. Every host here is on loopback port 1, where nothing listens, so reaching one would
/// say "cannot reach".
#[test]
fn a_timeout_variable_with_a_typo_stops_the_command_before_any_host_is_reached() {
    let dir = tempfile::tempdir().unwrap();
    let inv = loopback_inventory(dir.path());
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let state = state.to_str().unwrap();
    let inv = inv.to_str().unwrap();
    let cases: [(&str, &str, Vec<&str>); 3] = [
        (
            "HACTL_PROMOTE_TIMEOUT_SECS",
            "10m",
            vec!["replace", "cp1", "--reuse-host", "--yes"],
        ),
        ("HACTL_NODE_READY_TIMEOUT_SECS", "0", vec!["up", "--yes"]),
        ("HACTL_NODE_READY_TIMEOUT_SECS", "ninety", vec!["plan"]),
    ];
    for (var, value, args) in cases {
        let mut cmd = cli_support::hactl_command();
        cmd.args(&args)
            .args(["-i", inv, "--state-dir", state])
            .env(var, value);
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{var}={value} {args:?}: {}",
            text(&out)
        );
        assert!(
            stderr.contains(&format!("{var}={value:?} is not a whole number of seconds from 1 to 86400: set it to one, or unset it for the default")),
            "{var}={value} {args:?}: {}",
            text(&out)
        );
        assert!(
            !stderr.contains("cannot reach"),
            "{var}={value} {args:?}: {}",
            text(&out)
        );
    }
    // With the variables sane the same commands go on to the hosts, and fail there.
    let out = cli_support::hactl_command()
        .args([
            "replace",
            "cp1",
            "--reuse-host",
            "--yes",
            "-i",
            inv,
            "--state-dir",
            state,
        ])
        .env("HACTL_PROMOTE_TIMEOUT_SECS", "600")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach"),
        "{}",
        text(&out)
    );
}

/// Output to a closed stream ends quietly: a pipe whose reader went away (`hactl check | head
/// -0`) or a stream closed outright (`2>&-`) on stdout, stderr or both makes no panic (101) and
/// no error; the command runs to its end and exits with its own code, as with open streams.
#[test]
fn output_to_a_closed_pipe_or_stream_ends_quietly_with_the_commands_own_exit_code() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    hactl(&["init", good.to_str().unwrap()]);
    let loopback = loopback_inventory(dir.path());
    let missing = dir.path().join("missing.yaml");
    let cases: [(Vec<&str>, i32); 4] = [
        // Plenty on stdout, little on stderr.
        (vec!["validate", "-i", good.to_str().unwrap()], 0),
        // A table on stdout, a log on stderr (-vv), exit 1: no host answers.
        (vec!["check", "-vv", "-i", loopback.to_str().unwrap()], 1),
        // clap's own printing.
        (vec!["--help"], 0),
        // The error chain on stderr.
        (vec!["validate", "-i", missing.to_str().unwrap()], 1),
    ];
    let closed_pipe = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        Stdio::from(writer)
    };
    for (args, code) in &cases {
        for closed in ["stdout", "stderr", "both"] {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_hactl"));
            cmd.args(args).stdin(Stdio::null());
            let (out_closed, err_closed) = (closed != "stderr", closed != "stdout");
            cmd.stdout(if out_closed { closed_pipe() } else { Stdio::piped() });
            cmd.stderr(if err_closed { closed_pipe() } else { Stdio::piped() });
            let out = cmd.output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(*code),
                "{args:?} with {closed} a closed pipe: {}",
                text(&out)
            );
            assert!(!text(&out).contains("panicked"), "{args:?}: {}", text(&out));
        }
        // Closed outright: fds 1 and 2 not open at all.
        for redirect in [">&-", "2>&-", ">&- 2>&-"] {
            let line = format!("exec \"$0\" \"$@\" {redirect}");
            let out = Command::new("sh")
                .arg("-c")
                .arg(&line)
                .arg(env!("CARGO_BIN_EXE_hactl"))
                .args(args)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(*code),
                "{args:?} {redirect}: {}",
                text(&out)
            );
            assert!(
                !text(&out).contains("panicked"),
                "{args:?} {redirect}: {}",
                text(&out)
            );
        }
    }
}

/// Every file hactl reads has a limit: an inventory that never ends (`/dev/zero`, which also
/// claims a size of 0) fails at 16 MiB with the file and the limit named, instead of reading
/// until memory runs out (it once read 24 GB before failing): the message is only given once
/// 16 MiB and one byte have been read.
#[test]
fn an_endless_inventory_fails_fast_naming_the_file_and_the_limit() {
    let out = hactl(&["validate", "-i", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "zero: cannot be read: `/dev/zero` is larger than 16 MiB, the most hactl reads from it"
        ),
        "{}",
        text(&out)
    );
}
