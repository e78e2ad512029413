//! adopt's acts on the operator machine: AD1 (the marker and the host keys), AD2 (the read-back
//! into the state directory, and the new CAs beside the hosts' own: the rotations' first
//! state step), AD3 (the marker closed). Each with its postcondition read from the state
//! directory, so running `hactl adopt` again resumes.
//!
//! Invariants: nothing is written before every file was read and checked (AD2); a key travels
//! from the host's stdout into a 0600 file of the state directory and nowhere else (no argv,
//! no log, no journal: the journal gets the state-relative names only); the etcd CA's
//! certificate is written last, so its presence says the read-back is whole.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::decide::{check_read_back, Decisions, Form, Read};
use super::observe;
use crate::exec::Transports;
use crate::inventory::Inventory;
use crate::operations::runner::LocalAct;
use crate::pki::rotate;
use crate::state::StateDir;

/// The marker, relative to the state directory: the adopt run under way.
pub const MARKER: &str = "adopt";

/// The run the marker names, if any.
pub fn marker_run(state: &StateDir) -> Option<String> {
    fs_err::read_to_string(state.file(MARKER))
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// What the marker becomes once the run is done: `<run>.done` (`adopt-<time>.done`).
pub fn done_name(run: &str) -> String {
    format!("{run}.done")
}

/// Whether AD2 is done: the etcd CA certificate, written last, is in the state directory.
pub fn read_back_done(state: &StateDir) -> bool {
    state.file("pki/etcd/ca.crt").exists()
}

/// AD1: the host keys the run saw are recorded in the state directory's `known_hosts`, then
/// the marker names the run.
pub struct Start {
    pub state: StateDir,
    pub run: String,
    /// The host keys the reach checked (trusted for the run, not yet recorded).
    pub seen: Option<Arc<crate::ssh::KnownHosts>>,
}

#[async_trait]
impl LocalAct for Start {
    fn describe(&self) -> String {
        format!(
            "record the host keys listed above in {} (trusted on first use), then write the marker {} = {}",
            self.state.known_hosts_path().display(),
            self.state.file(MARKER).display(),
            self.run
        )
    }
    async fn act(&self, _: &Transports) -> anyhow::Result<serde_json::Value> {
        let mut pinned = Vec::new();
        if let Some(seen) = &self.seen {
            let file = crate::ssh::KnownHosts::load(self.state.known_hosts_path())?;
            pinned = file.pin_from(seen)?;
            for line in &pinned {
                tracing::info!("recorded host key {line}");
            }
        }
        self.state
            .write_file(MARKER, format!("{}\n", self.run).as_bytes(), 0o600)?;
        Ok(serde_json::json!({ "pinned": pinned }))
    }
    async fn holds(&self, _: &Transports) -> anyhow::Result<bool> {
        Ok(marker_run(&self.state).as_deref() == Some(self.run.as_str()))
    }
}

/// AD2: every file of the decisions read from its host, checked (its sha256 against what the
/// facts saw, the PKI as a whole with [`check_read_back`]), and only then written; the high-water
/// mark and the etcd token; the rotations started with their new CAs (`ca-next`); last, the CA
/// certificates the hosts trust, the etcd one at the very end.
pub struct ReadBack {
    pub state: StateDir,
    pub inv: Arc<Inventory>,
    pub run: String,
    pub decisions: Decisions,
}

impl ReadBack {
    fn pki(&self) -> PathBuf {
        self.state.file("pki")
    }

    /// Reads every file, host by host (one round trip each), checked against the facts.
    async fn read(&self, transports: &Transports) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
        let mut by_host: BTreeMap<&str, Vec<&Read>> = BTreeMap::new();
        for r in &self.decisions.reads {
            by_host.entry(r.host.as_str()).or_default().push(r);
        }
        let mut files = BTreeMap::new();
        for (host, reads) in by_host {
            let t = transports
                .get(host)
                .with_context(|| format!("{host}: not connected"))?;
            let mut paths: Vec<&str> = reads.iter().map(|r| r.remote.as_str()).collect();
            paths.dedup();
            let out = t
                .run(&observe::read_command(&paths))
                .await
                .with_context(|| format!("{host}: failed to read the files back"))?;
            if !out.success() {
                bail!(
                    "{host}: failed to read the files back: {}",
                    out.stderr_str().trim()
                );
            }
            let got = observe::parse_read(&out.stdout_str());
            for r in reads {
                let Some(Some(bytes)) = got.get(&r.remote) else {
                    bail!(
                        "{host}: {} is gone since it was observed: run `hactl adopt` again",
                        r.remote
                    );
                };
                let sha = hex::encode(Sha256::digest(bytes));
                if sha != r.sha256 {
                    bail!(
                        "{host}: {} changed since it was observed (sha256 {sha}, observed {}): \
                         something else changes the cluster; find out what, then run `hactl adopt` again",
                        r.remote,
                        r.sha256
                    );
                }
                files.insert(r.to.clone(), bytes.clone());
            }
        }
        Ok(files)
    }

    /// Adds the backup remote's pinned host key (the etcd hosts' copy) to the state's
    /// known_hosts.
    fn seed_remote_key(&self, lines: &[u8]) -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let theirs = tmp.path().join("known_hosts");
        fs_err::write(&theirs, lines)?;
        let seen = crate::ssh::KnownHosts::load_read_only(&theirs)?;
        let file = crate::ssh::KnownHosts::load(self.state.known_hosts_path())?;
        for line in file.pin_from(&seen)? {
            tracing::info!("recorded the backup remote's host key {line} (from the etcd hosts' copy)");
        }
        Ok(())
    }
}

