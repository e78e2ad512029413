//! Issuing: the keys that sign things (the three CAs and the service-account key), the leaf
//! certificates the inventory implies ([`requests`]), whether an existing one still fits, issuing
//! one; and [`inspect`], which reads any certificate back.
//!
//! Invariants:
//! - an existing CA or service-account key is never replaced. Whatever is wrong with one (about to
//!   expire, another key type than the inventory asks for) becomes a warning; what makes one
//!   unusable (a certificate without its key, a key that does not match) is a refusal;
//! - the decision to re-issue a leaf is made only from what [`inspect`] reads out of the
//!   certificate on disk compared with its [`CertRequest`]; the reasons are reported word for word.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, PublicKeyData, RsaKeySize, SanType, SerialNumber,
};
use time::{Duration, OffsetDateTime};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::public_key::PublicKey;
use x509_parser::x509::SubjectPublicKeyInfo;

use super::{key_type_name, store, Action, CertFiles, Entry, KeyFiles, KeyPem, Ledger, PkiError};
use crate::inventory::{Inventory, KeyType, Role};

/// The CAs hactl keeps. Each signs only its own kind of leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaKind {
    Etcd,
    Kubernetes,
    FrontProxy,
}

impl CaKind {
    /// The directory under the PKI directory holding this CA and its leaves.
    pub fn dir(self) -> &'static str {
        match self {
            CaKind::Etcd => "etcd",
            CaKind::Kubernetes => "kubernetes",
            CaKind::FrontProxy => "front-proxy",
        }
    }
    /// Path stem of the CA relative to the PKI directory, e.g. `etcd/ca`.
    pub fn name(self) -> &'static str {
        match self {
            CaKind::Etcd => "etcd/ca",
            CaKind::Kubernetes => "kubernetes/ca",
            CaKind::FrontProxy => "front-proxy/ca",
        }
    }
    /// The CA's subject CN, e.g. `hactl etcd CA lab`.
    pub fn common_name(self, cluster: &str) -> String {
        format!("hactl {} CA {cluster}", self.dir())
    }
}

/// A CA loaded from (or just written to) the PKI directory, ready to sign.
pub(crate) struct Ca {
    pub kind: CaKind,
    /// `None` for a CA whose key is not in the state directory ([`keyless_ca`]): it signs
    /// nothing, and a leaf it would have to issue comes from `next` instead.
    pub issuer: Option<Issuer<'static, KeyPair>>,
    /// The rotation's new CA (`ca-next`), for a keyless CA only.
    pub next: Option<Issuer<'static, KeyPair>>,
    /// DER of the CA certificate: checking a leaf's signature needs the CA's public key.
    pub der: Vec<u8>,
}

