use super::*;
use crate::facts::{FileState, UnitState};

fn inv() -> Inventory {
    crate::inventory::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/inventories/example.yaml"
    )))
    .unwrap()
}

fn ca(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

struct Cas {
    etcd: String,
    kube: String,
    fp: String,
}

fn cas() -> Cas {
    Cas {
        etcd: ca("hactl etcd CA example"),
        kube: ca("hactl kubernetes CA example"),
        fp: ca("hactl front-proxy CA example"),
    }
}

fn file(sha: &str) -> FileState {
    FileState {
        sha256: sha.into(),
        mode: 0o600,
        owner: "root".into(),
        group: "root".into(),
        mtime: 1,
    }
}

fn unit(active: &str) -> UnitState {
    UnitState {
        active: active.into(),
        main_pid: 1,
        enabled: "enabled".into(),
        started_monotonic_us: 1,
    }
}

fn members(list: &[(&str, u8, bool)]) -> crate::etcd::MemberList {
    let members: Vec<serde_json::Value> = list
        .iter()
        .enumerate()
        .map(|(i, (name, octet, learner))| {
            serde_json::json!({
                "ID": 100 + i as u64,
                "name": name,
                "peerURLs": [format!("https://10.0.0.{octet}:2380")],
                "isLearner": learner,
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "header": {"cluster_id": 0xabc, "revision": 42},
        "members": members,
    }))
    .unwrap()
}

const MEMBERS: [(&str, u8, bool); 3] = [("cp1", 11, false), ("cp2", 12, false), ("cp3", 13, false)];

/// The example inventory's cluster as hactl sets it up.
fn healthy(inv: &Inventory, c: &Cas) -> BTreeMap<String, HostSeen> {
    let mut out = BTreeMap::new();
    for h in &inv.hosts {
        let mut f = HostFacts::default();
        let etcd = crate::etcd::PKI_DIR;
        if h.has(Role::Etcd) {
            f.units.insert("etcd.service".into(), unit("active"));
            f.files.insert(crate::etcd::UNIT_PATH.into(), file("unit"));
            for leaf in ["server.crt", "server.key", "peer.crt", "peer.key"] {
                f.files
                    .insert(format!("{etcd}/{leaf}"), file(&format!("{}-{leaf}", h.name)));
            }
            for shared in ["client.crt", "client.key", "ca.crt"] {
                f.files.insert(format!("{etcd}/{shared}"), file(shared));
            }
            f.trusted.insert(format!("{etcd}/ca.crt"), c.etcd.clone());
            f.members = Some(members(&MEMBERS));
        }
        if h.has(Role::ControlPlane) {
            f.units.insert("kube-apiserver.service".into(), unit("active"));
            for path in kf::REMOTE_FILES {
                let sha = if path.contains("/apiserver.") {
                    format!("{}-{path}", h.name)
                } else {
                    path.to_string()
                };
                f.files.insert(path.to_string(), file(&sha));
            }
            f.trusted.insert(kf::CA_CRT.into(), c.kube.clone());
            f.trusted.insert(kf::SIGNING_CA_CRT.into(), c.kube.clone());
            f.trusted.insert(kf::FRONT_PROXY_CA_CRT.into(), c.fp.clone());
            f.trusted.insert(kf::ETCD_CA_CRT.into(), c.etcd.clone());
        }
        if h.has(Role::LoadBalancer) {
            f.units.insert("haproxy.service".into(), unit("active"));
            f.files
                .insert(crate::load_balancer::HAPROXY_CFG.into(), file("cfg"));
        }
        out.insert(
            h.name.clone(),
            HostSeen {
                facts: f,
                token: h.has(Role::Etcd).then(|| "hactl-example".to_string()),
                ..Default::default()
            },
        );
    }
    out
}

#[test]
fn a_cluster_as_hactl_set_it_up_is_read_back_and_its_etcd_and_front_proxy_cas_rotated() {
    let (inv, c) = (inv(), cas());
    let d = decide(&inv, &healthy(&inv, &c)).unwrap();
    assert_eq!(d.cluster_id, "abc");
    assert_eq!(d.revision, 42);
    assert_eq!(d.rotate, ["etcd", "front-proxy"]);
    assert_eq!(d.rotated(), [CaKind::Etcd, CaKind::FrontProxy]);
    assert_eq!(d.token, None, "the default token is not written");
    assert_eq!(d.warnings, Vec::<String>::new());
    let cas: Vec<(&str, bool)> = d.cas.iter().map(|c| (c.ca.as_str(), c.key_read_back)).collect();
    assert_eq!(
        cas,
        [("etcd", false), ("kubernetes", true), ("front-proxy", false)]
    );
    let to = |rel: &str| {
        d.reads
            .iter()
            .find(|r| r.to == rel)
            .unwrap_or_else(|| panic!("{rel}: {:?}", d.reads))
    };
    assert_eq!(to("pki/kubernetes/ca.key").remote, kf::CA_KEY);
    assert_eq!(to("pki/kubernetes/ca.key").form, Form::File { mode: 0o600 });
    assert_eq!(to("pki/kubernetes/ca.crt").remote, kf::SIGNING_CA_CRT);
    assert_eq!(to("pki/sa.key").host, "cp1");
    assert_eq!(to("kubernetes/encryption-key").form, Form::EncryptionKey);
    assert_eq!(to("pki/etcd/server-cp2.key").host, "cp2");
    assert_eq!(to("pki/etcd/server-cp2.key").sha256, "cp2-server.key");
    assert_eq!(to("pki/kubernetes/apiserver-cp3.crt").host, "cp3");
    assert_eq!(
        to("pki/etcd/apiserver-etcd-client.key").remote,
        kf::ETCD_CLIENT_KEY
    );
    assert_eq!(to("pki/front-proxy/ca.crt").form, Form::TrustedCa);
    let last = d.reads.last().unwrap();
    assert_eq!(
        (last.to.as_str(), last.form),
        ("pki/etcd/ca.crt", Form::TrustedCa)
    );
    assert!(
        !d.reads
            .iter()
            .any(|r| r.to.contains("front-proxy/ca.key") || r.to == "pki/etcd/ca.key"),
        "the keys that lived only in the state directory are not looked for"
    );
    // The decisions survive their JSON (a resumed run reloads them).
    let json = serde_json::to_string(&d).unwrap();
    assert_eq!(serde_json::from_str::<Decisions>(&json).unwrap(), d);
}

#[test]
fn every_difference_between_the_inventory_and_the_cluster_is_named() {
    let inv = inv();
    type Change = Box<dyn Fn(&mut BTreeMap<String, HostSeen>, &Cas)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "a member the inventory lacks",
            Box::new(|s, _| {
                let mut list = MEMBERS.to_vec();
                list.push(("cp4", 14, false));
                for h in ["cp1", "cp2", "cp3"] {
                    s.get_mut(h).unwrap().facts.members = Some(members(&list));
                }
            }),
            "member cp4 (https://10.0.0.14:2380) is not an etcd host of the inventory",
        ),
        (
            "an etcd host without a member",
            Box::new(|s, _| {
                for h in ["cp1", "cp2", "cp3"] {
                    s.get_mut(h).unwrap().facts.members = Some(members(&MEMBERS[..2]));
                }
            }),
            "cp3: the inventory makes it an etcd member at https://10.0.0.13:2380, but the cluster has no member there",
        ),
        (
            "a member under another name",
            Box::new(|s, _| {
                let list = [("cp1", 11, false), ("etcd-b", 12, false), ("cp3", 13, false)];
                for h in ["cp1", "cp2", "cp3"] {
                    s.get_mut(h).unwrap().facts.members = Some(members(&list));
                }
            }),
            "member etcd-b at https://10.0.0.12:2380 is host cp2 in the inventory",
        ),
        (
            "a learner",
            Box::new(|s, _| {
                let list = [("cp1", 11, false), ("cp2", 12, true), ("cp3", 13, false)];
                s.get_mut("cp1").unwrap().facts.members = Some(members(&list));
            }),
            "member cp2 (https://10.0.0.12:2380) is a learner",
        ),
        (
            "a stopped member",
            Box::new(|s, _| {
                s.get_mut("cp2").unwrap().facts.units.insert("etcd.service".into(), unit("inactive"));
            }),
            "cp2: the inventory gives it the etcd role, but hactl's etcd.service is inactive there",
        ),
        (
            "a load balancer that runs nothing",
            Box::new(|s, _| {
                s.get_mut("lb2").unwrap().facts.units.clear();
            }),
            "lb2: the inventory gives it the load-balancer role, but hactl's HAProxy is not installed there",
        ),
        (
            "a load balancer the inventory does not name",
            Box::new(|s, _| {
                let f = &mut s.get_mut("cp2").unwrap().facts;
                f.units.insert("haproxy.service".into(), unit("active"));
                f.files.insert(crate::load_balancer::HAPROXY_CFG.into(), file("cfg"));
            }),
            "cp2: runs hactl's HAProxy, but the inventory gives it no load-balancer role",
        ),
        (
            "an apiserver that does not run",
            Box::new(|s, _| {
                s.get_mut("cp3").unwrap().facts.units.remove("kube-apiserver.service");
            }),
            "cp3: the inventory gives it the control-plane role, but kube-apiserver is not installed there",
        ),
        (
            "a rotation under way",
            Box::new(|s, c| {
                let both = format!("{}{}", c.etcd, ca("next"));
                s.get_mut("cp2").unwrap().facts.trusted.insert(format!("{}/ca.crt", crate::etcd::PKI_DIR), both);
            }),
            "cp2: /etc/hactl/pki/etcd/ca.crt holds 2 CA certificates: a rotation of the etcd CA was under way",
        ),
        (
            "two front-proxy CAs",
            Box::new(|s, _| {
                s.get_mut("cp3").unwrap().facts.trusted.insert(kf::FRONT_PROXY_CA_CRT.into(), ca("other"));
            }),
            "the hosts trust different front-proxy CAs",
        ),
        (
            "two service-account keys",
            Box::new(|s, _| {
                s.get_mut("cp2").unwrap().facts.files.insert(kf::SA_KEY.into(), file("other"));
            }),
            "/etc/hactl/pki/kubernetes/sa.key differs between the control-plane hosts (cp1, cp2, cp3)",
        ),
        (
            "a missing key",
            Box::new(|s, _| {
                s.get_mut("cp1").unwrap().facts.files.remove(kf::CA_KEY);
            }),
            "cp1: /etc/hactl/pki/kubernetes/ca.key is missing",
        ),
        (
            "a fenced unit",
            Box::new(|s, _| {
                s.get_mut("cp1").unwrap().fences.push("/etc/systemd/system/etcd.service.d/hactl-fence.conf".into());
            }),
            "cp1: /etc/systemd/system/etcd.service.d/hactl-fence.conf fences a unit",
        ),
        (
            "a host in maintenance",
            Box::new(|s, _| {
                s.get_mut("cp2").unwrap().maintenance.push(("cp2".into(), "Drain".into(), "t".into()));
            }),
            "cp2 is in maintenance (stage Drain",
        ),
        (
            "two clusters",
            Box::new(|s, _| {
                let mut other = members(&MEMBERS);
                other.header.cluster_id = 0xdef;
                s.get_mut("cp3").unwrap().facts.members = Some(other);
            }),
            "the etcd hosts belong to 2 clusters (cp1: abc, cp2: abc, cp3: def)",
        ),
    ];
    for (what, change, want) in cases {
        let c = cas();
        let mut seen = healthy(&inv, &c);
        change(&mut seen, &c);
        let problems = decide(&inv, &seen).expect_err(what);
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{what}: no {want:?} in {problems:#?}"
        );
    }
}