#[async_trait]
impl LocalAct for ReadBack {
    fn describe(&self) -> String {
        let mut out = String::from(
            "read back, check (each file's sha256 as observed; keys against their certificates, \
             leaves against their CA) and only then write, in the state directory:",
        );
        for r in &self.decisions.reads {
            let how = match r.form {
                Form::File { mode } => format!("{mode:04o}"),
                Form::TrustedCa => "the signing CA's certificate without its key, written last".into(),
                Form::EncryptionKey => "its key, 0600".into(),
                Form::RemoteKnownHosts => "the backup remote's host key, added".into(),
            };
            out.push_str(&format!("\n      {}:{} -> {} ({how})", r.host, r.remote, r.to));
        }
        out.push_str(&format!(
            "\n      then {} (revision {}, cluster {})",
            crate::hwm::FILE,
            self.decisions.revision,
            self.decisions.cluster_id
        ));
        if let Some(t) = &self.decisions.token {
            out.push_str(&format!(", {} = {t}", crate::etcd::TOKEN_FILE));
        }
        for kind in self.decisions.rotated() {
            out.push_str(&format!(
                "\n      start the rotation of the {d} CA: pki/{d}/rotation = {run}, a new CA as pki/{d}/ca-next.{{crt,key}} (the rotation's C1)",
                d = kind.dir(),
                run = self.run
            ));
        }
        out
    }

    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let files = self.read(transports).await?;
        let problems = check_read_back(&self.decisions.reads, &files);
        if !problems.is_empty() {
            return Err(crate::exit::refuse(
                crate::exit::REFUSED,
                format!(
                    "refused: what the hosts hold does not hold together, so it was not written:\n  - {}",
                    problems.join("\n  - ")
                ),
            ));
        }
        let mut written = Vec::new();
        let (cas, rest): (Vec<&Read>, Vec<&Read>) = self
            .decisions
            .reads
            .iter()
            .partition(|r| r.form == Form::TrustedCa);
        for r in rest {
            let bytes = &files[&r.to];
            match r.form {
                Form::File { mode } => {
                    self.state.write_file(&r.to, bytes, mode)?;
                }
                Form::EncryptionKey => {
                    let key = crate::kubernetes::secrets::key_from_config(&String::from_utf8_lossy(bytes))
                        .with_context(|| format!("{}:{}: no key", r.host, r.remote))?;
                    self.state
                        .write_secret(&r.to, crate::kubernetes::secrets::key_file_text(&key).as_bytes())?;
                }
                Form::RemoteKnownHosts => self.seed_remote_key(bytes)?,
                Form::TrustedCa => unreachable!("partitioned out"),
            }
            written.push(r.to.clone());
        }
        if self.decisions.revision > 0 {
            crate::hwm::record(
                &self.state,
                crate::hwm::Hwm::now(self.decisions.revision, &self.decisions.cluster_id, "adopt"),
            )?;
            written.push(crate::hwm::FILE.into());
        }
        if let Some(t) = &self.decisions.token {
            self.state
                .write_file(crate::etcd::TOKEN_FILE, format!("{t}\n").as_bytes(), 0o600)?;
            written.push(crate::etcd::TOKEN_FILE.into());
        }
        let now = time::OffsetDateTime::now_utc();
        for kind in self.decisions.rotated() {
            rotate::start(&self.pki(), kind, &self.run)?;
            rotate::create_next(&self.pki(), &self.inv, kind, now)?;
            written.push(format!("pki/{}/ca-next.crt", kind.dir()));
        }
        // The hosts' CAs last (the etcd one at the very end, as decided): from here on the state
        // directory knows the cluster.
        for r in cas {
            self.state.write_file(&r.to, &files[&r.to], 0o644)?;
            written.push(r.to.clone());
        }
        Ok(serde_json::json!({ "written": written }))
    }

    async fn holds(&self, _: &Transports) -> anyhow::Result<bool> {
        Ok(read_back_done(&self.state))
    }
}

/// AD3: the marker becomes `<run>.done`.
pub struct Close {
    pub state: StateDir,
    pub run: String,
}

#[async_trait]
impl LocalAct for Close {
    fn describe(&self) -> String {
        format!(
            "close the adoption: {} becomes {}",
            self.state.file(MARKER).display(),
            done_name(&self.run)
        )
    }
    async fn act(&self, _: &Transports) -> anyhow::Result<serde_json::Value> {
        let from = self.state.file(MARKER);
        if from.exists() {
            fs_err::rename(&from, self.state.file(done_name(&self.run)))?;
        }
        Ok(serde_json::Value::Null)
    }
    async fn holds(&self, _: &Transports) -> anyhow::Result<bool> {
        Ok(!self.state.file(MARKER).exists())
    }
}

/// A postcondition described as what holds (the dry run's `skip when`).
pub struct Holds {
    pub what: String,
    pub act: Arc<dyn LocalAct>,
}

#[async_trait]
impl LocalAct for Holds {
    fn describe(&self) -> String {
        self.what.clone()
    }
    async fn act(&self, t: &Transports) -> anyhow::Result<serde_json::Value> {
        self.act.act(t).await
    }
    async fn holds(&self, t: &Transports) -> anyhow::Result<bool> {
        self.act.holds(t).await
    }
}
