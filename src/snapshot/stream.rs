//! Snapshots on the operator machine: streaming one from the leader, and checking one on a host.
//!
//! [`take`] streams a snapshot from the **leader** (a lagging member would silently lose writes)
//! through an SSH tunnel with the etcd client, hashing it as it arrives (the whole file and the
//! sha256 etcd appends), reads the facts `snapshot status` reports from the file itself
//! ([`crate::snapshot::bolt`]: no second transfer), and writes the sidecar JSON and the encrypted key
//! bundle beside it. [`verify_on`] checks a file, runs the host's own `snapshot status` on a copy
//! (which must agree with [`crate::snapshot::bolt`]) and trial-restores it into a scratch dir on a host.
//! `hactl etcd snapshot save|verify` and recover's R0.5 both use them.
//!
//! Invariant: the snapshot appears under its final name only once whole, fsynced and checked.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use sha2::{Digest, Sha256};
use std::io::Write as _;

use crate::etcd::client;
use crate::exec::{Transport, Transports};
use crate::hwm::{self, Hwm};
use crate::inventory::{Inventory, Role};
use crate::plan::{RemoteCommand, Upload};
use crate::snapshot::{self, FileCheck, HashState, RestoreArgs, Sidecar, SidecarMember, Status};
use crate::state::StateDir;

const TIMEOUT: Duration = Duration::from_secs(5);
/// Written by every snapshot save just before it streams; recover's checks can read it back.
pub const CANARY_KEY: &str = "/hactl/backup-canary";

/// A snapshot written to disk, with what was learned taking it.
#[derive(Debug, Clone)]
pub struct Saved {
    pub path: PathBuf,
    pub sidecar: Sidecar,
    pub bytes_per_sec: f64,
    pub stream_secs: f64,
}

/// The member a snapshot is streamed from, found by asking every member at once.
struct Leader {
    host: String,
    client: client::MemberClient,
    status: client::MemberStatus,
    /// The highest revision any member reported.
    revision_before: i64,
}

/// Who leads (a lagging member would silently lose writes), and the revision just before the
/// save. Read-only. Refused (exit 2) when no member leads.
async fn leader(inv: &Inventory, state: &StateDir, transports: &Transports) -> anyhow::Result<Leader> {
    let tls = client::client_tls(&state.file("pki"))?;
    let asked = inv.with_role(Role::Etcd).into_iter().filter_map(|host| {
        let t = transports.get(&host.name)?;
        let tls = &tls;
        Some(async move {
            let mut c = client::connect(t.as_ref(), inv.etcd.client_port, tls, TIMEOUT)
                .await
                .ok()?;
            let s = client::member_status(&mut c, TIMEOUT).await;
            Some((host.name.clone(), c, s))
        })
    });
    let mut leader = None;
    let mut revision_before = 0;
    for (host, c, s) in futures::future::join_all(asked).await.into_iter().flatten() {
        revision_before = revision_before.max(s.revision);
        if !s.id.is_empty() && s.id == s.leader {
            leader = Some((host, c, s));
        }
    }
    let Some((host, client, status)) = leader else {
        return Err(anyhow::Error::new(crate::exit::Refusal {
            code: crate::exit::REFUSED,
            message: "no etcd member is the leader, so no consistent snapshot can be taken: \
                      the cluster has lost quorum (`hactl status`); to rebuild it use `hactl recover`"
                .into(),
        }));
    };
    Ok(Leader {
        host,
        client,
        status,
        revision_before,
    })
}

/// What a save would do, found read-only (`hactl etcd snapshot save --dry-run`).
#[derive(Debug, Clone)]
pub struct Preview {
    /// The leader it would stream from.
    pub leader: String,
    pub etcd_version: String,
    /// The cluster's revision now.
    pub revision: i64,
    /// The leader's database size now (the snapshot's size, near enough).
    pub db_size: i64,
    /// Where the snapshot would go: `<out_dir>/<cluster>-<UTC time>.db` (the time of the save).
    pub path: PathBuf,
    /// Its sidecar, beside it.
    pub sidecar: PathBuf,
    /// The encrypted bundle beside it, unless `--no-bundle`.
    pub bundle: Option<PathBuf>,
}

/// What [`take`] would do now, reading only: the leader and its numbers, and the files it would
/// write (named as if taken now). Writes nothing here or on a host: no canary, no high-water
/// mark, no directory.
pub async fn preview(
    inv: &Inventory,
    state: &StateDir,
    transports: &Transports,
    out_dir: &Path,
    bundle: bool,
) -> anyhow::Result<Preview> {
    let l = leader(inv, state, transports).await?;
    let stem = snapshot::file_stem(&inv.name, time::OffsetDateTime::now_utc());
    let path = out_dir.join(format!("{stem}.db"));
    Ok(Preview {
        leader: l.host,
        etcd_version: l.status.version,
        revision: l.revision_before,
        db_size: l.status.db_size_bytes,
        sidecar: sidecar_path(&path),
        bundle: bundle.then(|| out_dir.join(format!("{stem}.bundle.age"))),
        path,
    })
}

