//! `pki::ensure` against a temporary state directory, every certificate read back with x509-parser.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use hactl::inventory::{
    BinarySource, EtcdSpec, Host, Inventory, KeyType, KubernetesMode, KubernetesSpec, PkiSpec, Role, SshAuth,
    SshSpec, Vip,
};
use hactl::pki::{self, Action, CertFiles, EtcdClient, KubernetesClient, Pki};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

const NOW: OffsetDateTime = datetime!(2025-06-01 12:00:00 UTC);

fn host(name: &str, address: &str, roles: &[Role]) -> Host {
    let address: IpAddr = address.parse().unwrap();
    Host {
        name: name.into(),
        address,
        prefix_length: 24,
        roles: roles.to_vec(),
        interface: None,
        ssh: SshSpec {
            address,
            port: 22,
            user: "root".into(),
            auth: SshAuth::Agent,
            sudo: false,
            bastion: None,
            connect_timeout_secs: 10,
        },
    }
}

/// `members` hosts that are both etcd and control plane (cp1 = 10.0.0.11, …), two load balancers
/// and a VIP; with a `kubernetes` section.
fn inventory(members: usize, key_type: KeyType) -> Inventory {
    let mut hosts: Vec<Host> = (1..=members)
        .map(|i| {
            host(
                &format!("cp{i}"),
                &format!("10.0.0.{}", 10 + i),
                &[Role::Etcd, Role::ControlPlane],
            )
        })
        .collect();
    hosts.push(host("lb1", "10.0.0.21", &[Role::LoadBalancer]));
    hosts.push(host("lb2", "10.0.0.22", &[Role::LoadBalancer]));
    Inventory {
        source: PathBuf::from("/tmp/lab.yaml"),
        name: "lab".into(),
        hosts,
        vip: Some(Vip {
            address: "10.0.0.100".parse().unwrap(),
            router_id: 51,
            advert_interval: hactl::inventory::DEFAULT_ADVERT_INTERVAL,
        }),
        load_balancer: Default::default(),
        etcd: EtcdSpec {
            version: None,
            source: BinarySource::Package,
            data_dir: "/var/lib/etcd".into(),
            client_port: 2379,
            peer_port: 2380,
            heartbeat_interval_ms: 100,
            election_timeout_ms: 1000,
            quota_backend_bytes: 2 << 30,
            auto_compaction_retention: "1h".into(),
            extra_args: Vec::new(),
        },
        kubernetes: Some(KubernetesSpec {
            version: semver::Version::new(1, 33, 0),
            source: BinarySource::Package,
            service_cidr: "10.96.0.0/12".parse().unwrap(),
            pod_cidr: "10.244.0.0/16".parse().unwrap(),
            mode: KubernetesMode::Systemd,
            images: hactl::inventory::ImageSource::Registry(hactl::inventory::DEFAULT_IMAGE_REGISTRY.into()),
            containerd: BinarySource::Package,
            cgroup_driver: hactl::inventory::CgroupDriver::Systemd,
            eviction_hard: Default::default(),
            dns: None,
        }),
        pki: PkiSpec {
            renew_before_days: 30,
            key_type,
            ca_validity_days: 3650,
            cert_validity_days: 365,
        },
        state_dir: PathBuf::from("/tmp/state"),
        allow_single_member: false,
        heal: Default::default(),
        backup: Default::default(),
    }
}

fn ensure(dir: &Path, inv: &Inventory, now: OffsetDateTime) -> Pki {
    pki::ensure(dir, inv, now).expect("pki::ensure")
}

fn info(files: &CertFiles) -> pki::CertInfo {
    pki::inspect(&files.cert_pem).expect("inspect")
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn strings(v: &[&str]) -> Vec<String> {
    sorted(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// Every regular file under `dir` with its bytes and mtime.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs_err::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else {
                out.insert(
                    path.clone(),
                    (fs_err::read(&path).unwrap(), meta.modified().unwrap()),
                );
            }
        }
    }
    out
}

