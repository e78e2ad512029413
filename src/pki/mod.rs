//! The cluster's PKI, kept as PEM files in `<state dir>/pki`.
//!
//! [`ensure`] makes the directory match what the inventory implies and returns a [`Pki`]: every
//! certificate with its key, and a report of what was created, re-issued or reused (for `hactl plan`).
//!
//! Invariants:
//! - idempotent: a second `ensure` with the same inventory rewrites nothing (same bytes, same mtimes);
//! - a leaf is re-issued from the **same** CA when its SANs, subject, usages or key type no longer match
//!   the inventory, when it was not signed by the current CA, when it expires within
//!   `spec.pki.renewBeforeDays` (default 30) days (or a
//!   third of its lifetime, if shorter: see [`renewal_window`]);
//! - a CA (and the service-account key) is never replaced automatically: it only yields a warning;
//! - directories are 0700 and private keys 0600 from the moment they exist (see `store.rs`);
//! - key material never reaches `Debug` output or logs ([`KeyPem`]).
//!
//! Layout (relative to the PKI directory):
//!
//! ```text
//! etcd/ca.{crt,key}                      etcd CA
//! etcd/server-<host>.{crt,key}           per etcd host: client-facing server cert (server+client auth)
//! etcd/peer-<host>.{crt,key}             per etcd host: peer cert (server+client auth)
//! etcd/hactl-client.{crt,key}            CN hactl: hactl's own etcd client
//! etcd/apiserver-etcd-client.{crt,key}   CN kube-apiserver-etcd-client
//!                                        (no health-check client: HAProxy asks etcd's metrics listener)
//! -- only when the inventory has a `kubernetes` section: --
//! kubernetes/ca.{crt,key}                Kubernetes CA
//! kubernetes/apiserver-<host>.{crt,key}  per control-plane host (VIP, all control-plane names, service IP…)
//! kubernetes/apiserver-kubelet-client.{crt,key}, admin, controller-manager, scheduler
//! kubernetes/kubelet-<host>.{crt,key}    per control-plane and worker host: system:node:<host>
//! kubernetes/kubelet-serving-<host>.{crt,key}  per node host: its kubelet's serving certificate
//! kubernetes/kube-proxy.{crt,key}        system:kube-proxy (every node's kube-proxy)
//! front-proxy/ca.{crt,key}, front-proxy/client.{crt,key}
//! sa.key, sa.pub                         service-account signing key pair (PKCS#8 / SPKI PEM)
//! ```

mod issue;
pub mod rotate;
mod store;

use std::fmt;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use crate::inventory::{Inventory, KeyType};

pub(crate) use issue::pem_to_der;
pub use issue::CaKind;
pub use issue::{
    bundle_ders, inspect, is_signed_by, kubelet_user, requests, CertInfo, CertRequest, San, Usage,
    ETCD_PEER_CN, KUBELET_CLIENT_GROUP, SYSTEM_NODES,
};

/// How long before `not_after` a certificate valid from `not_before` is due for renewal, when
/// leaves are renewed `renew_before_days` before they expire (`spec.pki.renewBeforeDays`).
pub fn renewal_window(
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    renew_before_days: u32,
) -> time::Duration {
    time::Duration::days(renew_before_days.into()).min((not_after - not_before) / 3)
}

/// Errors of [`ensure`] and [`inspect`].
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Reading or writing a file under the PKI directory (the message carries the path).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("failed to generate {what}")]
    Generate {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    /// A CA certificate without its key: hactl could not issue from it, and will not replace it.
    #[error(
        "{cert} exists but {key} does not: hactl never replaces a CA on its own; restore {key} \
         from a backup, or move both files aside to create a new CA (every certificate it signed \
         will then be re-issued and must be redistributed)"
    )]
    CaKeyMissing { cert: PathBuf, key: PathBuf },
    /// A CA file hactl cannot use; it is left untouched.
    #[error(
        "{path} cannot be used ({reason}); hactl never replaces a CA on its own: restore it from \
         a backup, or move the CA's files aside to create a new CA"
    )]
    CaUnusable { path: PathBuf, reason: String },
    /// The service-account key exists but cannot be read as a private key; it is left untouched.
    #[error(
        "{path} cannot be used ({reason}); hactl never replaces the service-account key on its \
         own (that would invalidate every issued token): restore it, or move it aside"
    )]
    ServiceAccountKeyUnusable { path: PathBuf, reason: String },
    /// Text that is not a PEM certificate hactl can read.
    #[error("invalid certificate: {reason}")]
    InvalidCertificate { reason: String },
}

