//! R0.4: the source of a recover: a snapshot file (checked, with its sidecar), a survivor's data
//! (`--from-member`), or with `--auto` the highest revision among the survivors, the verified
//! scheduled backups on reachable hosts and the snapshots in `<state>/backups` (a host backup is
//! fetched first).
//!
//! Invariant: only reads, except that `--auto` copies a host backup into
//! `<state>/backups/fetched/<host>/`; every candidate and the estimated loss are printed. What a
//! host or a file beside a snapshot says about it (its sha256, its revision) is checked on this
//! machine against the snapshot's own bytes before it becomes the source: a report that differs
//! is refused, never trusted.

use std::path::Path;

use anyhow::{anyhow, Context as _};

use crate::exec::Transports;
use crate::exit::refuse;
use crate::inventory::{Inventory, Role};
use crate::state::StateDir;

use super::assess::{self, HostAssessment};
use super::{self as rec, Source};

/// The source the options name (or `--auto` finds) for a recover of `targets`.
pub async fn choose(
    args: &super::Options,
    connect: &crate::exec::connect::ConnectSettings,
    inv: &Inventory,
    state: &StateDir,
    transports: &Transports,
    hosts: &[HostAssessment],
    targets: &[String],
) -> anyhow::Result<Source> {
    if let Some(path) = &args.from_snapshot {
        return file_source(path, args.skip_hash_check);
    }
    if let Some(m) = &args.from_member {
        let Some(a) = hosts.iter().find(|a| &a.host == m) else {
            return Err(refuse(
                crate::exit::REFUSED,
                format!("{m} is not a reachable etcd host"),
            ));
        };
        if !a.data_intact {
            return Err(refuse(
                crate::exit::REFUSED,
                format!("{m} holds no intact data ({}/member/wal and member/snap/db): choose another survivor or a snapshot", inv.etcd.data_dir),
            ));
        }
        return Ok(Source::Member { host: m.clone() });
    }
    auto_source(inv, state, transports, hosts, targets, connect).await
}

/// A snapshot file on the operator machine: its hash checked, its sidecar (when there is one)
/// agreeing with it: its sha256 with the file's, its revision with the one read here from the
/// file's bbolt pages.
pub fn file_source(path: &Path, skip_hash_check: bool) -> anyhow::Result<Source> {
    let path = std::path::absolute(path)?;
    let check =
        crate::snapshot::check_file(&path).with_context(|| format!("cannot read {}", path.display()))?;
    crate::snapshot::refuse_bad_hash(&path, &check, skip_hash_check)?;
    let sidecar: Option<crate::snapshot::Sidecar> =
        crate::bounded::read_to_string(crate::snapshot::sidecar_path(&path), crate::bounded::TEXT)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
    if let Some(s) = &sidecar {
        if s.sha256 != check.sha256 {
            return Err(refuse(
                crate::exit::REFUSED,
                format!(
                    "{}: sha256 {} differs from its sidecar's {}",
                    path.display(),
                    check.sha256,
                    s.sha256
                ),
            ));
        }
        verify_revision(&path, s.revision, "its sidecar")?;
    }
    if check.hash == crate::snapshot::HashState::Missing {
        eprintln!(
            "warning: {} has no appended sha256 (raw db copy): restoring with --skip-hash-check",
            path.display()
        );
    }
    Ok(Source::File {
        path: path.display().to_string(),
        sha256: check.sha256,
        size: check.size,
        skip_hash_check: check.hash == crate::snapshot::HashState::Missing,
        revision: sidecar.as_ref().map(|s| s.revision),
        time: sidecar.map(|s| s.time),
    })
}

