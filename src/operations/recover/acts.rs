//! The operator-side work of a recover (each a [`LocalAct`]): copying the snapshot to hosts,
//! taking the operation locks, the emulated revision bump through an etcd client, recording the
//! new token, the baseline backup, and the final release.
//!
//! Constructing one is pure (it holds only paths and names); the I/O happens in `act`/`holds`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use async_trait::async_trait;

use crate::etcd::client::{self, ClientTls};
use crate::exec::Transports;
use crate::inventory::Inventory;
use crate::operations::runner::LocalAct;
use crate::plan::{RemoteCommand, Upload};
use crate::state::StateDir;

fn transport<'a>(transports: &'a Transports, host: &str) -> anyhow::Result<&'a dyn crate::exec::Transport> {
    transports
        .get(host)
        .map(|t| t.as_ref())
        .ok_or_else(|| anyhow!("no connection to {host}"))
}

async fn remote_sha(t: &dyn crate::exec::Transport, path: &str) -> anyhow::Result<Option<String>> {
    let out = t
        .run(&RemoteCommand::read_only([
            "sh",
            "-c",
            "[ -f \"$1\" ] && sha256sum < \"$1\" | cut -d' ' -f1",
            "hactl-sha",
            path,
        ]))
        .await?;
    Ok(out.success().then(|| out.stdout_str().trim().to_string()))
}

/// Copies a snapshot file from this machine to a host (0600 root).
pub struct UploadSnapshot {
    pub host: String,
    pub local: PathBuf,
    pub remote: String,
    pub sha256: String,
}

