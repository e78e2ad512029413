//! adopt's decisions, pure: whether the inventory describes the cluster that runs (its etcd
//! members at their peer URLs, each host's roles as its units show them), whether the hosts agree
//! on one CA of each kind and on the secrets every control-plane host must share, and what to
//! read back from which host into which file of the state directory. Table-tested below.
//!
//! Invariant: no I/O; what the hosts hold comes in as observed ([`HostSeen`]), and the result
//! names every difference at once, each with what to do about it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::facts::HostFacts;
use crate::identity::{self, CaCert};
use crate::inventory::{Host, Inventory, KubernetesMode, Role};
use crate::kubernetes::files as kf;
use crate::pki::CaKind;

/// What one host showed adopt (read-only): its facts, and the few things the facts probe does
/// not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSeen {
    pub facts: HostFacts,
    /// hactl fence drop-ins present (a unit an operation stopped and did not bring back).
    pub fences: Vec<String>,
    /// Maintenance records on the host that have not reached `Complete`: (host, stage, since).
    pub maintenance: Vec<(String, String, String)>,
    /// `ETCD_INITIAL_CLUSTER_TOKEN` of the host's `etcd-initial.env`.
    pub token: Option<String>,
}

/// How a file read back becomes a file of the state directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Form {
    /// Copied byte for byte, with this mode.
    File { mode: u32 },
    /// A CA certificate the hosts trust, whose key is not on them: it becomes the state's
    /// signing CA certificate (keyless until its rotation replaces it); written after every
    /// other file, the etcd CA last (what marks the read-back done).
    TrustedCa,
    /// `encryption-config.yaml`: its key becomes `kubernetes/encryption-key`.
    EncryptionKey,
    /// The backup remote's pinned host key: added to the state's `known_hosts`.
    RemoteKnownHosts,
}

/// One file to read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Read {
    pub host: String,
    /// The path on the host.
    pub remote: String,
    /// Relative to the state directory.
    pub to: String,
    /// What the facts probe saw (the read is checked against it).
    pub sha256: String,
    pub form: Form,
}

/// One etcd member as the cluster lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenMember {
    pub name: String,
    pub id: String,
    pub peer_urls: Vec<String>,
}

/// One CA the hosts trust.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenCa {
    /// `etcd`, `kubernetes`, `front-proxy`.
    pub ca: String,
    pub fingerprint: String,
    pub subject: String,
    /// Its key is read back (the Kubernetes CA: the controller-manager signs with it); else
    /// it is rotated to a new CA.
    pub key_read_back: bool,
}

/// What adopt will do, saved as the run's `decisions.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decisions {
    /// Hex.
    pub cluster_id: String,
    /// The highest revision a member reported (the high-water mark the state starts from).
    pub revision: i64,
    pub members: Vec<SeenMember>,
    pub cas: Vec<SeenCa>,
    /// The CAs rotated to new ones (`etcd`, and `front-proxy` with Kubernetes).
    pub rotate: Vec<String>,
    pub reads: Vec<Read>,
    /// The etcd lineage token, when it is not the default (a recover changed it).
    pub token: Option<String>,
    pub warnings: Vec<String>,
}

impl Decisions {
    /// The CAs rotated, as kinds.
    pub fn rotated(&self) -> Vec<CaKind> {
        self.rotate.iter().filter_map(|d| kind_named(d)).collect()
    }
}

/// The kind whose directory is `dir`.
pub fn kind_named(dir: &str) -> Option<CaKind> {
    [CaKind::Etcd, CaKind::Kubernetes, CaKind::FrontProxy]
        .into_iter()
        .find(|k| k.dir() == dir)
}

fn active(f: &HostFacts, unit: &str) -> bool {
    f.units.get(unit).is_some_and(|u| u.active == "active")
}

fn unit_state(f: &HostFacts, unit: &str) -> String {
    f.units
        .get(unit)
        .map(|u| u.active.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "not installed".into())
}

/// Whether hactl's own file is at `path` (present, with hactl's header).
fn ours(f: &HostFacts, path: &str) -> bool {
    f.files.contains_key(path) && !f.foreign.contains(path)
}

