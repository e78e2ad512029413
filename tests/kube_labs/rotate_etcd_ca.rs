//! `hactl certs rotate-ca etcd` with a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`,
//! or of the cache `scripts/kube-binaries.sh` builds; never skipped as root): the apiservers roll
//! too and kubectl through the VIP answers throughout. The rotation without Kubernetes (dry run,
//! cut and resumed under a writer, old CA refused) is `etcd_labs::certs_rotate_ca`.
//!
//! Then, on the same lab, the state directory is lost with no backup bundle (issue 22, section
//! 1): `plan` changes nothing and `up` is refused, both naming `hactl adopt`, which rebuilds it
//! and rotates the etcd and front-proxy CAs under a writer and kubectl through the VIP (0
//! failures), keeping the Kubernetes CA, the service-account key and the encryption key.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;
use crate::support::writer::VipWriter;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab_support::{assert_rotation_closed_and_old_ca_retired, wait_for};

/// With a `kubernetes` section the apiservers read the etcd CA and present an etcd client
/// certificate: each roll restarts them too (drained, `/readyz`), and kubectl through the VIP
/// answers throughout (a read of the kube-system Namespace every 200 ms, `KubeLab::poll_reads`:
/// each etcd roll restarts the members under the apiservers, where `/readyz`'s own etcd check can
/// fail for a moment); afterwards the apiservers run with the new CA's client certificate.
#[test]
fn rotating_the_etcd_ca_with_kubernetes_keeps_kubectl_answering_through_the_vip() {
    let name = "rotating_the_etcd_ca_with_kubernetes_keeps_kubectl_answering_through_the_vip";
    let Some(k) = kube_support::KubeLab::up(name, 3, 2, 0) else {
        return;
    };
    let pki = k.state.join("pki");
    let poller = k.poll_reads();
    assert!(
        poller.wait_answered(3, Duration::from_secs(30)),
        "kubectl through the VIP did not answer before the rotation"
    );
    let t0 = Instant::now();
    let o = k.hactl(&["certs", "rotate-ca", "etcd", "--yes"]);
    let took = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(3));
    let attempts = poller.stop();
    assert!(
        o.status.success(),
        "the rotation failed: {}",
        kube_support::text(&o)
    );
    let failed = kube_support::report_failures(name, t0, &attempts);
    println!("{name}: rotate-ca etcd with 3 apiservers took {took:.1} s");
    assert!(attempts.len() > 20, "the poller barely ran: {}", attempts.len());
    assert_eq!(failed, 0, "kubectl through the VIP failed during the rotation");
    let new_ca = std::fs::read_to_string(pki.join("etcd/ca.crt")).unwrap();
    for host in k.control_planes() {
        assert_eq!(
            k.lab
                .exec_ok(&host, &["cat", "/etc/hactl/pki/apiserver-etcd/ca.crt"]),
            new_ca,
            "{host}: the apiserver's etcd trust file"
        );
        let client = k
            .lab
            .exec_ok(&host, &["cat", "/etc/hactl/pki/apiserver-etcd/client.crt"]);
        assert!(hactl::pki::is_signed_by(&client, &new_ca).unwrap(), "{host}");
    }
    k.kubectl_ok(&["create", "configmap", "after-rotation", "--from-literal=a=1"]);
    assert_eq!(k.hactl_ok(&["plan"]).trim(), "no changes");

    the_lost_state_directory_is_adopted_back_with_writes_flowing(name, k);
}

/// Every file under /etc/hactl and hactl's units on every host, with mode and sha256, and
/// whether a cluster lock is held: what a refused command must leave as it was.
fn hosts_snapshot(k: &kube_support::KubeLab) -> Vec<String> {
    k.lab
        .hosts()
        .iter()
        .map(|h| {
            k.lab.exec_ok(
                &h.name,
                &[
                    "sh",
                    "-c",
                    "find /etc/hactl /etc/systemd/system -type f -exec stat -c '%n %a' {} \\; -exec sha256sum {} \\; | sort; ls /var/lib/hactl/locks/cluster 2>&1; true",
                ],
            )
        })
        .collect()
}