#[async_trait]
impl LocalAct for UploadSnapshot {
    fn describe(&self) -> String {
        format!(
            "copy {} to {}:{} mode=0600 owner=root:root sha256={}",
            self.local.display(),
            self.host,
            self.remote,
            self.sha256
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let t = transport(transports, &self.host)?;
        // Reading and hashing the file off the async threads: copies to other hosts run at once.
        let (local, remote) = (self.local.clone(), self.remote.clone());
        let up = tokio::task::spawn_blocking(move || -> anyhow::Result<Upload> {
            let bytes = crate::bounded::read(&local, crate::bounded::SNAPSHOT)
                .with_context(|| "the snapshot file is needed until it has been copied to the hosts")?;
            Ok(Upload::new(remote, 0o600, "root", "root", bytes))
        })
        .await??;
        if up.sha256 != self.sha256 {
            bail!(
                "{} changed since the plan was made (sha256 {} ≠ {})",
                self.local.display(),
                up.sha256,
                self.sha256
            );
        }
        t.upload(&up).await?;
        Ok(serde_json::json!({ "sha256": self.sha256 }))
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        let t = transport(transports, &self.host)?;
        Ok(remote_sha(t, &self.remote).await?.as_deref() == Some(self.sha256.as_str()))
    }
}

/// Copies the snapshot a survivor produced from one host to another (through this machine).
pub struct CopySnapshot {
    pub from: String,
    pub to: String,
    pub path: String,
}

#[async_trait]
impl LocalAct for CopySnapshot {
    fn describe(&self) -> String {
        format!(
            "copy {}:{} to {}:{} (through this machine)",
            self.from, self.path, self.to, self.path
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let from = transport(transports, &self.from)?;
        let out = from
            .run(
                &RemoteCommand::read_only(["cat", &self.path])
                    .with_timeout(Duration::from_secs(600))
                    .with_output_limit(crate::bounded::SNAPSHOT),
            )
            .await?;
        if !out.success() {
            bail!(
                "{}: cannot read {}: {}",
                self.from,
                self.path,
                out.stderr_str().trim()
            );
        }
        let up = Upload::new(self.path.clone(), 0o600, "root", "root", out.stdout);
        transport(transports, &self.to)?.upload(&up).await?;
        Ok(serde_json::json!({ "sha256": up.sha256 }))
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        let a = remote_sha(transport(transports, &self.from)?, &self.path).await?;
        let b = remote_sha(transport(transports, &self.to)?, &self.path).await?;
        Ok(a.is_some() && a == b)
    }
}

/// etcd 3.4 has no `--bump-revision`: writes `/hactl/revbump` until the revision reaches
/// `target`, deletes it, then compacts at the revision reached, so watchers from any revision
/// clients may have seen get "required revision has been compacted".
pub struct EmulatedBump {
    pub host: String,
    pub client_port: u16,
    pub tls: ClientTls,
    pub target: i64,
}

const BUMP_KEY: &str = "/hactl/revbump";

impl EmulatedBump {
    async fn client(&self, transports: &Transports) -> anyhow::Result<client::MemberClient> {
        let t = transport(transports, &self.host)?;
        Ok(client::connect(t, self.client_port, &self.tls, Duration::from_secs(10)).await?)
    }
}

#[async_trait]
impl LocalAct for EmulatedBump {
    fn describe(&self) -> String {
        format!(
            "through a tunnel to {}: put {BUMP_KEY} until the revision reaches {}, delete it, compact there",
            self.host, self.target
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let mut c = self.client(transports).await?;
        let mut rev = c
            .client
            .status()
            .await?
            .header()
            .map(|h| h.revision())
            .unwrap_or(0);
        let start = rev;
        if self.target - rev > super::MAX_EMULATED_WRITES {
            bail!("the emulated bump would need {} writes", self.target - rev);
        }
        let started = std::time::Instant::now();
        // A few writes in flight at once: ~10x a single sequential writer.
        while rev < self.target - 1 {
            let n = ((self.target - 1 - rev) as usize).min(64);
            let mut kv = c.client.kv_client();
            let puts = (0..n).map(|i| {
                let mut kv = kv.clone();
                async move { kv.put(BUMP_KEY, i.to_string(), None).await }
            });
            for r in futures::future::join_all(puts).await {
                let resp = r?;
                rev = rev.max(resp.header().map(|h| h.revision()).unwrap_or(rev));
            }
            let _ = &mut kv;
        }
        let del = c.client.delete(BUMP_KEY, None).await?;
        rev = rev.max(del.header().map(|h| h.revision()).unwrap_or(rev));
        c.client
            .compact(rev, Some(etcd_client::CompactionOptions::new().with_physical()))
            .await?;
        tracing::info!(
            "{}: emulated bump: {} writes in {:.1}s, compacted at {rev}",
            self.host,
            rev - start,
            started.elapsed().as_secs_f64()
        );
        Ok(serde_json::json!({ "from": start, "compacted_at": rev, "writes": rev - start }))
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        let mut c = self.client(transports).await?;
        let rev = c
            .client
            .status()
            .await?
            .header()
            .map(|h| h.revision())
            .unwrap_or(0);
        if rev < self.target {
            return Ok(false);
        }
        // Compacted past the target? A read at target-1 must be refused as compacted.
        let r = c
            .client
            .get(
                BUMP_KEY,
                Some(etcd_client::GetOptions::new().with_revision(self.target - 1)),
            )
            .await;
        Ok(matches!(r, Err(e) if e.to_string().contains("compacted")))
    }
}

/// Records the new lineage's token in the state directory (`hactl up` renders it for joiners).
pub struct RecordToken {
    pub state: StateDir,
    pub token: String,
}

#[async_trait]
impl LocalAct for RecordToken {
    fn describe(&self) -> String {
        format!(
            "write {} = {}",
            self.state.file(crate::etcd::TOKEN_FILE).display(),
            self.token
        )
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        self.state.write_file(
            crate::etcd::TOKEN_FILE,
            format!("{}\n", self.token).as_bytes(),
            0o600,
        )?;
        Ok(serde_json::json!({ "token": self.token }))
    }
    async fn holds(&self, _t: &Transports) -> anyhow::Result<bool> {
        Ok(
            crate::bounded::read_to_string(self.state.file(crate::etcd::TOKEN_FILE), crate::bounded::TEXT)
                .map(|t| t.trim() == self.token)
                .unwrap_or(false),
        )
    }
}

/// A fresh backup of the recovered cluster, from its leader.
pub struct Baseline {
    pub inv: Inventory,
    pub state: StateDir,
    pub marker: PathBuf,
}

#[async_trait]
impl LocalAct for Baseline {
    fn describe(&self) -> String {
        format!(
            "hactl etcd snapshot save --out {} (a new baseline from the leader)",
            self.state.file("backups").display()
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let saved = crate::snapshot::take(
            &self.inv,
            &self.state,
            transports,
            &self.state.file("backups"),
            true,
        )
        .await
        .context("failed to take the baseline backup")?;
        let v = serde_json::json!({
            "file": saved.path.display().to_string(),
            "sha256": saved.sidecar.sha256,
            "revision": saved.sidecar.revision,
        });
        snapshot_marker(&self.marker, &v)?;
        Ok(v)
    }
    async fn holds(&self, _t: &Transports) -> anyhow::Result<bool> {
        Ok(self.marker.exists())
    }
}

fn snapshot_marker(path: &std::path::Path, v: &serde_json::Value) -> anyhow::Result<()> {
    crate::snapshot::write_atomically(path, format!("{v}\n").as_bytes())?;
    Ok(())
}

/// Records the new cluster's revision as the high-water mark and releases the locks.
pub struct Finalize {
    pub state: StateDir,
    pub hosts: Vec<String>,
    pub seed: String,
    pub run: String,
    pub cluster_id: String,
}

#[async_trait]
impl LocalAct for Finalize {
    fn describe(&self) -> String {
        format!(
            "record the high-water mark; mark run {} finished on {}",
            self.run,
            self.hosts.join(", ")
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let t = transport(transports, &self.seed)?;
        let out = t
            .run(&RemoteCommand::read_only([
                crate::etcd::ETCDCTL_WRAPPER,
                "endpoint",
                "status",
                "-w",
                "json",
            ]))
            .await?;
        let revision = out
            .stdout_str()
            .split("\"revision\":")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|r| r.parse::<i64>().ok())
            .unwrap_or(0);
        let mark = crate::hwm::record(
            &self.state,
            crate::hwm::Hwm::now(revision, &self.cluster_id, "recover"),
        )?;
        crate::snapshot::record_hwm_on_hosts(transports, &mark).await;
        let finished = RemoteCommand::new([
            "sh",
            "-c",
            "mkdir -p \"$1/$2\" && touch \"$1/$2/finished\"",
            "hactl-finished",
            crate::operations::journal::HOST_RUNS_DIR,
            &self.run,
        ]);
        for h in &self.hosts {
            let out = transport(transports, h)?.run(&finished).await?;
            if !out.success() {
                bail!(
                    "{h}: cannot mark run {} finished: {}",
                    self.run,
                    out.stderr_str().trim()
                );
            }
        }
        Ok(serde_json::json!({ "revision": revision }))
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        let cmd = RemoteCommand::read_only([
            "sh",
            "-c",
            "[ -e \"$1/$2/finished\" ]",
            "hactl-finished",
            crate::operations::journal::HOST_RUNS_DIR,
            &self.run,
        ]);
        for h in &self.hosts {
            if !transport(transports, h)?.run(&cmd).await?.success() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// R6: the member history after the recover: the targets are the members of the new cluster
/// (with the member IDs its member list gives), the hosts attested dead await their fence,
/// hosts `--members` left out were fenced and their data moved aside by R1.3 and R1.4.
pub struct RecordMembers {
    pub inv: Inventory,
    pub state: StateDir,
    pub run: String,
    pub seed: String,
    /// Hex.
    pub cluster_id: String,
    pub targets: Vec<String>,
    /// Etcd hosts and old members attested dead.
    pub attested: Vec<String>,
    /// Etcd hosts `--members` left out (fenced, data at `aside`).
    pub left_out: Vec<String>,
    pub aside: String,
}

impl RecordMembers {
    fn by(&self) -> String {
        format!("recover {}", self.run)
    }
}

#[async_trait]
impl LocalAct for RecordMembers {
    fn describe(&self) -> String {
        let mut s = format!(
            "record in {}: {} members of cluster {}",
            self.state.file(crate::old_members::record::FILE).display(),
            self.targets.join(", "),
            self.cluster_id
        );
        if !self.attested.is_empty() {
            s.push_str(&format!(
                "; {} attested dead, fenced the moment they answer again",
                self.attested.join(", ")
            ));
        }
        s
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let out = transport(transports, &self.seed)?
            .run(&RemoteCommand::read_only([
                crate::etcd::ETCDCTL_WRAPPER,
                "member",
                "list",
                "-w",
                "json",
            ]))
            .await?;
        let list: Option<crate::etcd::MemberList> = serde_json::from_str(&out.stdout_str()).ok();
        let seen: Vec<crate::old_members::record::Seen> = self
            .targets
            .iter()
            .filter_map(|t| self.inv.host(t))
            .map(|h| {
                let url = crate::etcd::peer_url(&self.inv, h);
                crate::old_members::record::Seen {
                    host: h.name.clone(),
                    address: h.address.to_string(),
                    member_id: list
                        .as_ref()
                        .and_then(|l| l.by_peer_url(&url))
                        .map(|m| crate::etcd::hex_id(m.id))
                        .unwrap_or_default(),
                }
            })
            .collect();
        let at = crate::clock::now_rfc3339();
        let by = self.by();
        let address = |h: &str| {
            self.inv
                .host(h)
                .map(|x| x.address.to_string())
                .unwrap_or_default()
        };
        crate::old_members::record::update(&self.state, &self.inv, |h| {
            h.record_members(&self.cluster_id, &seen, &by, &at);
            for a in &self.attested {
                h.mark_awaiting_fence(a, &address(a), &by, &at);
            }
            for l in &self.left_out {
                h.mark_fenced(l, &address(l), &by, &at, &self.aside);
            }
        })?;
        Ok(serde_json::json!({ "members": self.targets, "attested": self.attested }))
    }
    async fn holds(&self, _transports: &Transports) -> anyhow::Result<bool> {
        let h = crate::old_members::record::load(&self.state.view(), &self.inv);
        Ok(!h.derived
            && h.cluster_id == self.cluster_id
            && self.targets.iter().all(|t| {
                h.hosts
                    .get(t)
                    .is_some_and(|r| r.state == crate::old_members::HostState::Member)
            })
            && self.attested.iter().all(|a| {
                h.state_of(a).is_some_and(|s| {
                    matches!(
                        s,
                        crate::old_members::HostState::AwaitingFence | crate::old_members::HostState::Fenced
                    )
                })
            }))
    }
}

/// R7: `hactl up`'s plan, once etcd is back: what R0 found left for it (the control plane on new
/// hosts, HAProxy's backends), and anything else that differs from the inventory. Done when
/// `up` finished (a marker in the run's directory: `up` itself says `no changes` on a re-run).
/// Replace's P11 runs it too, for the replacement's node components.
pub struct Converge {
    pub inv: Inventory,
    pub state: StateDir,
    pub connect: crate::exec::connect::ConnectSettings,
    pub reasons: Vec<String>,
    pub marker: PathBuf,
}

#[async_trait]
impl LocalAct for Converge {
    fn describe(&self) -> String {
        format!(
            "run `hactl up`'s plan against every host of the inventory, computed when this step runs ({}); every restart it makes is one host at a time behind its health gate",
            self.reasons.join("; ")
        )
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let opts = crate::converge::Options {
            connect: self.connect.clone(),
            yes: true,
        };
        let (inv, state) = (self.inv.clone(), self.state.clone());
        // `up`'s future is not `Send` (the boxed future of the trait cannot name what it
        // borrows across awaits), so it runs on a runtime of its own on a blocking thread, as
        // `certs rotate-ca`'s rolls do. No gate: this recover holds the cluster lock; `up`'s
        // identity check still runs before it changes anything.
        tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(crate::converge::apply(
                    inv,
                    state.view(),
                    &opts,
                    &[],
                    &mut crate::converge::NoGate,
                ))
        })
        .await?
        .context(
            "R7: `hactl up`'s plan failed (etcd is recovered and verified; what is left is up's work)",
        )?;
        if let Some(parent) = self.marker.parent() {
            fs_err::create_dir_all(parent)?;
        }
        fs_err::write(&self.marker, crate::clock::now_rfc3339())?;
        Ok(serde_json::json!({ "converged": true }))
    }
    async fn holds(&self, _transports: &Transports) -> anyhow::Result<bool> {
        Ok(self.marker.exists())
    }
}
