//! AD1 and AD2 against hosts made of files: a cluster set up from one PKI (its state directory
//! then lost), read back into an empty state directory. What `up` plans from the result must be
//! what the hosts hold, the trust files alone apart (the rotation's first roll), and the keys
//! that were on the hosts (the Kubernetes CA's, the service account's, the encryption key) must
//! come back byte for byte. The lab test (`adopt` in a Kubernetes lab) proves the rest on real
//! hosts.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::decide::{self, HostSeen};
use super::steps::{self, Inputs};
use crate::exec::{Output, Transport, Transports, UploadOutcome};
use crate::facts::{FileState, HostFacts, UnitState};
use crate::inventory::{Inventory, Role};
use crate::kubernetes::files as kf;
use crate::kubernetes::secrets::EncryptionKey;
use crate::operations::runner::LocalAct;
use crate::pki::{CaKind, Pki};
use crate::plan::{RemoteCommand, Upload};
use crate::state::StateDir;

/// A host whose files are a map; it answers the read-back (and nothing else).
struct Files {
    name: String,
    files: BTreeMap<String, Vec<u8>>,
}

#[async_trait]
impl Transport for Files {
    fn host(&self) -> &str {
        &self.name
    }
    fn sudo(&self) -> bool {
        false
    }
    async fn run(&self, cmd: &RemoteCommand) -> Result<Output, crate::ssh::Error> {
        use base64::Engine as _;
        assert!(cmd.read_only, "adopt sent a command that changes things");
        assert_eq!(cmd.argv[3], "hactl-adopt-read", "{}", cmd.line(false));
        let mut out = String::new();
        for path in &cmd.argv[4..] {
            match self.files.get(path) {
                Some(b) => out.push_str(&format!(
                    "{path} {}\n",
                    base64::engine::general_purpose::STANDARD.encode(b)
                )),
                None => out.push_str(&format!("{path} -\n")),
            }
        }
        Ok(Output {
            status: Some(0),
            stdout: out.into_bytes(),
            stderr: vec![],
        })
    }
    async fn upload(&self, u: &Upload) -> Result<UploadOutcome, crate::ssh::Error> {
        panic!("adopt uploaded {}", u.path)
    }
    async fn forward(&self, _h: &str, _p: u16) -> Result<(u16, crate::ssh::ForwardGuard), crate::ssh::Error> {
        unimplemented!("not used")
    }
}

fn inv() -> Inventory {
    crate::inventory::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/inventories/example.yaml"
    )))
    .unwrap()
}

fn key() -> EncryptionKey {
    EncryptionKey::from_bytes([9u8; 32])
}

/// What each host of `inv` holds when `up` set it up from `pki`: the files `up` uploads, by
/// the same functions.
fn hosts_of(inv: &Inventory, pki: &Pki) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
    let facts = BTreeMap::new();
    let ctx = crate::phases::Ctx::new(inv, pki, &facts);
    let inputs = crate::kubernetes::KubernetesInputs::new(None, key());
    let mut out = BTreeMap::new();
    for h in &inv.hosts {
        let mut files = BTreeMap::new();
        let mut put = |uploads: Vec<Upload>| {
            for u in uploads {
                files.insert(u.path.clone(), u.content.in_memory().unwrap().to_vec());
            }
        };
        if h.has(Role::Etcd) {
            put(crate::phases::etcd_files::member_files(h, &ctx).unwrap());
        }
        if h.has(Role::ControlPlane) {
            put(kf::host_files(h, inv, pki, &inputs).unwrap());
        }
        out.insert(h.name.clone(), files);
    }
    out
}

