//! What the Kubernetes phases need from the operator machine: the key that encrypts Secrets at
//! rest and, for systemd mode, the control-plane binaries (downloaded and checked once). Read by
//! `up`/`plan` and by replace's P8/P9.

use anyhow::Context as _;

use crate::binaries;
use crate::inventory::Inventory;
use crate::state::{StateDir, StateView};

/// The encryption key (created once in the state directory) and, in systemd mode, the
/// Kubernetes binaries; `None` without a kubernetes section. `source: package` gets no binaries
/// here: planning refuses it with its own message.
pub async fn prepare(
    inv: &Inventory,
    state: &StateDir,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    if inv.kubernetes.is_none() {
        return Ok(None);
    }
    refuse_bad_bundle(inv)?;
    let key = crate::kubernetes::secrets::ensure_encryption_key(state)
        .context("failed to prepare the key that encrypts Secrets at rest")?;
    build(inv, &state.path.join("downloads"), key, true).await
}

/// [`prepare`] for a read-only command (`hactl plan`): the stored encryption key or one made in
/// memory, binaries from the cache or a temporary download; nothing is written.
pub async fn preview(
    inv: &Inventory,
    view: &StateView,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    if inv.kubernetes.is_none() {
        return Ok(None);
    }
    refuse_bad_bundle(inv)?;
    let key = crate::kubernetes::secrets::preview_encryption_key(view)
        .context("failed to read the key that encrypts Secrets at rest")?;
    build(inv, &view.file("downloads"), key, false).await
}

async fn build(
    inv: &Inventory,
    downloads: &std::path::Path,
    key: crate::kubernetes::secrets::EncryptionKey,
    write_cache: bool,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    let Some(kube) = &inv.kubernetes else {
        return Ok(None);
    };
    let today = time::OffsetDateTime::now_utc().date().to_string();
    if let Some(warning) = crate::kubernetes::gates::end_of_life_warning(&kube.version, &today) {
        tracing::warn!("{warning}");
    }
    let binaries = if kube.mode == crate::inventory::KubernetesMode::Systemd {
        let (wanted, optional) = (
            &crate::kubernetes::WANTED_BINARIES,
            &crate::kubernetes::OPTIONAL_BINARIES,
        );
        if write_cache {
            binaries::ensure(&kube.source, downloads, wanted, optional).await
        } else {
            binaries::ensure_read_only(&kube.source, downloads, wanted, optional).await
        }
        .context("failed to prepare the Kubernetes binaries")?
    } else {
        None
    };
    Ok(Some(crate::kubernetes::KubernetesInputs::new(
        binaries.as_ref(),
        key,
    )))
}

/// Refuses (exit 2) a `source: bundle` directory that lacks a binary, holds one that is not
/// executable or not `kubernetes.version`, or was left half-built by an interrupted build; every
/// problem is named. Read-only, and run before any host is contacted.
pub fn refuse_bad_bundle(inv: &Inventory) -> anyhow::Result<()> {
    let Some(kube) = &inv.kubernetes else {
        return Ok(());
    };
    let (crate::inventory::KubernetesMode::Systemd, crate::inventory::BinarySource::Bundle { dir }) =
        (kube.mode, &kube.source)
    else {
        return Ok(());
    };
    let problems = crate::kubernetes::bundle::check(dir, &kube.version);
    if problems.is_empty() {
        return Ok(());
    }
    Err(crate::exit::refuse(
        crate::exit::REFUSED,
        problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    ))
}