/// `--auto` (R0.4c): the highest revision among the survivors' data dirs, the verified scheduled
/// backups on reachable hosts and the snapshot files in `<state>/backups`; prints every
/// candidate and the estimated loss of the choice; a host backup is fetched into
/// `<state>/backups/fetched/<host>/` and used as a snapshot file.
async fn auto_source(
    inv: &Inventory,
    state: &StateDir,
    transports: &Transports,
    hosts: &[HostAssessment],
    targets: &[String],
    connect: &crate::exec::connect::ConnectSettings,
) -> anyhow::Result<Source> {
    let mut candidates: Vec<rec::AutoCandidate> = Vec::new();
    // Survivors: a running member reports its revision; a stopped one's db is read on a copy.
    // (Only the new members: a survivor's data is restored on its own host, the seed.)
    for a in hosts
        .iter()
        .filter(|a| a.data_intact && targets.contains(&a.host))
    {
        let (revision, raft_index) = match &a.status {
            Some(s) => (Some(s.header.revision), s.raft_index),
            None => {
                let t = &transports[&a.host];
                let out = t.run(&assess::db_revision_command(&inv.etcd.data_dir)).await;
                let rev = match out {
                    Ok(o) if o.success() => assess::parse_db_revision(&o.stdout_str()),
                    Ok(o) => {
                        eprintln!(
                            "{}: cannot read the revision of its db: {}",
                            a.host,
                            o.stderr_str().trim()
                        );
                        None
                    }
                    Err(e) => {
                        eprintln!("{}: cannot read the revision of its db: {e}", a.host);
                        None
                    }
                };
                (rev, 0)
            }
        };
        candidates.push(rec::AutoCandidate {
            source: rec::AutoSource::Survivor { host: a.host.clone() },
            revision,
            raft_index,
            age: None,
        });
    }
    // Scheduled backups on the reachable hosts (only verified ones: latest.json says ok).
    let read = crate::backup::read_command(&inv.backup.dir);
    for h in inv.with_role(Role::Etcd) {
        let Some(t) = transports.get(&h.name) else {
            continue;
        };
        let out = match t.run(&read).await {
            Ok(o) if o.success() => o,
            Ok(o) => {
                eprintln!("{}: cannot read its backups: {}", h.name, o.stderr_str().trim());
                continue;
            }
            Err(e) => {
                eprintln!("{}: cannot read its backups: {e}", h.name);
                continue;
            }
        };
        if let Some((now, l)) = crate::backup::parse_latest(&out.stdout_str()) {
            candidates.push(rec::AutoCandidate {
                source: rec::AutoSource::HostBackup {
                    host: h.name.clone(),
                    file: l.file.clone(),
                    sha256: l.sha256.clone(),
                },
                revision: Some(l.revision),
                raft_index: 0,
                age: Some(std::time::Duration::from_secs((now - l.time).max(0) as u64)),
            });
        }
    }
    // Snapshot files of this cluster in the state directory.
    candidates.extend(local_candidates(state, &inv.name));
    // The copies the leader pushed to spec.backup.remote (the newest few: older ones rank lower).
    if let Some(remote) = &inv.backup.remote {
        match crate::backup_remote::list(state.into(), remote, &inv.name, connect).await {
            Ok(list) => candidates.extend(list.into_iter().take(3).map(|s| rec::AutoCandidate {
                revision: s.revision,
                raft_index: 0,
                age: Some(std::time::Duration::from_secs(s.age_seconds.max(0) as u64)),
                source: rec::AutoSource::Remote {
                    snapshot: s,
                    remote: remote.describe(),
                },
            })),
            Err(e) => eprintln!("backup remote: {e}"),
        }
    }
    eprintln!("--auto: candidates (the highest revision wins):");
    for c in &candidates {
        eprintln!("  {}", c.describe());
    }
    let Some(best) = rec::pick_auto(&candidates) else {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "no source: no reachable member holds intact data, no reachable host has a verified backup in {} \
                 and {} holds no snapshot with a sidecar (nor does backup.remote, when set); nothing was changed. Pass --from-snapshot FILE",
                inv.backup.dir,
                state.file("backups").display()
            ),
        ));
    };
    let c = &candidates[best];
    let source = match &c.source {
        rec::AutoSource::Survivor { host } => Source::Member { host: host.clone() },
        rec::AutoSource::LocalFile { path } => file_source(path, false)?,
        rec::AutoSource::Remote {
            snapshot,
            remote: name,
        } => {
            let remote = inv
                .backup
                .remote
                .as_ref()
                .expect("a remote candidate comes from spec.backup.remote");
            let local = crate::backup_remote::fetch(state, remote, snapshot, connect)
                .await
                .map_err(|e| {
                    refuse(
                        crate::exit::REFUSED,
                        format!("{e:#}: nothing was changed; pass --from-snapshot FILE"),
                    )
                })?;
            eprintln!("--auto: fetched {name}: {} to {}", snapshot.path, local.display());
            fetched_source(&local, c, &format!("{}.json on {name}", snapshot.path))?
        }
        rec::AutoSource::HostBackup { host, file, sha256 } => {
            let local = fetch_host_backup(state, transports, host, file, sha256).await?;
            eprintln!("--auto: fetched {host}:{file} to {}", local.display());
            fetched_source(&local, c, &format!("the latest.json of {host}"))?
        }
    };
    // The loss against the high-water mark known so far (the same sources R0.5 reads).
    let mark = super::decide::high_water_mark(crate::hwm::read(state), hosts);
    let est = rec::LossEstimate {
        revisions: mark
            .as_ref()
            .zip(c.revision)
            .map(|(m, r)| (m.revision - r).max(0)),
        hwm: mark.as_ref().map(|m| (m.revision, m.time.clone())),
        source_revision: c.revision,
        source_age: c.age,
        source: String::new(),
    };
    eprintln!("--auto: chose {}; {}", c.describe(), rec::describe_loss(&est));
    Ok(source)
}