fn action_of<'a>(pki: &'a Pki, file: &str) -> &'a Action {
    &pki.report
        .iter()
        .find(|c| c.file == file)
        .unwrap_or_else(|| panic!("{file} not in the report"))
        .action
}

#[test]
fn ensure_creates_every_certificate_of_a_three_member_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let pki_dir = dir.path().join("pki");
    let pki = ensure(&pki_dir, &inventory(3, KeyType::EcdsaP256), NOW);

    let mut expected = vec!["etcd/ca", "kubernetes/ca", "front-proxy/ca"];
    for h in ["cp1", "cp2", "cp3"] {
        expected.push(Box::leak(format!("etcd/server-{h}").into_boxed_str()));
        expected.push(Box::leak(format!("etcd/peer-{h}").into_boxed_str()));
        expected.push(Box::leak(format!("kubernetes/apiserver-{h}").into_boxed_str()));
        // Every control-plane host is a node: its kubelet's client and serving certificates.
        expected.push(Box::leak(format!("kubernetes/kubelet-{h}").into_boxed_str()));
        expected.push(Box::leak(
            format!("kubernetes/kubelet-serving-{h}").into_boxed_str(),
        ));
    }
    expected.extend([
        "kubernetes/kube-proxy",
        "etcd/hactl-client",
        "etcd/apiserver-etcd-client",
        "kubernetes/apiserver-kubelet-client",
        "kubernetes/admin",
        "kubernetes/controller-manager",
        "kubernetes/scheduler",
        "front-proxy/client",
    ]);
    let mut have: Vec<&str> = pki.entries.iter().map(|e| e.name.as_str()).collect();
    have.sort();
    expected.sort();
    assert_eq!(have, expected);
    for e in &pki.entries {
        assert!(e.files.cert_path.is_file(), "{}", e.name);
        assert!(e.files.key_path.is_file(), "{}", e.name);
        assert_eq!(
            fs_err::read_to_string(&e.files.cert_path).unwrap(),
            e.files.cert_pem
        );
        assert_eq!(
            fs_err::read_to_string(&e.files.key_path).unwrap(),
            e.files.key_pem.expose()
        );
        assert_eq!(action_of(&pki, &format!("{}.crt", e.name)), &Action::Created);
    }
    let sa = pki.service_account_key().expect("sa key");
    assert!(sa.pub_pem.starts_with("-----BEGIN PUBLIC KEY-----"));
    assert!(sa.key_pem.expose().starts_with("-----BEGIN PRIVATE KEY-----"));
    assert!(pki.warnings.is_empty(), "{:?}", pki.warnings);
    assert_eq!(pki.changes().count(), pki.report.len());
}

#[test]
fn etcd_server_and_peer_certs_name_their_host_and_serve_and_dial() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    let pki = ensure(dir.path(), &inv, NOW);
    for (i, h) in ["cp1", "cp2", "cp3"].iter().enumerate() {
        let address = format!("10.0.0.{}", 11 + i);
        let peer = strings(&[&address, h, "localhost", "127.0.0.1", "::1"]);
        // Clients dial the VIP's etcd frontend: server certificates carry the VIP, peer ones not.
        let server = strings(&[&address, h, "localhost", "127.0.0.1", "::1", "10.0.0.100"]);
        // Peer certificates share one CN, the only one etcd's peer port admits.
        for (files, want, cn) in [
            (pki.etcd_server(h).unwrap(), server, *h),
            (pki.etcd_peer(h).unwrap(), peer, hactl::etcd::PEER_CN),
        ] {
            let info = info(files);
            assert_eq!(sorted(&info.sans), sorted(&want), "{}", files.cert_path.display());
            assert_eq!(info.subject_cn, cn);
            assert_eq!(info.ext_key_usages, ["server_auth", "client_auth"]);
            // ECDSA: no Key Encipherment (RFC 5480).
            assert_eq!(info.key_usages, ["digital_signature"]);
            assert!(!info.is_ca);
            assert_eq!(info.issuer_cn, "hactl etcd CA lab");
        }
    }
    assert!(pki.etcd_server("lb1").is_none());
}

