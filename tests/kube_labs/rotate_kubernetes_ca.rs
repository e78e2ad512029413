//! `hactl certs rotate-ca kubernetes` on a real control plane (3 control planes with the real
//! 1.20.2 binaries, 2 load balancers): the rotation, stopped after C1.roll (`--stop-after`), cut
//! after its C2 step (`HACTL_CRASH_AFTER`) and resumed by running the command again, keeps an
//! authenticated kubectl request through the VIP answering throughout (0 failed); while both CAs
//! are trusted the apiservers publish both in kube-system/extension-apiserver-authentication's
//! `client-ca-file`, and the ServiceAccount token Secrets and `kube-root-ca.crt` carry both.
//! Afterwards:
//! - that key holds the new CA alone (C5.publish), and so do the default ServiceAccount's token
//!   Secret (`ca.crt`) and the `kube-root-ca.crt` ConfigMap, which the controller-manager writes
//!   from its `--root-ca-file`;
//! - every control-plane host's trust file, signing CA and apiserver serving certificate are the
//!   new CA's, not the old one's;
//! - the old admin client certificate is refused (401) where the new one is answered;
//! - the controller-manager signs an approved CertificateSigningRequest with the new CA;
//! - the etcd and front-proxy CAs are untouched, and a second `hactl up` plans no changes.
//!
//! Then, on the same lab, the front-proxy CA's rotation (`rotate_front_proxy_ca.rs`). A second
//! test runs both rotations with the same checks on a control plane of static pods.
//!
//! Needs root and the Kubernetes binaries (see `support/kube.rs`).

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::{Duration, Instant};

use kube_support::{report_failures, text, KubeLab};
use lab_support::{assert_rotation_closed_and_old_ca_retired, cert_set as certs, put_file, wait_for};

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn unb64(s: &str) -> String {
    use base64::Engine as _;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .unwrap(),
    )
    .unwrap()
}

/// The kubernetes CAs the cluster publishes to aggregated API servers.
fn published(k: &KubeLab) -> String {
    k.published_cas("client-ca-file")
}

