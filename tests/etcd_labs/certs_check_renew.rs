//! `hactl certs check` and `hactl certs renew` on a real lab (3 etcd members, trixie): check
//! lists every certificate in the state directory and on the hosts, each host copy matching the
//! state's; renewing cp1's etcd server certificate re-issues it from the same CA, restarts cp1
//! alone, and cp1 then serves the new serial on 2379, while a writer through cp2 (a member that
//! is not restarted) sees no failed write: the cluster keeps quorum throughout. Its dry run
//! prints the certificate and that plan and changes nothing. An unknown name is refused with the
//! known names.
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::lab as lab_support;
use crate::support::writer::VipWriter;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab_support::TestLab;

fn hactl(inv: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .arg("-i")
        .arg(inv)
        .output()
        .expect("run hactl");
    eprintln!(
        "hactl {args:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The serial of the certificate `cp1` serves on 2379, read with openssl from `from`.
fn served_serial(lab: &TestLab, from: &str, ip: &str) -> String {
    let script = format!(
        "openssl s_client -connect {ip}:2379 -CAfile /etc/hactl/pki/etcd/ca.crt \
-cert /etc/hactl/pki/etcd/client.crt -key /etc/hactl/pki/etcd/client.key </dev/null 2>/dev/null \
| openssl x509 -noout -serial"
    );
    let out = lab.exec_ok(from, &["sh", "-c", &script]);
    norm(out.trim().trim_start_matches("serial="))
}

/// A serial as hex digits without separators or leading zeros, lowercase.
fn norm(serial: &str) -> String {
    serial
        .replace(':', "")
        .to_ascii_lowercase()
        .trim_start_matches('0')
        .to_string()
}

/// `certs check -o json`: exit code and rows.
fn check(inv: &Path) -> (i32, Vec<serde_json::Value>) {
    let o = hactl(inv, &["certs", "check", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (
        o.status.code().unwrap_or(-1),
        v["certificates"].as_array().unwrap().clone(),
    )
}

fn row<'a>(rows: &'a [serde_json::Value], location: &str, file: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["location"] == location && r["file"] == file)
        .unwrap_or_else(|| panic!("no {location} {file} in {rows:?}"))
}

#[test]
fn renewing_a_member_server_certificate_serves_the_new_serial_while_the_cluster_keeps_quorum() {
    let name = "renewing_a_member_server_certificate_serves_the_new_serial_while_the_cluster_keeps_quorum";
    let Some(lab) = TestLab::up(name, 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    assert!(hactl(&inv, &["up", "--yes"]).status.success());
    let cp1 = lab.ip("cp1").to_string();

    let (code, rows) = check(&inv);
    assert_eq!(code, 0, "{rows:?}");
    let state_server = row(&rows, "state", "etcd/server-cp1");
    let host_server = row(&rows, "cp1", "/etc/hactl/pki/etcd/server.crt");
    assert_eq!(host_server["matches"], "etcd/server-cp1");
    assert_eq!(host_server["serial"], state_server["serial"]);
    assert!(state_server["sans"].as_array().unwrap().iter().any(|s| s == &cp1));
    let old = norm(state_server["serial"].as_str().unwrap());
    assert_eq!(served_serial(&lab, "cp2", &cp1), old);

    let o = hactl(&inv, &["certs", "renew", "etcd/server-cp9"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no certificate named etcd/server-cp9") && err.contains("etcd/server-cp1"),
        "{err}"
    );

    // The dry run prints the certificate and the plan that would roll it out (cp1's member alone
    // restarts) and changes nothing: the state's certificate is the same file, `plan` has no
    // changes.
    let state_crt = inv.parent().unwrap().join("state/pki/etcd/server-cp1.crt");
    let before = std::fs::read(&state_crt).unwrap();
    let o = hactl(&inv, &["certs", "renew", "etcd/server-cp1", "--dry-run"]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}{err}");
    assert!(
        err.contains("etcd/server-cp1.crt: expires") && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(out.contains("cp1: run systemctl restart etcd.service"), "{out}");
    assert_eq!(out.matches("systemctl restart etcd.service").count(), 1, "{out}");
    let o = hactl(&inv, &["certs", "renew", "--all", "--dry-run", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(json["changes"], true, "{json}");
    assert!(json["phases"].as_array().is_some_and(|p| !p.is_empty()), "{json}");
    assert_eq!(
        std::fs::read(&state_crt).unwrap(),
        before,
        "the dry run re-issued"
    );
    let o = hactl(&inv, &["plan"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "no changes");

    let lab = Arc::new(lab);
    let writer = VipWriter::start_local(lab.clone(), "cp2", "renew-writer");
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let o = hactl(&inv, &["certs", "renew", "etcd/server-cp1", "--yes"]);
    let took = started.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let (w, f) = writer.stop();
    assert!(o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr.matches("systemctl restart etcd.service").count(),
        1,
        "only cp1 restarts: {stderr}"
    );
    assert!(
        stderr.contains("cp1: run systemctl restart etcd.service"),
        "{stderr}"
    );
    eprintln!(
        "certs renew etcd/server-cp1: {:.1} s; writer through cp2: {w} writes, {f} failed",
        took.as_secs_f64()
    );
    assert!(w > 5, "the writer barely ran: {w}");
    assert_eq!(f, 0, "writes failed while cp1 restarted");

    let (code, rows) = check(&inv);
    assert_eq!(code, 0, "{rows:?}");
    let new = norm(row(&rows, "state", "etcd/server-cp1")["serial"].as_str().unwrap());
    assert_ne!(new, old, "the certificate was not re-issued");
    assert_eq!(
        row(&rows, "state", "etcd/server-cp1")["issuer"],
        state_server["issuer"],
        "same CA"
    );
    assert_eq!(
        row(&rows, "cp1", "/etc/hactl/pki/etcd/server.crt")["matches"],
        "etcd/server-cp1"
    );
    assert_eq!(served_serial(&lab, "cp2", &cp1), new);
    let o = hactl(&inv, &["plan"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "no changes");
}