#[test]
fn client_certs_have_the_expected_subjects_and_client_auth_only() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(3, KeyType::EcdsaP256), NOW);
    let cases: [(&CertFiles, &str, &[&str], &str); 7] = [
        (
            pki.etcd_client(EtcdClient::Hactl),
            "hactl",
            &[],
            "hactl etcd CA lab",
        ),
        (
            pki.etcd_client(EtcdClient::ApiServer),
            "kube-apiserver-etcd-client",
            &[],
            "hactl etcd CA lab",
        ),
        (
            pki.kubernetes_client(KubernetesClient::ApiServerKubeletClient)
                .unwrap(),
            "kube-apiserver-kubelet-client",
            // A group of its own, bound to system:kubelet-api-admin by RBAC (not system:masters).
            &["hactl:apiserver-kubelet-client"],
            "hactl kubernetes CA lab",
        ),
        (
            pki.kubernetes_client(KubernetesClient::Admin).unwrap(),
            "kubernetes-admin",
            &["system:masters"],
            "hactl kubernetes CA lab",
        ),
        (
            pki.kubernetes_client(KubernetesClient::ControllerManager)
                .unwrap(),
            "system:kube-controller-manager",
            &[],
            "hactl kubernetes CA lab",
        ),
        (
            pki.kubernetes_client(KubernetesClient::Scheduler).unwrap(),
            "system:kube-scheduler",
            &[],
            "hactl kubernetes CA lab",
        ),
        (
            pki.front_proxy_client().unwrap(),
            "front-proxy-client",
            &[],
            "hactl front-proxy CA lab",
        ),
    ];
    for (files, cn, orgs, issuer) in cases {
        let info = info(files);
        assert_eq!(info.subject_cn, cn);
        assert_eq!(info.subject_organizations, orgs);
        assert_eq!(info.issuer_cn, issuer);
        assert_eq!(info.ext_key_usages, ["client_auth"], "{cn}");
        assert!(info.sans.is_empty(), "{cn}");
    }
}

#[test]
fn apiserver_certs_cover_the_vip_every_control_plane_host_and_the_service_ip() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(3, KeyType::EcdsaP256), NOW);
    let want = strings(&[
        "10.0.0.100",
        "10.0.0.11",
        "cp1",
        "10.0.0.12",
        "cp2",
        "10.0.0.13",
        "cp3",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "10.96.0.1",
        "localhost",
        "127.0.0.1",
        "::1",
    ]);
    for h in ["cp1", "cp2", "cp3"] {
        let info = info(pki.apiserver(h).unwrap());
        assert_eq!(sorted(&info.sans), want);
        assert_eq!(info.ext_key_usages, ["server_auth"]);
        assert_eq!(info.issuer_cn, "hactl kubernetes CA lab");
    }
}

#[test]
fn every_leaf_is_signed_by_its_own_ca_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(3, KeyType::EcdsaP256), NOW);
    let cas = [
        ("etcd/", pki.etcd_ca()),
        ("kubernetes/", pki.kubernetes_ca().unwrap()),
        ("front-proxy/", pki.front_proxy_ca().unwrap()),
    ];
    for e in pki.entries.iter().filter(|e| !e.name.ends_with("/ca")) {
        for (prefix, ca) in &cas {
            let signed = pki::is_signed_by(&e.files.cert_pem, &ca.cert_pem).unwrap();
            assert_eq!(signed, e.name.starts_with(prefix), "{} by {prefix}ca", e.name);
        }
        // The same check, spelled out with x509-parser directly.
        let (prefix, ca) = cas.iter().find(|(p, _)| e.name.starts_with(p)).unwrap();
        let ca_pem = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes())
            .unwrap()
            .1;
        let ca_x509 = ca_pem.parse_x509().unwrap();
        let leaf_pem = x509_parser::pem::parse_x509_pem(e.files.cert_pem.as_bytes())
            .unwrap()
            .1;
        let leaf = leaf_pem.parse_x509().unwrap();
        leaf.verify_signature(Some(ca_x509.public_key()))
            .unwrap_or_else(|err| panic!("{} not signed by {prefix}ca: {err}", e.name));
        // Authority key identifier = the CA's subject key identifier.
        let aki = leaf
            .iter_extensions()
            .find_map(|x| match x.parsed_extension() {
                x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
                    a.key_identifier.as_ref().map(|k| k.0.to_vec())
                }
                _ => None,
            })
            .expect("authority key identifier");
        let ski = ca_x509
            .iter_extensions()
            .find_map(|x| match x.parsed_extension() {
                x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
                _ => None,
            })
            .expect("subject key identifier");
        assert_eq!(aki, ski, "{}", e.name);
    }
}

