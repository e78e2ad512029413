//! What the Kubernetes phases need from the operator machine: the key that encrypts Secrets at
//! rest and, for systemd mode, the control-plane binaries (downloaded and checked once). Read by
//! `up`/`plan` and by replace's P8/P9.

use anyhow::Context as _;

use crate::binaries;
use crate::inventory::Inventory;
use crate::local_digests::LocalDigests;
use crate::state::{StateDir, StateView};

/// The encryption key (created once in the state directory) and, in systemd mode, the
/// Kubernetes binaries; `None` without a kubernetes section. `source: package` gets no binaries
/// here: planning refuses it with its own message.
pub async fn prepare(
    inv: &Inventory,
    state: &StateDir,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    let digests = LocalDigests::open(digests_file(&state.path.join("downloads")));
    let inputs = prepare_with(inv, state, &digests).await?;
    save_digests(&digests);
    Ok(inputs)
}

/// [`prepare`] with the run's digest records (the caller saves them).
pub async fn prepare_with(
    inv: &Inventory,
    state: &StateDir,
    digests: &LocalDigests,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    if inv.kubernetes.is_none() {
        return Ok(None);
    }
    refuse_bad_bundle(inv, digests)?;
    let key = crate::kubernetes::secrets::ensure_encryption_key(state)
        .context("failed to prepare the key that encrypts Secrets at rest")?;
    build(inv, &state.path.join("downloads"), key, true, digests).await
}

/// Where a state directory's `downloads/` keeps the operator side's digest records.
pub fn digests_file(downloads: &std::path::Path) -> std::path::PathBuf {
    downloads.join(crate::local_digests::FILE)
}

/// Saves the run's digest records; a failure costs only a hash next time, so it is a warning.
pub fn save_digests(digests: &LocalDigests) {
    if let Err(e) = digests.save() {
        tracing::warn!(
            "could not keep the digests of the local binaries (they are hashed again next run): {e}"
        );
    }
}

/// [`prepare`] for a read-only command (`hactl plan`): the stored encryption key or one made in
/// memory, binaries from the cache or a temporary download; nothing is written.
pub async fn preview(
    inv: &Inventory,
    view: &StateView,
    digests: &LocalDigests,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    if inv.kubernetes.is_none() {
        return Ok(None);
    }
    refuse_bad_bundle(inv, digests)?;
    let key = crate::kubernetes::secrets::preview_encryption_key(view)
        .context("failed to read the key that encrypts Secrets at rest")?;
    build(inv, &view.file("downloads"), key, false, digests).await
}

async fn build(
    inv: &Inventory,
    downloads: &std::path::Path,
    key: crate::kubernetes::secrets::EncryptionKey,
    write_cache: bool,
    digests: &LocalDigests,
) -> anyhow::Result<Option<crate::kubernetes::KubernetesInputs>> {
    let Some(kube) = &inv.kubernetes else {
        return Ok(None);
    };
    let today = time::OffsetDateTime::now_utc().date().to_string();
    if let Some(warning) = crate::kubernetes::gates::end_of_life_warning(&kube.version, &today) {
        tracing::warn!("{warning}");
    }
    // The node binaries in either mode (every control-plane and worker host runs a kubelet),
    // the control plane's in systemd mode.
    let wanted = crate::kubernetes::wanted_binaries(kube.mode);
    let optional: &[&str] = if kube.mode == crate::inventory::KubernetesMode::Systemd {
        &crate::kubernetes::OPTIONAL_BINARIES
    } else {
        &[]
    };
    let binaries = if write_cache {
        binaries::ensure(&kube.source, downloads, &wanted, optional, digests).await
    } else {
        binaries::ensure_read_only(&kube.source, downloads, &wanted, optional, digests).await
    }
    .context("failed to prepare the Kubernetes binaries")?;
    let containerd = containerd_binaries(&kube.containerd, downloads, write_cache, digests).await?;
    let images = match &kube.images {
        crate::inventory::ImageSource::Registry(_) => None,
        crate::inventory::ImageSource::Dir(dir) => Some(image_set(dir, kube, digests)?),
    };
    Ok(Some(
        crate::kubernetes::KubernetesInputs::new(binaries.as_ref(), key)
            .with_node(containerd.as_ref(), images),
    ))
}