/// A private key in PEM. `Debug` and `Display` never show it, and its memory is zeroed on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPem(String);

impl KeyPem {
    pub(crate) fn new(pem: String) -> Self {
        KeyPem(pem)
    }
    /// The PEM text, to upload or to hand to a TLS library. Do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for KeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyPem([redacted])")
    }
}

impl Drop for KeyPem {
    fn drop(&mut self) {
        // Best effort without `unsafe`: `into_bytes` keeps the same allocation.
        let mut bytes = std::mem::take(&mut self.0).into_bytes();
        bytes.fill(0);
        std::hint::black_box(&bytes);
    }
}

/// A certificate and its private key, as files and as PEM text.
#[derive(Clone)]
pub struct CertFiles {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    pub cert_pem: String,
    pub key_pem: KeyPem,
}

impl fmt::Debug for CertFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertFiles")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .field("cert_pem", &format_args!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &self.key_pem)
            .finish()
    }
}

/// The service-account key pair (signs and verifies ServiceAccount tokens).
#[derive(Clone)]
pub struct KeyFiles {
    pub key_path: PathBuf,
    pub pub_path: PathBuf,
    pub key_pem: KeyPem,
    /// SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    pub pub_pem: String,
}

impl fmt::Debug for KeyFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFiles")
            .field("key_path", &self.key_path)
            .field("pub_path", &self.pub_path)
            .field("key_pem", &self.key_pem)
            .finish_non_exhaustive()
    }
}

/// What `ensure` did to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Created,
    /// A CA certificate re-created from its existing key (after the certificate alone was lost).
    CreatedFromExistingKey,
    Reissued(Vec<String>),
    /// Re-written from data hactl already had (e.g. `sa.pub` from `sa.key`); the reason says why.
    Rewritten(String),
    Reused,
}

/// One line of the PKI report: `etcd/server-cp1.crt: re-issued (SANs changed: +10.0.0.14)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Path relative to the PKI directory; for a certificate, its key changed along with it.
    pub file: String,
    pub action: Action,
}

impl Change {
    pub fn is_change(&self) -> bool {
        self.action != Action::Reused
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.action {
            Action::Created => write!(f, "{}: created", self.file),
            Action::CreatedFromExistingKey => {
                write!(f, "{}: created (from the existing key)", self.file)
            }
            Action::Reissued(reasons) => {
                write!(f, "{}: re-issued ({})", self.file, reasons.join("; "))
            }
            Action::Rewritten(why) => write!(f, "{}: re-written ({why})", self.file),
            Action::Reused => write!(f, "{}: reused", self.file),
        }
    }
}

/// One certificate known to the PKI.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Path stem relative to the PKI directory, e.g. `etcd/server-cp1`.
    pub name: String,
    pub files: CertFiles,
    pub not_after: OffsetDateTime,
}

/// The etcd clients hactl issues certificates for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdClient {
    /// hactl itself (health, member list, snapshots).
    Hactl,
    /// kube-apiserver's `--etcd-certfile`.
    ApiServer,
}

impl EtcdClient {
    /// Path stem relative to the PKI directory.
    pub fn name(self) -> &'static str {
        match self {
            EtcdClient::Hactl => "etcd/hactl-client",
            EtcdClient::ApiServer => "etcd/apiserver-etcd-client",
        }
    }
}

/// Kubernetes client certificates signed by the Kubernetes CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubernetesClient {
    /// kube-apiserver's `--kubelet-client-certificate`.
    ApiServerKubeletClient,
    /// The admin kubeconfig (`system:masters`).
    Admin,
    ControllerManager,
    Scheduler,
}