/// Loads the CA of `kind`, creating it when neither its certificate nor its key exists.
pub(crate) fn ensure_ca(ledger: &mut Ledger<'_>, kind: CaKind, cluster: &str) -> Result<Ca, PkiError> {
    let cert_rel = format!("{}.crt", kind.name());
    let key_rel = format!("{}.key", kind.name());
    let cert_path = ledger.path(&cert_rel);
    let key_path = ledger.path(&key_rel);
    let existing_cert = store::read_if_exists(&cert_path)?;
    let existing_key = ledger.read_key(&key_rel)?;

    let (cert_pem, key_pem, action) = match (existing_cert, existing_key) {
        (Some(cert), None) => {
            // A CA read back from the hosts by `hactl adopt` (its key lived only in a lost state
            // directory) while the rotation that replaces it runs: it stays trusted and signs
            // nothing. Without that rotation a missing key is a refusal, as ever.
            if let Some(next) = super::rotate::next_issuer(ledger.dir, kind)? {
                return keyless_ca(ledger, kind, cert_rel, cert_path, key_path, cert, next);
            }
            return Err(PkiError::CaKeyMissing {
                cert: cert_path,
                key: key_path,
            });
        }
        (Some(cert), Some(key)) => (cert, key, Action::Reused),
        (None, Some(key_pem)) => {
            // The key is written before the certificate, so this is an interrupted creation (or a
            // lost certificate): a new certificate for the same key keeps every leaf valid.
            let key = KeyPair::from_pem(&key_pem).map_err(|e| PkiError::CaUnusable {
                path: key_path.clone(),
                reason: format!("not a private key: {e}"),
            })?;
            let cert = self_signed(ledger, kind, cluster, &key)?;
            ledger.write(&cert_path, cert.as_bytes(), store::CERT_MODE)?;
            (cert, key_pem, Action::CreatedFromExistingKey)
        }
        (None, None) => {
            let key = generate_key(ledger.key_type, &key_rel)?;
            let key_pem = key.serialize_pem();
            let cert = self_signed(ledger, kind, cluster, &key)?;
            ledger.write(&key_path, key_pem.as_bytes(), store::KEY_MODE)?;
            ledger.write(&cert_path, cert.as_bytes(), store::CERT_MODE)?;
            (cert, key_pem, Action::Created)
        }
    };

    let unusable = |reason: String| PkiError::CaUnusable {
        path: cert_path.clone(),
        reason,
    };
    let key = KeyPair::from_pem(&key_pem).map_err(|e| PkiError::CaUnusable {
        path: key_path.clone(),
        reason: format!("not a private key: {e}"),
    })?;
    let der = pem_to_der(&cert_pem).map_err(unusable)?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| unusable(format!("not a certificate: {e}")))?;
    if x509.public_key().subject_public_key.data.as_ref() != key.der_bytes() {
        return Err(unusable(format!("it does not match {key_rel}")));
    }
    if !x509.is_ca() {
        return Err(unusable("it is not a CA certificate".into()));
    }
    let not_before = x509.validity().not_before.to_datetime();
    let not_after = x509.validity().not_after.to_datetime();
    let key_type = key_type_of(&x509);
    drop(x509);

    if not_after - ledger.now < super::renewal_window(not_before, not_after, ledger.renew_before_days) {
        ledger.warnings.push(format!(
            "{cert_rel} expires on {}: CAs are not renewed automatically; plan a CA rotation",
            not_after.date()
        ));
    }
    if key_type != Some(ledger.key_type) {
        ledger.warnings.push(format!(
            "{key_rel} is {} but the inventory asks for {}: CAs are not replaced automatically",
            key_type.map_or("of another key type", key_type_name),
            key_type_name(ledger.key_type)
        ));
    }

    let issuer = Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| PkiError::CaUnusable {
        path: cert_path.clone(),
        reason: e.to_string(),
    })?;
    ledger.record(cert_rel, action);
    ledger.entries.push(Entry {
        name: kind.name().to_string(),
        files: CertFiles {
            cert_path,
            key_path,
            cert_pem,
            key_pem: KeyPem::new(key_pem),
        },
        not_after,
    });
    Ok(Ca {
        kind,
        issuer: Some(issuer),
        next: None,
        der,
    })
}

/// A signing CA without its key, while a rotation's `ca-next` (`next`) waits beside it: the
/// certificate is trusted as before (the hosts' leaves are its), nothing is issued from it.
/// Its entry carries an empty key, which nothing uploads (the etcd and front-proxy CA keys
/// never leave the state directory; the Kubernetes CA, whose key the hosts hold, is read back
/// with it).
fn keyless_ca(
    ledger: &mut Ledger<'_>,
    kind: CaKind,
    cert_rel: String,
    cert_path: std::path::PathBuf,
    key_path: std::path::PathBuf,
    cert_pem: String,
    next: Issuer<'static, KeyPair>,
) -> Result<Ca, PkiError> {
    let unusable = |reason: String| PkiError::CaUnusable {
        path: cert_path.clone(),
        reason,
    };
    let der = pem_to_der(&cert_pem).map_err(unusable)?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| unusable(format!("not a certificate: {e}")))?;
    if !x509.is_ca() {
        return Err(unusable("it is not a CA certificate".into()));
    }
    let not_after = x509.validity().not_after.to_datetime();
    drop(x509);
    ledger.warnings.push(format!(
        "{cert_rel}: its key is not in the state directory (a CA read back from the hosts); it \
         signs nothing and the rotation under way (`{}`) replaces it",
        super::rotate::marker(ledger.dir, kind).display()
    ));
    ledger.record(cert_rel, Action::Reused);
    ledger.entries.push(Entry {
        name: kind.name().to_string(),
        files: CertFiles {
            cert_path,
            key_path,
            cert_pem,
            key_pem: KeyPem::new(String::new()),
        },
        not_after,
    });
    Ok(Ca {
        kind,
        issuer: None,
        next: Some(next),
        der,
    })
}

fn self_signed(ledger: &Ledger<'_>, kind: CaKind, cluster: &str, key: &KeyPair) -> Result<String, PkiError> {
    self_signed_named(ledger, kind, &kind.common_name(cluster), key)
}