/// containerd, its shim, ctr, runc and the CNI plugins from `kubernetes.containerd` (none for
/// packages). A bundle directory must list each in its `SHA256SUMS` and match it.
async fn containerd_binaries(
    source: &crate::inventory::BinarySource,
    downloads: &std::path::Path,
    write_cache: bool,
    digests: &LocalDigests,
) -> anyhow::Result<Option<binaries::LocalBinaries>> {
    let names: Vec<&str> = crate::kubernetes::node::containerd_binaries()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let bins = if write_cache {
        binaries::ensure(source, downloads, &names, &[], digests).await
    } else {
        binaries::ensure_read_only(source, downloads, &names, &[], digests).await
    }
    .context("failed to prepare the containerd binaries (kubernetes.containerd)")?;
    if let (crate::inventory::BinarySource::Bundle { dir }, Some(bins)) = (source, &bins) {
        let problems = checksums(dir, bins);
        if !problems.is_empty() {
            return Err(crate::exit::refuse(crate::exit::REFUSED, problems.join("\n")));
        }
    }
    Ok(bins)
}

/// What is wrong with a bundle's binaries against its `SHA256SUMS` (`<sha256>  <name>` lines, as
/// `sha256sum` writes them): every problem, each naming the file.
pub fn checksums(dir: &std::path::Path, bins: &binaries::LocalBinaries) -> Vec<String> {
    let sums_path = dir.join("SHA256SUMS");
    let Ok(sums) = fs_err::read_to_string(&sums_path) else {
        return vec![format!(
            "kubernetes.containerd.bundleDir: {} is missing: a bundle lists the sha256 of each \
             binary there (`sha256sum * > SHA256SUMS` in the directory), so a changed file is \
             refused; nothing was changed",
            sums_path.display()
        )];
    };
    let listed: std::collections::BTreeMap<&str, &str> = sums
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let sum = w.next()?;
            let name = w.next()?.trim_start_matches('*');
            Some((name, sum))
        })
        .collect();
    let mut problems = Vec::new();
    for (name, blob) in &bins.files {
        let found = &blob.sha256;
        match listed.get(name.as_str()) {
            None => problems.push(format!(
                "{}: lists no {name}: add its sha256; nothing was changed",
                sums_path.display()
            )),
            Some(want) if !want.eq_ignore_ascii_case(found) => problems.push(format!(
                "{}: sha256 {found}, but {} says {want}: the file changed since it was listed; \
                 nothing was changed",
                dir.join(name).display(),
                sums_path.display()
            )),
            Some(_) => {}
        }
    }
    problems
}

/// The image set of `kubernetes.images.dir`: its manifest checked, every archive hashed against
/// it (through the run's digest records), the archives left in their files until they are sent.
fn image_set(
    dir: &std::path::Path,
    kube: &crate::inventory::KubernetesSpec,
    digests: &LocalDigests,
) -> anyhow::Result<crate::kubernetes::node::NodeImages> {
    let set = crate::images::ImageSet::load(dir).context("kubernetes.images.dir")?;
    let blobs = set.verify_archives(digests).context("kubernetes.images.dir")?;
    crate::kubernetes::node::NodeImages::from_set(&set, kube, |image| {
        blobs
            .get(&image.archive)
            .cloned()
            .ok_or_else(|| std::io::Error::other("not verified (a bug in hactl)"))
    })
    .map_err(|e| {
        crate::exit::refuse(
            crate::exit::REFUSED,
            format!("kubernetes.images.dir: {e}; nothing was changed"),
        )
    })
}

/// (sha256, `--version` line) of each binary of a `source: bundle` directory, from the run's
/// digest records (each file read, and started, once per change). The facts probe prints the
/// version of a host's binary whose recorded digest is one of these instead of starting it
/// ([`crate::facts::Query::known_versions`]). Empty for other sources; a binary that cannot be
/// read or run is left out (the probe starts the host's copy then).
pub fn known_versions(inv: &Inventory, digests: &LocalDigests) -> Vec<(String, String)> {
    let Some(kube) = &inv.kubernetes else {
        return vec![];
    };
    let crate::inventory::BinarySource::Bundle { dir } = &kube.source else {
        return vec![];
    };
    crate::kubernetes::wanted_binaries(kube.mode)
        .into_iter()
        .filter_map(|name| {
            let path = dir.join(name);
            let sha256 = digests.sha256(&path).ok()?.sha256;
            let line = digests
                .version(&path, crate::kubernetes::bundle::version_of)
                .ok()?;
            Some((sha256, line))
        })
        .collect()
}

/// Refuses (exit 2) a `source: bundle` directory that lacks a binary, holds one that is not
/// executable or not `kubernetes.version`, or was left half-built by an interrupted build; every
/// problem is named. Read-only, and run before any host is contacted.
pub fn refuse_bad_bundle(inv: &Inventory, digests: &LocalDigests) -> anyhow::Result<()> {
    let Some(kube) = &inv.kubernetes else {
        return Ok(());
    };
    let crate::inventory::BinarySource::Bundle { dir } = &kube.source else {
        return Ok(());
    };
    let problems = crate::kubernetes::bundle::check(dir, &kube.version, kube.mode, digests);
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
