//! What the Kubernetes phases need from the operator machine: the key that encrypts Secrets at
//! rest and, for systemd mode, the control-plane binaries (downloaded and checked once). Read by
//! `up`/`plan` and by replace's P8/P9.

use anyhow::Context as _;

use crate::binaries;
use crate::inventory::Inventory;
use crate::state::StateDir;

/// The encryption key (created once in the state directory) and, in systemd mode, the
/// Kubernetes binaries; `None` without a kubernetes section. `source: package` gets no binaries
/// here: planning refuses it with its own message.
pub async fn prepare(
    inv: &Inventory,
    state: &StateDir,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    let Some(kube) = &inv.kubernetes else {
        return Ok(None);
    };
    let key = crate::kubernetes::secrets::ensure_encryption_key(state)
        .context("failed to prepare the key that encrypts Secrets at rest")?;
    let binaries = if kube.mode == crate::inventory::KubernetesMode::Systemd {
        binaries::ensure(
            &kube.source,
            &state.path.join("downloads"),
            &crate::kubernetes::WANTED_BINARIES,
            &crate::kubernetes::OPTIONAL_BINARIES,
        )
        .await
        .context("failed to prepare the Kubernetes binaries")?
    } else {
        None
    };
    Ok(Some(crate::kubernetes::KubernetesInputs::new(
        binaries.as_ref(),
        key,
    )))
}
