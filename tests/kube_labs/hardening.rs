//! Issue 13, points 6 and 7, on a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`, or of
//! the cache `scripts/kube-binaries.sh` builds; never skipped as root): the kube units run
//! sandboxed (no new privileges, no capabilities, a read-only root), the apiserver refuses TLS 1.1
//! and a TLS 1.2 cipher outside its list, and the apiserver's kubelet client is bound by RBAC
//! (`system:kubelet-api-admin`), not `system:masters`; `up` recreates the binding when it is gone.
//! Here the binding, the certificate's subject and what RBAC allows that subject are checked;
//! `kubectl exec` through the kubelet client into a running pod is `nodes::pods_run`'s.
//! They run on `up`'s lab (3 control planes, 2 load balancers), after its checks. In the same lab:
//! `status` with only the operator's route to one member cut (point 11), and
//! etcd's peer port refusing every certificate of the etcd CA but the members' peer ones (point 7).

use crate::support::kube as kube_support;

use hactl::kubernetes::{files, rbac, Component};
use kube_support::{text, KubeLab};

/// `openssl s_client` from `from` to `target`:`port` with `args`; (handshake done, output).
fn s_client(k: &KubeLab, from: &str, target: &str, args: &[&str]) -> (bool, String) {
    let script = "t=\"$1\"; shift; openssl s_client -connect \"$t\" \"$@\" </dev/null 2>&1";
    let mut argv = vec!["sh", "-c", script, "sh", target];
    argv.extend_from_slice(args);
    let out = k.lab.exec(from, &argv);
    let all = text(&out);
    let done = out.status.success() && all.contains("Cipher is ") && !all.contains("Cipher is (NONE)");
    (done, all)
}