#[test]
fn cas_last_ten_years_and_leaves_one_year_from_five_minutes_ago() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(3, KeyType::EcdsaP256), NOW);
    let not_before = NOW - Duration::minutes(5);
    for e in &pki.entries {
        let info = info(&e.files);
        assert_eq!(info.not_before, not_before, "{}", e.name);
        assert_eq!(info.not_after, e.not_after, "{}", e.name);
        if e.name.ends_with("/ca") {
            assert!(info.is_ca);
            assert_eq!(info.not_after, NOW + Duration::days(3650));
            assert_eq!(
                info.key_usages,
                ["digital_signature", "key_cert_sign", "crl_sign"]
            );
            assert_eq!(info.subject_cn, info.issuer_cn);
        } else {
            assert!(!info.is_ca);
            assert_eq!(info.not_after, NOW + Duration::days(365), "{}", e.name);
        }
    }
    let report = pki.expiry_report();
    assert_eq!(report.len(), pki.entries.len());
    assert_eq!(report[0], ("etcd/ca.crt".to_string(), NOW + Duration::days(3650)));
}

#[test]
fn serials_are_random_and_distinct() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(3, KeyType::EcdsaP256), NOW);
    let serials: std::collections::BTreeSet<String> =
        pki.entries.iter().map(|e| info(&e.files).serial).collect();
    assert_eq!(serials.len(), pki.entries.len());
}

#[test]
fn a_second_ensure_rewrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    let first = ensure(dir.path(), &inv, NOW);
    let before = snapshot(dir.path());
    // A day later, so nothing is near expiry but "now" differs.
    let second = ensure(dir.path(), &inv, NOW + Duration::days(1));
    assert_eq!(snapshot(dir.path()), before);
    assert_eq!(second.changes().count(), 0, "{:?}", second.report);
    assert!(second.report.iter().all(|c| c.to_string().ends_with(": reused")));
    assert_eq!(second.report.len(), first.report.len());
    for (a, b) in first.entries.iter().zip(&second.entries) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.files.cert_pem, b.files.cert_pem);
        assert_eq!(a.files.key_pem, b.files.key_pem);
    }
    assert_eq!(
        first.service_account_key().unwrap().pub_pem,
        second.service_account_key().unwrap().pub_pem
    );
}

#[test]
fn changing_a_host_address_reissues_only_the_certs_that_name_it_from_the_same_ca() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(3, KeyType::EcdsaP256);
    let first = ensure(dir.path(), &inv, NOW);
    let ca_before = fs_err::read(dir.path().join("etcd/ca.crt")).unwrap();
    let ca_key_before = fs_err::read(dir.path().join("etcd/ca.key")).unwrap();

    let cp2 = inv.hosts.iter_mut().find(|h| h.name == "cp2").unwrap();
    cp2.address = "10.0.0.14".parse().unwrap();
    let second = ensure(dir.path(), &inv, NOW + Duration::days(1));

    assert_eq!(fs_err::read(dir.path().join("etcd/ca.crt")).unwrap(), ca_before);
    assert_eq!(
        fs_err::read(dir.path().join("etcd/ca.key")).unwrap(),
        ca_key_before
    );
    let mut changed: Vec<String> = second.changes().map(|c| c.to_string()).collect();
    changed.sort();
    assert_eq!(
        changed,
        [
            "etcd/peer-cp2.crt: re-issued (SANs changed: +10.0.0.14, -10.0.0.12)",
            "etcd/server-cp2.crt: re-issued (SANs changed: +10.0.0.14, -10.0.0.12)",
            "kubernetes/apiserver-cp1.crt: re-issued (SANs changed: +10.0.0.14, -10.0.0.12)",
            "kubernetes/apiserver-cp2.crt: re-issued (SANs changed: +10.0.0.14, -10.0.0.12)",
            "kubernetes/apiserver-cp3.crt: re-issued (SANs changed: +10.0.0.14, -10.0.0.12)",
            "kubernetes/kubelet-serving-cp2.crt: re-issued (SANs changed: +10.0.0.14, -10.0.0.12)",
        ]
    );
    let server = second.etcd_server("cp2").unwrap();
    assert!(info(server).sans.contains(&"10.0.0.14".to_string()));
    assert!(pki::is_signed_by(&server.cert_pem, &second.etcd_ca().cert_pem).unwrap());
    assert_eq!(
        first.etcd_server("cp1").unwrap().cert_pem,
        second.etcd_server("cp1").unwrap().cert_pem
    );
}