/// Takes a snapshot from the leader into `out_dir`. Records the high-water mark.
pub async fn take(
    inv: &Inventory,
    state: &StateDir,
    transports: &Transports,
    out_dir: &Path,
    bundle: bool,
) -> anyhow::Result<Saved> {
    let Leader {
        host: leader_host,
        client: mut c,
        status,
        mut revision_before,
    } = leader(inv, state, transports).await?;
    let version = status.version.clone();
    // The canary: a write just before the save, so the snapshot's revision (the newest key's, as
    // `snapshot status` reports it) must reach this write's, proving it holds it.
    let canary = c
        .client
        .put(
            CANARY_KEY,
            crate::clock::timestamp(time::OffsetDateTime::now_utc()),
            None,
        )
        .await
        .with_context(|| format!("failed to write the backup canary through {leader_host}"))?;
    revision_before = canary.header().map(|h| h.revision()).unwrap_or(revision_before);
    let members = c
        .client
        .member_list()
        .await
        .with_context(|| format!("failed to list members through {leader_host}"))?;
    let cluster_id = members
        .header()
        .map(|h| format!("{:x}", h.cluster_id()))
        .unwrap_or_default();
    let members: Vec<SidecarMember> = members
        .members()
        .iter()
        .map(|m| SidecarMember {
            name: m.name().to_string(),
            id: format!("{:x}", m.id()),
            peer_urls: m.peer_urls().to_vec(),
        })
        .collect();

    fs_err::create_dir_all(out_dir)?;
    let now = time::OffsetDateTime::now_utc();
    let stem = snapshot::file_stem(&inv.name, now);
    let path = out_dir.join(format!("{stem}.db"));
    let part = snapshot::part_path(&path);
    tracing::info!(
        "{leader_host}: streaming a snapshot from the leader to {}",
        path.display()
    );
    let started = Instant::now();
    let mut stream = c
        .client
        .snapshot()
        .await
        .with_context(|| format!("failed to start a snapshot on {leader_host}"))?;
    // The bytes go to a writer thread that hashes and writes them, so receiving (SSH, TLS,
    // gRPC) and hashing use two cores.
    let file = snapshot::create_private(&part)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(256);
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<StreamHashes> {
        let mut file = std::io::BufWriter::with_capacity(4 << 20, file);
        let mut hashes = StreamHashes::default();
        while let Some(blob) = rx.blocking_recv() {
            hashes.update(&blob);
            file.write_all(&blob)?;
        }
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(hashes)
    });
    // On a terminal: bytes so far and the rate (the stream's size is not known ahead).
    let mut progress = crate::output::Transfer::bar_only(format!("snapshot from {leader_host}"), None);
    let received: anyhow::Result<()> = async {
        while let Some(resp) = stream
            .message()
            .await
            .with_context(|| format!("the snapshot stream from {leader_host} broke"))?
        {
            progress.inc(resp.blob().len() as u64);
            if tx.send(resp.blob().to_vec()).await.is_err() {
                break;
            }
        }
        Ok(())
    }
    .await;
    progress.finish();
    drop(tx);
    let written = writer.await?;
    let hashes = match (received, written) {
        (Ok(()), Ok(h)) => h,
        (Err(e), _) => {
            let _ = fs_err::remove_file(&part);
            return Err(e);
        }
        (_, Err(e)) => {
            let _ = fs_err::remove_file(&part);
            return Err(anyhow::Error::new(e).context(format!("failed to write {}", part.display())));
        }
    };
    let stream_secs = started.elapsed().as_secs_f64();
    let size = hashes.size;
    let check = hashes.finish();
    if check.hash != HashState::Ok || fs_err::metadata(&part)?.len() != size {
        let _ = fs_err::remove_file(&part);
        bail!(
            "the snapshot from {leader_host} failed its integrity check ({:?}); nothing was kept",
            check.hash
        );
    }
    fs_err::rename(&part, &path)?;
    snapshot::sync_parent(&path);

    // `snapshot status`, read from the file itself: no second copy to a host.
    let status = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || crate::snapshot::bolt::status(&path)).await?
    }
    .with_context(|| {
        format!(
            "the snapshot from {leader_host} passed its sha256 but does not read as a bbolt file: {} kept for inspection",
            path.display()
        )
    })?;
    if status.total_size + 32 != size {
        bail!(
            "the snapshot's bbolt file counts {} bytes but {} arrived before etcd's sha256: {} kept for inspection",
            status.total_size,
            size - 32,
            path.display()
        );
    }
    if status.revision < revision_before {
        bail!(
            "the snapshot's revision {} is below the cluster's {} read before it: {} kept for inspection",
            status.revision,
            revision_before,
            path.display()
        );
    }
    let hwm_now = hwm::record(state, Hwm::now(status.revision, &cluster_id, "snapshot"))?;
    record_hwm_on_hosts(transports, &hwm_now).await;
    let bundle_name = if bundle {
        let bundle_path = out_dir.join(format!("{stem}.bundle.age"));
        snapshot::write_state_bundle(&bundle_path, state)?;
        Some(
            bundle_path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
        )
    } else {
        None
    };
    let sidecar = Sidecar {
        file: path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned(),
        sha256: check.sha256.clone(),
        size: check.size,
        cluster: inv.name.clone(),
        cluster_id,
        taken_from: leader_host,
        members,
        etcd_version: version,
        revision: status.revision,
        total_key: status.total_key,
        revision_before,
        hwm: Some(hwm_now),
        time: crate::clock::timestamp(now),
        bundle: bundle_name,
    };
    let json = serde_json::to_string_pretty(&sidecar)?;
    snapshot::write_atomically(&sidecar_path(&path), format!("{json}\n").as_bytes())?;
    Ok(Saved {
        path,
        sidecar,
        bytes_per_sec: size as f64 / stream_secs.max(1e-9),
        stream_secs,
    })
}