impl KubernetesClient {
    /// Path stem relative to the PKI directory.
    pub fn name(self) -> &'static str {
        match self {
            KubernetesClient::ApiServerKubeletClient => "kubernetes/apiserver-kubelet-client",
            KubernetesClient::Admin => "kubernetes/admin",
            KubernetesClient::ControllerManager => "kubernetes/controller-manager",
            KubernetesClient::Scheduler => "kubernetes/scheduler",
        }
    }
}

/// The cluster's certificates and keys, after [`ensure`].
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
    /// CAs first, then leaves, in a stable order (inventory order for per-host certificates).
    pub entries: Vec<Entry>,
    pub service_account: Option<KeyFiles>,
    /// One line per file, in the order of `entries`, then `sa.key`/`sa.pub`.
    pub report: Vec<Change>,
    /// Things a human should act on (a CA about to expire, loosened permissions that were fixed …).
    pub warnings: Vec<String>,
    /// CAs trusted beside a signing CA during its rotation (`ca-next`, then `ca-previous`).
    pub extra_trust: Vec<(CaKind, String)>,
}

impl Pki {
    /// A certificate by its path stem, e.g. `etcd/server-cp1`.
    pub fn get(&self, name: &str) -> Option<&CertFiles> {
        self.entries.iter().find(|e| e.name == name).map(|e| &e.files)
    }

    fn must(&self, name: &str) -> &CertFiles {
        self.get(name)
            .unwrap_or_else(|| panic!("pki::ensure always creates {name}"))
    }

    pub fn etcd_ca(&self) -> &CertFiles {
        self.must(CaKind::Etcd.name())
    }
    pub fn etcd_ca_pem(&self) -> &str {
        &self.etcd_ca().cert_pem
    }
    /// What etcd's trust files hold: the signing CA, then during a rotation the other CA.
    pub fn etcd_trust_pem(&self) -> String {
        self.trust_pem(CaKind::Etcd, self.etcd_ca_pem())
    }
    fn trust_pem(&self, kind: CaKind, signing: &str) -> String {
        let mut out = signing.to_string();
        for (_, pem) in self.extra_trust.iter().filter(|(k, _)| *k == kind) {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(pem);
        }
        out
    }
    /// `None` when `host` is not an etcd host of the inventory `ensure` ran with.
    pub fn etcd_server(&self, host: &str) -> Option<&CertFiles> {
        self.get(&issue::etcd_server_name(host))
    }
    pub fn etcd_peer(&self, host: &str) -> Option<&CertFiles> {
        self.get(&issue::etcd_peer_name(host))
    }
    pub fn etcd_client(&self, client: EtcdClient) -> &CertFiles {
        self.must(client.name())
    }
    /// `None` when the inventory has no `kubernetes` section (also for the getters below).
    pub fn kubernetes_ca(&self) -> Option<&CertFiles> {
        self.get(CaKind::Kubernetes.name())
    }
    /// What every reader of the kubernetes CA trusts (the apiservers' `--client-ca-file`, the
    /// controller-manager's `--root-ca-file`, the kubeconfigs, HAProxy's `/readyz` check): the
    /// signing CA, then during a rotation the other one. `None` without a `kubernetes` section.
    /// (`--cluster-signing-cert-file` takes the signing CA alone: [`Pki::kubernetes_ca`].)
    pub fn kubernetes_trust_pem(&self) -> Option<String> {
        self.kubernetes_ca()
            .map(|ca| self.trust_pem(CaKind::Kubernetes, &ca.cert_pem))
    }
    pub fn front_proxy_ca(&self) -> Option<&CertFiles> {
        self.get(CaKind::FrontProxy.name())
    }
    /// What the apiservers' `--requestheader-client-ca-file` holds (and they publish in
    /// kube-system/extension-apiserver-authentication): the signing front-proxy CA, then during
    /// a rotation the other one. `None` without a `kubernetes` section.
    pub fn front_proxy_trust_pem(&self) -> Option<String> {
        self.front_proxy_ca()
            .map(|ca| self.trust_pem(CaKind::FrontProxy, &ca.cert_pem))
    }
    pub fn front_proxy_client(&self) -> Option<&CertFiles> {
        self.get(issue::FRONT_PROXY_CLIENT)
    }
    pub fn apiserver(&self, host: &str) -> Option<&CertFiles> {
        self.get(&issue::apiserver_name(host))
    }
    pub fn kubernetes_client(&self, client: KubernetesClient) -> Option<&CertFiles> {
        self.get(client.name())
    }
    /// `host`'s kubelet client certificate (`system:node:<host>`); `None` when `host` runs no
    /// kubelet (not a control-plane or worker host, or no kubernetes section).
    pub fn kubelet_client(&self, host: &str) -> Option<&CertFiles> {
        self.get(&issue::kubelet_client_name(host))
    }
    /// `host`'s kubelet serving certificate (its address and name).
    pub fn kubelet_serving(&self, host: &str) -> Option<&CertFiles> {
        self.get(&issue::kubelet_serving_name(host))
    }
    /// kube-proxy's client certificate (`system:kube-proxy`), shared by every node.
    pub fn kube_proxy(&self) -> Option<&CertFiles> {
        self.get(issue::KUBE_PROXY_CLIENT)
    }
    pub fn service_account_key(&self) -> Option<&KeyFiles> {
        self.service_account.as_ref()
    }