#[test]
fn a_leaf_expiring_within_thirty_days_is_reissued_and_the_ca_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    let first = ensure(dir.path(), &inv, NOW);
    let later = NOW + Duration::days(340);
    let second = ensure(dir.path(), &inv, later);

    assert_eq!(action_of(&second, "etcd/ca.crt"), &Action::Reused);
    assert_eq!(first.etcd_ca().cert_pem, second.etcd_ca().cert_pem);
    let line = second
        .report
        .iter()
        .find(|c| c.file == "etcd/peer-cp1.crt")
        .unwrap()
        .to_string();
    assert_eq!(
        line,
        "etcd/peer-cp1.crt: re-issued (expires on 2026-06-01, within 30 days)"
    );
    for e in second.entries.iter().filter(|e| !e.name.ends_with("/ca")) {
        assert!(matches!(
            action_of(&second, &format!("{}.crt", e.name)),
            Action::Reissued(_)
        ));
        assert_eq!(e.not_after, later + Duration::days(365));
        let ca_dir = e.name.split('/').next().unwrap();
        let ca = second.get(&format!("{ca_dir}/ca")).unwrap();
        assert!(pki::is_signed_by(&e.files.cert_pem, &ca.cert_pem).unwrap());
    }
}

#[test]
fn a_ca_expiring_within_thirty_days_is_kept_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let pki_dir = dir.path().join("pki");
    let mut inv = inventory(1, KeyType::EcdsaP256);
    inv.kubernetes = None;
    inv.pki.ca_validity_days = 100;
    let first = ensure(&pki_dir, &inv, NOW);
    assert!(first.warnings.is_empty(), "{:?}", first.warnings);
    let second = ensure(&pki_dir, &inv, NOW + Duration::days(75));
    assert_eq!(first.etcd_ca().cert_pem, second.etcd_ca().cert_pem);
    assert_eq!(action_of(&second, "etcd/ca.crt"), &Action::Reused);
    assert_eq!(
        second.warnings,
        ["etcd/ca.crt expires on 2025-09-09: CAs are not renewed automatically; plan a CA rotation"]
    );
}

#[test]
fn short_lived_leaves_are_renewed_in_the_last_third_of_their_lifetime_not_on_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(1, KeyType::EcdsaP256);
    inv.kubernetes = None;
    inv.pki.cert_validity_days = 9;
    ensure(dir.path(), &inv, NOW);
    assert_eq!(
        ensure(dir.path(), &inv, NOW + Duration::days(5))
            .changes()
            .count(),
        0
    );
    let later = ensure(dir.path(), &inv, NOW + Duration::days(7));
    assert_eq!(
        action_of(&later, "etcd/server-cp1.crt"),
        &Action::Reissued(vec!["expires on 2025-06-10, within 3 days".into()])
    );
}

