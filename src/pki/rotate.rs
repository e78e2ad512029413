//! The state directory's side of a CA rotation (`hactl certs rotate-ca`): where the new CA waits,
//! where the old one stays trusted, and where it goes when it is trusted no more.
//!
//! For a CA `<kind>` (`etcd`, …), relative to the PKI directory:
//!
//! ```text
//! <kind>/rotation                 the run that rotates it (present from the first step to the last)
//! <kind>/ca-next.{crt,key}        the new CA, trusted beside the current one, not yet signing
//! <kind>/ca.{crt,key}             the CA that signs (the old one until `promote`, the new one after)
//! <kind>/ca-previous.{crt,key}    the old CA after `promote`: still trusted, signs nothing
//! <kind>/ca-retired-<run>.{crt,key}  the old CA once nothing trusts it (kept, never deleted)
//! ```
//!
//! The trust file hosts receive is the signing CA followed by `ca-next` or `ca-previous` when
//! one exists ([`super::Pki::trust_pem`]), so `hactl up` at any point of a rotation uploads what
//! that point needs.
//!
//! Invariants: every function is idempotent and safe to repeat after a crash at any point (a
//! key is written before its certificate; renames replace atomically); a CA is never deleted.

use std::path::{Path, PathBuf};

use rcgen::KeyPair;
use time::OffsetDateTime;

use super::{issue, store, CaKind, Ledger, PkiError};
use crate::inventory::Inventory;

/// Where a rotation of one CA stands, read from the state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// No rotation in progress.
    Idle,
    /// `rotation` names `run`; nothing else changed yet.
    Started { run: String },
    /// The new CA exists beside the signing one (`ca-next`).
    Trusting { run: String },
    /// The new CA signs; the old one is still trusted (`ca-previous`).
    Promoted { run: String },
    /// The old CA is retired; only the marker is left to remove.
    Retired { run: String },
}

fn rel(kind: CaKind, stem: &str, ext: &str) -> String {
    format!("{}/{stem}.{ext}", kind.dir())
}

fn path(dir: &Path, kind: CaKind, stem: &str, ext: &str) -> PathBuf {
    dir.join(rel(kind, stem, ext))
}

/// The marker file of a rotation of `kind`.
pub fn marker(dir: &Path, kind: CaKind) -> PathBuf {
    dir.join(kind.dir()).join("rotation")
}

/// Reads where a rotation of `kind` stands.
pub fn stage(dir: &Path, kind: CaKind) -> Result<Stage, PkiError> {
    let Some(run) = store::read_if_exists(&marker(dir, kind))? else {
        return Ok(Stage::Idle);
    };
    let run = run.trim().to_string();
    let exists = |stem: &str| path(dir, kind, stem, "crt").exists() || path(dir, kind, stem, "key").exists();
    Ok(if exists("ca-next") {
        Stage::Trusting { run }
    } else if exists("ca-previous") {
        Stage::Promoted { run }
    } else if exists(&format!("ca-retired-{run}")) {
        Stage::Retired { run }
    } else {
        Stage::Started { run }
    })
}

/// Starts a rotation of `kind` as run `run` (writes the marker), unless one is in progress:
/// returns the run that owns the rotation.
pub fn start(dir: &Path, kind: CaKind, run: &str) -> Result<String, PkiError> {
    match stage(dir, kind)? {
        Stage::Idle => {
            store::write_atomic(
                &marker(dir, kind),
                format!("{run}\n").as_bytes(),
                store::CERT_MODE,
            )?;
            Ok(run.to_string())
        }
        Stage::Started { run }
        | Stage::Trusting { run }
        | Stage::Promoted { run }
        | Stage::Retired { run } => Ok(run),
    }
}