/// The CA bundle pods get: the default ServiceAccount's token Secret's `ca.crt` and the
/// `kube-root-ca.crt` ConfigMap, both in `default`.
fn pod_cas(k: &KubeLab) -> (String, String) {
    let secret = k
        .kubectl(&[
            "-n",
            "default",
            "get",
            "serviceaccount",
            "default",
            "-o",
            "jsonpath={.secrets[0].name}",
        ])
        .stdout;
    let secret = String::from_utf8_lossy(&secret).trim().to_string();
    let token_ca = if secret.is_empty() {
        String::new()
    } else {
        let out = k.kubectl(&[
            "-n",
            "default",
            "get",
            "secret",
            &secret,
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ]);
        unb64(&String::from_utf8_lossy(&out.stdout))
    };
    let out = k.kubectl(&[
        "-n",
        "default",
        "get",
        "configmap",
        "kube-root-ca.crt",
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ]);
    (token_ca, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The HTTP status of `GET /api/v1/namespaces/kube-system` on `url`, presenting the client
/// certificate `cert`/`key` and trusting `ca` (a PKI directory laid out as hactl's own client
/// reads it).
fn status_with(url: &str, ca: &str, cert: &str, key: &str) -> u16 {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("kubernetes")).unwrap();
    std::fs::write(dir.path().join("kubernetes/ca.crt"), ca).unwrap();
    std::fs::write(dir.path().join("kubernetes/admin.crt"), cert).unwrap();
    std::fs::write(dir.path().join("kubernetes/admin.key"), key).unwrap();
    let api = hactl::kubernetes::api::ApiClient::new(url, dir.path()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (code, _) = rt
        .block_on(api.request(reqwest::Method::GET, "/api/v1/namespaces/kube-system", "", None))
        .unwrap();
    code
}

#[test]
fn rotating_the_kubernetes_ca_keeps_kubectl_answering_and_leaves_only_the_new_ca_trusted() {
    let name = "rotating_the_kubernetes_ca_keeps_kubectl_answering_and_leaves_only_the_new_ca_trusted";
    let Some(k) = KubeLab::up(name, 3, 2, 0) else {
        return;
    };
    rotate_and_check(name, &k);

    // The front-proxy CA's rotation on the same lab (no bring-up of its own).
    crate::rotate_front_proxy_ca::rotating_the_front_proxy_ca_keeps_the_apiservers_answering_and_publishes_only_the_new_ca(&k);
}

/// The same rotation with the control plane as static pods (`kubernetes.mode: static-pod`): each
/// roll is then `up`'s manifest roll, the kubelet restarting the pods whose files changed. Then
/// the front-proxy CA's rotation on the same lab. Before and after each, every component runs as
/// one static pod per host and as no unit.
#[test]
fn rotating_the_kubernetes_ca_with_a_static_pod_control_plane_keeps_kubectl_answering() {
    let name = "rotating_the_kubernetes_ca_with_a_static_pod_control_plane_keeps_kubectl_answering";
    let Some(k) = KubeLab::up_static_pods(name, 3, 2, 0) else {
        return;
    };
    let cps = k.control_planes();
    crate::static_pods::assert_runs_as_static_pods(&k, &cps, "before the rotation");
    rotate_and_check(name, &k);
    crate::static_pods::assert_runs_as_static_pods(&k, &cps, "after the Kubernetes CA's rotation");

    // The front-proxy CA's rotation on the same lab, as in systemd mode.
    crate::rotate_front_proxy_ca::rotating_the_front_proxy_ca_keeps_the_apiservers_answering_and_publishes_only_the_new_ca(&k);
    crate::static_pods::assert_runs_as_static_pods(&k, &cps, "after the front-proxy CA's rotation");
}

/// The rotation (paused after C1.roll, cut after C2, resumed) with its checks, described at the top
/// of this file; `name` is for the messages.
fn rotate_and_check(name: &str, k: &KubeLab) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let pki = k.state.join("pki");
    let read = |rel: &str| std::fs::read_to_string(pki.join(rel)).unwrap();
    let old_ca = read("kubernetes/ca.crt");
    let old_admin = (read("kubernetes/admin.crt"), read("kubernetes/admin.key"));
    let etcd_ca = read("etcd/ca.crt");
    let front_proxy_ca = read("front-proxy/ca.crt");
    assert_eq!(
        certs(&published(k)),
        certs(&old_ca),
        "before the rotation the cluster publishes the kubernetes CA alone"
    );
    let (token_ca, root_ca) = wait_for(Duration::from_secs(60), &(old_ca.clone(), old_ca.clone()), || {
        pod_cas(k)
    });
    assert_eq!(
        certs(&token_ca),
        certs(&old_ca),
        "the token Secret's ca.crt before"
    );
    assert_eq!(certs(&root_ca), certs(&old_ca), "kube-root-ca.crt before");

    let dry = k.hactl_ok(&["certs", "rotate-ca", "kubernetes", "--dry-run"]);
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
    assert!(dry.contains("client-ca-file"), "{dry}");
    assert!(
        !pki.join("kubernetes/rotation").exists(),
        "the dry run changed nothing"
    );

    // An authenticated read (RBAC needs the admin's client certificate): both the server's
    // certificate and the client's must be trusted by the other side for it to answer.
    // (`KubeLab::poll_reads`: 10 s per request, a failed request still counts, and one
    // answered with etcd's leader-change error is sent once more.)
    let poller = k.poll_reads();
    assert!(
        poller.wait_answered(3, Duration::from_secs(30)),
        "kubectl through the VIP did not answer before the rotation"
    );
    // The first run stops after C1.roll as asked (the pause an operator takes to restart
    // workloads that read the CA once): both CAs trusted, published and given to pods, the old
    // one still signing. The second dies right after C2 (the new CA signs and every kubernetes
    // leaf is re-issued; the hosts still present the old leaves); the third resumes it.
    let t0 = Instant::now();
    let paused = k.hactl(&[
        "certs",
        "rotate-ca",
        "kubernetes",
        "--yes",
        "--stop-after",
        "C1.roll",
    ]);
    assert!(paused.status.success(), "{}", text(&paused));
    let paused_out = String::from_utf8_lossy(&paused.stdout);
    assert!(
        paused_out.contains("stopped after C1.roll as asked")
            && paused_out.contains("(2 steps done, 0 already done)"),
        "{paused_out}"
    );
    let paused_at = t0.elapsed().as_secs_f64();
    assert_eq!(read("kubernetes/ca.crt"), old_ca, "the old CA signs until C2");
    let next_ca = read("kubernetes/ca-next.crt");
    let mut both = certs(&old_ca);
    both.extend(certs(&next_ca));
    both.sort();
    let both_pems = |pem: &str| certs(pem) == both;
    let (token_ca, root_ca) = wait_for(Duration::from_secs(60), &(true, true), || {
        let (t, r) = pod_cas(k);
        (both_pems(&t), both_pems(&r))
    });
    assert!(token_ca && root_ca, "pods are not given both CAs at the pause");
    assert_eq!(
        wait_for(Duration::from_secs(30), &both, || certs(&published(k))),
        both,
        "while both CAs are trusted, both are published"
    );
    let cut = k.hactl_env(
        &["certs", "rotate-ca", "kubernetes", "--yes"],
        &[("HACTL_CRASH_AFTER", "C2")],
    );
    assert_eq!(
        cut.status.code(),
        Some(137),
        "the rotation did not stop after C2: {}",
        text(&cut)
    );
    let cut_at = t0.elapsed().as_secs_f64();
    assert!(pki.join("kubernetes/ca-previous.crt").exists() && pki.join("kubernetes/rotation").exists());
    let new_ca = read("kubernetes/ca.crt");
    assert_eq!(new_ca, next_ca, "C2 made ca-next the signing CA");

    let resumed = k.hactl(&["certs", "rotate-ca", "kubernetes", "--yes"]);
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
        "{name}: rotate-ca kubernetes with 3 apiservers took {took:.1} s in all (stopped after C1.roll at {paused_at:.1} s, cut after C2 at {cut_at:.1} s, then resumed); {} requests, {failed} failed",
        attempts.len()
    );
    assert!(attempts.len() > 20, "the poller barely ran: {}", attempts.len());
    assert_eq!(failed, 0, "kubectl through the VIP failed during the rotation");

    // Published, and given to pods: the new CA alone.
    let new = certs(&new_ca);
    assert_eq!(certs(&published(k)), new, "the ConfigMap still holds the old CA");
    let (token_ca, root_ca) = wait_for(Duration::from_secs(60), &(new_ca.clone(), new_ca.clone()), || {
        pod_cas(k)
    });
    assert_eq!(certs(&token_ca), new, "the token Secret's ca.crt");
    assert_eq!(certs(&root_ca), new, "kube-root-ca.crt");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        certs(&published(k)),
        new,
        "an apiserver published the old CA again"
    );

    // The state directory: the old CA kept (retired), no rotation in progress, others untouched.
    assert_rotation_closed_and_old_ca_retired(&pki, "kubernetes", &old_ca);
    assert_eq!(read("etcd/ca.crt"), etcd_ca, "the etcd CA is untouched");
    assert_eq!(
        read("front-proxy/ca.crt"),
        front_proxy_ca,
        "the front-proxy CA is untouched"
    );

    // Every control-plane host: the trust file and the signing CA are the new CA alone; the
    // serving certificate is the new CA's (openssl on the host), not the old one's.
    for host in k.control_planes() {
        for file in [
            "/etc/hactl/pki/kubernetes/ca.crt",
            "/etc/hactl/pki/kubernetes/signing-ca.crt",
        ] {
            assert_eq!(k.lab.exec_ok(&host, &["cat", file]), new_ca, "{host}: {file}");
        }
        let verify = |ca: &str| {
            k.lab.exec(
                &host,
                &[
                    "openssl",
                    "verify",
                    "-CAfile",
                    ca,
                    "/etc/hactl/pki/kubernetes/apiserver.crt",
                ],
            )
        };
        let ok = verify("/etc/hactl/pki/kubernetes/ca.crt");
        assert!(ok.status.success(), "{host}: {}", text(&ok));
        put_file(&k.lab, &host, "/root/old-kubernetes-ca.crt", &old_ca, "644");
        assert!(
            !verify("/root/old-kubernetes-ca.crt").status.success(),
            "{host}: the old CA still verifies the apiserver's serving certificate"
        );
    }

    // The old admin certificate is refused; the new one is answered.
    let url = format!("https://{}:6443", k.lab.ip("cp1"));
    let new_admin = (read("kubernetes/admin.crt"), read("kubernetes/admin.key"));
    assert_eq!(status_with(&url, &new_ca, &new_admin.0, &new_admin.1), 200);
    assert_eq!(
        status_with(&url, &new_ca, &old_admin.0, &old_admin.1),
        401,
        "a client certificate from the old CA is still accepted"
    );

    // The controller-manager signs with the new CA: an approved client CSR gets a certificate
    // that verifies against it and not against the old one.
    let cp1 = "cp1";
    k.lab.exec_ok(
        cp1,
        &[
            "openssl",
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "/root/rotation-test.key",
            "-subj",
            "/CN=rotation-test",
            "-out",
            "/root/rotation-test.csr",
        ],
    );
    let csr = k.lab.exec_ok(cp1, &["cat", "/root/rotation-test.csr"]);
    let manifest = serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "rotation-test"},
        "spec": {
            "request": b64(&csr),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"],
        },
    })
    .to_string();
    let created = k.kubectl_input(&["create", "-f", "-"], Some(&manifest));
    assert!(created.status.success(), "create CSR: {}", text(&created));
    k.kubectl_ok(&["certificate", "approve", "rotation-test"]);
    let issued = wait_for(Duration::from_secs(60), &true, || {
        !String::from_utf8_lossy(
            &k.kubectl(&[
                "get",
                "csr",
                "rotation-test",
                "-o",
                "jsonpath={.status.certificate}",
            ])
            .stdout,
        )
        .trim()
        .is_empty()
    });
    assert!(issued, "the controller-manager did not sign the approved CSR");
    let signed = unb64(&k.kubectl_ok(&[
        "get",
        "csr",
        "rotation-test",
        "-o",
        "jsonpath={.status.certificate}",
    ]));
    assert!(
        hactl::pki::is_signed_by(&signed, &new_ca).unwrap(),
        "not the new CA's:\n{signed}"
    );
    assert!(
        !hactl::pki::is_signed_by(&signed, &old_ca).unwrap(),
        "the old CA signed it"
    );

    // Converged: a second `up` has nothing to do; `certs check` finds no problem.
    let again = k.hactl_ok(&["up", "--yes"]);
    assert_eq!(again.trim(), "no changes");
    assert_eq!(k.hactl(&["certs", "check"]).status.code(), Some(0));
    println!("{name}: passed");
}
