//! The keys that sign things: the three CAs and the service-account key.
//!
//! Invariant: an existing CA or service-account key is never replaced. Whatever is wrong with one
//! (about to expire, another key type than the inventory asks for) becomes a warning; what makes
//! one unusable (a certificate without its key, a key that does not match) is a refusal.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PublicKeyData,
};
use time::Duration;

use super::issue::{self, key_type_of, random_serial, CLOCK_SKEW};
use super::{key_type_name, store, Action, CertFiles, Entry, KeyFiles, KeyPem, Ledger, PkiError};

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
    pub issuer: Issuer<'static, KeyPair>,
    /// DER of the CA certificate: checking a leaf's signature needs the CA's public key.
    pub der: Vec<u8>,
}

/// Loads the CA of `kind`, creating it when neither its certificate nor its key exists.
pub(crate) fn ensure(ledger: &mut Ledger<'_>, kind: CaKind, cluster: &str) -> Result<Ca, PkiError> {
    let cert_rel = format!("{}.crt", kind.name());
    let key_rel = format!("{}.key", kind.name());
    let cert_path = ledger.path(&cert_rel);
    let key_path = ledger.path(&key_rel);
    let existing_cert = store::read_if_exists(&cert_path)?;
    let existing_key = ledger.read_key(&key_rel)?;

    let (cert_pem, key_pem, action) = match (existing_cert, existing_key) {
        (Some(_), None) => {
            return Err(PkiError::CaKeyMissing {
                cert: cert_path,
                key: key_path,
            })
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
            store::write_atomic(&cert_path, cert.as_bytes(), store::CERT_MODE)?;
            (cert, key_pem, Action::CreatedFromExistingKey)
        }
        (None, None) => {
            let key = issue::generate_key(ledger.key_type, &key_rel)?;
            let key_pem = key.serialize_pem();
            let cert = self_signed(ledger, kind, cluster, &key)?;
            store::write_atomic(&key_path, key_pem.as_bytes(), store::KEY_MODE)?;
            store::write_atomic(&cert_path, cert.as_bytes(), store::CERT_MODE)?;
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
    let der = issue::pem_to_der(&cert_pem).map_err(unusable)?;
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
    Ok(Ca { kind, issuer, der })
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
            let have = issue::key_type_of_key(&key);
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
            let key = issue::generate_key(ledger.key_type, "sa.key")?;
            let pem = key.serialize_pem();
            store::write_atomic(&key_path, pem.as_bytes(), store::KEY_MODE)?;
            ledger.record("sa.key".into(), Action::Created);
            (key, pem)
        }
    };
    let pub_pem = key.public_key_pem();
    match store::read_if_exists(&pub_path)? {
        Some(existing) if existing == pub_pem => ledger.record("sa.pub".into(), Action::Reused),
        existing => {
            store::write_atomic(&pub_path, pub_pem.as_bytes(), store::CERT_MODE)?;
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