#[test]
fn a_reissued_leaf_keeps_its_key_so_hosts_swap_only_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    ensure(dir.path(), &inv, NOW);
    let key_before = fs_err::read(dir.path().join("etcd/hactl-client.key")).unwrap();
    let cert_before = fs_err::read(dir.path().join("etcd/hactl-client.crt")).unwrap();
    // Due for renewal: re-issued, from the same key.
    let second = ensure(dir.path(), &inv, NOW + Duration::days(340));
    assert!(matches!(
        action_of(&second, "etcd/hactl-client.crt"),
        Action::Reissued(_)
    ));
    assert_ne!(
        fs_err::read(dir.path().join("etcd/hactl-client.crt")).unwrap(),
        cert_before
    );
    assert_eq!(
        fs_err::read(dir.path().join("etcd/hactl-client.key")).unwrap(),
        key_before
    );
    // A key that is not the certificate's is replaced.
    let other = tempfile::tempdir().unwrap();
    ensure(other.path(), &inv, NOW);
    fs_err::copy(
        other.path().join("etcd/hactl-client.key"),
        dir.path().join("etcd/hactl-client.key"),
    )
    .unwrap();
    let foreign = fs_err::read(dir.path().join("etcd/hactl-client.key")).unwrap();
    let third = ensure(dir.path(), &inv, NOW + Duration::days(341));
    assert_eq!(
        action_of(&third, "etcd/hactl-client.crt"),
        &Action::Reissued(vec!["key does not match the certificate".into()])
    );
    let key_after = fs_err::read(dir.path().join("etcd/hactl-client.key")).unwrap();
    assert_ne!(key_after, foreign);
    assert_ne!(key_after, key_before);
}

#[test]
fn a_leaf_from_another_ca_is_reissued() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    ensure(dir.path(), &inv, NOW);
    ensure(other.path(), &inv, NOW);
    for ext in ["crt", "key"] {
        fs_err::copy(
            other.path().join(format!("etcd/server-cp1.{ext}")),
            dir.path().join(format!("etcd/server-cp1.{ext}")),
        )
        .unwrap();
    }
    let pki = ensure(dir.path(), &inv, NOW);
    assert_eq!(
        action_of(&pki, "etcd/server-cp1.crt"),
        &Action::Reissued(vec!["issuer is not the current etcd CA".into()])
    );
    assert_eq!(pki.changes().count(), 1);
}

#[test]
fn a_leaf_whose_key_was_lost_is_reissued() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    ensure(dir.path(), &inv, NOW);
    fs_err::remove_file(dir.path().join("etcd/peer-cp3.key")).unwrap();
    let pki = ensure(dir.path(), &inv, NOW);
    assert_eq!(
        action_of(&pki, "etcd/peer-cp3.crt"),
        &Action::Reissued(vec!["key file missing".into()])
    );
    assert!(dir.path().join("etcd/peer-cp3.key").is_file());
}

#[test]
fn a_ca_certificate_without_its_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    ensure(dir.path(), &inv, NOW);
    fs_err::remove_file(dir.path().join("etcd/ca.key")).unwrap();
    let before = snapshot(dir.path());
    let err = pki::ensure(dir.path(), &inv, NOW).unwrap_err();
    assert!(matches!(err, pki::PkiError::CaKeyMissing { .. }), "{err}");
    assert!(err.to_string().contains("never replaces a CA"), "{err}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_ca_key_without_its_certificate_gets_a_new_certificate_and_leaves_stay_valid() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(3, KeyType::EcdsaP256);
    let first = ensure(dir.path(), &inv, NOW);
    fs_err::remove_file(dir.path().join("etcd/ca.crt")).unwrap();
    let second = ensure(dir.path(), &inv, NOW);
    assert_eq!(action_of(&second, "etcd/ca.crt"), &Action::CreatedFromExistingKey);
    assert_eq!(second.changes().count(), 1, "{:?}", second.report);
    assert!(pki::is_signed_by(
        &first.etcd_server("cp1").unwrap().cert_pem,
        &second.etcd_ca().cert_pem
    )
    .unwrap());
}

