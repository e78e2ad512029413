//! `hactl etcd snapshot save|verify`: snapshots on the operator machine (the streaming and the
//! checks are [`crate::snapshot`]). `save --dry-run` finds the leader read-only and prints what
//! a save would write, writing nothing.

use anyhow::{anyhow, Context as _};

use crate::cli::{SnapshotSaveArgs, SnapshotVerifyArgs};
use crate::inventory::Role;
use crate::snapshot;
use crate::snapshot::{refuse_bad_hash, take, verify_on};

/// `hactl etcd snapshot save`.
pub async fn save(args: &SnapshotSaveArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_for(&args.inventory, args.dry_run)?;
    let keys = if args.dry_run {
        crate::exec::connect::HostKeys::Check(&state)
    } else {
        (&state).into()
    };
    let transports = crate::exec::connect::reach(keys, &inv.with_role(Role::Etcd), &args.connect.settings())
        .await
        .warn_unreachable();
    let out_dir = args.out.clone().unwrap_or_else(|| state.file("backups"));
    if args.dry_run {
        let p = snapshot::preview(&inv, &state, &transports, &out_dir, !args.no_bundle).await?;
        print!("{}", preview_text(&p));
        return Ok(crate::exit::OK);
    }
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

/// A database size for the operator: KiB below 1 MiB (a new cluster's is a few dozen KiB).
fn size(bytes: i64) -> String {
    if bytes < 1 << 20 {
        format!("{} KiB", (bytes + 1023) / 1024)
    } else {
        format!("{:.1} MiB", bytes as f64 / 1048576.0)
    }
}

/// What `snapshot save --dry-run` prints: the leader, its numbers and every write it would make.
fn preview_text(p: &snapshot::Preview) -> String {
    let mut out = format!(
        "snapshot save (dry run: nothing written)\n\
         stream a snapshot from the leader {} (etcd {}, revision {}, database {}) after \
         writing the canary key {} through it\n\
         write {} (named for the time of the save), then its sidecar {}\n",
        p.leader,
        p.etcd_version,
        p.revision,
        size(p.db_size),
        snapshot::CANARY_KEY,
        p.path.display(),
        p.sidecar.display()
    );
    match &p.bundle {
        Some(b) => out.push_str(&format!(
            "write the encrypted bundle of CAs and keys {} (--no-bundle leaves it out)\n",
            b.display()
        )),
        None => out.push_str("no bundle of CAs and keys (--no-bundle)\n"),
    }
    out.push_str(
        "record the high-water mark (the snapshot's revision) in the state directory and on the etcd hosts\n",
    );
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dry_run_names_the_leader_and_every_write() {
        let mut p = snapshot::Preview {
            leader: "cp2".into(),
            etcd_version: "3.5.16".into(),
            revision: 42,
            db_size: 3 << 20,
            path: "/b/c-20261125T070000Z.db".into(),
            sidecar: "/b/c-20261125T070000Z.db.json".into(),
            bundle: Some("/b/c-20261125T070000Z.bundle.age".into()),
        };
        let text = preview_text(&p);
        for part in [
            "nothing written",
            "from the leader cp2 (etcd 3.5.16, revision 42, database 3.0 MiB)",
            snapshot::CANARY_KEY,
            "write /b/c-20261125T070000Z.db (",
            "sidecar /b/c-20261125T070000Z.db.json",
            "bundle of CAs and keys /b/c-20261125T070000Z.bundle.age",
            "high-water mark",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
        p.bundle = None;
        p.db_size = 20480;
        let text = preview_text(&p);
        assert!(text.contains("no bundle of CAs and keys (--no-bundle)"), "{text}");
        assert!(text.contains("database 20 KiB)"), "{text}");
    }
}