/// `<file>.json`.
pub fn sidecar_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".json");
    PathBuf::from(s)
}

/// Raises the mark on every connected host (best effort).
pub async fn record_hwm_on_hosts(transports: &Transports, seen: &Hwm) {
    let cmd = hwm::host_record_command(seen);
    let runs = transports.iter().map(|(h, t)| {
        let cmd = cmd.clone();
        async move { (h, t.run(&cmd).await) }
    });
    for (h, r) in futures::future::join_all(runs).await {
        if !matches!(r, Ok(ref o) if o.success()) {
            tracing::warn!("{h}: could not record the high-water mark");
        }
    }
}

/// The sha256 of a stream (the whole file) and of all but its last 32 bytes (what etcd's
/// appended hash covers), computed as the bytes arrive so the file is not read again.
#[derive(Default)]
struct StreamHashes {
    whole: Sha256,
    body: Sha256,
    /// The last (up to) 32 bytes seen, not yet fed to `body`.
    tail: Vec<u8>,
    size: u64,
}

impl StreamHashes {
    fn update(&mut self, blob: &[u8]) {
        self.whole.update(blob);
        self.size += blob.len() as u64;
        if blob.len() >= 32 {
            self.body.update(&self.tail);
            self.body.update(&blob[..blob.len() - 32]);
            self.tail.clear();
            self.tail.extend_from_slice(&blob[blob.len() - 32..]);
        } else {
            self.tail.extend_from_slice(blob);
            let extra = self.tail.len().saturating_sub(32);
            self.body.update(&self.tail[..extra]);
            self.tail.drain(..extra);
        }
    }

    /// The same verdict as [`snapshot::check_file`] on the bytes streamed.
    fn finish(self) -> FileCheck {
        let with_hash = self.size >= 32 && self.size % 512 == 32;
        let hash = if !with_hash {
            HashState::Missing
        } else if self.body.finalize().as_slice() == self.tail.as_slice() {
            HashState::Ok
        } else {
            HashState::Mismatch
        };
        FileCheck {
            size: self.size,
            sha256: hex::encode(self.whole.finalize()),
            hash,
        }
    }
}

/// Places the snapshot helper on a host (skipped when it is already there).
pub async fn upload_helper(t: &dyn Transport) -> anyhow::Result<()> {
    t.upload(&snapshot::helper_upload()?)
        .await
        .with_context(|| format!("failed to place {} on {}", snapshot::HELPER, t.host()))?;
    Ok(())
}

/// What a trial restore of a file showed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verified {
    pub check: FileCheck,
    pub status: Status,
    pub host: String,
    pub trial_cluster_id: String,
}

