//! The cluster identity: which cluster the hosts belong to, checked against the state directory
//! before any command changes anything.
//!
//! A cluster is known by its CAs. Every host hactl set up trusts them through the trust files
//! the facts probe reads ([`crate::facts::TRUST_FILES`]), and its etcd members share one cluster
//! ID. A state directory that is lost, or the wrong one, holds other CAs (or none), and a
//! command that went on would issue certificates the members do not trust: the cluster would
//! be re-keyed under its own feet. So `up` and every other command that changes a cluster
//! compare first ([`check`]) and refuse (exit 2, [`refusal`]) a host whose trust files hold no
//! CA the state directory knows, naming the host, both fingerprints and the ways out.
//!
//! What the state knows of a kind ([`Expected::from_pki_dir`]): its signing CA and every other
//! CA certificate a rotation keeps beside it (`ca-next`, `ca-previous`, `ca-retired-<run>`), so
//! a host still trusting the old CA while a rotation is under way, or one left behind by a
//! finished one, is not taken for a stranger. A host without any trust file (a new host, or
//! one `hactl reset`) is accepted, as before.
//!
//! Invariant: pure apart from [`Expected::from_pki_dir`], which only reads; callers check before
//! their first write (the PKI is created only after the check), so a refusal leaves the hosts
//! and the state directory as they were.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::facts::HostFacts;
use crate::pki::CaKind;

/// The CA kind a trust file on a host belongs to.
pub fn kind_of(path: &str) -> Option<CaKind> {
    match path {
        "/etc/hactl/pki/etcd/ca.crt" | "/etc/hactl/pki/apiserver-etcd/ca.crt" => Some(CaKind::Etcd),
        "/etc/hactl/pki/kubernetes/ca.crt" | "/etc/hactl/pki/kubernetes/signing-ca.crt" => {
            Some(CaKind::Kubernetes)
        }
        "/etc/hactl/pki/front-proxy/ca.crt" => Some(CaKind::FrontProxy),
        _ => None,
    }
}

/// A read-only command that prints the trust files as the facts probe does (`trust <path>
/// <base64>` lines, parsed by [`crate::facts::parse`]): for operations, which gather their own
/// facts.
pub fn probe_command() -> crate::plan::RemoteCommand {
    let mut script = String::from("for c in");
    for path in crate::facts::TRUST_FILES {
        script.push(' ');
        script.push_str(path);
    }
    script.push_str("; do [ -f \"$c\" ] && echo \"trust $c $(base64 -w0 \"$c\")\"; done; exit 0");
    crate::plan::RemoteCommand::read_only(["sh", "-c", &script])
}

/// A certificate's SHA-256 fingerprint as `openssl x509 -noout -fingerprint -sha256` prints it
/// (`AB:CD:…`), so an operator can compare it on the host.
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// One CA certificate: its fingerprint and subject CN.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CaCert {
    pub fingerprint: String,
    pub subject: String,
}

impl fmt::Display for CaCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.fingerprint, self.subject)
    }
}

/// The CA certificates in a PEM text (a trust file holds one, or two during a rotation).
pub fn certs_in(pem: &str) -> Vec<CaCert> {
    crate::pki::bundle_ders(pem)
        .unwrap_or_default()
        .into_iter()
        .map(|der| {
            let subject = x509_parser::parse_x509_certificate(&der)
                .ok()
                .and_then(|(_, x)| {
                    x.subject()
                        .iter_common_name()
                        .next()
                        .and_then(|cn| cn.as_str().ok().map(str::to_string))
                })
                .unwrap_or_else(|| "no CN".into());
            CaCert {
                fingerprint: fingerprint(&der),
                subject,
            }
        })
        .collect()
}

/// What the state directory knows: every CA certificate of each kind, and the etcd cluster ID
/// it last saw (from the high-water mark).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected {
    pub cas: BTreeMap<&'static str, Vec<CaCert>>,
    pub cluster_id: Option<String>,
}

/// The kinds, in the order messages list them.
const KINDS: [CaKind; 3] = [CaKind::Etcd, CaKind::Kubernetes, CaKind::FrontProxy];

impl Expected {
    /// Reads `<pki>/<kind>/ca*.crt` (the signing CA, `ca-next`, `ca-previous`,
    /// `ca-retired-<run>`); a missing directory knows nothing. Only reads.
    pub fn from_pki_dir(pki: &Path) -> std::io::Result<Expected> {
        let mut cas = BTreeMap::new();
        for kind in KINDS {
            let dir = pki.join(kind.dir());
            let mut certs = Vec::new();
            let entries = match fs_err::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("ca") && n.ends_with(".crt"))
                .collect();
            names.sort();
            for name in names {
                certs.extend(certs_in(&crate::bounded::read_to_string(
                    dir.join(name),
                    crate::bounded::TEXT,
                )?));
            }
            if !certs.is_empty() {
                cas.insert(kind.dir(), certs);
            }
        }
        Ok(Expected {
            cas,
            cluster_id: None,
        })
    }

    /// With the cluster ID the state last saw.
    pub fn with_cluster_id(mut self, id: Option<String>) -> Self {
        self.cluster_id = id.filter(|i| !i.is_empty());
        self
    }

    fn knows(&self, kind: CaKind, cert: &CaCert) -> bool {
        self.cas
            .get(kind.dir())
            .is_some_and(|c| c.iter().any(|k| k.fingerprint == cert.fingerprint))
    }
}