/// The revision the snapshot at `path` holds, read here from its bbolt pages, is the one `who`
/// reports (`claimed`): otherwise a refusal (exit 2), since `--auto` ranked the snapshot by that
/// report, and a file whose revision cannot be read here is refused too.
fn verify_revision(path: &Path, claimed: i64, who: &str) -> anyhow::Result<()> {
    match crate::snapshot::bolt::status(path) {
        Ok(s) if s.revision == claimed => Ok(()),
        Ok(s) => Err(refuse(
            crate::exit::REFUSED,
            format!(
                "{}: {who} reports revision {claimed}, but the file read here holds revision {}: \
                 the report is wrong, so the snapshot is not used; nothing was changed. Find out why \
                 the report differs, or pass a snapshot you trust with --from-snapshot FILE",
                path.display(),
                s.revision
            ),
        )),
        Err(e) => Err(refuse(
            crate::exit::REFUSED,
            format!(
                "{}: {who} reports revision {claimed}, but the revision cannot be read from the \
                 file here ({e}), so the snapshot is not used; nothing was changed. Pass a \
                 snapshot you trust with --from-snapshot FILE",
                path.display()
            ),
        )),
    }
}

/// The source of a candidate `--auto` fetched to `local` (its sha256 already checked against
/// the one `who` reported): the file checked as any snapshot file, its revision checked against
/// the one `who` reported, and the candidate's time where the file alone does not tell it.
fn fetched_source(local: &Path, c: &rec::AutoCandidate, who: &str) -> anyhow::Result<Source> {
    let source = file_source(local, false)?;
    if let Some(claimed) = c.revision {
        verify_revision(local, claimed, who)?;
    }
    Ok(with_candidate_facts(source, c))
}

/// A fetched candidate's file source, with the revision and time the candidate's listing gave
/// where the file alone does not tell them.
fn with_candidate_facts(source: Source, c: &rec::AutoCandidate) -> Source {
    match source {
        Source::File {
            path,
            sha256,
            size,
            skip_hash_check,
            revision,
            time,
        } => Source::File {
            path,
            sha256,
            size,
            skip_hash_check,
            revision: revision.or(c.revision),
            time: time.or_else(|| {
                c.age
                    .map(|a| crate::clock::timestamp(time::OffsetDateTime::now_utc() - a))
            }),
        },
        other => other,
    }
}

/// Snapshot files in `<state>/backups` with a sidecar of this cluster.
fn local_candidates(state: &StateDir, cluster: &str) -> Vec<rec::AutoCandidate> {
    let Ok(entries) = fs_err::read_dir(state.file("backups")) else {
        return Vec::new();
    };
    let now = time::OffsetDateTime::now_utc();
    let mut out = Vec::new();
    let mut paths: Vec<std::path::PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.extension().and_then(|x| x.to_str()) != Some("db") {
            continue;
        }
        let Some(s) = crate::bounded::read_to_string(crate::snapshot::sidecar_path(&p), crate::bounded::TEXT)
            .ok()
            .and_then(|t| serde_json::from_str::<crate::snapshot::Sidecar>(&t).ok())
        else {
            continue;
        };
        if s.cluster != cluster {
            continue;
        }
        let age = time::OffsetDateTime::parse(&s.time, &time::format_description::well_known::Rfc3339)
            .ok()
            .map(|t| (now - t).max(time::Duration::ZERO).unsigned_abs());
        out.push(rec::AutoCandidate {
            source: rec::AutoSource::LocalFile { path: p },
            revision: Some(s.revision),
            raft_index: 0,
            age,
        });
    }
    out
}