/// What the facts probe would report of those hosts.
fn seen_of(
    inv: &Inventory,
    hosts: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
) -> BTreeMap<String, HostSeen> {
    let members: crate::etcd::MemberList = serde_json::from_value(serde_json::json!({
        "header": {"cluster_id": 0x5eed, "revision": 1234},
        "members": inv.with_role(Role::Etcd).iter().enumerate().map(|(i, h)| serde_json::json!({
            "ID": 10 + i, "name": h.name, "peerURLs": [crate::etcd::peer_url(inv, h)],
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    let mut out = BTreeMap::new();
    for h in &inv.hosts {
        let mut f = HostFacts::default();
        for (path, bytes) in &hosts[&h.name] {
            f.files.insert(
                path.clone(),
                FileState {
                    sha256: hex::encode(Sha256::digest(bytes)),
                    ..Default::default()
                },
            );
            if crate::identity::kind_of(path).is_some() {
                f.trusted
                    .insert(path.clone(), String::from_utf8(bytes.clone()).unwrap());
            }
        }
        let active = UnitState {
            active: "active".into(),
            ..Default::default()
        };
        if h.has(Role::Etcd) {
            f.units.insert("etcd.service".into(), active.clone());
            f.members = Some(members.clone());
        }
        if h.has(Role::ControlPlane) {
            f.units.insert("kube-apiserver.service".into(), active.clone());
        }
        if h.has(Role::LoadBalancer) {
            f.units.insert("haproxy.service".into(), active.clone());
            f.files
                .insert(crate::load_balancer::HAPROXY_CFG.into(), FileState::default());
        }
        out.insert(
            h.name.clone(),
            HostSeen {
                facts: f,
                ..Default::default()
            },
        );
    }
    out
}

struct NoRoll;
#[async_trait]
impl LocalAct for NoRoll {
    fn describe(&self) -> String {
        "roll".into()
    }
    async fn act(&self, _: &Transports) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::Value::Null)
    }
}

fn uploads_by_path(inv: &Inventory, pki: &Pki, host: &str) -> BTreeMap<String, String> {
    let mut hosts = hosts_of(inv, pki);
    hosts
        .remove(host)
        .unwrap()
        .into_iter()
        .map(|(p, b)| (p, hex::encode(Sha256::digest(&b))))
        .collect()
}

#[tokio::test]
async fn the_read_back_rebuilds_a_state_directory_up_would_use_as_the_hosts_hold_it() {
    let inv = inv();
    let tmp = tempfile::tempdir().unwrap();
    let now = time::OffsetDateTime::now_utc();
    // The cluster, set up from a state directory since lost.
    let lost = crate::pki::ensure(&tmp.path().join("lost/pki"), &inv, now).unwrap();
    let hosts = hosts_of(&inv, &lost);
    let decisions = decide::decide(&inv, &seen_of(&inv, &hosts)).unwrap();
    let transports: Transports = hosts
        .iter()
        .map(|(name, files)| {
            (
                name.clone(),
                Arc::new(Files {
                    name: name.clone(),
                    files: files.clone(),
                }) as Arc<dyn Transport>,
            )
        })
        .collect();

    let state = StateDir::open_or_later(&tmp.path().join("adopted")).unwrap();
    let list = steps::steps(Inputs {
        state: state.clone(),
        inv: Arc::new(inv.clone()),
        run: "adopt-t1".into(),
        seen_keys: None,
        decisions: decisions.clone(),
        roll: Arc::new(NoRoll),
        publish: Box::new(|_| None),
    });
    let ids: Vec<&str> = list.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids[..3], ["AD1", "AD2", "C1-etcd"]);
    assert_eq!(ids.last(), Some(&"AD3"));
    let text: String = list.iter().map(|s| s.render(false)).collect();
    assert!(
        text.contains("cp1:/etc/hactl/pki/kubernetes/ca.key -> pki/kubernetes/ca.key (0600)"),
        "{text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "{text}");

    let mut journal = crate::operations::journal::Journal::dry_run("adopt-t1");
    let opts = crate::operations::runner::RunOptions::default();
    let out = crate::operations::runner::run(&list[..2], &transports, &mut journal, &opts)
        .await
        .unwrap();
    assert_eq!(out.done, ["AD1", "AD2"]);
    assert_eq!(super::acts::marker_run(&state).as_deref(), Some("adopt-t1"));

    // The keys that were on the hosts, byte for byte; the ones that were not, nowhere.
    let read = |rel: &str| std::fs::read_to_string(state.file(rel)).unwrap();
    assert_eq!(
        read("pki/kubernetes/ca.key"),
        lost.kubernetes_ca().unwrap().key_pem.expose()
    );
    assert_eq!(
        read("pki/sa.key"),
        lost.service_account_key().unwrap().key_pem.expose()
    );
    assert_eq!(
        read(crate::kubernetes::secrets::ENCRYPTION_KEY),
        crate::kubernetes::secrets::key_file_text(&key())
    );
    for gone in ["pki/etcd/ca.key", "pki/front-proxy/ca.key"] {
        assert!(!state.file(gone).exists(), "{gone}");
    }
    use std::os::unix::fs::MetadataExt as _;
    for secret in [
        "pki/kubernetes/ca.key",
        "pki/etcd/server-cp2.key",
        "kubernetes/encryption-key",
    ] {
        assert_eq!(
            std::fs::metadata(state.file(secret)).unwrap().mode() & 0o777,
            0o600,
            "{secret}"
        );
    }
    let hwm: crate::hwm::Hwm = serde_json::from_str(&read(crate::hwm::FILE)).unwrap();
    assert_eq!((hwm.revision, hwm.cluster_id.as_str()), (1234, "5eed"));

    // `up` from the adopted state: every file as the hosts hold it, but the etcd and
    // front-proxy trust files, which now carry the hosts' CA and the new one.
    let adopted = crate::pki::ensure(&state.file("pki"), &inv, now).unwrap();
    let next = |kind: CaKind| read(&format!("pki/{}/ca-next.crt", kind.dir()));
    assert_eq!(
        adopted.etcd_trust_pem(),
        format!("{}{}", lost.etcd_ca_pem(), next(CaKind::Etcd))
    );
    assert_eq!(
        adopted.front_proxy_trust_pem().unwrap(),
        format!(
            "{}{}",
            lost.front_proxy_ca().unwrap().cert_pem,
            next(CaKind::FrontProxy)
        )
    );
    for host in ["cp1", "cp3"] {
        let (before, after) = (
            uploads_by_path(&inv, &lost, host),
            uploads_by_path(&inv, &adopted, host),
        );
        let changed: Vec<&String> = before
            .keys()
            .filter(|p| before.get(*p) != after.get(*p))
            .collect();
        assert_eq!(
            changed,
            [
                "/etc/hactl/pki/apiserver-etcd/ca.crt",
                "/etc/hactl/pki/etcd/ca.crt",
                "/etc/hactl/pki/front-proxy/ca.crt"
            ],
            "{host}"
        );
    }

    // Run again: both steps hold.
    let again = crate::operations::runner::run(&list[..2], &transports, &mut journal, &opts)
        .await
        .unwrap();
    assert_eq!(again.skipped, ["AD1", "AD2"]);
}

#[tokio::test]
async fn a_file_that_changed_since_it_was_observed_stops_the_read_back_before_any_write() {
    let inv = inv();
    let tmp = tempfile::tempdir().unwrap();
    let lost = crate::pki::ensure(
        &tmp.path().join("lost/pki"),
        &inv,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let mut hosts = hosts_of(&inv, &lost);
    let decisions = decide::decide(&inv, &seen_of(&inv, &hosts)).unwrap();
    hosts
        .get_mut("cp2")
        .unwrap()
        .insert(kf::SA_KEY.into(), b"another key".to_vec());
    let transports: Transports = hosts
        .iter()
        .map(|(name, files)| {
            (
                name.clone(),
                Arc::new(Files {
                    name: name.clone(),
                    files: files.clone(),
                }) as Arc<dyn Transport>,
            )
        })
        .collect();
    let state = StateDir::open_or_later(&tmp.path().join("adopted")).unwrap();
    let act = super::acts::ReadBack {
        state: state.clone(),
        inv: Arc::new(inv.clone()),
        run: "adopt-t2".into(),
        decisions: decide::Decisions {
            // cp2's service-account key is the one read.
            reads: decisions
                .reads
                .iter()
                .cloned()
                .map(|mut r| {
                    if r.remote == kf::SA_KEY {
                        r.host = "cp2".into();
                    }
                    r
                })
                .collect(),
            ..decisions
        },
    };
    let e = format!("{:#}", act.act(&transports).await.unwrap_err());
    assert!(
        e.contains("cp2: /etc/hactl/pki/kubernetes/sa.key changed since it was observed"),
        "{e}"
    );
    assert!(!e.contains("another key"), "{e}");
    assert!(!state.path.exists(), "something was written");
}

/// With `spec.backup.remote`: the push key comes back from the first etcd host as the state's
/// key (what `up` then uploads unchanged), and the remote's host key, pinned on the etcd hosts,
/// joins the state's known_hosts.
#[tokio::test]
async fn the_backup_push_key_and_the_remotes_pinned_host_key_come_back() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: plain\nspec:\n  ssh:\n    agent: true\n  hosts:\n    - { name: cp1, address: 10.0.0.11, roles: [etcd] }\n    - { name: cp2, address: 10.0.0.12, roles: [etcd] }\n    - { name: cp3, address: 10.0.0.13, roles: [etcd] }\n  backup:\n    remote:\n      address: 10.0.0.50\n      path: /srv/backups/plain\n";
    let inv = crate::inventory::load_str(&tmp.path().join("plain.yaml"), yaml).unwrap();
    let lost_state = StateDir::open(&tmp.path().join("lost")).unwrap();
    let lost = crate::pki::ensure(&lost_state.file("pki"), &inv, time::OffsetDateTime::now_utc()).unwrap();
    let push = crate::backup_remote::ensure_key(&lost_state, "plain").unwrap();
    let remote_key =
        crate::backup_remote::ensure_key(&StateDir::open(&tmp.path().join("remote")).unwrap(), "remote")
            .unwrap();
    let key_only: Vec<&str> = remote_key.public_line.split_whitespace().take(2).collect();
    let pinned = format!("10.0.0.50 {}\n", key_only.join(" "));
    let mut hosts = hosts_of(&inv, &lost);
    for files in hosts.values_mut() {
        files.insert(
            crate::backup_remote::HOST_KEY.into(),
            push.private_openssh.clone().into_bytes(),
        );
        files.insert(
            crate::backup_remote::HOST_KNOWN_HOSTS.into(),
            pinned.clone().into_bytes(),
        );
    }
    let decisions = decide::decide(&inv, &seen_of(&inv, &hosts)).unwrap();
    let transports: Transports = hosts
        .iter()
        .map(|(name, files)| {
            (
                name.clone(),
                Arc::new(Files {
                    name: name.clone(),
                    files: files.clone(),
                }) as Arc<dyn Transport>,
            )
        })
        .collect();
    let state = StateDir::open_or_later(&tmp.path().join("adopted")).unwrap();
    let act = super::acts::ReadBack {
        state: state.clone(),
        inv: Arc::new(inv.clone()),
        run: "adopt-t3".into(),
        decisions,
    };
    act.act(&transports).await.unwrap();
    let again = crate::backup_remote::ensure_key(&state, "plain").unwrap();
    assert_eq!(
        again.private_openssh, push.private_openssh,
        "the push key, unchanged"
    );
    let remote = inv.backup.remote.as_ref().unwrap();
    assert_eq!(
        crate::backup_remote::known_hosts_lines(&state.known_hosts_path(), remote).trim(),
        pinned.trim(),
        "the remote's host key the etcd hosts pinned"
    );
}