/// A host that belongs to another cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stranger {
    pub host: String,
    pub kind: CaKind,
    /// The trust file on the host.
    pub path: String,
    pub on_host: Vec<CaCert>,
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Hosts whose trust files hold no CA the state knows (a refusal).
    pub strangers: Vec<Stranger>,
    /// Running etcd members that report different cluster IDs: host → cluster ID (a refusal).
    pub cluster_ids: BTreeMap<String, String>,
    /// Warnings: the cluster ID differs from the one the state last saw (a recover run from
    /// another machine changes it), and the like.
    pub warnings: Vec<String>,
}

impl Findings {
    /// Whether a command may go on.
    pub fn is_ok(&self) -> bool {
        self.strangers.is_empty() && self.distinct_cluster_ids().len() <= 1
    }

    fn distinct_cluster_ids(&self) -> BTreeSet<&str> {
        self.cluster_ids.values().map(String::as_str).collect()
    }
}

/// Compares what each host holds with what the state knows. Pure.
pub fn check(expected: &Expected, facts: &BTreeMap<String, HostFacts>) -> Findings {
    let mut out = Findings::default();
    for (host, f) in facts {
        for (path, pem) in &f.trusted {
            let Some(kind) = kind_of(path) else { continue };
            let on_host = certs_in(pem);
            if on_host.is_empty() || on_host.iter().any(|c| expected.knows(kind, c)) {
                continue;
            }
            // One line per host and kind: the apiserver's copy of the etcd CA says the same
            // as etcd's own.
            if out.strangers.iter().any(|s| s.host == *host && s.kind == kind) {
                continue;
            }
            out.strangers.push(Stranger {
                host: host.clone(),
                kind,
                path: path.clone(),
                on_host,
            });
        }
        if let Some(m) = &f.members {
            if m.header.cluster_id != 0 {
                out.cluster_ids
                    .insert(host.clone(), format!("{:x}", m.header.cluster_id));
            }
        }
    }
    let ids = out.distinct_cluster_ids();
    if let (Some(known), [only]) = (&expected.cluster_id, ids.iter().collect::<Vec<_>>().as_slice()) {
        if known != *only && out.strangers.is_empty() {
            out.warnings.push(format!(
                "the etcd members run cluster {only}, and the state directory last saw cluster \
                 {known}: a recover run elsewhere gives a cluster a new ID; the CAs match, so this \
                 is the same cluster"
            ));
        }
    }
    out
}

