//! One exit-code table for every command (`hactl::exit::TABLE`): `--help` of hactl and of each
//! subcommand prints it, docs/reference/exit-codes.md lists the same codes and names, and every
//! code has a test that makes a real command exit with it. The cheap ones run here; the ones
//! that need a cluster are lab tests, named in [`PROVEN_IN_LABS`] and checked to exist.

use std::process::{Command, Output};

use hactl::exit::TABLE;

fn hactl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .env_remove("HACTL_INVENTORY")
        .env_remove("HACTL_STATE_DIR")
        .output()
        .expect("run hactl")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_docs_and_every_help_print_the_one_table() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/reference/exit-codes.md"
    ))
    .unwrap();
    // `| 3 | `NEEDS_INPUT` | …`: the codes and names of the reference's table, in its order.
    let rows: Vec<(i32, String)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let code = cells.get(1)?.parse().ok()?;
            Some((code, cells.get(2)?.trim_matches('`').to_string()))
        })
        .collect();
    let want: Vec<(i32, String)> = TABLE.iter().map(|c| (c.code, c.name.to_string())).collect();
    assert_eq!(
        rows, want,
        "docs/reference/exit-codes.md and src/exit.rs disagree"
    );
    for args in [
        &["--help"][..],
        &["up", "--help"],
        &["etcd", "snapshot", "save", "--help"],
        &["maintenance", "start", "-h"],
    ] {
        let out = hactl(args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let help = String::from_utf8_lossy(&out.stdout);
        for c in TABLE {
            assert!(
                help.contains(&format!("{:>2}  {}", c.code, c.meaning)),
                "hactl {args:?} does not print exit code {}:\n{help}",
                c.code
            );
        }
    }
}

/// The example inventory on loopback, SSH on port 1 where nothing listens, and its state
/// directory.
fn loopback(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let inv = dir.join("loopback.yaml");
    assert_eq!(hactl(&["init", inv.to_str().unwrap()]).status.code(), Some(0));
    let text = std::fs::read_to_string(&inv)
        .unwrap()
        .replace("10.0.0.", "127.0.0.")
        .replace("    # port: 22", "    port: 1");
    std::fs::write(&inv, text).unwrap();
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    (inv, state)
}

/// `hactl up --yes` on `inv` with its state directory `state`.
fn up(inv: &std::path::Path, state: &std::path::Path) -> Output {
    hactl(&[
        "up",
        "--yes",
        "-i",
        inv.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ])
}

/// 3: the cluster lock is held by a run of another machine; `up` names it before connecting
/// anywhere and asks for `--steal-lock`, once the operator knows that run is gone.
#[test]
fn a_lock_held_elsewhere_needs_input_3() {
    let dir = tempfile::tempdir().unwrap();
    let (inv, state) = loopback(dir.path());
    std::fs::create_dir(state.join("locks")).unwrap();
    std::fs::write(
        state.join("locks/cluster.lock"),
        r#"{"command":"recover","run":"recover-1","operator":"ops@desk","machine":"another-machine","pid":1,"since":"2026-11-25T10:00:00Z"}"#,
    )
    .unwrap();
    let out = up(&inv, &state);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("recover-1") && said.contains("--steal-lock"),
        "{said}"
    );
    assert!(!said.contains("cannot reach"), "it connected first: {said}");
}

/// 1: a failure before any change: no host answers `up`.
#[test]
fn nothing_reached_fails_1() {
    let dir = tempfile::tempdir().unwrap();
    let (inv, state) = loopback(dir.path());
    let out = up(&inv, &state);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("cannot reach"), "{}", text(&out));
}

/// Each code, and the test that makes a real command exit with it. Those in this file and in
/// tests/cli_conventions.rs run without hosts; the others need a lab.
const PROVEN: &[(i32, &str, &str)] = &[
    (0, "tests/cli_conventions.rs", "validate_reports_json"),
    (1, "tests/exit_codes.rs", "nothing_reached_fails_1"),
    (
        2,
        "tests/cli_conventions.rs",
        "replace_refuses_at_the_retry_limit_before_reaching_any_host",
    ),
    (3, "tests/exit_codes.rs", "a_lock_held_elsewhere_needs_input_3"),
    (
        3,
        "tests/etcd_labs/preflight_fanout_host_keys.rs",
        "a_changed_host_key_is_refused_with_both_fingerprints_and_nothing_runs",
    ),
    (
        4,
        "tests/etcd_labs/recover.rs",
        "recover_auto_takes_the_newest_scheduled_backup_and_checks_members_bump_and_a8",
    ),
    (
        4,
        "tests/kube_labs/maintenance_leases.rs",
        "maintenance_drains_real_pods_and_hands_both_leases_over_first",
    ),
    (
        5,
        "tests/etcd_labs/load_balancers_vip.rs",
        "vip_serves_etcd_with_client_certs_and_affinity_and_marks_a_stopped_member_down",
    ),
    (
        6,
        "tests/cli_conventions.rs",
        "answering_no_at_the_prompt_changes_nothing_and_exits_6",
    ),
    (
        7,
        "tests/etcd_labs/old_members.rs",
        "recover_onto_new_hosts_fences_the_old_cluster_and_heal_fences_a_zombie",
    ),
    (
        64,
        "tests/cli_conventions.rs",
        "usage_errors_exit_64_and_help_and_version_exit_0",
    ),
];

/// Every code of the table has a test, and each named test exists (a renamed test fails here,
/// not silently).
#[test]
fn every_code_has_a_test_that_makes_a_command_exit_with_it() {
    for c in TABLE {
        assert!(
            PROVEN.iter().any(|(code, _, _)| *code == c.code),
            "exit code {} ({}) has no test",
            c.code,
            c.name
        );
    }
    for (code, file, name) in PROVEN {
        let source = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR")))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let at = source
            .find(&format!("fn {name}("))
            .unwrap_or_else(|| panic!("{file} has no test {name} (for exit code {code})"));
        // The test asserts the code itself somewhere after its start.
        let body = &source[at..];
        let end = body[1..].find("\nfn ").map_or(body.len(), |e| e + 1);
        let body = &body[..end];
        let name = TABLE.iter().find(|c| c.code == *code).unwrap().name;
        assert!(
            body.contains(&format!("Some({code})"))
                || body.contains(&format!("code, {code}"))
                || body.contains(&format!("Some({name})"))
                || body.contains(&format!("exit::{name}")),
            "{file}: {name} does not assert exit code {code}"
        );
    }
}