    /// Files that `ensure` created or changed (what `hactl plan` shows).
    pub fn changes(&self) -> impl Iterator<Item = &Change> {
        self.report.iter().filter(|c| c.is_change())
    }

    /// Every certificate (`etcd/ca.crt`, …) with its expiry, in the order of `entries`.
    pub fn expiry_report(&self) -> Vec<(String, OffsetDateTime)> {
        self.entries
            .iter()
            .map(|e| (format!("{}.crt", e.name), e.not_after))
            .collect()
    }
}

/// What a run of `ensure` accumulates; used by `issue.rs` and `rotate.rs`.
pub(crate) struct Ledger<'a> {
    pub dir: &'a Path,
    pub now: OffsetDateTime,
    pub key_type: KeyType,
    pub ca_validity_days: u32,
    pub cert_validity_days: u32,
    pub renew_before_days: u32,
    /// Leaves to re-issue even though they still fit (`hactl certs renew`), by path stem.
    pub renew: std::collections::BTreeSet<String>,
    pub entries: Vec<Entry>,
    pub report: Vec<Change>,
    pub warnings: Vec<String>,
    /// [`preview`]: decide and generate as `ensure` would, write nothing.
    pub read_only: bool,
}

impl Ledger<'_> {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Replaces `path` atomically ([`store::write_atomic`]); a preview writes nothing (what it
    /// made lives in the returned [`Pki`] only).
    pub fn write(&self, path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        store::write_atomic(path, contents, mode)
    }

    /// Reads an existing private key, tightening its mode to 0600 (with a warning) if it was looser.
    pub fn read_key(&mut self, rel: &str) -> Result<Option<String>, PkiError> {
        let path = self.path(rel);
        let Some(pem) = store::read_if_exists(&path)? else {
            return Ok(None);
        };
        if self.read_only {
            let old = fs_err::metadata(&path)?.permissions().mode() & 0o7777;
            if old & !store::KEY_MODE != 0 {
                self.warnings.push(format!(
                    "{rel}: permissions are {old:04o}; `hactl up` sets them to 0600"
                ));
            }
            return Ok(Some(pem));
        }
        if let Some(old) = store::tighten(&path, store::KEY_MODE)? {
            self.warnings
                .push(format!("{rel}: permissions were {old:04o}, set to 0600"));
        }
        Ok(Some(pem))
    }

    pub fn record(&mut self, file: String, action: Action) {
        self.report.push(Change { file, action });
    }
}

/// Makes `dir` (`<state dir>/pki`) hold every certificate and key the inventory implies; see the
/// module docs for the rules. `now` is the time certificates are issued and checked at.
pub fn ensure(dir: &Path, inv: &Inventory, now: OffsetDateTime) -> Result<Pki, PkiError> {
    ensure_renewing(dir, inv, now, &[])
}

/// [`ensure`], re-issuing the leaves named in `renew` (path stems, e.g. `etcd/server-cp1`) from
/// the same CA even when they still fit. Names that are not leaves of this inventory are ignored:
/// check them with [`leaf_names`] first.
pub fn ensure_renewing(
    dir: &Path,
    inv: &Inventory,
    now: OffsetDateTime,
    renew: &[String],
) -> Result<Pki, PkiError> {
    build(dir, inv, now, renew, false)
}