/// A self-signed CA certificate of `kind` with subject CN `cn` (a rotation's new CA carries
/// its run in the CN), valid for the inventory's CA lifetime.
pub(crate) fn self_signed_named(
    ledger: &Ledger<'_>,
    kind: CaKind,
    cn: &str,
    key: &KeyPair,
) -> Result<String, PkiError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    // pathLenConstraint 0: a CA of hactl's signs leaves only, never another CA (so a leaked leaf
    // key with a CA bit slipped in could not mint certificates either).
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = ledger.now - CLOCK_SKEW;
    params.not_after = ledger.now + Duration::days(ledger.ca_validity_days.into());
    params.serial_number = Some(random_serial());
    let cert = params.self_signed(key).map_err(|source| PkiError::Generate {
        what: format!("the {} CA certificate", kind.dir()),
        source,
    })?;
    Ok(cert.pem())
}

/// `sa.key` / `sa.pub`: the key pair kube-apiserver signs ServiceAccount tokens with.
pub(crate) fn ensure_service_account_key(ledger: &mut Ledger<'_>) -> Result<KeyFiles, PkiError> {
    let key_path = ledger.path("sa.key");
    let pub_path = ledger.path("sa.pub");
    let (key, key_pem) = match ledger.read_key("sa.key")? {
        Some(pem) => {
            let key = KeyPair::from_pem(&pem).map_err(|e| PkiError::ServiceAccountKeyUnusable {
                path: key_path.clone(),
                reason: format!("not a private key: {e}"),
            })?;
            ledger.record("sa.key".into(), Action::Reused);
            let have = key_type_of_key(&key);
            if have != Some(ledger.key_type) {
                ledger.warnings.push(format!(
                    "sa.key is {} but the inventory asks for {}: the service-account key is not \
                     replaced automatically (that would invalidate every issued token)",
                    have.map_or("of another key type", key_type_name),
                    key_type_name(ledger.key_type)
                ));
            }
            (key, pem)
        }
        None => {
            let key = generate_key(ledger.key_type, "sa.key")?;
            let pem = key.serialize_pem();
            ledger.write(&key_path, pem.as_bytes(), store::KEY_MODE)?;
            ledger.record("sa.key".into(), Action::Created);
            (key, pem)
        }
    };
    let pub_pem = key.public_key_pem();
    match store::read_if_exists(&pub_path)? {
        Some(existing) if existing == pub_pem => ledger.record("sa.pub".into(), Action::Reused),
        existing => {
            ledger.write(&pub_path, pub_pem.as_bytes(), store::CERT_MODE)?;
            let action = match existing {
                None => Action::Created,
                Some(_) => Action::Rewritten("did not match sa.key".into()),
            };
            ledger.record("sa.pub".into(), action);
        }
    }
    Ok(KeyFiles {
        key_path,
        pub_path,
        key_pem: KeyPem::new(key_pem),
        pub_pem,
    })
}

/// notBefore is set this far in the past, so a host whose clock lags a little accepts a new cert.
pub(crate) const CLOCK_SKEW: Duration = Duration::minutes(5);

pub(crate) const FRONT_PROXY_CLIENT: &str = "front-proxy/client";

pub(crate) fn etcd_server_name(host: &str) -> String {
    format!("etcd/server-{host}")
}
pub(crate) fn etcd_peer_name(host: &str) -> String {
    format!("etcd/peer-{host}")
}
pub(crate) fn apiserver_name(host: &str) -> String {
    format!("kubernetes/apiserver-{host}")
}
pub(crate) fn kubelet_client_name(host: &str) -> String {
    format!("kubernetes/kubelet-{host}")
}
pub(crate) fn kubelet_serving_name(host: &str) -> String {
    format!("kubernetes/kubelet-serving-{host}")
}
pub(crate) const KUBE_PROXY_CLIENT: &str = "kubernetes/kube-proxy";

/// The user a kubelet authenticates as (its Node's name behind `system:node:`).
pub fn kubelet_user(host: &str) -> String {
    format!("system:node:{host}")
}

/// A subject alternative name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum San {
    Dns(String),
    Ip(IpAddr),
}

impl fmt::Display for San {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            San::Dns(name) => f.write_str(name),
            San::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// An extended key usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Usage {
    ServerAuth,
    ClientAuth,
}

impl Usage {
    /// As [`CertInfo::ext_key_usages`] spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Usage::ServerAuth => "server_auth",
            Usage::ClientAuth => "client_auth",
        }
    }
}

/// A leaf certificate the inventory implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertRequest {
    /// Path stem relative to the PKI directory, e.g. `etcd/server-cp1`.
    pub name: String,
    pub ca: CaKind,
    pub common_name: String,
    pub organization: Option<String>,
    pub sans: Vec<San>,
    pub usages: Vec<Usage>,
}

