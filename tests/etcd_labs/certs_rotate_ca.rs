//! `hactl certs rotate-ca etcd` on a real lab (3 etcd members, 2 load balancers, trixie): the
//! dry run prints the steps and changes nothing; the rotation, cut after its C2 step
//! (`HACTL_CRASH_AFTER`) and resumed by running the command again, runs under a writer through the
//! VIP (HAProxy's etcd-client backends) with 0 failed writes; afterwards every host trusts the
//! new CA alone, every member serves a certificate the new CA verifies, a client certificate
//! from the old CA is refused while the new one is accepted, the old CA is kept (retired), a
//! second run starts nothing half-done and `plan` prints `no changes`. The kubernetes CA is
//! refused by name, and the front-proxy CA without a `kubernetes` section (exit 2). The same
//! rotation with Kubernetes is `kube_labs::rotate_etcd_ca`.
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::lab as lab_support;
use crate::support::writer as writer_support;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab_support::{assert_rotation_closed_and_old_ca_retired, put_file, TestLab};
use writer_support::VipWriter;

fn hactl(inv: &Path, args: &[&str]) -> Output {
    hactl_env(inv, args, &[])
}

fn hactl_env(inv: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .arg("-i")
        .arg(inv)
        .envs(env.iter().copied())
        .output()
        .expect("run hactl");
    eprintln!(
        "hactl {args:?} ({:.1} s) -> {:?}\n{}{}",
        started.elapsed().as_secs_f64(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Writes `content` to `path` on `host`.
/// A put on `member`'s client port from `from` with the given client certificate and key, the
/// host's trust file verifying the member: (success, stderr).
fn put_with(lab: &TestLab, from: &str, member: &str, cert: &str, key: &str) -> (bool, String) {
    let endpoint = format!("--endpoints=https://{}:2379", lab.ip(member));
    let o = lab.exec(
        from,
        &[
            "sh",
            "-c",
            "ETCDCTL_API=3 exec \"$(command -v etcdctl)\" \"$@\"",
            "put-with",
            &endpoint,
            "--cacert=/etc/hactl/pki/etcd/ca.crt",
            &format!("--cert={cert}"),
            &format!("--key={key}"),
            "--command-timeout=5s",
            "put",
            "rotate-ca/probe",
            "x",
        ],
    );
    (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
}

#[test]
fn rotating_the_etcd_ca_under_a_writer_through_the_vip_loses_no_write_and_the_old_ca_is_refused_after() {
    let name =
        "rotating_the_etcd_ca_under_a_writer_through_the_vip_loses_no_write_and_the_old_ca_is_refused_after";
    let Some(lab) = TestLab::up(name, 3, 2, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let pki = inv.parent().unwrap().join("state").join("pki");
    assert!(hactl(&inv, &["up", "--yes"]).status.success());
    let old_ca = std::fs::read_to_string(pki.join("etcd/ca.crt")).unwrap();
    let old_cert = std::fs::read_to_string(pki.join("etcd/hactl-client.crt")).unwrap();
    let old_key = std::fs::read_to_string(pki.join("etcd/hactl-client.key")).unwrap();

    // Refused (exit 2), naming why and what to run instead: the kubernetes and front-proxy CAs
    // because this inventory has no `kubernetes` section; a step that does not exist. Nothing
    // changes.
    let o = hactl(
        &inv,
        &["certs", "rotate-ca", "etcd", "--yes", "--stop-after", "C9"],
    );
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("--stop-after C9: no such step")
            && stderr.contains("C1, C1.roll, C2, C3, C4, C5, C6")
            && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    assert!(!pki.join("etcd/rotation").exists());
    for (ca, why) in [
        ("kubernetes", "the kubernetes CA exists only with Kubernetes"),
        ("front-proxy", "has no `kubernetes` section"),
    ] {
        let o = hactl(&inv, &["certs", "rotate-ca", ca, "--yes"]);
        assert_eq!(o.status.code(), Some(2), "{ca}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains(why) && stderr.contains("nothing was changed"),
            "{ca}: {stderr}"
        );
    }
    assert!(!pki.join("front-proxy").exists() && !pki.join("kubernetes").exists());
    // The dry run prints the steps and changes nothing.
    let o = hactl(&inv, &["certs", "rotate-ca", "etcd", "--dry-run"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for id in ["[C1]", "[C1.roll]", "[C2]", "[C3]", "[C4]", "[C5]", "[C6]"] {
        assert!(text.contains(id), "{id} missing:\n{text}");
    }
    assert!(!pki.join("etcd/ca-next.crt").exists() && !pki.join("etcd/rotation").exists());

    let lab = Arc::new(lab);
    let writer = VipWriter::start(lab.clone(), "cp3", "rotate-writer");
    std::thread::sleep(Duration::from_secs(2));
    // The first run dies right after C2 (the new CA signs, the leaves are re-issued, the hosts
    // still have the old leaves); the second resumes it from the state directory.
    let started = Instant::now();
    let o = hactl_env(
        &inv,
        &["certs", "rotate-ca", "etcd", "--yes"],
        &[("HACTL_CRASH_AFTER", "C2")],
    );
    assert_eq!(o.status.code(), Some(137), "the rotation did not stop after C2");
    assert!(pki.join("etcd/ca-previous.crt").exists() && pki.join("etcd/rotation").exists());
    let o = hactl(&inv, &["certs", "rotate-ca", "etcd", "--yes"]);
    let took = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let (w, f) = writer.stop();
    assert!(o.status.success(), "the resumed rotation failed");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("(5 steps done, 2 already done)"), "{stdout}");
    println!("{name}: rotate-ca etcd on 3 members, cut after C2 and resumed, took {took:.1} s in all; writer through the VIP: {w} writes, {f} failed");
    assert!(w > 10, "the writer barely ran: {w}");
    assert_eq!(f, 0, "writes through the VIP failed during the rotation");

    // The state directory: a new CA signs; the old one is kept, retired.
    let new_ca = std::fs::read_to_string(pki.join("etcd/ca.crt")).unwrap();
    assert_ne!(new_ca, old_ca);
    assert_rotation_closed_and_old_ca_retired(&pki, "etcd", &old_ca);

    for host in ["cp1", "cp2", "cp3"] {
        // Trust only the new CA.
        let trust = lab.exec_ok(host, &["cat", "/etc/hactl/pki/etcd/ca.crt"]);
        assert_eq!(trust, new_ca, "{host}'s trust file");
        // The member serves a certificate the new CA verifies.
        let script = format!(
            "openssl s_client -connect {}:2379 -verify_return_error -CAfile /etc/hactl/pki/etcd/ca.crt \
-cert /etc/hactl/pki/etcd/client.crt -key /etc/hactl/pki/etcd/client.key </dev/null 2>&1 | grep -q 'Verify return code: 0 (ok)'",
            lab.ip(host)
        );
        assert!(
            lab.exec(host, &["sh", "-c", &script]).status.success(),
            "{host} does not serve a certificate from the new CA"
        );
    }
    // A client certificate from the old CA is refused; the new one is accepted.
    put_file(&lab, "cp3", "/root/old-client.crt", &old_cert, "600");
    put_file(&lab, "cp3", "/root/old-client.key", &old_key, "600");
    for member in ["cp1", "cp2", "cp3"] {
        let (ok, err) = put_with(
            &lab,
            "cp3",
            member,
            "/root/old-client.crt",
            "/root/old-client.key",
        );
        assert!(!ok, "{member} accepted a client certificate from the old CA");
        eprintln!("{member} refused the old client certificate: {}", err.trim());
        let (ok, err) = put_with(
            &lab,
            "cp3",
            member,
            "/etc/hactl/pki/etcd/client.crt",
            "/etc/hactl/pki/etcd/client.key",
        );
        assert!(ok, "{member} refused the new client certificate: {err}");
    }

    // Converged: nothing left to roll; `certs check` finds no problem.
    let o = hactl(&inv, &["plan"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "no changes");
    assert_eq!(hactl(&inv, &["certs", "check"]).status.code(), Some(0));
}