/// Whether `host` runs an etcd member of hactl's.
fn runs_etcd(f: &HostFacts) -> bool {
    active(f, crate::etcd::UNIT) && ours(f, crate::etcd::UNIT_PATH)
}

/// Whether `host` runs a kube-apiserver (a unit, or hactl's static-pod manifest).
fn runs_apiserver(f: &HostFacts) -> bool {
    use crate::kubernetes::Component;
    active(f, "kube-apiserver.service") || ours(f, &Component::ApiServer.manifest_path())
}

/// Whether `host` runs hactl's load balancer.
fn runs_load_balancer(f: &HostFacts) -> bool {
    active(f, "haproxy.service") && ours(f, crate::load_balancer::HAPROXY_CFG)
}

/// The etcd CA's leaves on every etcd host, and where they go in the state directory.
const ETCD_LEAVES: [(&str, &str); 4] = [
    ("server.crt", "server-{}.crt"),
    ("server.key", "server-{}.key"),
    ("peer.crt", "peer-{}.crt"),
    ("peer.key", "peer-{}.key"),
];

/// Files read from the first control-plane host that every control-plane host must hold
/// alike: a difference means the cluster disagrees with itself (two service-account keys, two
/// encryption keys), which adopt cannot settle.
const SHARED_SECRETS: [(&str, &str, Form); 5] = [
    (
        kf::SIGNING_CA_CRT,
        "pki/kubernetes/ca.crt",
        Form::File { mode: 0o644 },
    ),
    (kf::CA_KEY, "pki/kubernetes/ca.key", Form::File { mode: 0o600 }),
    (kf::SA_KEY, "pki/sa.key", Form::File { mode: 0o600 }),
    (kf::SA_PUB, "pki/sa.pub", Form::File { mode: 0o644 }),
    (
        kf::ENCRYPTION_CONFIG,
        crate::kubernetes::secrets::ENCRYPTION_KEY,
        Form::EncryptionKey,
    ),
];

/// Client certificates read from the first control-plane host: they may differ between hosts
/// (the first host's are taken, and the next roll gives them to the others).
const SHARED_CLIENTS: [(&str, &str); 10] = [
    (
        kf::KUBELET_CLIENT_CRT,
        "pki/kubernetes/apiserver-kubelet-client.crt",
    ),
    (
        kf::KUBELET_CLIENT_KEY,
        "pki/kubernetes/apiserver-kubelet-client.key",
    ),
    (
        kf::CONTROLLER_MANAGER_CRT,
        "pki/kubernetes/controller-manager.crt",
    ),
    (
        kf::CONTROLLER_MANAGER_KEY,
        "pki/kubernetes/controller-manager.key",
    ),
    (kf::SCHEDULER_CRT, "pki/kubernetes/scheduler.crt"),
    (kf::SCHEDULER_KEY, "pki/kubernetes/scheduler.key"),
    (kf::FRONT_PROXY_CLIENT_CRT, "pki/front-proxy/client.crt"),
    (kf::FRONT_PROXY_CLIENT_KEY, "pki/front-proxy/client.key"),
    (kf::ETCD_CLIENT_CRT, "pki/etcd/apiserver-etcd-client.crt"),
    (kf::ETCD_CLIENT_KEY, "pki/etcd/apiserver-etcd-client.key"),
];

fn mode_of(path: &str) -> u32 {
    if path.ends_with(".key") || path.ends_with("id_ed25519") {
        0o600
    } else {
        0o644
    }
}