/// Copies a host's scheduled backup to `<state>/backups/fetched/<host>/<name>` (kept when it is
/// already there with the same sha256) and checks it against the sha256 its `latest.json` names.
async fn fetch_host_backup(
    state: &StateDir,
    transports: &Transports,
    host: &str,
    file: &str,
    sha256: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let name = Path::new(file)
        .file_name()
        .ok_or_else(|| anyhow!("{host}: latest.json names no file ({file:?})"))?;
    let dir = state.file(Path::new("backups").join("fetched").join(host));
    let local = dir.join(name);
    if local.exists() && crate::snapshot::check_file(&local).is_ok_and(|c| c.sha256 == sha256) {
        return Ok(local);
    }
    let t = &transports[host];
    let out = t
        .run(
            &crate::plan::RemoteCommand::read_only(["cat", file])
                .with_timeout(std::time::Duration::from_secs(900))
                .with_output_limit(crate::bounded::SNAPSHOT),
        )
        .await
        .with_context(|| format!("{host}: cannot read {file}"))?;
    if !out.success() {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "{host}: cannot read its backup {file}: {}: nothing was changed; pass --from-snapshot FILE",
                out.stderr_str().trim()
            ),
        ));
    }
    fs_err::create_dir_all(&dir)?;
    crate::snapshot::write_atomically(&local, &out.stdout)?;
    let got = crate::snapshot::check_file(&local)?;
    if got.sha256 != sha256 {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "{host}:{file} arrived with sha256 {} but its latest.json names {sha256}: nothing was changed. \
                 Check the file on {host}, or pass another source with --from-snapshot",
                got.sha256
            ),
        ));
    }
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot taken from a lab cluster (revision 343, as `etcdutl snapshot status` read it).
    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/snapshot/lab-3.5.16.db"
    );

    fn sidecar(path: &Path, sha256: &str, revision: i64) {
        let json = serde_json::json!({
            "file": path.display().to_string(), "sha256": sha256, "size": 213024, "cluster": "lab",
            "clusterId": "1", "takenFrom": "cp1", "members": [], "etcdVersion": "3.5.16",
            "revision": revision, "totalKey": 350, "revisionBefore": revision, "hwm": null,
            "time": "2026-11-24T00:00:00Z",
        });
        fs_err::write(crate::snapshot::sidecar_path(path), json.to_string()).unwrap();
    }

    fn copy_of_fixture(dir: &Path) -> (std::path::PathBuf, String) {
        let path = dir.join("lab-20261124T000000Z.db");
        fs_err::copy(FIXTURE, &path).unwrap();
        let sha256 = crate::snapshot::check_file(&path).unwrap().sha256;
        (path, sha256)
    }

    fn refused_with(r: anyhow::Result<Source>) -> String {
        let err = r.expect_err("refused");
        assert_eq!(crate::exit::exit_code_of(&err), crate::exit::REFUSED, "{err:#}");
        format!("{err:#}")
    }

    #[test]
    fn a_sidecar_that_lies_about_the_revision_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (path, sha256) = copy_of_fixture(tmp.path());
        sidecar(&path, &sha256, 343);
        let Source::File {
            revision,
            sha256: got,
            ..
        } = file_source(&path, false).unwrap()
        else {
            panic!("a file source")
        };
        assert_eq!((revision, got.as_str()), (Some(343), sha256.as_str()));
        // A sidecar that claims more than the file holds (so --auto would rank it first).
        sidecar(&path, &sha256, 900);
        let message = refused_with(file_source(&path, false));
        assert!(
            message.contains("its sidecar reports revision 900, but the file read here holds revision 343"),
            "{message}"
        );
        assert!(message.contains("--from-snapshot FILE"), "{message}");
        // A sidecar naming another file's sha256.
        sidecar(&path, &"0".repeat(64), 343);
        assert!(refused_with(file_source(&path, false)).contains("differs from its sidecar's"));
    }

    #[test]
    fn a_fetched_copy_whose_host_reported_another_revision_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (path, sha256) = copy_of_fixture(tmp.path());
        let candidate = |revision| rec::AutoCandidate {
            source: rec::AutoSource::HostBackup {
                host: "cp1".into(),
                file: "/var/lib/etcd-backups/lab-20261124T000000Z.db".into(),
                sha256: sha256.clone(),
            },
            revision,
            raft_index: 0,
            age: Some(std::time::Duration::from_secs(60)),
        };
        let who = "the latest.json of cp1";
        let Source::File { revision, time, .. } = fetched_source(&path, &candidate(Some(343)), who).unwrap()
        else {
            panic!("a file source")
        };
        assert_eq!(revision, Some(343));
        assert!(time.is_some());
        let message = refused_with(fetched_source(&path, &candidate(Some(5000)), who));
        assert!(
            message.contains(
                "the latest.json of cp1 reports revision 5000, but the file read here holds revision 343"
            ),
            "{message}"
        );
        // No report to check: the file's own checks only.
        assert!(fetched_source(&path, &candidate(None), who).is_ok());
        // A file whose revision cannot be read here (both bbolt meta pages broken, the appended
        // sha256 made to match) is not taken on the host's word.
        let bad = tmp.path().join("bad.db");
        let mut bytes = fs_err::read(FIXTURE).unwrap();
        bytes.truncate(bytes.len() - 32);
        bytes[16] ^= 0xff;
        bytes[4096 + 16] ^= 0xff;
        let sum = {
            use sha2::Digest;
            sha2::Sha256::digest(&bytes)
        };
        bytes.extend_from_slice(&sum);
        fs_err::write(&bad, &bytes).unwrap();
        let message = refused_with(fetched_source(&bad, &candidate(Some(343)), who));
        assert!(message.contains("cannot be read from the file here"), "{message}");
    }
}