/// The refusal for findings that are not [`Findings::is_ok`]: exit 2, what was seen on which
/// host and in the state directory, that nothing was changed, and the ways out.
pub fn refusal(findings: &Findings, expected: &Expected, state_dir: &Path, inventory: &Path) -> String {
    let inv = inventory.display();
    let mut out = String::new();
    for s in &findings.strangers {
        let in_state = match expected.cas.get(s.kind.dir()) {
            Some(certs) => certs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            None => "none".into(),
        };
        out.push_str(&format!(
            "{} belongs to another cluster: its {} CA ({}) is {}; the state directory {} holds {}\n",
            s.host,
            s.kind.dir(),
            s.path,
            s.on_host
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            state_dir.display(),
            in_state
        ));
    }
    let ids = findings.distinct_cluster_ids();
    if ids.len() > 1 {
        out.push_str(&format!(
            "the etcd members belong to {} clusters: {}\n",
            ids.len(),
            findings
                .cluster_ids
                .iter()
                .map(|(h, id)| format!("{h}: {id}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out.push_str(&format!(
        "refused before any change: nothing was written on any host or in the state directory. \
         A command that went on would issue certificates these members do not trust. Ways out:\n\
         \x20 - the state directory was lost or is the wrong one: restore it from a backup \
         bundle (`hactl etcd snapshot restore-bundle <snapshot>.bundle.age --identity <backup-identity.txt> -i {inv}`), \
         or point --state-dir at the cluster's own;\n\
         \x20 - lost with no copy and no bundle: rebuild it from the running cluster with \
         `hactl adopt -i {inv}` (it reads back what the hosts hold and rotates the CAs whose keys \
         only the lost directory had, with writes flowing);\n\
         \x20 - the host really is to be wiped: `hactl reset -i <an inventory naming only that host>`, then run this again"
    ));
    if ids.len() > 1 {
        out.push_str(&format!(
            ";\n\x20 - one of them is an old member restarted on old data (a zombie, e.g. a host attested dead to a \
             recover that came back): `hactl status -i {inv}` names it, and `hactl heal -i {inv} --once` fences it for \
             good (its data moved aside), then `hactl up` joins it again"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(cn: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn host(trusted: &[(&str, &str)], cluster: u64) -> HostFacts {
        let mut f = HostFacts::default();
        for (path, pem) in trusted {
            f.trusted.insert(path.to_string(), pem.to_string());
        }
        if cluster != 0 {
            f.members = serde_json::from_str(&format!(
                r#"{{"header":{{"cluster_id":{cluster}}},"members":[]}}"#
            ))
            .ok();
        }
        f
    }

    fn state_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Expected) {
        let tmp = tempfile::tempdir().unwrap();
        for (rel, pem) in files {
            let p = tmp.path().join(rel);
            fs_err::create_dir_all(p.parent().unwrap()).unwrap();
            fs_err::write(p, pem).unwrap();
        }
        let e = Expected::from_pki_dir(tmp.path()).unwrap();
        (tmp, e)
    }

    const ETCD: &str = "/etc/hactl/pki/etcd/ca.crt";
    const KUBE: &str = "/etc/hactl/pki/kubernetes/ca.crt";

    #[test]
    fn hosts_are_judged_by_the_cas_they_trust() {
        let (ours, theirs, next) = (ca("hactl etcd CA lab"), ca("hactl etcd CA lab"), ca("next"));
        let (_t, expected) = state_with(&[("etcd/ca.crt", &ours), ("etcd/ca-next.crt", &next)]);
        let both = format!("{theirs}{ours}");
        let cases: Vec<(&str, HostFacts, bool)> = vec![
            ("a new host", host(&[], 0), true),
            ("our CA", host(&[(ETCD, &ours)], 7), true),
            (
                "a rotation's bundle",
                host(&[(ETCD, &format!("{ours}{next}"))], 7),
                true,
            ),
            ("the next CA alone", host(&[(ETCD, &next)], 7), true),
            ("a bundle holding ours", host(&[(ETCD, &both)], 7), true),
            ("another cluster's CA", host(&[(ETCD, &theirs)], 7), false),
            (
                "a Kubernetes CA the state lacks",
                host(&[(KUBE, &ours)], 7),
                false,
            ),
            (
                "a file that is no certificate",
                host(&[(ETCD, "garbage")], 0),
                true,
            ),
        ];
        for (what, facts, ok) in cases {
            let f = check(&expected, &BTreeMap::from([("cp1".to_string(), facts)]));
            assert_eq!(f.is_ok(), ok, "{what}: {f:?}");
        }
    }

    #[test]
    fn no_state_knows_no_ca_and_refuses_every_hactl_host() {
        let tmp = tempfile::tempdir().unwrap();
        let expected = Expected::from_pki_dir(&tmp.path().join("missing")).unwrap();
        assert!(expected.cas.is_empty());
        let theirs = ca("hactl etcd CA lab");
        let facts = BTreeMap::from([
            ("cp1".to_string(), host(&[(ETCD, &theirs)], 7)),
            ("cp2".to_string(), host(&[], 0)),
        ]);
        let f = check(&expected, &facts);
        assert_eq!(f.strangers.len(), 1);
        assert_eq!(f.strangers[0].host, "cp1");
        let text = refusal(&f, &expected, Path::new("/st"), Path::new("lab.yaml"));
        let fp = &certs_in(&theirs)[0].fingerprint;
        assert!(
            text.starts_with(&format!(
                "cp1 belongs to another cluster: its etcd CA ({ETCD}) is {fp} (hactl etcd CA lab); \
                 the state directory /st holds none\n"
            )),
            "{text}"
        );
        for way in [
            "hactl etcd snapshot restore-bundle",
            "hactl adopt -i lab.yaml",
            "hactl reset -i",
            "nothing was written",
        ] {
            assert!(text.contains(way), "{way}: {text}");
        }
        // The bundle first, then adopt, then reset.
        let at = |w: &str| text.find(w).unwrap();
        assert!(at("restore-bundle") < at("hactl adopt") && at("hactl adopt") < at("hactl reset"));
    }

    #[test]
    fn two_cluster_ids_among_the_members_are_refused_and_a_new_one_is_a_warning() {
        let ours = ca("x");
        let (_t, expected) = state_with(&[("etcd/ca.crt", &ours)]);
        let expected = expected.with_cluster_id(Some("1".into()));
        let split = BTreeMap::from([
            ("cp1".to_string(), host(&[(ETCD, &ours)], 1)),
            ("cp2".to_string(), host(&[(ETCD, &ours)], 2)),
        ]);
        let f = check(&expected, &split);
        assert!(!f.is_ok());
        assert!(refusal(&f, &expected, Path::new("/s"), Path::new("i"))
            .contains("the etcd members belong to 2 clusters: cp1: 1, cp2: 2"));
        let moved = BTreeMap::from([("cp1".to_string(), host(&[(ETCD, &ours)], 0x1f))]);
        let f = check(&expected, &moved);
        assert!(f.is_ok());
        assert_eq!(f.warnings.len(), 1, "{f:?}");
        assert!(f.warnings[0].contains("cluster 1f"));
    }

    #[test]
    fn the_fingerprint_is_openssls() {
        assert_eq!(
            fingerprint(b"abc"),
            "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
        );
    }
}