/// Step 1: creates the new CA as `ca-next` (its CN carries the run, so the two CAs are told
/// apart in `certs check` and by clients). Does nothing once `ca-next` exists or was promoted.
pub fn create_next(dir: &Path, inv: &Inventory, kind: CaKind, now: OffsetDateTime) -> Result<(), PkiError> {
    let run = match stage(dir, kind)? {
        Stage::Started { run } => run,
        Stage::Trusting { .. } => {
            // A crash between the key and the certificate leaves the key alone: finish it.
            if path(dir, kind, "ca-next", "crt").exists() {
                return Ok(());
            }
            stage_run(dir, kind)?
        }
        _ => return Ok(()),
    };
    let key_rel = rel(kind, "ca-next", "key");
    let key_path = dir.join(&key_rel);
    let key_pem = match store::read_if_exists(&key_path)? {
        Some(pem) => pem,
        None => {
            let key = issue::generate_key(inv.pki.key_type, &key_rel)?;
            let pem = key.serialize_pem();
            store::write_atomic(&key_path, pem.as_bytes(), store::KEY_MODE)?;
            pem
        }
    };
    let key = KeyPair::from_pem(&key_pem).map_err(|e| PkiError::CaUnusable {
        path: key_path.clone(),
        reason: format!("not a private key: {e}"),
    })?;
    let ledger = Ledger {
        dir,
        now: now.replace_nanosecond(0).expect("0 is a valid nanosecond"),
        key_type: inv.pki.key_type,
        ca_validity_days: inv.pki.ca_validity_days,
        cert_validity_days: inv.pki.cert_validity_days,
        renew_before_days: inv.pki.renew_before_days,
        renew: Default::default(),
        entries: Vec::new(),
        report: Vec::new(),
        warnings: Vec::new(),
        read_only: false,
    };
    let cn = format!("{} {run}", kind.common_name(&inv.name));
    let cert = issue::self_signed_named(&ledger, kind, &cn, &key)?;
    store::write_atomic(
        &path(dir, kind, "ca-next", "crt"),
        cert.as_bytes(),
        store::CERT_MODE,
    )?;
    Ok(())
}

fn stage_run(dir: &Path, kind: CaKind) -> Result<String, PkiError> {
    Ok(store::read_if_exists(&marker(dir, kind))?
        .unwrap_or_default()
        .trim()
        .to_string())
}

fn rename(from: &Path, to: &Path) -> Result<(), PkiError> {
    std::fs::rename(from, to).map_err(|e| {
        PkiError::Io(std::io::Error::new(
            e.kind(),
            format!("failed to rename {} to {}: {e}", from.display(), to.display()),
        ))
    })
}

/// The rotation's new CA (`ca-next`, certificate and key) as an issuer, when it exists: what a
/// signing CA whose key is not in the state directory (read back by `hactl adopt`) hands the
/// leaves it cannot issue itself. Only reads.
pub(crate) fn next_issuer(
    dir: &Path,
    kind: CaKind,
) -> Result<Option<rcgen::Issuer<'static, KeyPair>>, PkiError> {
    let (crt, key) = (
        path(dir, kind, "ca-next", "crt"),
        path(dir, kind, "ca-next", "key"),
    );
    let (Some(cert_pem), Some(key_pem)) = (store::read_if_exists(&crt)?, store::read_if_exists(&key)?) else {
        return Ok(None);
    };
    let key = KeyPair::from_pem(&key_pem).map_err(|e| PkiError::CaUnusable {
        path: key.clone(),
        reason: format!("not a private key: {e}"),
    })?;
    rcgen::Issuer::from_ca_cert_pem(&cert_pem, key)
        .map(Some)
        .map_err(|e| PkiError::CaUnusable {
            path: crt,
            reason: e.to_string(),
        })
}