#[test]
fn client_certificates_that_differ_are_a_warning_and_a_recovered_token_is_kept() {
    let (inv, c) = (inv(), cas());
    let mut seen = healthy(&inv, &c);
    seen.get_mut("cp3")
        .unwrap()
        .facts
        .files
        .insert(kf::SCHEDULER_CRT.into(), file("older"));
    for h in ["cp1", "cp2", "cp3"] {
        seen.get_mut(h).unwrap().token = Some("hactl-example-recover-1".into());
    }
    let d = decide(&inv, &seen).unwrap();
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(
        d.warnings[0].contains("scheduler.crt differs"),
        "{:?}",
        d.warnings
    );
    assert_eq!(d.token.as_deref(), Some("hactl-example-recover-1"));
}

#[test]
fn without_kubernetes_only_the_etcd_ca_is_read_and_rotated() {
    let yaml = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: plain\nspec:\n  ssh:\n    agent: true\n  hosts:\n    - { name: cp1, address: 10.0.0.11, roles: [etcd] }\n    - { name: cp2, address: 10.0.0.12, roles: [etcd] }\n    - { name: cp3, address: 10.0.0.13, roles: [etcd] }\n";
    let inv = crate::inventory::load_str(std::path::Path::new("/nonexistent/plain.yaml"), yaml).unwrap();
    let c = cas();
    let d = decide(&inv, &healthy(&inv, &c)).unwrap();
    assert_eq!(d.rotate, ["etcd"]);
    assert_eq!(d.cas.len(), 1);
    assert!(
        d.reads.iter().all(|r| r.to.starts_with("pki/etcd/")),
        "{:?}",
        d.reads
    );
    assert_eq!(d.reads.len(), 3 * 4 + 2 + 1);
}