#[test]
fn changing_the_key_type_reissues_leaves_but_only_warns_about_cas() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(1, KeyType::EcdsaP256);
    ensure(dir.path(), &inv, NOW);
    inv.pki.key_type = KeyType::Rsa2048;
    let pki = ensure(dir.path(), &inv, NOW);
    assert_eq!(
        action_of(&pki, "etcd/server-cp1.crt"),
        &Action::Reissued(vec!["key type changed: ecdsa-p256 -> rsa-2048".into()])
    );
    assert_eq!(
        info(pki.etcd_server("cp1").unwrap()).key_type,
        Some(KeyType::Rsa2048)
    );
    assert_eq!(action_of(&pki, "etcd/ca.crt"), &Action::Reused);
    assert_eq!(action_of(&pki, "sa.key"), &Action::Reused);
    assert_eq!(pki.warnings.len(), 4, "{:?}", pki.warnings); // three CAs and sa.key
    assert!(pki.warnings[0].starts_with("etcd/ca.key is ecdsa-p256 but the inventory asks for rsa-2048"));
}

#[test]
fn rsa_2048_keys_work_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(1, KeyType::Rsa2048);
    inv.kubernetes = None;
    let pki = ensure(dir.path(), &inv, NOW);
    for e in &pki.entries {
        assert_eq!(info(&e.files).key_type, Some(KeyType::Rsa2048), "{}", e.name);
    }
    let server = pki.etcd_server("cp1").unwrap();
    assert!(pki::is_signed_by(&server.cert_pem, &pki.etcd_ca().cert_pem).unwrap());
    assert_eq!(ensure(dir.path(), &inv, NOW).changes().count(), 0);
}

#[test]
#[ignore = "RSA 4096 key generation takes seconds per key"]
fn rsa_4096_keys_work_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(1, KeyType::Rsa4096);
    inv.kubernetes = None;
    let pki = ensure(dir.path(), &inv, NOW);
    for e in &pki.entries {
        assert_eq!(info(&e.files).key_type, Some(KeyType::Rsa4096), "{}", e.name);
    }
    assert_eq!(ensure(dir.path(), &inv, NOW).changes().count(), 0);
}

#[test]
fn an_etcd_only_inventory_gets_only_the_etcd_pki() {
    let dir = tempfile::tempdir().unwrap();
    let mut inv = inventory(5, KeyType::EcdsaP256);
    inv.kubernetes = None;
    let pki = ensure(dir.path(), &inv, NOW);
    assert!(pki.entries.iter().all(|e| e.name.starts_with("etcd/")));
    // The CA, a server and a peer certificate per member, hactl's and the apiserver's clients
    // (no health-check client: the load balancers hold no etcd credential).
    assert_eq!(pki.entries.len(), 1 + 5 * 2 + 2);
    assert!(pki.kubernetes_ca().is_none());
    assert!(pki.service_account_key().is_none());
    assert!(!dir.path().join("kubernetes").exists());
}

#[test]
fn key_files_are_0600_and_directories_0700() {
    let dir = tempfile::tempdir().unwrap();
    let pki_dir = dir.path().join("state/pki");
    let pki = ensure(&pki_dir, &inventory(3, KeyType::EcdsaP256), NOW);
    let mode = |p: &Path| fs_err::metadata(p).unwrap().permissions().mode() & 0o777;
    for d in ["", "etcd", "kubernetes", "front-proxy"] {
        assert_eq!(mode(&pki_dir.join(d)), 0o700, "{d}");
    }
    for e in &pki.entries {
        assert_eq!(mode(&e.files.key_path), 0o600, "{}", e.name);
    }
    assert_eq!(mode(&pki_dir.join("sa.key")), 0o600);
}

#[test]
fn a_loosened_key_file_is_tightened_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(1, KeyType::EcdsaP256);
    ensure(dir.path(), &inv, NOW);
    let key = dir.path().join("etcd/ca.key");
    fs_err::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let pki = ensure(dir.path(), &inv, NOW);
    assert_eq!(
        fs_err::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(pki.warnings, ["etcd/ca.key: permissions were 0644, set to 0600"]);
}