impl CertRequest {
    fn new(name: String, ca: CaKind, common_name: &str, usages: &[Usage]) -> Self {
        CertRequest {
            name,
            ca,
            common_name: common_name.to_string(),
            organization: None,
            sans: Vec::new(),
            usages: usages.to_vec(),
        }
    }
    fn org(mut self, organization: &str) -> Self {
        self.organization = Some(organization.to_string());
        self
    }
    fn san(mut self, san: San) -> Self {
        if !self.sans.contains(&san) {
            self.sans.push(san);
        }
        self
    }
}

const SERVER_AND_CLIENT: &[Usage] = &[Usage::ServerAuth, Usage::ClientAuth];
const CLIENT: &[Usage] = &[Usage::ClientAuth];
const SYSTEM_MASTERS: &str = "system:masters";
/// The group of every kubelet's identity (what the Node authorizer and NodeRestriction check).
pub const SYSTEM_NODES: &str = "system:nodes";
/// The CN of every etcd member's peer certificate; the only CN the peer port admits once every
/// member holds such a certificate (`--peer-cert-allowed-cn`, see
/// `phases::etcd_files::peer_cn_enforced`).
pub const ETCD_PEER_CN: &str = "etcd-peer";
/// The group (`O=`) of the apiserver's kubelet client certificate, which `up` binds to
/// `system:kubelet-api-admin` (`kubernetes::rbac`).
pub const KUBELET_CLIENT_GROUP: &str = "hactl:apiserver-kubelet-client";

/// Every leaf certificate `inv` implies, in a stable order (per-host certs in inventory order).
pub fn requests(inv: &Inventory) -> Vec<CertRequest> {
    let mut out = Vec::new();
    let local = |r: CertRequest| {
        r.san(San::Dns("localhost".into()))
            .san(San::Ip(Ipv4Addr::LOCALHOST.into()))
            .san(San::Ip(Ipv6Addr::LOCALHOST.into()))
    };
    // Clients may dial the VIP's etcd frontend (HAProxy passes TLS through to a member), so
    // member server certificates carry the VIP when load balancers serve it.
    let vip = inv
        .vip
        .as_ref()
        .filter(|_| !inv.with_role(Role::LoadBalancer).is_empty());
    for host in inv.with_role(Role::Etcd) {
        for (name, server) in [
            (etcd_server_name(&host.name), true),
            (etcd_peer_name(&host.name), false),
        ] {
            // etcd members also dial each other and themselves as clients with these certs.
            // Peer certificates share one CN, which the peer port admits alone
            // (`--peer-cert-allowed-cn`), so no client or server certificate of the same CA passes
            // there; the host is in the SANs.
            let cn = if server { host.name.as_str() } else { ETCD_PEER_CN };
            let mut r = CertRequest::new(name, CaKind::Etcd, cn, SERVER_AND_CLIENT)
                .san(San::Ip(host.address))
                .san(San::Dns(host.name.clone()));
            if let (true, Some(vip)) = (server, vip) {
                r = r.san(San::Ip(vip.address));
            }
            out.push(local(r));
        }
    }
    // No health-check client: any certificate from this CA reads and writes every key, so the
    // load balancers ask etcd's metrics listener instead (an older state dir may still hold an
    // `etcd/healthcheck-client`; nothing uses it).
    for (name, cn) in [
        ("etcd/hactl-client", "hactl"),
        ("etcd/apiserver-etcd-client", "kube-apiserver-etcd-client"),
    ] {
        out.push(CertRequest::new(name.into(), CaKind::Etcd, cn, CLIENT));
    }

    let Some(kubernetes) = &inv.kubernetes else {
        return out;
    };
    let control_plane = inv.with_role(Role::ControlPlane);
    for host in &control_plane {
        let mut r = CertRequest::new(
            apiserver_name(&host.name),
            CaKind::Kubernetes,
            "kube-apiserver",
            &[Usage::ServerAuth],
        );
        if let Some(vip) = &inv.vip {
            r = r.san(San::Ip(vip.address));
        }
        for cp in &control_plane {
            r = r.san(San::Ip(cp.address)).san(San::Dns(cp.name.clone()));
        }
        for dns in [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ] {
            r = r.san(San::Dns(dns.into()));
        }
        // The `kubernetes` Service's address (the first of the range), as validation reads it.
        if let Some(ip) = crate::inventory::validate::first_service_ip(&kubernetes.service_cidr) {
            r = r.san(San::Ip(ip));
        }
        r = r
            .san(San::Dns("localhost".into()))
            .san(San::Ip(Ipv4Addr::LOCALHOST.into()))
            .san(San::Ip(Ipv6Addr::LOCALHOST.into()));
        out.push(r);
    }
    let k8s = |name: &str, cn: &str| CertRequest::new(name.into(), CaKind::Kubernetes, cn, CLIENT);
    out.push(
        // Not system:masters: a group of its own, bound by RBAC to `system:kubelet-api-admin`
        // (`up` creates the ClusterRoleBinding, see kubernetes::rbac).
        k8s(
            "kubernetes/apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
        )
        .org(KUBELET_CLIENT_GROUP),
    );
    out.push(k8s("kubernetes/admin", "kubernetes-admin").org(SYSTEM_MASTERS));
    out.push(k8s(
        "kubernetes/controller-manager",
        "system:kube-controller-manager",
    ));
    out.push(k8s("kubernetes/scheduler", "system:kube-scheduler"));
    // The node components: each kubelet's client certificate is its Node identity (the Node
    // authorizer and NodeRestriction read `system:node:<name>` in `system:nodes`), its serving
    // certificate is what the apiservers verify (`--kubelet-certificate-authority`) at the
    // address they reach it on; kube-proxy's identity is bound by the built-in ClusterRoleBinding
    // `system:node-proxier`.
    for host in inv.node_hosts() {
        let cn = kubelet_user(&host.name);
        out.push(
            CertRequest::new(kubelet_client_name(&host.name), CaKind::Kubernetes, &cn, CLIENT)
                .org(SYSTEM_NODES),
        );
        out.push(
            CertRequest::new(
                kubelet_serving_name(&host.name),
                CaKind::Kubernetes,
                &cn,
                &[Usage::ServerAuth],
            )
            .org(SYSTEM_NODES)
            .san(San::Ip(host.address))
            .san(San::Dns(host.name.clone())),
        );
    }
    if !inv.node_hosts().is_empty() {
        out.push(k8s(KUBE_PROXY_CLIENT, "system:kube-proxy"));
    }
    out.push(CertRequest::new(
        FRONT_PROXY_CLIENT.into(),
        CaKind::FrontProxy,
        "front-proxy-client",
        CLIENT,
    ));
    out
}