/// Run by `up::kubernetes_control_plane_comes_up_with_real_binaries` on its lab once its own
/// checks passed: the checks below only read the cluster, or change it and put it back (the
/// binding, a route), so they need no bring-up of their own.
pub(crate) fn kube_units_run_sandboxed_tls_below_12_is_refused_and_the_kubelet_client_is_bound_by_rbac(
    k: &KubeLab,
) {
    let name = "hardening";

    // 1. Every unit runs sandboxed: read from the running process, not from the unit file.
    for c in Component::ALL {
        let unit = c.unit();
        let pid = k
            .lab
            .exec_ok("cp1", &["systemctl", "show", "-p", "MainPID", "--value", &unit])
            .trim()
            .to_string();
        assert!(pid != "0" && !pid.is_empty(), "{unit} is not running");
        let status = k.lab.exec_ok("cp1", &["cat", &format!("/proc/{pid}/status")]);
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        assert_eq!(field("NoNewPrivs:"), "1", "{unit}: NoNewPrivs\n{status}");
        assert_eq!(
            field("CapBnd:"),
            "0000000000000000",
            "{unit}: bounding set\n{status}"
        );
        assert_eq!(
            field("CapEff:"),
            "0000000000000000",
            "{unit}: effective set\n{status}"
        );
        let mounts = k.lab.exec_ok("cp1", &["cat", &format!("/proc/{pid}/mountinfo")]);
        let options_of = |point: &str| {
            mounts
                .lines()
                .rfind(|l| l.split(' ').nth(4) == Some(point))
                .map(|l| l.split(' ').nth(5).unwrap_or("").to_string())
                .unwrap_or_default()
        };
        for point in ["/", "/usr", "/etc"] {
            let opts = options_of(point);
            // ProtectSystem=strict remounts the root (or each of these) read-only.
            // (/usr and /etc are no mounts of their own on a lab host: then the root's count.)
            let ro = opts.split(',').any(|o| o == "ro")
                || (opts.is_empty() && options_of("/").split(',').any(|o| o == "ro"));
            assert!(ro, "{unit}: {point} is writable ({opts:?})\n{mounts}");
        }
        // PrivateTmp: the process's /tmp is not the host's.
        assert!(
            mounts.lines().any(|l| l.split(' ').nth(4) == Some("/tmp")),
            "{unit}: no private /tmp\n{mounts}"
        );
        eprintln!("{name}: {unit} (pid {pid}) runs sandboxed");
    }

    // 2. TLS: 1.1 refused by the server, 1.2 with an AEAD suite accepted, a CBC suite refused.
    let api = format!("{}:6443", k.lab.ip("cp1"));
    // SECLEVEL=0 lets this openssl offer TLS 1.1 at all, so a failure is the server's refusal.
    let (ok11, out11) = s_client(k, "cp2", &api, &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]);
    assert!(!ok11, "TLS 1.1 was accepted:\n{out11}");
    assert!(
        out11.contains("protocol version") || out11.contains("alert"),
        "TLS 1.1 failed on the client side, not by the server's refusal:\n{out11}"
    );
    let (ok12, out12) = s_client(k, "cp2", &api, &["-tls1_2"]);
    assert!(ok12, "TLS 1.2 was refused:\n{out12}");
    assert!(
        out12.contains("GCM"),
        "TLS 1.2 did not use an AEAD suite:\n{out12}"
    );
    let (cbc, out_cbc) = s_client(
        k,
        "cp2",
        &api,
        &[
            "-tls1_2",
            "-cipher",
            "ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA",
        ],
    );
    assert!(!cbc, "a CBC suite was accepted:\n{out_cbc}");
    // The controller-manager and scheduler serve on 127.0.0.1 with the same floor.
    for port in ["10257", "10259"] {
        let target = format!("127.0.0.1:{port}");
        let (ok, out) = s_client(k, "cp1", &target, &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]);
        assert!(!ok, "{target}: TLS 1.1 was accepted:\n{out}");
        let (ok, out) = s_client(k, "cp1", &target, &["-tls1_2"]);
        assert!(ok, "{target}: TLS 1.2 was refused:\n{out}");
    }
    eprintln!("{name}: TLS 1.1 and a CBC suite refused, TLS 1.2 with GCM accepted");

    // 3. The kubelet client: its own group, bound by RBAC to system:kubelet-api-admin.
    let subject = k.lab.exec_ok(
        "cp1",
        &[
            "openssl",
            "x509",
            "-noout",
            "-subject",
            "-in",
            files::KUBELET_CLIENT_CRT,
        ],
    );
    assert!(
        subject.contains(rbac::KUBELET_CLIENT_GROUP) && !subject.contains("system:masters"),
        "kubelet client subject: {subject}"
    );
    let binding = |field: &str| {
        k.kubectl_ok(&[
            "get",
            "clusterrolebinding",
            rbac::KUBELET_CLIENT_BINDING,
            "-o",
            &format!("jsonpath={field}"),
        ])
    };
    assert_eq!(binding("{.roleRef.name}"), rbac::KUBELET_API_ROLE);
    assert_eq!(
        binding("{.subjects[0].kind}/{.subjects[0].name}"),
        format!("Group/{}", rbac::KUBELET_CLIENT_GROUP)
    );
    // `RESOURCE --subresource=SUB` (kubectl reads `nodes/proxy` as the Node named proxy).
    let can = |verb: &str, what: &str| {
        let (resource, sub) = what.split_once('/').unwrap_or((what, ""));
        let subresource = format!("--subresource={sub}");
        let mut args = vec!["auth", "can-i", verb, resource];
        if !sub.is_empty() {
            args.push(&subresource);
        }
        let group = format!("--as-group={}", rbac::KUBELET_CLIENT_GROUP);
        args.extend(["--as=kube-apiserver-kubelet-client", group.as_str()]);
        let out = k.kubectl(&args);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        can("get", "nodes/proxy"),
        "yes",
        "the kubelet API (logs, exec) is allowed"
    );
    assert_eq!(
        can("create", "nodes/proxy"),
        "yes",
        "exec and port-forward are allowed"
    );
    assert_eq!(can("get", "nodes/log"), "yes");
    assert_eq!(can("get", "secrets"), "no", "the kubelet client reads no Secret");
    assert_eq!(can("delete", "nodes"), "no");
    assert_eq!(can("create", "clusterrolebindings"), "no");

    // 4. Idempotent: a second `up` changes nothing; with the binding gone, `up` recreates it.
    let again = k.hactl(&["up", "--yes"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "no changes");
    k.kubectl_ok(&["delete", "clusterrolebinding", rbac::KUBELET_CLIENT_BINDING]);
    let again = k.hactl(&["up", "--yes"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "no changes");
    assert_eq!(
        binding("{.roleRef.name}"),
        rbac::KUBELET_API_ROLE,
        "up recreated the binding"
    );

    // 5. Issue 13, point 11: the operator alone loses cp3 (replies to this machine's bridge
    //    address are blackholed on cp3; its peers reach it as before). `status` says the member
    //    is unreachable from here but healthy to its peers, and still raises the high-water mark
    //    because a leader answered.
    let operator = k.lab.lab().operator_address.to_string();
    let hwm_before = hwm_revision(k);
    k.lab.exec_ok(
        "cp3",
        &["ip", "route", "add", "blackhole", &format!("{operator}/32")],
    );
    let (code, doc) = k.status();
    k.lab.exec_ok(
        "cp3",
        &["ip", "route", "del", "blackhole", &format!("{operator}/32")],
    );
    let cp3 = doc["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "cp3")
        .cloned()
        .unwrap();
    assert_eq!(cp3["healthy"], false, "cp3 answered through the blackhole: {cp3}");
    assert_eq!(cp3["healthyFromPeers"], true, "{cp3}");
    let problems: Vec<String> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert!(
        problems.iter().any(
            |p| p.starts_with("member cp3 does not answer hactl from this machine")
                && p.contains("its peers see it healthy")
        ),
        "{problems:#?}"
    );
    assert!(
        !problems.iter().any(|p| p.starts_with("member cp3 is unhealthy")),
        "{problems:#?}"
    );
    assert_eq!(code, 5, "the operator's partition is still reported (exit 5)");
    let hwm_after = hwm_revision(k);
    assert!(
        doc["leader"].as_str().is_some_and(|l| !l.is_empty()) && hwm_after > hwm_before,
        "a leader answered, so status raised the mark: {hwm_before} -> {hwm_after} ({})",
        doc["revision"]
    );
    assert_eq!(hwm_after, doc["revision"].as_i64().unwrap());

    // 6. Issue 13, point 7: etcd's peer port admits only the members' peer certificates (one
    //    shared CN, `--peer-cert-allowed-cn`): hactl's client certificate, the apiserver's etcd
    //    client and a member's server certificate (all of the same etcd CA) are refused on 2380.
    let peer_port = format!("https://{}:2380/version", k.lab.ip("cp2"));
    let curl_2380 = |cert: &str, key: &str| {
        k.lab.exec(
            "cp1",
            &[
                "curl",
                "-sS",
                "--http1.1",
                "-m",
                "5",
                "--cacert",
                "/etc/hactl/pki/etcd/ca.crt",
                "--cert",
                cert,
                "--key",
                key,
                &peer_port,
            ],
        )
    };
    let peer = curl_2380("/etc/hactl/pki/etcd/peer.crt", "/etc/hactl/pki/etcd/peer.key");
    assert!(
        peer.status.success() && text(&peer).contains("etcdserver"),
        "a member's peer certificate was refused on 2380: {}",
        text(&peer)
    );
    for (cert, key) in [
        ("/etc/hactl/pki/etcd/client.crt", "/etc/hactl/pki/etcd/client.key"),
        (files::ETCD_CLIENT_CRT, files::ETCD_CLIENT_KEY),
        ("/etc/hactl/pki/etcd/server.crt", "/etc/hactl/pki/etcd/server.key"),
    ] {
        let out = curl_2380(cert, key);
        assert!(
            !(out.status.success() && text(&out).contains("etcdserver")),
            "{cert} passed on the peer port 2380: {}",
            text(&out)
        );
    }
    // And the same client certificate still works on the client port.
    k.lab.exec_ok(
        "cp1",
        &[
            "hactl-etcdctl",
            "get",
            "--prefix",
            "--keys-only",
            "--limit=1",
            "/registry/namespaces",
        ],
    );
    eprintln!("{name}: the peer port admits peer certificates only");
}

/// The revision in the state directory's `hwm.json`; 0 when none was recorded yet.
fn hwm_revision(k: &KubeLab) -> i64 {
    let Ok(text) = std::fs::read_to_string(k.state.join("hwm.json")) else {
        return 0;
    };
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["revision"].as_i64().unwrap()
}