/// Step 2's state side: the old CA becomes `ca-previous` (still trusted) and `ca-next` becomes
/// the signing CA, so the next [`super::ensure`] re-issues every leaf of `kind` from it (they
/// are no longer signed by the current CA).
pub fn promote(dir: &Path, kind: CaKind) -> Result<(), PkiError> {
    let (next_crt, next_key) = (
        path(dir, kind, "ca-next", "crt"),
        path(dir, kind, "ca-next", "key"),
    );
    if !next_crt.exists() && !next_key.exists() {
        return Ok(());
    }
    let (prev_crt, prev_key) = (
        path(dir, kind, "ca-previous", "crt"),
        path(dir, kind, "ca-previous", "key"),
    );
    let (ca_crt, ca_key) = (path(dir, kind, "ca", "crt"), path(dir, kind, "ca", "key"));
    if !prev_crt.exists() {
        // Copies, not renames: the signing CA never disappears, even for a moment. A CA read
        // back from the hosts (`hactl adopt`) has no key: its certificate alone stays trusted.
        let crt = store::read_if_exists(&ca_crt)?.ok_or_else(|| PkiError::CaKeyMissing {
            cert: ca_crt.clone(),
            key: ca_key.clone(),
        })?;
        if let Some(key) = store::read_if_exists(&ca_key)? {
            store::write_atomic(&prev_key, key.as_bytes(), store::KEY_MODE)?;
        }
        store::write_atomic(&prev_crt, crt.as_bytes(), store::CERT_MODE)?;
    }
    if next_key.exists() {
        rename(&next_key, &ca_key)?;
    }
    if next_crt.exists() {
        rename(&next_crt, &ca_crt)?;
    }
    Ok(())
}

/// Step 4's state side: `ca-previous` becomes `ca-retired-<run>`, so the trust file holds the
/// new CA alone.
pub fn retire(dir: &Path, kind: CaKind) -> Result<(), PkiError> {
    let run = stage_run(dir, kind)?;
    for ext in ["key", "crt"] {
        let from = path(dir, kind, "ca-previous", ext);
        if from.exists() {
            rename(&from, &path(dir, kind, &format!("ca-retired-{run}"), ext))?;
        }
    }
    Ok(())
}

/// The last step: the marker becomes `rotation-<run>.done`, so a later `rotate-ca` starts anew.
pub fn finish(dir: &Path, kind: CaKind) -> Result<(), PkiError> {
    let m = marker(dir, kind);
    if m.exists() {
        let run = stage_run(dir, kind)?;
        rename(&m, &dir.join(kind.dir()).join(format!("rotation-{run}.done")))?;
    }
    Ok(())
}

/// The extra CAs `kind`'s trust file carries beside the signing CA: `ca-next` or `ca-previous`.
pub fn extra_trust(dir: &Path, kind: CaKind) -> Result<Vec<String>, PkiError> {
    let mut out = Vec::new();
    for stem in ["ca-next", "ca-previous"] {
        if let Some(pem) = store::read_if_exists(&path(dir, kind, stem, "crt"))? {
            out.push(pem);
        }
    }
    Ok(out)
}