/// Reuses the leaf on disk if it still fits `request`, or issues it from `ca`.
pub(crate) fn ensure_leaf(ledger: &mut Ledger<'_>, request: &CertRequest, ca: &Ca) -> Result<(), PkiError> {
    let cert_rel = format!("{}.crt", request.name);
    let key_rel = format!("{}.key", request.name);
    let cert_path = ledger.path(&cert_rel);
    let key_path = ledger.path(&key_rel);
    let existing_cert = store::read_if_exists(&cert_path)?;
    let existing_key = ledger.read_key(&key_rel)?;

    let action = match (&existing_cert, &existing_key) {
        (None, _) => Action::Created,
        (Some(_), _) if ledger.renew.contains(&request.name) => {
            Action::Reissued(vec!["renewal requested".into()])
        }
        (Some(cert), key) => match check(ledger, request, ca, cert, key.as_deref()) {
            Ok(not_after) => {
                ledger.record(cert_rel, Action::Reused);
                ledger.entries.push(Entry {
                    name: request.name.clone(),
                    files: CertFiles {
                        cert_path,
                        key_path,
                        cert_pem: existing_cert.expect("matched Some"),
                        key_pem: KeyPem::new(existing_key.expect("check needs a key")),
                    },
                    not_after,
                });
                return Ok(());
            }
            Err(reasons) => Action::Reissued(reasons),
        },
    };

    // A keyless CA (read back by `hactl adopt`, its rotation under way) re-issues nothing: a
    // leaf the hosts hold stays as it is until the rotation re-issues it from the new CA; one
    // that is missing (or has lost its key) comes from the new CA now.
    let issuer = match &ca.issuer {
        Some(issuer) => issuer,
        None => {
            if let (Some(cert), Some(key)) = (&existing_cert, &existing_key) {
                if let Some(not_after) = key_matches(cert, key) {
                    if let Action::Reissued(reasons) = &action {
                        ledger.warnings.push(format!(
                            "{cert_rel}: kept as the hosts hold it ({}): the {} CA's key is not in \
                             the state directory; the rotation under way re-issues it",
                            reasons.join("; "),
                            ca.kind.dir()
                        ));
                    }
                    ledger.record(cert_rel, Action::Reused);
                    ledger.entries.push(Entry {
                        name: request.name.clone(),
                        files: CertFiles {
                            cert_path,
                            key_path,
                            cert_pem: cert.clone(),
                            key_pem: KeyPem::new(key.clone()),
                        },
                        not_after,
                    });
                    return Ok(());
                }
            }
            ledger.warnings.push(format!(
                "{cert_rel}: issued from the new {} CA (ca-next): the signing CA's key is not in the \
                 state directory",
                ca.kind.dir()
            ));
            ca.next
                .as_ref()
                .expect("a CA without its key is loaded only beside ca-next")
        }
    };
    // A re-issue keeps a sound key (as `kubeadm certs renew` does): on the hosts only the
    // certificate then changes, by one rename, so no client there (etcdctl, the backup timer,
    // etcd's own per-handshake reload) reads a new certificate beside the old key between two
    // uploads. A key that is missing, unreadable, of another type or not the certificate's is
    // replaced.
    let kept = existing_key
        .as_deref()
        .and_then(|pem| reusable_key(ledger.key_type, existing_cert.as_deref(), pem));
    let new_key = kept.is_none();
    let key = match kept {
        Some(key) => key,
        None => generate_key(ledger.key_type, &key_rel)?,
    };
    let key_pem = key.serialize_pem();
    let not_after = ledger.now + Duration::days(ledger.cert_validity_days.into());
    let cert_pem = leaf_params(request, ledger.key_type, ledger.now, not_after)
        .and_then(|params| params.signed_by(&key, issuer))
        .map_err(|source| PkiError::Generate {
            what: format!("certificate {cert_rel}"),
            source,
        })?
        .pem();
    // Key first: after a crash in between, the next run finds a key that does not match the
    // certificate and re-issues both.
    if new_key {
        ledger.write(&key_path, key_pem.as_bytes(), store::KEY_MODE)?;
    }
    ledger.write(&cert_path, cert_pem.as_bytes(), store::CERT_MODE)?;
    ledger.record(cert_rel, action);
    ledger.entries.push(Entry {
        name: request.name.clone(),
        files: CertFiles {
            cert_path,
            key_path,
            cert_pem,
            key_pem: KeyPem::new(key_pem),
        },
        not_after,
    });
    Ok(())
}

