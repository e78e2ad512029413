//! Issue 13, point 7: etcd's peer port admits only the members' peer certificates (one shared
//! CN, `--peer-cert-allowed-cn`), and a cluster made by an older hactl (peer certificates with
//! the host's CN, no flag) migrates through `up` without a member ever refusing its peers: the
//! first `up` rolls the new peer certificates without the flag, the second rolls the flag.
//! Needs root (a lab of real hosts); without it prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::path::Path;
use std::process::Command;

use cli_support::{hactl_in, status_json, text, up_ok};
use lab_support::TestLab;

const PKI: &str = "/etc/hactl/pki/etcd";
const FLAG: &str = "--peer-cert-allowed-cn=etcd-peer";

/// Writes `content` to `path` on `host` (mode, owner) through argv, no shell quoting of it.
fn put(lab: &TestLab, host: &str, path: &str, content: &str, mode: &str, owner: &str) {
    lab.exec_ok(
        host,
        &[
            "sh",
            "-c",
            "printf '%s' \"$1\" > \"$2\" && chmod \"$3\" \"$2\" && chown \"$4\" \"$2\"",
            "sh",
            content,
            path,
            mode,
            owner,
        ],
    );
}

/// A peer certificate as hactl issued it before peer certificates shared one CN: CN = the host,
/// the member's address and name in the SANs, signed by the cluster's etcd CA.
fn old_style_peer(state: &Path, host: &str, address: &str, dir: &Path) -> (String, String) {
    let key = dir.join(format!("{host}.key"));
    let csr = dir.join(format!("{host}.csr"));
    let crt = dir.join(format!("{host}.crt"));
    let ext = dir.join(format!("{host}.ext"));
    std::fs::write(
        &ext,
        format!(
            "subjectAltName=IP:{address},DNS:{host},DNS:localhost,IP:127.0.0.1,IP:::1\n\
             extendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n"
        ),
    )
    .unwrap();
    let ok = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(Command::new("openssl")
        .args(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"])
        .arg(&key));
    ok(Command::new("openssl")
        .args(["req", "-new", "-subj", &format!("/CN={host}"), "-key"])
        .arg(&key)
        .arg("-out")
        .arg(&csr));
    ok(Command::new("openssl")
        .args(["x509", "-req", "-days", "30", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(state.join("pki/etcd/ca.crt"))
        .arg("-CAkey")
        .arg(state.join("pki/etcd/ca.key"))
        .arg("-CAserial")
        .arg(dir.join("ca.srl"))
        .arg("-CAcreateserial")
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(&crt));
    (
        std::fs::read_to_string(&crt).unwrap(),
        std::fs::read_to_string(&key).unwrap(),
    )
}

/// Whether the certificate at `cert` on `from` passes TLS on `to`'s peer port.
fn passes_peer_port(lab: &TestLab, from: &str, to: &str, cert: &str, key: &str) -> bool {
    let url = format!("https://{}:2380/version", lab.ip(to));
    let out = lab.exec(
        from,
        &[
            "curl",
            "-sS",
            "--http1.1",
            "-m",
            "5",
            "--cacert",
            &format!("{PKI}/ca.crt"),
            "--cert",
            cert,
            "--key",
            key,
            &url,
        ],
    );
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("etcdserver")
}

fn units_with_flag(lab: &TestLab, hosts: &[&str]) -> Vec<String> {
    hosts
        .iter()
        .filter(|h| {
            lab.exec_ok(h, &["cat", "/etc/systemd/system/etcd.service"])
                .contains(FLAG)
        })
        .map(|h| h.to_string())
        .collect()
}

fn assert_healthy(inv: &Path, when: &str) {
    let (code, s) = status_json(inv);
    assert_eq!(code, 0, "{when}: status {s:#}");
    assert!(
        s["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["healthy"] == true),
        "{when}: {s:#}"
    );
}

#[test]
fn the_peer_port_admits_peer_certificates_only_and_an_older_cluster_migrates_in_two_ups() {
    let name = "the_peer_port_admits_peer_certificates_only";
    let Some(lab) = TestLab::up(name, 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let state = inv.parent().unwrap().join("state");
    let hosts = ["cp1", "cp2", "cp3"];
    up_ok(&inv);
    // A new cluster: the flag at once, and only peer certificates pass on 2380.
    assert_eq!(units_with_flag(&lab, &hosts), hosts);
    let client = (format!("{PKI}/client.crt"), format!("{PKI}/client.key"));
    let server = (format!("{PKI}/server.crt"), format!("{PKI}/server.key"));
    let peer = (format!("{PKI}/peer.crt"), format!("{PKI}/peer.key"));
    assert!(passes_peer_port(&lab, "cp1", "cp2", &peer.0, &peer.1));
    assert!(
        !passes_peer_port(&lab, "cp1", "cp2", &client.0, &client.1),
        "client cert on 2380"
    );
    assert!(
        !passes_peer_port(&lab, "cp1", "cp2", &server.0, &server.1),
        "server cert on 2380"
    );

    // Make it a cluster an older hactl left: peer certificates with the host's CN, no flag.
    let tmp = tempfile::tempdir().unwrap();
    for h in hosts {
        lab.exec_ok(h, &["systemctl", "stop", "etcd.service"]);
    }
    for h in hosts {
        let (crt, key) = old_style_peer(&state, h, &lab.ip(h).to_string(), tmp.path());
        put(&lab, h, &peer.0, &crt, "0644", "root:root");
        put(&lab, h, &peer.1, &key, "0600", "etcd:etcd");
        lab.exec_ok(
            h,
            &[
                "sed",
                "-i",
                &format!("/{FLAG}/d"),
                "/etc/systemd/system/etcd.service",
            ],
        );
        lab.exec_ok(h, &["systemctl", "daemon-reload"]);
        lab.exec_ok(h, &["systemctl", "start", "--no-block", "etcd.service"]);
    }
    assert!(
        lab_support::eventually(std::time::Duration::from_secs(60), || status_json(&inv).0 == 0),
        "the older-style cluster did not come back"
    );
    assert!(units_with_flag(&lab, &hosts).is_empty());
    assert!(
        passes_peer_port(&lab, "cp1", "cp2", &client.0, &client.1),
        "before the migration a client certificate passes on 2380 (the hole being closed)"
    );

    // First `up`: new peer certificates (CN etcd-peer) rolled, the flag held back.
    let out = hactl_in(&inv, &["up", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(units_with_flag(&lab, &hosts).is_empty(), "{}", text(&out));
    for h in hosts {
        let subject = lab.exec_ok(h, &["openssl", "x509", "-noout", "-subject", "-in", &peer.0]);
        assert!(
            subject.contains("CN = etcd-peer") || subject.contains("CN=etcd-peer"),
            "{h}: {subject}"
        );
    }
    assert_healthy(&inv, "after the first up");

    // Second `up`: the flag, one member at a time; the hole is closed.
    let out = hactl_in(&inv, &["up", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(units_with_flag(&lab, &hosts), hosts, "{}", text(&out));
    assert_healthy(&inv, "after the second up");
    assert!(passes_peer_port(&lab, "cp2", "cp3", &peer.0, &peer.1));
    assert!(
        !passes_peer_port(&lab, "cp1", "cp2", &client.0, &client.1),
        "client cert on 2380"
    );

    // Third: nothing left to do.
    let out = hactl_in(&inv, &["up", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no changes",
        "{}",
        text(&out)
    );
    println!("{name}: passed");
}