/// What [`ensure`] would make of `dir`, without writing anything (`hactl plan`): the same
/// decisions and the same report, with whatever it would create or re-issue generated in
/// memory only (so the sha256 a preview prints for a new or re-issued file is not the one `up`
/// will upload: `up` generates its own keys). A missing `dir` is a PKI to create from nothing.
/// `renew` as for [`ensure_renewing`] (`hactl certs renew --dry-run`; `hactl plan` passes none).
pub fn preview(dir: &Path, inv: &Inventory, now: OffsetDateTime, renew: &[String]) -> Result<Pki, PkiError> {
    build(dir, inv, now, renew, true)
}

fn build(
    dir: &Path,
    inv: &Inventory,
    now: OffsetDateTime,
    renew: &[String],
    read_only: bool,
) -> Result<Pki, PkiError> {
    // Certificates carry whole seconds; keep `now` comparable with what is read back.
    let now = now.replace_nanosecond(0).expect("0 is a valid nanosecond");
    let mut ledger = Ledger {
        dir,
        now,
        key_type: inv.pki.key_type,
        ca_validity_days: inv.pki.ca_validity_days,
        cert_validity_days: inv.pki.cert_validity_days,
        renew_before_days: inv.pki.renew_before_days,
        renew: renew.iter().cloned().collect(),
        entries: Vec::new(),
        report: Vec::new(),
        warnings: Vec::new(),
        read_only,
    };
    ensure_dir(&mut ledger, dir, "the PKI directory")?;

    let kinds: &[CaKind] = if inv.kubernetes.is_some() {
        &[CaKind::Etcd, CaKind::Kubernetes, CaKind::FrontProxy]
    } else {
        &[CaKind::Etcd]
    };
    let mut cas = Vec::new();
    let mut extra_trust = Vec::new();
    for &kind in kinds {
        ensure_dir(&mut ledger, &dir.join(kind.dir()), kind.dir())?;
        cas.push(issue::ensure_ca(&mut ledger, kind, &inv.name)?);
        extra_trust.extend(rotate::extra_trust(dir, kind)?.into_iter().map(|pem| (kind, pem)));
    }
    for request in issue::requests(inv) {
        let ca = cas
            .iter()
            .find(|c| c.kind == request.ca)
            .expect("every request's CA was ensured above");
        issue::ensure_leaf(&mut ledger, &request, ca)?;
    }
    let service_account = if inv.kubernetes.is_some() {
        Some(issue::ensure_service_account_key(&mut ledger)?)
    } else {
        None
    };

    Ok(Pki {
        dir: dir.to_path_buf(),
        entries: ledger.entries,
        service_account,
        report: ledger.report,
        warnings: ledger.warnings,
        extra_trust,
    })
}

fn ensure_dir(ledger: &mut Ledger<'_>, path: &Path, what: &str) -> Result<(), PkiError> {
    if ledger.read_only {
        return Ok(());
    }
    if let Some(old) = store::ensure_dir(path)? {
        ledger
            .warnings
            .push(format!("{what}: permissions were {old:04o}, set to 0700"));
    }
    Ok(())
}

/// The path stems of every leaf the inventory implies (what `hactl certs renew` accepts), in
/// the order `ensure` issues them.
pub fn leaf_names(inv: &Inventory) -> Vec<String> {
    issue::requests(inv).into_iter().map(|r| r.name).collect()
}

/// Whether `key_pem` is the private key of the certificate `cert_pem` (both must parse).
pub fn key_matches_certificate(cert_pem: &str, key_pem: &str) -> bool {
    issue::key_matches(cert_pem, key_pem).is_some()
}

/// Name used in reports and warnings for a key type.
pub fn key_type_name(key_type: KeyType) -> &'static str {
    match key_type {
        KeyType::EcdsaP256 => "ecdsa-p256",
        KeyType::Rsa2048 => "rsa-2048",
        KeyType::Rsa4096 => "rsa-4096",
    }
}