/// Decides what adopt reads back, or every reason it must not (refusal lines, each saying
/// what to do). `seen` holds every inventory host with a role.
pub fn decide(inv: &Inventory, seen: &BTreeMap<String, HostSeen>) -> Result<Decisions, Vec<String>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    for h in &hosts {
        if !seen.contains_key(&h.name) {
            problems.push(format!("{}: not observed", h.name));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let facts = |h: &Host| &seen[&h.name].facts;

    // The etcd members against the etcd hosts.
    let etcd_hosts = inv.with_role(Role::Etcd);
    let lists: Vec<(&str, &crate::etcd::MemberList)> = etcd_hosts
        .iter()
        .filter_map(|h| facts(h).members.as_ref().map(|m| (h.name.as_str(), m)))
        .collect();
    let ids: BTreeSet<u64> = lists.iter().map(|(_, m)| m.header.cluster_id).collect();
    if ids.len() > 1 {
        problems.push(format!(
            "the etcd hosts belong to {} clusters ({}): adopt takes one cluster; give the inventory \
             only the hosts of the cluster to adopt, and `hactl reset` the others if they are to be wiped",
            ids.len(),
            lists
                .iter()
                .map(|(h, m)| format!("{h}: {:x}", m.header.cluster_id))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut members: Vec<crate::etcd::Member> =
        lists.first().map(|(_, m)| m.members.clone()).unwrap_or_default();
    // In inventory order (etcd lists them by ID), the unknown ones last.
    let place = |m: &crate::etcd::Member| {
        etcd_hosts
            .iter()
            .position(|h| m.peer_urls.contains(&crate::etcd::peer_url(inv, h)))
            .unwrap_or(usize::MAX)
    };
    members.sort_by_key(|m| (place(m), m.id));
    if lists.is_empty() {
        problems.push(format!(
            "no etcd member answered on the inventory's etcd hosts ({}): adopt reads a running \
             cluster; start its members (or, with quorum lost, `hactl recover` once the state \
             directory is back)",
            etcd_hosts
                .iter()
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let url_of: BTreeMap<String, &str> = etcd_hosts
        .iter()
        .map(|h| (crate::etcd::peer_url(inv, h), h.name.as_str()))
        .collect();
    for m in &members {
        let label = if m.name.is_empty() {
            format!("{:x}", m.id)
        } else {
            m.name.clone()
        };
        let urls = m.peer_urls.join(",");
        if m.is_learner {
            problems.push(format!(
                "member {label} ({urls}) is a learner: a membership change was under way; finish \
                 or undo it with etcdctl on a member host (`hactl-etcdctl member promote` or \
                 `member remove`), then run adopt again"
            ));
        }
        if !m.is_started() {
            problems.push(format!(
                "member {label} ({urls}) was added but never started: a join was under way; \
                 remove it (`hactl-etcdctl member remove {:x}` on a member host) or start it, then run adopt again",
                m.id
            ));
        }
        match m.peer_urls.iter().find_map(|u| url_of.get(u)) {
            None => problems.push(format!(
                "member {label} ({urls}) is not an etcd host of the inventory: add its host with \
                 the etcd role at that address"
            )),
            Some(host) if m.is_started() && m.name != *host => problems.push(format!(
                "member {label} at {urls} is host {host} in the inventory: hactl names each member \
                 after its host; name the host {label} in the inventory"
            )),
            Some(_) => {}
        }
    }
    for h in &etcd_hosts {
        let url = crate::etcd::peer_url(inv, h);
        if !lists.is_empty() && !members.iter().any(|m| m.peer_urls.contains(&url)) {
            problems.push(format!(
                "{}: the inventory makes it an etcd member at {url}, but the cluster has no member \
                 there (members: {}): remove the etcd role from it in the inventory, or give it the \
                 address its member has",
                h.name,
                members
                    .iter()
                    .map(|m| format!("{} {}", m.name, m.peer_urls.join(",")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }

    // Each host's roles against what it runs.
    for h in &hosts {
        let f = facts(h);
        let role_problem = |what: &str, want: bool, have: bool, state: String, role: &str| match (want, have)
        {
            (true, false) => Some(format!(
                "{}: the inventory gives it the {role} role, but {what} is {state} there: \
                     start it, or take the role away in the inventory",
                h.name
            )),
            (false, true) => Some(format!(
                "{}: runs {what}, but the inventory gives it no {role} role: add the role",
                h.name
            )),
            _ => None,
        };
        problems.extend(role_problem(
            "hactl's etcd.service",
            h.has(Role::Etcd),
            runs_etcd(f),
            unit_state(f, crate::etcd::UNIT),
            "etcd",
        ));
        let want_cp = crate::kubernetes::spec_for(inv, h).is_some();
        if !want_cp && runs_apiserver(f) && h.has(Role::ControlPlane) {
            problems.push(format!(
                "{}: runs kube-apiserver, but the inventory has no kubernetes section: add it, \
                 with the version and mode that run",
                h.name
            ));
        } else {
            problems.extend(role_problem(
                "kube-apiserver",
                want_cp,
                runs_apiserver(f),
                unit_state(f, "kube-apiserver.service"),
                "control-plane",
            ));
        }
        problems.extend(role_problem(
            "hactl's HAProxy",
            h.has(Role::LoadBalancer),
            runs_load_balancer(f),
            unit_state(f, "haproxy.service"),
            "load-balancer",
        ));
        let hs = &seen[&h.name];
        for fence in &hs.fences {
            problems.push(format!(
                "{}: {fence} fences a unit a hactl operation stopped and did not bring back; adopt \
                 rolls every member and needs all of them serving: finish that operation where its \
                 state directory is, or lift the fence by hand (`rm {fence} && systemctl \
                 daemon-reload`, then start the unit) once you know why it is there",
                h.name
            ));
        }
        for (host, stage, since) in &hs.maintenance {
            problems.push(format!(
                "{}: {host} is in maintenance (stage {stage}, since {since}; \
                 {}/{host}.json): adopt rolls every member and needs all of them serving; bring \
                 the host back first",
                h.name,
                crate::operations::maintenance_record::HOST_RECORD_DIR
            ));
        }
    }

    // One CA of each kind, in one trust file each.
    let kinds: &[CaKind] = if inv.kubernetes.is_some() {
        &[CaKind::Etcd, CaKind::Kubernetes, CaKind::FrontProxy]
    } else {
        &[CaKind::Etcd]
    };
    let mut cas = Vec::new();
    for &kind in kinds {
        let mut found: BTreeMap<String, (CaCert, Vec<String>)> = BTreeMap::new();
        for h in &hosts {
            for (path, pem) in &facts(h).trusted {
                if identity::kind_of(path) != Some(kind) {
                    continue;
                }
                let certs = identity::certs_in(pem);
                match certs.as_slice() {
                    [one] => {
                        found
                            .entry(one.fingerprint.clone())
                            .or_insert_with(|| (one.clone(), Vec::new()))
                            .1
                            .push(format!("{}:{path}", h.name));
                    }
                    _ => problems.push(format!(
                        "{}: {path} holds {} CA certificates: a rotation of the {} CA was under way \
                         when the state directory was lost, and adopt reads one CA per trust file \
                         (docs/development/known-gaps.md); restore the state directory from a backup \
                         bundle instead",
                        h.name,
                        certs.len(),
                        kind.dir()
                    )),
                }
            }
        }
        match found.len() {
            0 => problems.push(format!(
                "no host trusts a {} CA (its trust files are missing): not a cluster hactl set up, \
                 or one that was reset",
                kind.dir()
            )),
            1 => {
                let (cert, _) = found.into_values().next().expect("one");
                cas.push(SeenCa {
                    ca: kind.dir().into(),
                    fingerprint: cert.fingerprint,
                    subject: cert.subject,
                    key_read_back: kind == CaKind::Kubernetes,
                });
            }
            _ => problems.push(format!(
                "the hosts trust different {} CAs: {}; adopt takes one cluster: give the inventory \
                 only the hosts of the cluster to adopt",
                kind.dir(),
                found
                    .values()
                    .map(|(c, at)| format!("{c} on {}", at.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        }
    }

    // What to read back, from where.
    let mut reads = Vec::new();
    let mut need =
        |host: &Host, remote: &str, to: String, form: Form, problems: &mut Vec<String>| match facts(host)
            .files
            .get(remote)
        {
            Some(f) => reads.push(Read {
                host: host.name.clone(),
                remote: remote.to_string(),
                to,
                sha256: f.sha256.clone(),
                form,
            }),
            None => problems.push(format!(
                "{}: {remote} is missing: the host is not set up as hactl sets up its role; \
                 restore the file, or take the role away in the inventory",
                host.name
            )),
        };
    let differs = |hosts: &[&Host], path: &str| -> bool {
        let shas: BTreeSet<Option<&str>> = hosts
            .iter()
            .map(|h| facts(h).files.get(path).map(|f| f.sha256.as_str()))
            .collect();
        shas.len() > 1
    };
    let etcd_dir = crate::etcd::PKI_DIR;
    for h in &etcd_hosts {
        for (file, to) in ETCD_LEAVES {
            need(
                h,
                &format!("{etcd_dir}/{file}"),
                format!("pki/etcd/{}", to.replace("{}", &h.name)),
                Form::File { mode: mode_of(file) },
                &mut problems,
            );
        }
    }
    if let Some(first) = etcd_hosts.first() {
        for (file, to) in [
            ("client.crt", "hactl-client.crt"),
            ("client.key", "hactl-client.key"),
        ] {
            let path = format!("{etcd_dir}/{file}");
            if differs(&etcd_hosts, &path) {
                warnings.push(format!(
                    "{path} differs between the etcd hosts: {}'s is read back, and the next roll \
                     gives it to the others",
                    first.name
                ));
            }
            need(
                first,
                &path,
                format!("pki/etcd/{to}"),
                Form::File { mode: mode_of(file) },
                &mut problems,
            );
        }
        if inv.backup.remote.is_some() {
            use crate::backup_remote::{HOST_KEY, HOST_KNOWN_HOSTS, STATE_KEY};
            if facts(first).files.contains_key(HOST_KEY) {
                need(
                    first,
                    HOST_KEY,
                    STATE_KEY.into(),
                    Form::File { mode: 0o600 },
                    &mut problems,
                );
            } else {
                warnings.push(format!(
                    "{}: no backup push key ({HOST_KEY}): `hactl up` makes a new one and \
                     authorizes it on the backup remote",
                    first.name
                ));
            }
            if facts(first).files.contains_key(HOST_KNOWN_HOSTS) {
                need(
                    first,
                    HOST_KNOWN_HOSTS,
                    "known_hosts".into(),
                    Form::RemoteKnownHosts,
                    &mut problems,
                );
            }
        }
    }
    let control_planes: Vec<&Host> = hosts
        .iter()
        .copied()
        .filter(|h| crate::kubernetes::spec_for(inv, h).is_some())
        .collect();
    for h in &control_planes {
        need(
            h,
            kf::APISERVER_CRT,
            format!("pki/kubernetes/apiserver-{}.crt", h.name),
            Form::File { mode: 0o644 },
            &mut problems,
        );
        need(
            h,
            kf::APISERVER_KEY,
            format!("pki/kubernetes/apiserver-{}.key", h.name),
            Form::File { mode: 0o600 },
            &mut problems,
        );
    }
    if let Some(first) = control_planes.first() {
        for (path, to, form) in SHARED_SECRETS {
            if differs(&control_planes, path) {
                problems.push(format!(
                    "{path} differs between the control-plane hosts ({}): the apiservers disagree \
                     with each other, and adopt cannot tell which is the cluster's; restore the state \
                     directory from a backup bundle instead",
                    control_planes
                        .iter()
                        .map(|h| h.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            need(first, path, to.to_string(), form, &mut problems);
        }
        for (path, to) in SHARED_CLIENTS {
            if differs(&control_planes, path) {
                warnings.push(format!(
                    "{path} differs between the control-plane hosts: {}'s is read back, and the \
                     next roll gives it to the others",
                    first.name
                ));
            }
            need(
                first,
                path,
                to.to_string(),
                Form::File { mode: mode_of(path) },
                &mut problems,
            );
        }
        need(
            first,
            kf::FRONT_PROXY_CA_CRT,
            "pki/front-proxy/ca.crt".into(),
            Form::TrustedCa,
            &mut problems,
        );
        if let Some(kube) = &inv.kubernetes {
            if kube.mode == KubernetesMode::StaticPod {
                warnings.push(
                    "static-pod mode: adopt was tested in systemd mode only (docs/development/known-gaps.md)"
                        .into(),
                );
            }
        }
    }
    // The etcd CA last: its file in the state directory marks the read-back done.
    if let Some(first) = etcd_hosts.first() {
        need(
            first,
            &format!("{etcd_dir}/ca.crt"),
            "pki/etcd/ca.crt".into(),
            Form::TrustedCa,
            &mut problems,
        );
    }

    if !problems.is_empty() {
        return Err(problems);
    }
    let revision = hosts
        .iter()
        .flat_map(|h| {
            let f = facts(h);
            let listed = f.members.as_ref().map(|m| m.header.revision);
            let own = f.etcd_status.as_ref().map(|s| s.header.revision);
            listed.into_iter().chain(own)
        })
        .max()
        .unwrap_or(0);
    let token = etcd_hosts
        .first()
        .and_then(|h| seen[&h.name].token.clone())
        .filter(|t| !t.is_empty() && *t != crate::etcd::token(inv));
    let mut rotate = vec![CaKind::Etcd.dir().to_string()];
    if inv.kubernetes.is_some() {
        rotate.push(CaKind::FrontProxy.dir().to_string());
    }
    Ok(Decisions {
        cluster_id: ids.iter().next().map(|i| format!("{i:x}")).unwrap_or_default(),
        revision,
        members: members
            .iter()
            .map(|m| SeenMember {
                name: m.name.clone(),
                id: format!("{:x}", m.id),
                peer_urls: m.peer_urls.clone(),
            })
            .collect(),
        cas,
        rotate,
        reads,
        token,
        warnings,
    })
}

/// What the read-back found wrong with the files it read (`to` → bytes, as [`Read::to`] names
/// them), before any is written: a key that is not its certificate's, a leaf its CA did not
/// sign, a service-account public key that is not its private key's, an encryption
/// configuration hactl did not write. Pure; reports every problem, never a byte of a key.
pub fn check_read_back(reads: &[Read], files: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let text = |rel: &str| files.get(rel).map(|b| String::from_utf8_lossy(b).into_owned());
    let at = |rel: &str| {
        reads
            .iter()
            .find(|r| r.to == rel)
            .map(|r| format!("{}:{}", r.host, r.remote))
            .unwrap_or_else(|| rel.to_string())
    };
    let mut problems = Vec::new();
    for r in reads {
        let Some(cert_rel) = r.to.strip_suffix(".key").map(|s| format!("{s}.crt")) else {
            continue;
        };
        if let (Some(cert), Some(key)) = (text(&cert_rel), text(&r.to)) {
            if !crate::pki::key_matches_certificate(&cert, &key) {
                problems.push(format!(
                    "{}: the key is not the key of {}",
                    at(&r.to),
                    at(&cert_rel)
                ));
            }
        }
    }
    for (dir, ca_rel) in [
        ("pki/etcd/", "pki/etcd/ca.crt"),
        ("pki/kubernetes/", "pki/kubernetes/ca.crt"),
        ("pki/front-proxy/", "pki/front-proxy/ca.crt"),
    ] {
        let Some(ca) = text(ca_rel) else { continue };
        for r in reads {
            if !r.to.starts_with(dir) || !r.to.ends_with(".crt") || r.to == ca_rel {
                continue;
            }
            let Some(leaf) = text(&r.to) else { continue };
            if !crate::pki::is_signed_by(&leaf, &ca).unwrap_or(false) {
                problems.push(format!(
                    "{}: not signed by the CA the hosts trust ({})",
                    at(&r.to),
                    at(ca_rel)
                ));
            }
        }
    }
    if let (Some(key), Some(public)) = (text("pki/sa.key"), text("pki/sa.pub")) {
        let derived = rcgen::KeyPair::from_pem(&key).map(|k| k.public_key_pem());
        if derived.as_deref().ok() != Some(public.as_str()) {
            problems.push(format!(
                "{}: not the public key of {}",
                at("pki/sa.pub"),
                at("pki/sa.key")
            ));
        }
    }
    let config = crate::kubernetes::secrets::ENCRYPTION_KEY;
    if let Some(t) = text(config) {
        if crate::kubernetes::secrets::key_from_config(&t).is_none() {
            problems.push(format!(
                "{}: not the encryption configuration hactl writes (edited by hand?): adopt cannot \
                 tell which key encrypts the Secrets; restore the state directory from a backup \
                 bundle instead",
                at(config)
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests;