/// Checks a snapshot file (hash and size rule locally), then on host `t`: status on a copy and a
/// trial restore into a scratch dir, which is removed afterwards.
pub async fn verify_on(
    inv: &Inventory,
    t: &dyn Transport,
    path: &Path,
    skip_hash_check: bool,
) -> anyhow::Result<Verified> {
    let check = snapshot::check_file(path).with_context(|| format!("cannot read {}", path.display()))?;
    refuse_bad_hash(path, &check, skip_hash_check)?;
    let host = inv
        .host(t.host())
        .ok_or_else(|| anyhow!("{} is not in the inventory", t.host()))?;
    upload_helper(t).await?;
    let dir = format!("{}/verify-{}", snapshot::HOST_SCRATCH, &check.sha256[..16]);
    let remote = format!("{dir}/snapshot.db");
    let bytes = crate::bounded::read(path, crate::bounded::SNAPSHOT)?;
    t.upload(&Upload::new(remote.clone(), 0o600, "root", "root", bytes))
        .await
        .with_context(|| format!("failed to copy {} to {}", path.display(), host.name))?;
    let result = async {
        let out = t.run(&snapshot::status_command(&remote)).await?;
        if !out.success() {
            bail!(
                "{}: snapshot status failed: {}",
                host.name,
                out.stderr_str().trim()
            );
        }
        let status: Status = serde_json::from_str(out.stdout_str().trim())?;
        // The host's tool and hactl's own reader (which `save` relies on) must agree.
        let local = {
            let path = path.to_path_buf();
            tokio::task::spawn_blocking(move || crate::snapshot::bolt::status(&path)).await?
        };
        match local {
            Ok(l) if l == status => {}
            Ok(l) => bail!(
                "{}: `snapshot status` says {status:?} but hactl read {l:?} from the same file",
                host.name
            ),
            Err(e) => bail!(
                "{}: `snapshot status` read the file ({status:?}) but hactl could not: {e}",
                host.name
            ),
        }
        let url = crate::etcd::peer_url(inv, host);
        let trial = RestoreArgs {
            snapshot: remote.clone(),
            name: host.name.clone(),
            peer_url: url.clone(),
            initial_cluster: format!("{}={url}", host.name),
            token: format!("hactl-{}-verify", inv.name),
            data_dir: format!("{dir}/restore"),
            bump: 0,
            skip_hash_check,
        };
        let _ = t
            .run(&RemoteCommand::new(["rm", "-rf", "--", &trial.data_dir]))
            .await;
        let out = t.run(&snapshot::restore_command(&trial)).await?;
        if !out.success() {
            bail!("{}: trial restore failed: {}", host.name, out.stderr_str().trim());
        }
        let v: serde_json::Value = serde_json::from_str(out.stdout_str().trim())?;
        Ok((status, v["cluster_id"].as_str().unwrap_or_default().to_string()))
    }
    .await;
    let _ = t.run(&RemoteCommand::new(["rm", "-rf", "--", &dir])).await;
    let (status, trial_cluster_id) = result?;
    Ok(Verified {
        check,
        status,
        host: host.name.clone(),
        trial_cluster_id,
    })
}

/// Exit 2 for a corrupt file, or a raw db without `--skip-hash-check`.
pub fn refuse_bad_hash(path: &Path, check: &FileCheck, skip_hash_check: bool) -> anyhow::Result<()> {
    let message = match check.hash {
        HashState::Ok => return Ok(()),
        HashState::Mismatch => format!(
            "{}: expected sha256 in its last 32 bytes does not match its content (size {}, sha256 {}): \
             the file is corrupt; use another snapshot",
            path.display(),
            check.size,
            check.sha256
        ),
        HashState::Missing if skip_hash_check => return Ok(()),
        HashState::Missing => format!(
            "{}: snapshot missing hash (size {} is not 32 more than a multiple of 512): it looks like a raw copy of \
             member/snap/db, which may lack writes still in the WAL; pass --skip-hash-check to use it anyway",
            path.display(),
            check.size
        ),
    };
    Err(anyhow::Error::new(crate::exit::Refusal {
        code: crate::exit::REFUSED,
        message,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_taken_while_streaming_agree_with_the_file_check_whatever_the_chunks() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("s.db");
        let body: Vec<u8> = (0..512u32 * 9).map(|i| (i % 251) as u8).collect();
        let mut good = body.clone();
        good.extend_from_slice(&Sha256::digest(&body));
        let mut flipped = good.clone();
        flipped[700] ^= 1;
        for bytes in [good, flipped, body] {
            fs_err::write(&p, &bytes).unwrap();
            let want = snapshot::check_file(&p).unwrap();
            for chunk in [1, 7, 31, 32, 33, 512, 4096, bytes.len()] {
                let mut h = StreamHashes::default();
                for c in bytes.chunks(chunk) {
                    h.update(c);
                }
                assert_eq!(h.finish(), want, "chunks of {chunk}");
            }
        }
    }
}
