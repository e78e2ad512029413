//! `hactl etcd snapshot save|verify`: snapshots on the operator machine (the streaming and the
//! checks are [`crate::snapshot`]).

use anyhow::{anyhow, Context as _};

use crate::cli::{SnapshotSaveArgs, SnapshotVerifyArgs};
use crate::inventory::Role;
use crate::snapshot;
use crate::snapshot::{refuse_bad_hash, take, verify_on};

/// `hactl etcd snapshot save`.
pub async fn save(args: &SnapshotSaveArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    let transports =
        crate::exec::connect::reach(&state, &inv.with_role(Role::Etcd), &args.connect.settings())
            .await
            .warn_unreachable();
    let out_dir = args.out.clone().unwrap_or_else(|| state.file("backups"));
    let saved = take(&inv, &state, &transports, &out_dir, !args.no_bundle).await?;
    let s = &saved.sidecar;
    println!("{}", saved.path.display());
    eprintln!(
        "snapshot: {} bytes from leader {} at revision {} in {:.2}s ({:.1} MiB/s); sha256 {}",
        s.size,
        s.taken_from,
        s.revision,
        saved.stream_secs,
        saved.bytes_per_sec / 1048576.0,
        s.sha256
    );
    if let Some(b) = &s.bundle {
        let (_, public) = snapshot::identity(&state)?;
        eprintln!(
            "bundle: {b} (encrypted to {public}; the identity that opens it is {}: keep a copy somewhere safe)",
            state.file(snapshot::IDENTITY_FILE).display()
        );
    }
    Ok(crate::exit::OK)
}

/// `hactl etcd snapshot restore-bundle`.
pub fn restore_bundle(args: &crate::cli::SnapshotRestoreBundleArgs) -> anyhow::Result<i32> {
    let (_, state) = super::load(&args.inventory)?;
    for name in snapshot::restore_bundle(&args.bundle, &args.identity, &state)? {
        println!("{}", state.file(name).display());
    }
    Ok(crate::exit::OK)
}

/// `hactl etcd snapshot verify`.
pub async fn verify(args: &SnapshotVerifyArgs) -> anyhow::Result<i32> {
    let check =
        snapshot::check_file(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    refuse_bad_hash(&args.file, &check, args.skip_hash_check)?;
    let (inv, state) = super::load(&args.inventory)?;
    let transports =
        crate::exec::connect::reach(&state, &inv.with_role(Role::Etcd), &args.connect.settings())
            .await
            .warn_unreachable();
    let t = transports
        .values()
        .next()
        .ok_or_else(|| anyhow!("no etcd host is reachable for the trial restore"))?;
    let v = verify_on(&inv, t.as_ref(), &args.file, args.skip_hash_check).await?;
    println!(
        "{}: ok: size {} (hash {:?}), sha256 {}, revision {}, {} keys; trial restore on {} gave cluster-id {}",
        args.file.display(),
        v.check.size,
        v.check.hash,
        v.check.sha256,
        v.status.revision,
        v.status.total_key,
        v.host,
        v.trial_cluster_id
    );
    Ok(crate::exit::OK)
}