/// The trust file of `kind` as the state directory has it now: the signing CA, then `ca-next`
/// or `ca-previous` (what [`super::Pki::trust_pem`] builds, read without [`super::ensure`], so
/// nothing is written).
pub fn trust_bundle(dir: &Path, kind: CaKind) -> Result<String, PkiError> {
    let ca = path(dir, kind, "ca", "crt");
    let mut out = store::read_if_exists(&ca)?.ok_or_else(|| {
        PkiError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} does not exist", ca.display()),
        ))
    })?;
    for pem in extra_trust(dir, kind)? {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&pem);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Inventory {
        crate::inventory::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/inventories/example.yaml"
        )))
        .unwrap()
    }

    fn signed_by_ca(dir: &Path, leaf: &str) -> bool {
        let leaf = std::fs::read_to_string(dir.join(leaf)).unwrap();
        let ca = std::fs::read_to_string(dir.join("etcd/ca.crt")).unwrap();
        crate::pki::is_signed_by(&leaf, &ca).unwrap()
    }

    #[test]
    fn a_rotation_walks_its_stages_and_repeating_any_step_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let inv = inv();
        let now = OffsetDateTime::now_utc();
        let pki = crate::pki::ensure(&dir, &inv, now).unwrap();
        let old_ca = pki.etcd_ca_pem().to_string();
        assert_eq!(pki.etcd_trust_pem(), old_ca);
        assert_eq!(stage(&dir, CaKind::Etcd).unwrap(), Stage::Idle);

        assert_eq!(start(&dir, CaKind::Etcd, "r1").unwrap(), "r1");
        assert_eq!(
            start(&dir, CaKind::Etcd, "r2").unwrap(),
            "r1",
            "a second start resumes r1"
        );
        create_next(&dir, &inv, CaKind::Etcd, now).unwrap();
        let next = std::fs::read_to_string(dir.join("etcd/ca-next.crt")).unwrap();
        create_next(&dir, &inv, CaKind::Etcd, now).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("etcd/ca-next.crt")).unwrap(),
            next
        );
        assert_eq!(
            stage(&dir, CaKind::Etcd).unwrap(),
            Stage::Trusting { run: "r1".into() }
        );
        assert!(inspect_cn(&next).ends_with(" r1"), "{}", inspect_cn(&next));
        // Trusting: the old CA still signs; the trust file holds both, the signer first.
        let pki = crate::pki::ensure(&dir, &inv, now).unwrap();
        assert_eq!(pki.etcd_ca_pem(), old_ca);
        assert_eq!(pki.etcd_trust_pem(), format!("{old_ca}{next}"));
        assert!(signed_by_ca(&dir, "etcd/peer-cp1.crt"));

        promote(&dir, CaKind::Etcd).unwrap();
        promote(&dir, CaKind::Etcd).unwrap();
        assert_eq!(
            stage(&dir, CaKind::Etcd).unwrap(),
            Stage::Promoted { run: "r1".into() }
        );
        assert_eq!(std::fs::read_to_string(dir.join("etcd/ca.crt")).unwrap(), next);
        assert!(
            !signed_by_ca(&dir, "etcd/peer-cp1.crt"),
            "leaves are still the old CA's"
        );
        let pki = crate::pki::ensure(&dir, &inv, now).unwrap();
        assert!(
            signed_by_ca(&dir, "etcd/peer-cp1.crt"),
            "ensure re-issued from the new CA"
        );
        assert!(signed_by_ca(&dir, "etcd/hactl-client.crt"));
        assert_eq!(pki.etcd_trust_pem(), format!("{next}{old_ca}"));

        retire(&dir, CaKind::Etcd).unwrap();
        retire(&dir, CaKind::Etcd).unwrap();
        assert_eq!(
            stage(&dir, CaKind::Etcd).unwrap(),
            Stage::Retired { run: "r1".into() }
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("etcd/ca-retired-r1.crt")).unwrap(),
            old_ca,
            "the old CA is kept"
        );
        assert!(dir.join("etcd/ca-retired-r1.key").exists());
        let pki = crate::pki::ensure(&dir, &inv, now).unwrap();
        assert_eq!(pki.etcd_trust_pem(), next);
        finish(&dir, CaKind::Etcd).unwrap();
        finish(&dir, CaKind::Etcd).unwrap();
        assert_eq!(stage(&dir, CaKind::Etcd).unwrap(), Stage::Idle);
        assert!(dir.join("etcd/rotation-r1.done").exists());
    }

    #[test]
    fn a_promotion_cut_between_its_renames_finishes_when_repeated() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let inv = inv();
        let now = OffsetDateTime::now_utc();
        crate::pki::ensure(&dir, &inv, now).unwrap();
        start(&dir, CaKind::Etcd, "r1").unwrap();
        create_next(&dir, &inv, CaKind::Etcd, now).unwrap();
        let next = std::fs::read_to_string(dir.join("etcd/ca-next.crt")).unwrap();
        // The crash: previous copied and the key renamed, the certificate not yet.
        std::fs::copy(dir.join("etcd/ca.crt"), dir.join("etcd/ca-previous.crt")).unwrap();
        std::fs::copy(dir.join("etcd/ca.key"), dir.join("etcd/ca-previous.key")).unwrap();
        std::fs::rename(dir.join("etcd/ca-next.key"), dir.join("etcd/ca.key")).unwrap();
        assert!(
            crate::pki::ensure(&dir, &inv, now).is_err(),
            "a mismatched CA is refused, not replaced"
        );
        promote(&dir, CaKind::Etcd).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("etcd/ca.crt")).unwrap(), next);
        crate::pki::ensure(&dir, &inv, now).unwrap();
    }

    /// The front-proxy trust file (what the apiservers' `--requestheader-client-ca-file` holds)
    /// at each stage of its rotation, and the etcd and kubernetes CAs untouched throughout.
    #[test]
    fn the_front_proxy_trust_bundle_follows_each_stage_of_its_rotation() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let inv = inv();
        let now = OffsetDateTime::now_utc();
        let kind = CaKind::FrontProxy;
        let before = crate::pki::ensure(&dir, &inv, now).unwrap();
        let old = before.front_proxy_ca().unwrap().cert_pem.clone();
        let others = |p: &crate::pki::Pki| (p.etcd_trust_pem(), p.kubernetes_ca().unwrap().cert_pem.clone());
        assert_eq!(before.front_proxy_trust_pem().unwrap(), old, "idle: the CA alone");
        assert_eq!(trust_bundle(&dir, kind).unwrap(), old);

        start(&dir, kind, "f1").unwrap();
        create_next(&dir, &inv, kind, now).unwrap();
        let next = std::fs::read_to_string(dir.join("front-proxy/ca-next.crt")).unwrap();
        let pki = crate::pki::ensure(&dir, &inv, now).unwrap();
        assert_eq!(
            pki.front_proxy_trust_pem().unwrap(),
            format!("{old}{next}"),
            "trusting: old signs, both trusted"
        );
        assert_eq!(trust_bundle(&dir, kind).unwrap(), format!("{old}{next}"));
        assert!(crate::pki::is_signed_by(&pki.front_proxy_client().unwrap().cert_pem, &old).unwrap());
        assert_eq!(others(&pki), others(&before));
        assert_eq!(
            pki.etcd_trust_pem(),
            before.etcd_ca_pem(),
            "etcd trusts its own CA alone"
        );

        promote(&dir, kind).unwrap();
        let pki = crate::pki::ensure(&dir, &inv, now).unwrap();
        assert_eq!(
            pki.front_proxy_trust_pem().unwrap(),
            format!("{next}{old}"),
            "promoted: new signs, old still trusted"
        );
        assert!(
            crate::pki::is_signed_by(&pki.front_proxy_client().unwrap().cert_pem, &next).unwrap(),
            "front-proxy-client re-issued from the new CA"
        );
        assert_eq!(others(&pki), others(&before));

        retire(&dir, kind).unwrap();
        let pki = crate::pki::ensure(&dir, &inv, now).unwrap();
        assert_eq!(
            pki.front_proxy_trust_pem().unwrap(),
            next,
            "retired: the new CA alone"
        );
        assert_eq!(trust_bundle(&dir, kind).unwrap(), next);
        assert_eq!(
            std::fs::read_to_string(dir.join("front-proxy/ca-retired-f1.crt")).unwrap(),
            old
        );
        finish(&dir, kind).unwrap();
        assert_eq!(stage(&dir, kind).unwrap(), Stage::Idle);
        assert_eq!(
            others(&crate::pki::ensure(&dir, &inv, now).unwrap()),
            others(&before)
        );
    }

    /// A state directory rebuilt from the hosts (`hactl adopt`): the etcd and front-proxy CA
    /// certificates without their keys, every leaf as the hosts hold it, each rotation started.
    /// `ensure` keeps the leaves byte for byte and trusts old and new; a leaf the hosts lack
    /// comes from the new CA; the rotation then walks as usual and the old CA is kept, keyless.
    #[test]
    fn a_ca_without_its_key_is_trusted_during_its_rotation_and_signs_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (hosts, adopted) = (tmp.path().join("hosts"), tmp.path().join("adopted"));
        let inv = inv();
        let now = OffsetDateTime::now_utc();
        let before = crate::pki::ensure(&hosts, &inv, now).unwrap();
        let lost = ["etcd/ca.key", "front-proxy/ca.key"];
        for e in &before.entries {
            for (from, ext) in [(&e.files.cert_path, "crt"), (&e.files.key_path, "key")] {
                let rel = format!("{}.{ext}", e.name);
                if lost.contains(&rel.as_str()) || rel == "etcd/hactl-client.crt" {
                    continue;
                }
                let to = adopted.join(&rel);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(from, to).unwrap();
            }
        }
        for f in ["sa.key", "sa.pub"] {
            std::fs::copy(hosts.join(f), adopted.join(f)).unwrap();
        }
        // Without a rotation under way, a CA without its key is refused, as ever.
        let refused = crate::pki::ensure(&adopted, &inv, now).unwrap_err();
        assert!(matches!(refused, PkiError::CaKeyMissing { .. }), "{refused}");

        for kind in [CaKind::Etcd, CaKind::FrontProxy] {
            start(&adopted, kind, "adopt-1").unwrap();
            create_next(&adopted, &inv, kind, now).unwrap();
        }
        let next = std::fs::read_to_string(adopted.join("etcd/ca-next.crt")).unwrap();
        let pki = crate::pki::ensure(&adopted, &inv, now).unwrap();
        let old = before.etcd_ca_pem().to_string();
        assert_eq!(pki.etcd_ca_pem(), old);
        assert_eq!(pki.etcd_trust_pem(), format!("{old}{next}"));
        for name in [
            "etcd/server-cp1",
            "etcd/peer-cp2",
            "front-proxy/client",
            "kubernetes/admin",
        ] {
            assert_eq!(
                pki.get(name).unwrap().cert_pem,
                before.get(name).unwrap().cert_pem,
                "{name} kept as the hosts hold it"
            );
        }
        let client = &pki.etcd_client(crate::pki::EtcdClient::Hactl).cert_pem;
        assert!(
            crate::pki::is_signed_by(client, &next).unwrap(),
            "a missing leaf comes from ca-next"
        );
        assert!(
            pki.warnings
                .iter()
                .any(|w| w.contains("etcd/ca.crt: its key is not in the state directory")),
            "{:?}",
            pki.warnings
        );
        assert!(!adopted.join("etcd/ca.key").exists(), "no key was made up");

        promote(&adopted, CaKind::Etcd).unwrap();
        assert!(adopted.join("etcd/ca-previous.crt").exists());
        assert!(!adopted.join("etcd/ca-previous.key").exists());
        let pki = crate::pki::ensure(&adopted, &inv, now).unwrap();
        assert_eq!(pki.etcd_ca_pem(), next);
        assert_eq!(pki.etcd_trust_pem(), format!("{next}{old}"));
        assert!(crate::pki::is_signed_by(&pki.etcd_server("cp1").unwrap().cert_pem, &next).unwrap());
        assert_eq!(
            pki.etcd_server("cp1").unwrap().key_pem,
            before.etcd_server("cp1").unwrap().key_pem,
            "the re-issue keeps the hosts' key"
        );
        retire(&adopted, CaKind::Etcd).unwrap();
        assert_eq!(
            std::fs::read_to_string(adopted.join("etcd/ca-retired-adopt-1.crt")).unwrap(),
            old
        );
        finish(&adopted, CaKind::Etcd).unwrap();
        let pki = crate::pki::ensure(&adopted, &inv, now).unwrap();
        assert_eq!(pki.etcd_trust_pem(), next);
    }

    fn inspect_cn(pem: &str) -> String {
        crate::pki::inspect(pem).unwrap().subject_cn
    }
}
