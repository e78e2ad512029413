//! `hactl certs rotate-ca etcd` with a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`,
//! or of the cache `scripts/kube-binaries.sh` builds; never skipped as root): the apiservers roll
//! too and kubectl through the VIP answers throughout. The rotation without Kubernetes (dry run,
//! cut and resumed under a writer, old CA refused) is `etcd_labs::certs_rotate_ca`.

use crate::support::kube as kube_support;

use std::time::{Duration, Instant};

/// With a `kubernetes` section the apiservers read the etcd CA and present an etcd client
/// certificate: each roll restarts them too (drained, `/readyz`), and kubectl through the VIP
/// answers throughout; afterwards the apiservers run with the new CA's client certificate.
#[test]
fn rotating_the_etcd_ca_with_kubernetes_keeps_kubectl_answering_through_the_vip() {
    let name = "rotating_the_etcd_ca_with_kubernetes_keeps_kubectl_answering_through_the_vip";
    let Some(k) = kube_support::KubeLab::up(name, 3, 2, 0) else {
        return;
    };
    let pki = k.state.join("pki");
    let poller = k.poll_readyz();
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
}