/// The bytes the hosts of a cluster set up from `pki_dir` would give back for `reads`.
fn read_back(reads: &[Read], pki_dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let key = crate::kubernetes::secrets::EncryptionKey::from_bytes([3u8; 32]);
    reads
        .iter()
        .map(|r| {
            let bytes = match r.form {
                Form::EncryptionKey => crate::kubernetes::secrets::encryption_config(&key)
                    .unwrap()
                    .into_bytes(),
                _ => std::fs::read(pki_dir.join(r.to.strip_prefix("pki/").unwrap())).unwrap(),
            };
            (r.to.clone(), bytes)
        })
        .collect()
}

#[test]
fn the_files_read_back_must_be_a_pki_that_holds_together() {
    let (inv, c) = (inv(), cas());
    let d = decide(&inv, &healthy(&inv, &c)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    crate::pki::ensure(&pki, &inv, time::OffsetDateTime::now_utc()).unwrap();
    let good = read_back(&d.reads, &pki);
    assert_eq!(check_read_back(&d.reads, &good), Vec::<String>::new());

    let other = tmp.path().join("other");
    crate::pki::ensure(&other, &inv, time::OffsetDateTime::now_utc()).unwrap();
    let cases: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        (
            "a key of another certificate",
            "pki/etcd/peer-cp2.key",
            std::fs::read(pki.join("etcd/peer-cp3.key")).unwrap(),
            "cp2:/etc/hactl/pki/etcd/peer.key: the key is not the key of cp2:/etc/hactl/pki/etcd/peer.crt",
        ),
        (
            "a leaf of another CA",
            "pki/kubernetes/scheduler.crt",
            std::fs::read(other.join("kubernetes/scheduler.crt")).unwrap(),
            "cp1:/etc/hactl/pki/kubernetes/scheduler.crt: not signed by the CA the hosts trust (cp1:/etc/hactl/pki/kubernetes/signing-ca.crt)",
        ),
        (
            "a CA key that is not the CA's",
            "pki/kubernetes/ca.key",
            std::fs::read(other.join("kubernetes/ca.key")).unwrap(),
            "cp1:/etc/hactl/pki/kubernetes/ca.key: the key is not the key of cp1:/etc/hactl/pki/kubernetes/signing-ca.crt",
        ),
        (
            "a service-account public key of another key",
            "pki/sa.pub",
            std::fs::read(other.join("sa.pub")).unwrap(),
            "cp1:/etc/hactl/pki/kubernetes/sa.pub: not the public key of cp1:/etc/hactl/pki/kubernetes/sa.key",
        ),
        (
            "an edited encryption configuration",
            "kubernetes/encryption-key",
            b"kind: EncryptionConfiguration\n".to_vec(),
            "cp1:/etc/hactl/kubernetes/encryption-config.yaml: not the encryption configuration hactl writes",
        ),
    ];
    for (what, rel, bytes, want) in cases {
        let mut files = good.clone();
        files.insert(rel.to_string(), bytes);
        let problems = check_read_back(&d.reads, &files);
        assert!(
            problems.iter().any(|p| p == want || p.starts_with(want)),
            "{what}: no {want:?} in {problems:#?}"
        );
        assert!(
            problems.iter().all(|p| !p.contains("BEGIN")),
            "{what}: key material in {problems:#?}"
        );
    }
}