/// The certificate's expiry, when `key_pem` is the key of `cert_pem` (both parse).
pub(crate) fn key_matches(cert_pem: &str, key_pem: &str) -> Option<OffsetDateTime> {
    let key = KeyPair::from_pem(key_pem).ok()?;
    let der = pem_to_der(cert_pem).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    (cert.public_key().subject_public_key.data.as_ref() == key.der_bytes())
        .then(|| cert.validity().not_after.to_datetime())
}

/// The existing key, when a re-issue may keep it: it parses, it is of the inventory's key type,
/// and it is the key of the existing certificate.
fn reusable_key(key_type: KeyType, cert_pem: Option<&str>, key_pem: &str) -> Option<KeyPair> {
    let key = KeyPair::from_pem(key_pem).ok()?;
    let der = pem_to_der(cert_pem?).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let same = cert.public_key().subject_public_key.data.as_ref() == key.der_bytes();
    (same && info_of(&cert).key_type == Some(key_type)).then_some(key)
}

fn leaf_params(
    request: &CertRequest,
    key_type: KeyType,
    now: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    if let Some(org) = &request.organization {
        dn.push(DnType::OrganizationName, org.as_str());
    }
    dn.push(DnType::CommonName, request.common_name.as_str());
    params.distinguished_name = dn;
    params.subject_alt_names = request
        .sans
        .iter()
        .map(|san| {
            Ok(match san {
                San::Dns(name) => SanType::DnsName(name.clone().try_into()?),
                San::Ip(ip) => SanType::IpAddress(*ip),
            })
        })
        .collect::<Result<_, rcgen::Error>>()?;
    params.is_ca = IsCa::ExplicitNoCa;
    // RFC 5480 §3: an ECDSA key signs and never enciphers keys, so only RSA leaves (whose TLS
    // 1.2 key exchange may encipher the premaster secret) carry Key Encipherment.
    params.key_usages = match key_type {
        KeyType::EcdsaP256 => vec![KeyUsagePurpose::DigitalSignature],
        KeyType::Rsa2048 | KeyType::Rsa4096 => vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ],
    };
    params.extended_key_usages = request
        .usages
        .iter()
        .map(|u| match u {
            Usage::ServerAuth => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::ClientAuth => ExtendedKeyUsagePurpose::ClientAuth,
        })
        .collect();
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - CLOCK_SKEW;
    params.not_after = not_after;
    params.serial_number = Some(random_serial());
    Ok(params)
}