/// The same lab, its state directory then lost with no backup bundle (issue 22, section 1):
/// `plan` changes nothing and `up` is refused (exit 2), both naming `hactl adopt`; `adopt
/// --dry-run` prints its steps and creates nothing; `hactl adopt` rebuilds the state directory
/// and rolls the etcd and front-proxy CAs to new ones under a writer through the VIP and
/// kubectl through the VIP (0 failures each); the Kubernetes CA, the service-account key pair
/// and the encryption key come back byte for byte (a Secret written before reads back, a
/// ServiceAccount token issued before is accepted); afterwards `up` says `no changes` and
/// `status` is healthy.
fn the_lost_state_directory_is_adopted_back_with_writes_flowing(name: &str, k: kube_support::KubeLab) {
    k.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "before-adopt",
        "--from-literal=k=v1",
    ]);
    k.kubectl_ok(&["create", "serviceaccount", "before-adopt"]);
    let token_secret = wait_for(Duration::from_secs(60), &true, || {
        !k.kubectl_ok(&[
            "get",
            "serviceaccount",
            "before-adopt",
            "-o",
            "jsonpath={.secrets[0].name}",
        ])
        .trim()
        .is_empty()
    });
    assert!(token_secret, "no token Secret for the ServiceAccount");
    let secret = k.kubectl_ok(&[
        "get",
        "serviceaccount",
        "before-adopt",
        "-o",
        "jsonpath={.secrets[0].name}",
    ]);
    let token = {
        use base64::Engine as _;
        let b64 = k.kubectl_ok(&["get", "secret", secret.trim(), "-o", "jsonpath={.data.token}"]);
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap(),
        )
        .unwrap()
    };

    let lost = k.state.with_file_name("state.lost");
    std::fs::rename(&k.state, &lost).unwrap();
    let hosts_before = hosts_snapshot(&k);
    for args in [&["plan"][..], &["up", "--yes"]] {
        let o = k.hactl(args);
        let t = kube_support::text(&o);
        assert_eq!(o.status.code(), Some(2), "hactl {args:?}:\n{t}");
        assert!(
            t.contains("hactl adopt -i"),
            "hactl {args:?} does not name adopt:\n{t}"
        );
        assert!(!k.state.exists(), "hactl {args:?} created the state directory");
    }
    let dry = k.hactl(&["adopt", "--dry-run"]);
    let t = kube_support::text(&dry);
    assert!(dry.status.success(), "{t}");
    for want in [
        "[AD1]",
        "[AD2]",
        "[C1.roll]",
        "[C5.publish-front-proxy]",
        "[AD3]",
        "cp1:/etc/hactl/pki/kubernetes/ca.key -> pki/kubernetes/ca.key (0600)",
        "restore-bundle",
        "host keys seen for the first time",
    ] {
        assert!(t.contains(want), "adopt --dry-run lacks {want:?}:\n{t}");
    }
    assert!(!t.contains("PRIVATE KEY"), "{t}");
    assert!(!k.state.exists(), "the dry run created the state directory");
    assert_eq!(
        hosts_snapshot(&k),
        hosts_before,
        "a refused or dry command changed a host"
    );

    let k = Arc::new(k);
    let writer = VipWriter::start(k.clone(), "cp3", "adopt-writer");
    // The admin kubeconfig of the lost directory: the Kubernetes CA and its client
    // certificates stay valid through adopt (their CA's key is read back, not replaced).
    let poller = k.poll_reads_with(lost.join("admin.kubeconfig"));
    assert!(poller.wait_answered(3, Duration::from_secs(30)));
    let t0 = Instant::now();
    let o = k.hactl(&["adopt", "--yes"]);
    let took = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let (w, f) = writer.stop();
    let attempts = poller.stop();
    assert!(o.status.success(), "adopt failed: {}", kube_support::text(&o));
    let failed = kube_support::report_failures(name, t0, &attempts);
    println!("{name}: adopt (etcd and front-proxy CAs rotated, 3 apiservers) took {took:.1} s; writer through the VIP: {w} writes, {f} failed");
    assert!(w > 10, "the writer barely ran: {w}");
    assert_eq!(f, 0, "writes through the VIP failed during adopt");
    assert_eq!(failed, 0, "kubectl through the VIP failed during adopt");

    // What was on the hosts came back byte for byte; what was not was replaced.
    let (pki, old) = (k.state.join("pki"), lost.join("pki"));
    let read = |dir: &Path, rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap();
    for rel in ["kubernetes/ca.crt", "kubernetes/ca.key", "sa.key", "sa.pub"] {
        assert_eq!(read(&pki, rel), read(&old, rel), "{rel}");
    }
    assert_eq!(
        read(&k.state, "kubernetes/encryption-key"),
        read(&lost, "kubernetes/encryption-key")
    );
    for ca in ["etcd", "front-proxy"] {
        let new = read(&pki, &format!("{ca}/ca.crt"));
        assert_ne!(new, read(&old, &format!("{ca}/ca.crt")), "{ca}");
        assert_rotation_closed_and_old_ca_retired(&pki, ca, &read(&old, &format!("{ca}/ca.crt")));
    }
    let (etcd_ca, fp_ca) = (read(&pki, "etcd/ca.crt"), read(&pki, "front-proxy/ca.crt"));
    for host in k.control_planes() {
        for (path, want) in [
            ("/etc/hactl/pki/etcd/ca.crt", &etcd_ca),
            ("/etc/hactl/pki/apiserver-etcd/ca.crt", &etcd_ca),
            ("/etc/hactl/pki/front-proxy/ca.crt", &fp_ca),
        ] {
            assert_eq!(&k.lab.exec_ok(&host, &["cat", path]), want, "{host}: {path}");
        }
        let server = k.lab.exec_ok(&host, &["cat", "/etc/hactl/pki/etcd/server.crt"]);
        assert!(hactl::pki::is_signed_by(&server, &etcd_ca).unwrap(), "{host}");
    }
    assert_eq!(
        lab_support::cert_set(&k.published_cas("requestheader-client-ca-file")),
        lab_support::cert_set(&fp_ca),
        "the apiservers publish the new front-proxy CA alone"
    );
    assert!(!k.state.join("adopt").exists(), "the adoption is not closed");

    // The Secret written before reads back; the token issued before is accepted.
    let v = k.kubectl_ok(&["get", "secret", "before-adopt", "-o", "jsonpath={.data.k}"]);
    assert_eq!(v.trim(), "djE=", "the Secret written before adopt");
    let o = Command::new(k.kubectl_path())
        .args(["--kubeconfig", "/dev/null", "--request-timeout=10s"])
        .arg(format!("--server=https://{}:6443", k.lab.lab().vip))
        .arg(format!(
            "--certificate-authority={}",
            pki.join("kubernetes/ca.crt").display()
        ))
        .arg(format!("--token={token}"))
        .args(["get", "--raw", "/api"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the token issued before adopt: {}",
        kube_support::text(&o)
    );

    let o = k.hactl(&["up", "--yes"]);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("no changes"),
        "{}",
        kube_support::text(&o)
    );
    let o = k.hactl(&["status"]);
    assert_eq!(o.status.code(), Some(0), "{}", kube_support::text(&o));
}
