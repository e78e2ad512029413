//! The foundation against real lab hosts: preflight, fan-out order, skipped uploads, pinned host
//! keys and a powered-off host. They need root; without it each prints `SKIPPED <name>: needs root`.

use crate::support::lab as lab_support;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hactl::exec::UploadOutcome;
use hactl::inventory::Host;
use hactl::plan::{RemoteCommand, Upload};
use hactl::ssh::{ConnectOptions, KnownHosts, Session};
use lab_support::TestLab;

fn hactl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .output()
        .expect("run hactl")
}

fn check_json(inventory: &str, extra: &[&str]) -> (Option<i32>, Vec<serde_json::Value>, String) {
    let mut args = vec!["check", "-i", inventory, "-o", "json"];
    args.extend_from_slice(extra);
    let out = hactl(&args);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check JSON: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(doc["kind"], "CheckReport", "{doc}");
    let rows: Vec<serde_json::Value> = doc["checks"].as_array().expect("checks").clone();
    let failed = rows.iter().filter(|r| r["verdict"] == "fail").count();
    assert_eq!(doc["failed"], failed, "{doc}");
    (
        out.status.code(),
        rows,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn failed_rows(rows: &[serde_json::Value]) -> Vec<(String, String, String)> {
    rows.iter()
        .filter(|r| r["verdict"] == "fail")
        .map(|r| {
            (
                r["host"].as_str().unwrap().to_string(),
                r["check"].as_str().unwrap().to_string(),
                r["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn check_passes_on_a_lab_and_fails_only_for_a_powered_off_host() {
    let Some(mut lab) = TestLab::up("check_passes_on_a_lab", 3, 2, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_str().unwrap().to_string();
    let (code, rows, stderr) = check_json(&inv, &[]);
    assert_eq!(failed_rows(&rows), vec![], "{stderr}");
    assert_eq!(code, Some(0));
    let hosts: Vec<&str> = rows.iter().map(|r| r["host"].as_str().unwrap()).collect();
    let mut order = hosts.clone();
    order.dedup();
    assert_eq!(
        order,
        ["cp1", "cp2", "cp3", "lb1", "lb2"],
        "rows out of inventory order"
    );
    for check in ["ssh", "sudo", "os", "clock", "ports", "disk", "binaries"] {
        assert!(rows.iter().any(|r| r["check"] == check), "no {check} row");
    }

    lab.fault("lb1", hactl::lab::Fault::Poweroff);
    // 10 s to connect, the inventory's default: 3 s can time out on a live host of a machine at
    // its busiest (seen in CI with recover's --connect-timeout 3).
    let started = Instant::now();
    let (code, rows, _) = check_json(&inv, &["--connect-timeout", "10"]);
    let took = started.elapsed();
    assert_eq!(code, Some(1));
    let failed = failed_rows(&rows);
    assert_eq!(failed.len(), 1, "{failed:?}");
    let (host, check, detail) = &failed[0];
    assert_eq!((host.as_str(), check.as_str()), ("lb1", "ssh"));
    assert!(
        detail.contains("lb1") && detail.contains(&lab.ip("lb1").to_string()),
        "{detail}"
    );
    println!("powered-off host reported in {took:?}: {detail}");
}

fn connect_options(lab: &TestLab, accept: &[&str]) -> ConnectOptions {
    let inv = hactl::inventory::load(lab.inventory()).unwrap();
    let known = KnownHosts::load(inv.state_dir.join("known_hosts")).unwrap();
    let mut opts = ConnectOptions::new(Arc::new(known));
    opts.accept_new_host_key = accept.iter().map(|s| s.to_string()).collect();
    opts
}

fn hosts(lab: &TestLab) -> Vec<Host> {
    hactl::inventory::load(lab.inventory()).unwrap().hosts
}

#[test]
fn fan_out_returns_every_hosts_output_in_inventory_order_and_skips_unchanged_uploads() {
    let Some(lab) = TestLab::up("fan_out_returns_every_hosts_output", 3, 2, 0, "trixie") else {
        return;
    };
    std::fs::create_dir_all(hactl::inventory::load(lab.inventory()).unwrap().state_dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hosts = hosts(&lab);
    let refs: Vec<&Host> = hosts.iter().collect();
    let opts = Arc::new(connect_options(&lab, &[]));
    let results = rt.block_on(hactl::exec::parallel::for_each_host(&refs, 2, |h| {
        let h = h.clone();
        let opts = opts.clone();
        async move {
            // Later hosts answer first, so order must come from the inventory, not from timing.
            let delay = match h.name.as_str() {
                "cp1" => "0.6",
                "cp2" => "0.4",
                _ => "0",
            };
            let s = Session::connect(&h.name, &h.ssh, &opts).await?;
            let out = s
                .run(&RemoteCommand::read_only([
                    "sh",
                    "-c",
                    &format!("sleep {delay}; hostname"),
                ]))
                .await?;
            Ok(out.stdout_str().trim().to_string())
        }
    }));
    let got: Vec<(String, String)> = results.into_iter().map(|(h, r)| (h, r.unwrap())).collect();
    let want: Vec<(String, String)> = ["cp1", "cp2", "cp3", "lb1", "lb2"]
        .iter()
        .map(|h| (h.to_string(), h.to_string()))
        .collect();
    assert_eq!(got, want);
    let lines: Vec<String> = got
        .iter()
        .map(|(h, out)| hactl::exec::parallel::prefix_lines(h, out))
        .collect();
    assert_eq!(lines[0].trim_end(), "cp1: cp1");

    // An upload of unchanged content does not touch the file.
    let cp1 = &hosts[0];
    let session = rt.block_on(Session::connect(&cp1.name, &cp1.ssh, &opts)).unwrap();
    let up = Upload::new(
        "/etc/hactl/test/unchanged.conf",
        0o640,
        "root",
        "root",
        b"same\n".to_vec(),
    );
    assert_eq!(rt.block_on(session.upload(&up)).unwrap(), UploadOutcome::Written);
    let stat = |lab: &TestLab| {
        lab.exec_ok(
            "cp1",
            &["stat", "-c", "%i %Y %Z", "/etc/hactl/test/unchanged.conf"],
        )
    };
    let before = stat(&lab);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        rt.block_on(session.upload(&up)).unwrap(),
        UploadOutcome::Unchanged
    );
    assert_eq!(stat(&lab), before, "an unchanged upload rewrote the file");
    let changed = Upload::new(
        "/etc/hactl/test/unchanged.conf",
        0o640,
        "root",
        "root",
        b"new\n".to_vec(),
    );
    assert_eq!(
        rt.block_on(session.upload(&changed)).unwrap(),
        UploadOutcome::Written
    );
    assert_eq!(
        lab.exec_ok("cp1", &["cat", "/etc/hactl/test/unchanged.conf"]),
        "new\n"
    );
}

#[test]
fn a_changed_host_key_is_refused_with_both_fingerprints_and_nothing_runs() {
    let Some(lab) = TestLab::up("a_changed_host_key_is_refused", 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_str().unwrap().to_string();
    // `check` is read-only: on first contact it trusts the keys for itself and records none.
    let (code, _, stderr) = check_json(&inv, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let state_dir = hactl::inventory::load(lab.inventory()).unwrap().state_dir;
    assert!(
        !state_dir.join("known_hosts").exists(),
        "check recorded host keys"
    );
    // A connection that may write (as `up`'s does) pins every host's key.
    std::fs::create_dir_all(&state_dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    {
        let opts = connect_options(&lab, &[]);
        for host in hosts(&lab) {
            rt.block_on(Session::connect(&host.name, &host.ssh, &opts))
                .unwrap_or_else(|e| panic!("first contact with {}: {e}", host.name));
        }
    }
    // Re-install cp2's host key, as a re-imaged machine would have.
    lab.exec_ok(
        "cp2",
        &["sh", "-c", "rm -f /etc/ssh/ssh_host_* && ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key && systemctl restart ssh"],
    );
    let presented = lab.exec_ok(
        "cp2",
        &["ssh-keygen", "-l", "-f", "/etc/ssh/ssh_host_ed25519_key.pub"],
    );
    let presented = presented.split_whitespace().nth(1).unwrap().to_string();

    let marker = "/tmp/hactl-ran-here";
    let hosts = hosts(&lab);
    let opts = connect_options(&lab, &[]);
    let err = rt
        .block_on(Session::connect("cp2", &hosts[1].ssh, &opts))
        .expect_err("connected despite a changed key");
    let msg = format!("{err}");
    assert!(
        msg.contains("host key of cp2") && msg.contains(&presented),
        "{msg}"
    );
    assert!(msg.contains("known SHA256:"), "{msg}");
    assert!(msg.contains("--accept-new-host-key cp2"), "{msg}");
    // Only the operator can say the key changed for a re-install: that is input (3), not a
    // failed check (1).
    let (code, rows, stderr) = check_json(&inv, &[]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("--accept-new-host-key cp2"), "{stderr}");
    let failed = failed_rows(&rows);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!((failed[0].0.as_str(), failed[0].1.as_str()), ("cp2", "ssh"));
    assert!(!lab.exec("cp2", &["test", "-e", marker]).status.success());

    // The operator confirms the re-install: `check` accepts the new key for its own run and
    // still records nothing; a writing connection with the same flag pins it from then on.
    let (code, _, stderr) = check_json(&inv, &["--accept-new-host-key", "cp2"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, _) = check_json(&inv, &[]);
    assert_eq!(code, Some(3), "check recorded the accepted key");
    let opts = connect_options(&lab, &["cp2"]);
    rt.block_on(Session::connect("cp2", &hosts[1].ssh, &opts))
        .expect("the accepted key");
    let (code, _, stderr) = check_json(&inv, &[]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// Every command that changes a running cluster counts an unreachable member as down; a member
/// whose host merely presents a new key (re-installed, or another machine at its address) is
/// not known to be down, so each refuses with exit 3 and the flag to use, before changing
/// anything, dry runs included. With the key accepted the same command goes on.
#[test]
fn day_two_operations_refuse_a_changed_host_key_with_exit_3() {
    use crate::support::cli::{hactl_in, text, up_ok};
    let Some(lab) = TestLab::up("day_two_changed_host_key", 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory();
    up_ok(inv);
    lab.exec_ok(
        "cp2",
        &["sh", "-c", "rm -f /etc/ssh/ssh_host_* && ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key && systemctl restart ssh"],
    );
    let commands: [&[&str]; 7] = [
        &["heal", "--dry-run"],
        &["etcd", "maintenance", "--defrag", "--dry-run"],
        &["maintenance", "start", "cp3", "--dry-run"],
        &["replace", "cp3", "--reuse-host", "--dry-run"],
        &[
            "recover",
            "--from-member",
            "cp1",
            "--confirm-dead",
            "cp2,cp3",
            "--dry-run",
        ],
        &["certs", "rotate-ca", "etcd", "--dry-run"],
        &["remove", "cp3", "--dry-run"],
    ];
    for args in commands {
        let out = hactl_in(inv, args);
        assert_eq!(out.status.code(), Some(3), "hactl {args:?}:\n{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("host key of cp2") && stderr.contains("--accept-new-host-key cp2"),
            "hactl {args:?} does not say which key changed and what to run:\n{}",
            text(&out)
        );
    }
    // Nothing was changed: cp2's member still runs.
    assert_eq!(
        lab.exec_ok("cp2", &["systemctl", "is-active", "etcd"]).trim(),
        "active"
    );
    // The operator attests the re-install: the round goes on, and the cluster is healthy. A dry
    // run records nothing, so the next command still asks.
    let out = hactl_in(inv, &["heal", "--dry-run", "--accept-new-host-key", "cp2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not recorded (this command writes nothing)"),
        "{}",
        text(&out)
    );
    let out = hactl_in(inv, &["heal", "--dry-run"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the dry run recorded the key: {}",
        text(&out)
    );
    // A live round records it: from then on no flag is needed.
    let out = hactl_in(inv, &["heal", "--accept-new-host-key", "cp2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = hactl_in(inv, &["heal", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}