/// `Ok(not_after)` when the leaf on disk still fits, else every reason it does not.
fn check(
    ledger: &Ledger<'_>,
    request: &CertRequest,
    ca: &Ca,
    cert_pem: &str,
    key_pem: Option<&str>,
) -> Result<OffsetDateTime, Vec<String>> {
    let der = pem_to_der(cert_pem).map_err(|e| vec![format!("unreadable certificate: {e}")])?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| vec![format!("unreadable certificate: {e}")])?;
    let info = info_of(&cert);
    let mut reasons = Vec::new();

    match key_pem.map(KeyPair::from_pem) {
        None => reasons.push("key file missing".to_string()),
        Some(Err(e)) => reasons.push(format!("unreadable key: {e}")),
        Some(Ok(key)) => {
            if cert.public_key().subject_public_key.data.as_ref() != key.der_bytes() {
                reasons.push("key does not match the certificate".into());
            }
        }
    }
    if !signed_by(&cert, &ca.der) {
        reasons.push(format!("issuer is not the current {} CA", ca.kind.dir()));
    }

    let want: BTreeSet<String> = request.sans.iter().map(San::to_string).collect();
    let have: BTreeSet<String> = info.sans.iter().cloned().collect();
    if want != have {
        let added = want.difference(&have).map(|s| format!("+{s}"));
        let removed = have.difference(&want).map(|s| format!("-{s}"));
        let diff: Vec<String> = added.chain(removed).collect();
        reasons.push(format!("SANs changed: {}", diff.join(", ")));
    }

    let want_subject = subject_string(
        &request.common_name,
        request.organization.iter().map(String::as_str),
    );
    let have_subject = subject_string(
        &info.subject_cn,
        info.subject_organizations.iter().map(String::as_str),
    );
    if want_subject != have_subject {
        reasons.push(format!("subject changed: {have_subject} -> {want_subject}"));
    }

    let want_usages: BTreeSet<&str> = request.usages.iter().map(|u| u.as_str()).collect();
    let have_usages: BTreeSet<&str> = info.ext_key_usages.iter().map(String::as_str).collect();
    if want_usages != have_usages || info.is_ca {
        reasons.push(format!(
            "usages changed: {} -> {}",
            info.ext_key_usages.join("+"),
            want_usages.into_iter().collect::<Vec<_>>().join("+")
        ));
    }

    if info.key_type != Some(ledger.key_type) {
        reasons.push(format!(
            "key type changed: {} -> {}",
            info.key_type.map_or("other", key_type_name),
            key_type_name(ledger.key_type)
        ));
    }

    let left = info.not_after - ledger.now;
    let window = super::renewal_window(info.not_before, info.not_after, ledger.renew_before_days);
    if left <= Duration::ZERO {
        reasons.push(format!("expired on {}", info.not_after.date()));
    } else if left < window {
        reasons.push(format!(
            "expires on {}, within {} days",
            info.not_after.date(),
            window.whole_days()
        ));
    }

    if reasons.is_empty() {
        Ok(info.not_after)
    } else {
        Err(reasons)
    }
}

fn subject_string<'a>(cn: &str, orgs: impl Iterator<Item = &'a str>) -> String {
    let mut s = format!("CN={cn}");
    for o in orgs {
        s.push_str(",O=");
        s.push_str(o);
    }
    s
}

/// Whether `cert` names the CA in `ca_der` as its issuer and carries a valid signature by its key.
fn signed_by(cert: &X509Certificate<'_>, ca_der: &[u8]) -> bool {
    let Ok((_, ca)) = x509_parser::parse_x509_certificate(ca_der) else {
        return false;
    };
    cert.issuer().as_raw() == ca.subject().as_raw() && cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// Whether the certificate `cert_pem` was signed by the CA certificate `ca_pem` (its name and key).
pub fn is_signed_by(cert_pem: &str, ca_pem: &str) -> Result<bool, PkiError> {
    let invalid = |reason: String| PkiError::InvalidCertificate { reason };
    let der = pem_to_der(cert_pem).map_err(invalid)?;
    let ca_der = pem_to_der(ca_pem).map_err(invalid)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| PkiError::InvalidCertificate {
        reason: e.to_string(),
    })?;
    Ok(signed_by(&cert, &ca_der))
}

/// A new private key of `key_type`; `what` names it in errors.
pub(crate) fn generate_key(key_type: KeyType, what: &str) -> Result<KeyPair, PkiError> {
    match key_type {
        KeyType::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
        KeyType::Rsa2048 => KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, RsaKeySize::_2048),
        KeyType::Rsa4096 => KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, RsaKeySize::_4096),
    }
    .map_err(|source| PkiError::Generate {
        what: format!("key {what}"),
        source,
    })
}

/// 16 random bytes, positive and without a leading zero byte (RFC 5280 allows up to 20).
pub(crate) fn random_serial() -> SerialNumber {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

/// The DER of the first `CERTIFICATE` block in `pem`.
pub(crate) fn pem_to_der(pem: &str) -> Result<Vec<u8>, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| format!("not PEM: {e}"))?;
    if block.label != "CERTIFICATE" {
        return Err(format!("PEM block is {}, not CERTIFICATE", block.label));
    }
    Ok(block.contents)
}