#[test]
fn debug_output_never_contains_key_material() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(1, KeyType::EcdsaP256), NOW);
    let files = pki.etcd_server("cp1").unwrap();
    assert!(files.key_pem.expose().contains("PRIVATE KEY"));
    let debug = format!("{files:?}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    assert!(debug.contains("[redacted]"));
    let all = format!("{pki:?}");
    assert!(!all.contains("PRIVATE KEY"));
    assert!(!all.contains(&files.key_pem.expose()[30..60]));
}

#[test]
fn inspect_rejects_text_that_is_not_a_certificate() {
    assert!(matches!(
        pki::inspect("hello"),
        Err(pki::PkiError::InvalidCertificate { .. })
    ));
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(1, KeyType::EcdsaP256), NOW);
    assert!(pki::inspect(pki.etcd_ca().key_pem.expose()).is_err());
}

/// The `pathLenConstraint` of a certificate's basic constraints (`None`: unconstrained or absent).
fn path_len(pem: &str) -> (bool, Option<u32>) {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).unwrap();
    let bc = cert
        .basic_constraints()
        .unwrap()
        .expect("basic constraints")
        .value;
    (bc.ca, bc.path_len_constraint)
}

#[test]
fn cas_sign_leaves_only_with_path_length_zero() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ensure(dir.path(), &inventory(3, KeyType::EcdsaP256), NOW);
    for ca in ["etcd/ca.crt", "kubernetes/ca.crt", "front-proxy/ca.crt"] {
        let pem = fs_err::read_to_string(dir.path().join(ca)).unwrap();
        assert_eq!(path_len(&pem), (true, Some(0)), "{ca}");
    }
    drop(pki);
}

#[test]
fn ecdsa_leaves_only_sign_and_rsa_leaves_may_also_encipher_keys() {
    for (key_type, want) in [
        (KeyType::EcdsaP256, vec!["digital_signature"]),
        (KeyType::Rsa2048, vec!["digital_signature", "key_encipherment"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let pki = ensure(dir.path(), &inventory(3, key_type), NOW);
        let leaves = [
            pki.etcd_server("cp1").unwrap(),
            pki.etcd_peer("cp1").unwrap(),
            pki.etcd_client(EtcdClient::Hactl),
            pki.apiserver("cp1").unwrap(),
            pki.kubernetes_client(KubernetesClient::Admin).unwrap(),
            pki.front_proxy_client().unwrap(),
        ];
        for files in leaves {
            assert_eq!(
                info(files).key_usages,
                want,
                "{key_type:?} {}",
                files.cert_path.display()
            );
        }
    }
}

#[test]
fn a_preview_reports_what_ensure_would_do_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state/pki");
    let inv = inventory(3, KeyType::EcdsaP256);
    // No PKI yet: everything would be created, and nothing appears on disk.
    let preview = pki::preview(&dir, &inv, NOW, &[]).expect("preview");
    assert!(
        !tmp.path().join("state").exists(),
        "a preview created a directory"
    );
    assert_eq!(action_of(&preview, "etcd/ca.crt"), &Action::Created);
    assert_eq!(action_of(&preview, "etcd/server-cp1.crt"), &Action::Created);
    assert!(
        preview.etcd_server("cp1").is_some(),
        "a preview holds the leaves it would make"
    );
    let created = ensure(&dir, &inv, NOW);
    let report = |p: &Pki| p.report.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    assert_eq!(report(&preview), report(&created));
    // With a PKI: the same report as ensure would give, byte for byte the same directory.
    let before = snapshot(&dir);
    let mut grown = inventory(4, KeyType::EcdsaP256);
    grown.name = inv.name.clone();
    let key = dir.join("etcd/ca.key");
    fs_err::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let preview = pki::preview(&dir, &grown, NOW, &[]).expect("preview");
    assert_eq!(snapshot(&dir), before, "a preview changed the PKI directory");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        fs_err::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o644,
        "a preview tightened a key"
    );
    assert_eq!(action_of(&preview, "etcd/ca.crt"), &Action::Reused);
    assert_eq!(action_of(&preview, "etcd/server-cp4.crt"), &Action::Created);
    assert!(preview.changes().count() > 0);
    let ensured = ensure(&dir, &grown, NOW);
    assert_eq!(report(&preview), report(&ensured));
}
