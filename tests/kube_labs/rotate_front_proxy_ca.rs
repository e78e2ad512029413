//! `hactl certs rotate-ca front-proxy` on a real control plane (3 control planes with the real
//! 1.20.2 binaries, 2 load balancers; the lab of `rotate_kubernetes_ca`, after its rotation): the
//! rotation, cut after its C2 step (`HACTL_CRASH_AFTER`) and resumed by running the command
//! again, keeps kubectl through the VIP answering throughout (0 failed reads of the kube-system
//! Namespace); while both CAs are trusted the apiservers publish both in
//! kube-system/extension-apiserver-authentication; afterwards that ConfigMap holds the new CA
//! alone (the apiservers only add to it: the rotation's C5.publish step removes the old one),
//! every control-plane host's front-proxy-client certificate verifies against the new CA and
//! not the old, the etcd and kubernetes CAs are untouched, and a second `hactl up` plans no
//! changes.
//!
//! Needs root and the Kubernetes binaries (see `support/kube.rs`).

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::{Duration, Instant};

use kube_support::{report_failures, text, KubeLab};
use lab_support::{assert_rotation_closed_and_old_ca_retired, cert_set as certs, put_file, wait_for};

/// The front-proxy CAs the cluster publishes to aggregated API servers.
fn published(k: &KubeLab) -> String {
    k.published_cas("requestheader-client-ca-file")
}

/// Run by `rotate_kubernetes_ca`'s test on its lab once the Kubernetes CA's rotation is checked
/// (one bring-up for both: each rotation leaves the other CAs untouched, and this one checks that
/// again).
pub fn rotating_the_front_proxy_ca_keeps_the_apiservers_answering_and_publishes_only_the_new_ca(k: &KubeLab) {
    let name = "rotating_the_front_proxy_ca_keeps_the_apiservers_answering_and_publishes_only_the_new_ca";
    let pki = k.state.join("pki");
    let read = |rel: &str| std::fs::read_to_string(pki.join(rel)).unwrap();
    let old_ca = read("front-proxy/ca.crt");
    let etcd_ca = read("etcd/ca.crt");
    let kubernetes_ca = read("kubernetes/ca.crt");
    let before = published(k);
    assert_eq!(
        certs(&before),
        certs(&old_ca),
        "before the rotation the cluster publishes the front-proxy CA alone"
    );

    // The dry run prints the steps, C5.publish among them, and changes nothing.
    let dry = k.hactl_ok(&["certs", "rotate-ca", "front-proxy", "--dry-run"]);
    for id in [
        "[C1]",
        "[C1.roll]",
        "[C2]",
        "[C3]",
        "[C4]",
        "[C5]",
        "[C5.publish]",
        "[C6]",
    ] {
        assert!(dry.contains(id), "{id} missing:\n{dry}");
    }
    assert!(!pki.join("front-proxy/rotation").exists());

    let poller = k.poll_reads();
    assert!(
        poller.wait_answered(3, Duration::from_secs(30)),
        "kubectl through the VIP did not answer before the rotation"
    );
    // The first run dies right after C2 (the new CA signs and front-proxy-client is re-issued;
    // the hosts trust both CAs and still present the old leaf); the second resumes it.
    let t0 = Instant::now();
    let cut = k.hactl_env(
        &["certs", "rotate-ca", "front-proxy", "--yes"],
        &[("HACTL_CRASH_AFTER", "C2")],
    );
    assert_eq!(cut.status.code(), Some(137), "the rotation did not stop after C2");
    let cut_at = t0.elapsed().as_secs_f64();
    assert!(pki.join("front-proxy/ca-previous.crt").exists() && pki.join("front-proxy/rotation").exists());
    let new_ca = read("front-proxy/ca.crt");
    assert_ne!(new_ca, old_ca);
    // C1.roll restarted every apiserver trusting both: they published both.
    let mut both = certs(&old_ca);
    both.extend(certs(&new_ca));
    both.sort();
    assert_eq!(
        wait_for(Duration::from_secs(30), &both, || certs(&published(k))),
        both,
        "while both CAs are trusted, both are published"
    );

    let resumed = k.hactl(&["certs", "rotate-ca", "front-proxy", "--yes"]);
    let took = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(3));
    let attempts = poller.stop();
    assert!(
        resumed.status.success(),
        "the resumed rotation failed: {}",
        text(&resumed)
    );
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(stdout.contains("(6 steps done, 2 already done)"), "{stdout}");
    let failed = report_failures(name, t0, &attempts);
    println!(
        "{name}: rotate-ca front-proxy with 3 apiservers took {took:.1} s in all (cut after C2 at {cut_at:.1} s, then resumed)"
    );
    assert!(attempts.len() > 20, "the poller barely ran: {}", attempts.len());
    assert_eq!(failed, 0, "kubectl through the VIP failed during the rotation");

    // Published: the new CA alone, and it stays so (no apiserver adds the old one back).
    assert_eq!(
        certs(&published(k)),
        certs(&new_ca),
        "the ConfigMap still holds the old CA"
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        certs(&published(k)),
        certs(&new_ca),
        "an apiserver published the old CA again"
    );

    // The state directory: the old CA kept (retired), no rotation in progress, others untouched.
    assert_rotation_closed_and_old_ca_retired(&pki, "front-proxy", &old_ca);
    assert_eq!(read("etcd/ca.crt"), etcd_ca, "the etcd CA is untouched");
    assert_eq!(
        read("kubernetes/ca.crt"),
        kubernetes_ca,
        "the kubernetes CA is untouched"
    );

    // Every control-plane host: the trust file is the new CA alone, and front-proxy-client is
    // the new CA's (openssl on the host), not the old one's.
    for host in k.control_planes() {
        assert_eq!(
            k.lab
                .exec_ok(&host, &["cat", "/etc/hactl/pki/front-proxy/ca.crt"]),
            new_ca,
            "{host}'s requestheader CA file"
        );
        let verify = k.lab.exec(
            &host,
            &[
                "openssl",
                "verify",
                "-CAfile",
                "/etc/hactl/pki/front-proxy/ca.crt",
                "/etc/hactl/pki/front-proxy/client.crt",
            ],
        );
        assert!(
            verify.status.success(),
            "{host}: front-proxy-client is not the new CA's: {}",
            text(&verify)
        );
        put_file(&k.lab, &host, "/root/old-front-proxy-ca.crt", &old_ca, "644");
        let old = k.lab.exec(
            &host,
            &[
                "openssl",
                "verify",
                "-CAfile",
                "/root/old-front-proxy-ca.crt",
                "/etc/hactl/pki/front-proxy/client.crt",
            ],
        );
        assert!(
            !old.status.success(),
            "{host}: the old CA still verifies front-proxy-client"
        );
    }

    // Converged: a second `up` has nothing to do; `certs check` finds no problem.
    let again = k.hactl_ok(&["up", "--yes"]);
    assert_eq!(again.trim(), "no changes");
    assert_eq!(k.hactl(&["certs", "check"]).status.code(), Some(0));
}