/// The DER of every certificate in a PEM bundle (a trust file: one CA, or two during a
/// rotation), in order; other blocks are skipped.
pub fn bundle_ders(pem: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| format!("not PEM: {e}"))?;
        if block.label == "CERTIFICATE" {
            out.push(block.contents);
        }
    }
    Ok(out)
}

fn key_type_of_spki(spki: &SubjectPublicKeyInfo<'_>) -> Option<KeyType> {
    match spki.parsed().ok()? {
        PublicKey::EC(_) => {
            let curve = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
            (curve == x509_parser::oid_registry::OID_EC_P256).then_some(KeyType::EcdsaP256)
        }
        PublicKey::RSA(rsa) => match rsa.key_size() {
            2048 => Some(KeyType::Rsa2048),
            4096 => Some(KeyType::Rsa4096),
            _ => None,
        },
        _ => None,
    }
}

/// The key type of a certificate's public key, if it is one hactl issues.
pub(crate) fn key_type_of(cert: &X509Certificate<'_>) -> Option<KeyType> {
    key_type_of_spki(cert.public_key())
}

/// The key type of a private key, if it is one hactl issues.
pub(crate) fn key_type_of_key(key: &KeyPair) -> Option<KeyType> {
    use x509_parser::prelude::FromDer;
    let spki_der = key.subject_public_key_info();
    let (_, spki) = SubjectPublicKeyInfo::from_der(&spki_der).ok()?;
    key_type_of_spki(&spki)
}

/// What a certificate says, read back with x509-parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub subject_cn: String,
    pub subject_organizations: Vec<String>,
    pub issuer_cn: String,
    /// Hex, colon-separated (as `openssl x509 -serial` groups it, lowercase).
    pub serial: String,
    /// DNS names and IP addresses, as strings, in certificate order.
    pub sans: Vec<String>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub is_ca: bool,
    /// `digital_signature`, `key_encipherment`, `key_cert_sign`, `crl_sign`, … (RFC 5280 order).
    pub key_usages: Vec<String>,
    /// `server_auth`, `client_auth` (others by OID).
    pub ext_key_usages: Vec<String>,
    /// `None` for a key type hactl does not issue.
    pub key_type: Option<KeyType>,
}

/// Reads a PEM certificate back (used by the re-issue logic, `hactl status` and tests).
pub fn inspect(pem: &str) -> Result<CertInfo, PkiError> {
    let der = pem_to_der(pem).map_err(|reason| PkiError::InvalidCertificate { reason })?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| PkiError::InvalidCertificate {
        reason: e.to_string(),
    })?;
    Ok(info_of(&cert))
}

fn info_of(cert: &X509Certificate<'_>) -> CertInfo {
    let cn = |name: &x509_parser::x509::X509Name<'_>| {
        name.iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let sans = match cert.subject_alternative_name() {
        Ok(Some(ext)) => ext
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some(dns.to_string()),
                GeneralName::IPAddress(bytes) => ip_from_bytes(bytes).map(|ip| ip.to_string()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut key_usages = Vec::new();
    if let Ok(Some(ku)) = cert.key_usage() {
        let ku = ku.value;
        for (set, name) in [
            (ku.digital_signature(), "digital_signature"),
            (ku.non_repudiation(), "non_repudiation"),
            (ku.key_encipherment(), "key_encipherment"),
            (ku.data_encipherment(), "data_encipherment"),
            (ku.key_agreement(), "key_agreement"),
            (ku.key_cert_sign(), "key_cert_sign"),
            (ku.crl_sign(), "crl_sign"),
        ] {
            if set {
                key_usages.push(name.to_string());
            }
        }
    }
    let mut ext_key_usages = Vec::new();
    if let Ok(Some(eku)) = cert.extended_key_usage() {
        let eku = eku.value;
        if eku.server_auth {
            ext_key_usages.push("server_auth".to_string());
        }
        if eku.client_auth {
            ext_key_usages.push("client_auth".to_string());
        }
        ext_key_usages.extend(eku.other.iter().map(|oid| oid.to_id_string()));
    }
    CertInfo {
        subject_cn: cn(cert.subject()),
        subject_organizations: cert
            .subject()
            .iter_organization()
            .filter_map(|a| a.as_str().ok())
            .map(str::to_string)
            .collect(),
        issuer_cn: cn(cert.issuer()),
        serial: cert.raw_serial_as_string(),
        sans,
        not_before: cert.validity().not_before.to_datetime(),
        not_after: cert.validity().not_after.to_datetime(),
        is_ca: cert.is_ca(),
        key_usages,
        ext_key_usages,
        key_type: key_type_of(cert),
    }
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}
