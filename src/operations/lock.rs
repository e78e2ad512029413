//! The one lock: every command that changes a cluster (`up`, `reset`, `recover`, `replace`,
//! `remove`, `maintenance start|complete`, heal's restart and replace, `certs rotate-ca`) holds it
//! while it changes anything, so they exclude one another.
//!
//! It is taken in two places, in this order:
//! - **locally**, `locks/cluster.lock` in the state directory (created with `O_EXCL`, 0600),
//!   which keeps two hactl processes of one machine apart before either connects anywhere;
//! - **on the cluster's hosts**, `mkdir /var/lib/hactl/locks/cluster` (atomic) holding
//!   `owner.json`, on every host of the run that answered, in inventory order: this is what keeps
//!   two operator machines apart, each with its own copy of the state directory.
//!
//! Both hold the same [`Owner`]: the command, the run, who (`user@host`), the machine, the pid
//! and the start time, and a refusal names them (exit 3) with what to do.
//!
//! Stale locks: a holder is proven dead only when it ran on this machine (its machine id is
//! ours) and its process is gone; such a lock is taken over (and logged). A holder that may be
//! alive is never taken over: on this machine with its process running, not even with
//! `--steal-lock`; on another machine, whose process hactl cannot see, only when the operator
//! names its run with `--steal-lock RUN`. The same run (a `--resume`) re-takes its own lock.
//!
//! Invariant: a lock is released only by its run (the host script checks the owner), at the end
//! of the run, whatever its outcome; a process that dies leaves it for the rules above.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use fs_err::os::unix::fs::OpenOptionsExt;
use serde::{Deserialize, Serialize};

use crate::exec::Transports;
use crate::inventory::Inventory;
use crate::plan::RemoteCommand;
use crate::state::StateDir;

/// Where hosts keep the lock.
pub const HOST_LOCKS_DIR: &str = "/var/lib/hactl/locks";
/// The lock's name, locally (`locks/cluster.lock`) and on hosts (`<HOST_LOCKS_DIR>/cluster`).
pub const NAME: &str = "cluster";
/// Overrides this machine's id (tests stand two operator machines on one).
pub const MACHINE_ID_ENV: &str = "HACTL_MACHINE_ID";

/// Who holds a lock: one JSON line, in the local lock file and in each host's `owner.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// What runs: `remove cp4`, `up`, `maintenance start cp1`, …
    pub command: String,
    pub run: String,
    /// `user@hostname`.
    pub operator: String,
    /// The machine's id (`/etc/machine-id`): a holder on this machine can be checked for life.
    #[serde(default)]
    pub machine: String,
    pub pid: u32,
    /// RFC 3339.
    pub since: String,
}

impl Owner {
    /// This process, running `command` as run `run`.
    pub fn new(command: &str, run: &str) -> Owner {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "unknown".into());
        Owner {
            command: command.to_string(),
            run: run.to_string(),
            operator: format!("{user}@{}", hostname()),
            machine: machine_id(),
            pid: std::process::id(),
            since: crate::clock::timestamp(time::OffsetDateTime::now_utc()),
        }
    }

    fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// What this machine can tell about the holder.
    pub fn liveness(&self) -> Liveness {
        if self.machine != machine_id() {
            Liveness::Elsewhere
        } else if pid_alive(self.pid) {
            Liveness::Running
        } else {
            Liveness::Dead
        }
    }
}

/// What this machine can tell about a lock's holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// On this machine, its process runs: never taken over.
    Running,
    /// On this machine, its process is gone: proven dead, taken over.
    Dead,
    /// On another machine: taken over only with `--steal-lock RUN`.
    Elsewhere,
}

fn hostname() -> String {
    crate::bounded::read_to_string("/proc/sys/kernel/hostname", crate::bounded::TEXT)
        .or_else(|_| crate::bounded::read_to_string("/etc/hostname", crate::bounded::TEXT))
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// This machine's id: `HACTL_MACHINE_ID`, else `/etc/machine-id`, else the host name.
pub fn machine_id() -> String {
    if let Ok(id) = std::env::var(MACHINE_ID_ENV) {
        if !id.trim().is_empty() {
            return id.trim().to_string();
        }
    }
    crate::bounded::read_to_string("/etc/machine-id", crate::bounded::TEXT)
        .map(|id| id.trim().to_string())
        .ok()
        .filter(|id| !id.is_empty())
        .unwrap_or_else(hostname)
}

/// Whether a process with this pid exists.
fn pid_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    if cfg!(target_os = "linux") {
        return Path::new("/proc").join(pid.to_string()).exists();
    }
    crate::local_command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(true) // cannot tell: assume alive
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{}", held_message(place, owner, steal))]
    Held {
        /// `the state directory DIR` or `host cp1`.
        place: String,
        owner: Box<Owner>,
        /// The run `--steal-lock` named, when it named this holder but the holder runs.
        steal: Option<String>,
    },
    #[error(
        "{place}: the lock holds an owner hactl cannot read ({text}): remove {path} there if no hactl runs"
    )]
    Unreadable {
        place: String,
        text: String,
        path: String,
    },
    #[error("{host}: failed to take the lock")]
    Transport {
        host: String,
        #[source]
        source: Box<crate::ssh::Error>,
    },
    #[error("{host}: failed to take the lock: {message}")]
    Failed { host: String, message: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

fn held_message(place: &str, o: &Owner, steal: &Option<String>) -> String {
    let who = format!(
        "the cluster lock on {place} is held by `hactl {}` (run {}, {}, pid {}, since {})",
        o.command, o.run, o.operator, o.pid, o.since
    );
    let what = match o.liveness() {
        Liveness::Running if steal.is_some() => format!(
            "it is running on this machine (pid {} is alive), so --steal-lock {} is refused: wait for it to finish, then run again",
            o.pid, o.run
        ),
        Liveness::Running => "it is running on this machine: wait for it to finish, then run again".to_string(),
        Liveness::Dead => format!(
            "its process is gone: run again to take the lock over, or resume that run (`--resume {}`)",
            o.run
        ),
        Liveness::Elsewhere => format!(
            "it runs on another machine, where this one cannot see whether it still runs: wait for it to finish, then run again; only if you are sure run {} is dead (that machine is down, or its pid {} gone), take the lock over with --steal-lock {}",
            o.run, o.pid, o.run
        ),
    };
    format!("{who}: {what}")
}

impl LockError {
    /// The refusal to report: a held lock needs operator input (exit 3); a failure to reach a
    /// host or to write is a failure (exit 1).
    pub fn refusal(&self) -> crate::exit::Refusal {
        crate::exit::Refusal {
            code: match self {
                LockError::Held { .. } | LockError::Unreadable { .. } => crate::exit::NEEDS_INPUT,
                _ => crate::exit::FAILED,
            },
            message: self.to_string(),
        }
    }
}

/// The local half: `locks/cluster.lock` in the state directory, removed on drop.
#[derive(Debug)]
struct LocalLock {
    path: PathBuf,
}

impl Drop for LocalLock {
    fn drop(&mut self) {
        if let Err(err) = fs_err::remove_file(&self.path) {
            tracing::warn!("failed to release the cluster lock: {err}");
        }
    }
}

/// The owner written in the local lock file at `path`, read with its bound; a file that does not
/// parse is [`LockError::Unreadable`] (named at `place`).
fn read_local_owner(path: &std::path::Path, place: &str) -> Result<Owner, LockError> {
    let text = crate::bounded::read_to_string(path, crate::bounded::TEXT)?;
    serde_json::from_str::<Owner>(text.trim()).map_err(|_| LockError::Unreadable {
        place: place.to_string(),
        text: text.trim().to_string(),
        path: path.display().to_string(),
    })
}

impl LocalLock {
    fn acquire(state: &StateDir, owner: &Owner) -> Result<LocalLock, LockError> {
        let path = state.subdir("locks")?.join(format!("{NAME}.lock"));
        let place = format!("the state directory {}", state.path.display());
        // Two attempts: the second follows the removal of a stale lock.
        for _ in 0..2 {
            match fs_err::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(mut file) => {
                    // From here on the lock is ours: dropping it on a failed write removes it.
                    let lock = LocalLock { path };
                    file.write_all(format!("{}\n", owner.json()).as_bytes())?;
                    file.sync_all()?;
                    return Ok(lock);
                }
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                    let held = read_local_owner(&path, &place)?;
                    if held.liveness() != Liveness::Dead {
                        return Err(LockError::Held {
                            place,
                            owner: Box::new(held),
                            steal: None,
                        });
                    }
                    tracing::warn!(
                        "taking over the cluster lock of run {} in {} (pid {} is gone)",
                        held.run,
                        path.display(),
                        held.pid
                    );
                    match fs_err::remove_file(&path) {
                        Ok(()) => {}
                        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                        Err(err) => return Err(err.into()),
                    }
                }
                Err(err) => return Err(err.into()),
            }
        }
        // Someone else took it between our removal and our creation.
        let held = read_local_owner(&path, &place)?;
        Err(LockError::Held {
            place,
            owner: Box::new(held),
            steal: None,
        })
    }
}

/// The host half, one shell script under `flock` so concurrent takers on one host are
/// serialized. Exit 0: held by this run (`acquired`, `held-by-this-run` or `taken-over`); exit 3:
/// held by another run, whose owner line is printed.
const ACQUIRE: &str = r#"
d="$1/$2"; run=$3; take=$4; owner=$5
mkdir -p "$1" || exit 1
exec 9>>"$1/.$2.guard" || exit 1
flock -w 30 9 || { echo "another hactl is taking the lock on this host" >&2; exit 1; }
if mkdir -m 700 "$d" 2>/dev/null; then
  printf '%s\n' "$owner" > "$d/owner.json.tmp" && mv "$d/owner.json.tmp" "$d/owner.json" && echo acquired && exit 0
  exit 1
fi
cur=$(cat "$d/owner.json" 2>/dev/null || true)
case "$cur" in *"\"run\":\"$run\""*) echo held-by-this-run; exit 0 ;; esac
over=no
[ -z "$cur" ] && over=yes   # a taker died between mkdir and writing its owner
if [ -n "$take" ]; then case "$cur" in *"\"run\":\"$take\""*) over=yes ;; esac; fi
if [ $over = yes ]; then
  printf '%s\n' "$owner" > "$d/owner.json.tmp" && mv "$d/owner.json.tmp" "$d/owner.json" && echo taken-over && exit 0
  exit 1
fi
printf '%s\n' "$cur"
exit 3
"#;

const RELEASE: &str = r#"
d="$1/$2"
if grep -q "\"run\":\"$3\"" "$d/owner.json" 2>/dev/null; then rm -f "$d/owner.json" && rmdir "$d"; fi
[ ! -e "$d" ] || ! grep -q "\"run\":\"$3\"" "$d/owner.json"
"#;

/// Takes (or re-takes, for the same run) the lock on one host; `take_over` names the run whose
/// lock may be replaced (a proven-dead holder, or `--steal-lock`).
pub fn acquire_command(owner: &Owner, take_over: Option<&str>) -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        ACQUIRE,
        "hactl-lock",
        HOST_LOCKS_DIR,
        NAME,
        &owner.run,
        take_over.unwrap_or(""),
        &owner.json(),
    ])
}

/// Releases the lock if `run` holds it (otherwise leaves it alone).
pub fn release_command(run: &str) -> RemoteCommand {
    RemoteCommand::new(["sh", "-c", RELEASE, "hactl-unlock", HOST_LOCKS_DIR, NAME, run])
}

/// What one host said to an acquire.
enum Taken {
    /// This call made the lock (release it if another host refuses).
    New,
    /// Already this run's, or taken over from a dead holder.
    Kept,
}

async fn acquire_on(
    transports: &Transports,
    host: &str,
    owner: &Owner,
    steal: Option<&str>,
) -> Result<Taken, LockError> {
    let Some(t) = transports.get(host) else {
        return Err(LockError::Failed {
            host: host.to_string(),
            message: "no connection".into(),
        });
    };
    let mut take_over: Option<String> = None;
    // Twice at most: the second time with the run of a holder found dead (or named by
    // --steal-lock and not running here).
    for _ in 0..2 {
        let out = t
            .run(&acquire_command(owner, take_over.as_deref()))
            .await
            .map_err(|source| LockError::Transport {
                host: host.to_string(),
                source: Box::new(source),
            })?;
        match out.status {
            Some(0) => {
                let said = out.stdout_str();
                return Ok(match said.trim() {
                    "acquired" => Taken::New,
                    "taken-over" => {
                        tracing::warn!(
                            "{host}: took the cluster lock over from run {}",
                            take_over.unwrap_or_default()
                        );
                        Taken::Kept
                    }
                    _ => Taken::Kept,
                });
            }
            Some(3) => {
                let text = out.stdout_str().trim().to_string();
                let Ok(held) = serde_json::from_str::<Owner>(&text) else {
                    return Err(LockError::Unreadable {
                        place: format!("host {host}"),
                        text,
                        path: format!("{HOST_LOCKS_DIR}/{NAME}/owner.json"),
                    });
                };
                let named = steal == Some(held.run.as_str());
                let over = match held.liveness() {
                    Liveness::Dead => true,
                    Liveness::Elsewhere => named,
                    Liveness::Running => false,
                };
                if !over || take_over.is_some() {
                    return Err(LockError::Held {
                        place: format!("host {host}"),
                        steal: named.then(|| held.run.clone()),
                        owner: Box::new(held),
                    });
                }
                take_over = Some(held.run.clone());
            }
            _ => {
                return Err(LockError::Failed {
                    host: host.to_string(),
                    message: format!("{}{}", out.stderr_str().trim(), out.stdout_str().trim()),
                })
            }
        }
    }
    unreachable!("the loop returns on its second pass")
}

/// Releases the lock of `run` on every host of `hosts` that has a connection (best effort).
pub async fn release_on(transports: &Transports, hosts: &[String], run: &str) {
    let cmd = release_command(run);
    let runs = hosts
        .iter()
        .filter_map(|h| transports.get(h).map(|t| (h, t.clone())));
    let results = futures::future::join_all(runs.map(|(h, t)| {
        let cmd = cmd.clone();
        async move { (h, t.run(&cmd).await) }
    }))
    .await;
    for (host, r) in results {
        match r {
            Ok(out) if out.success() => {}
            Ok(out) => tracing::warn!(
                "{host}: failed to release the cluster lock: {}",
                out.stderr_str().trim()
            ),
            Err(e) => tracing::warn!("{host}: failed to release the cluster lock: {e}"),
        }
    }
}

/// Read-only: refuses when the state directory behind `view` holds the cluster lock of a run
/// that may still be alive. `up` asks this before it connects anywhere, so a run on this
/// machine is named at once instead of after every host was reached; the lock itself is
/// still taken later, on the hosts first ([`ClusterLock::on_hosts_first`]).
pub fn refuse_if_held_here(view: &crate::state::StateView) -> Result<(), LockError> {
    let path = view.file(format!("locks/{NAME}.lock"));
    let place = format!("the state directory {}", view.path.display());
    let held = match read_local_owner(&path, &place) {
        Ok(held) => held,
        Err(LockError::Io(err)) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    if held.liveness() == Liveness::Dead {
        return Ok(());
    }
    Err(LockError::Held {
        place,
        owner: Box::new(held),
        steal: None,
    })
}

/// The lock, held: locally and on `hosts`. [`ClusterLock::release`] gives it back; dropping it
/// does too (the hosts' part only on a multi-threaded runtime, as a drop cannot wait otherwise).
pub struct ClusterLock {
    local: Option<LocalLock>,
    transports: Transports,
    hosts: Vec<String>,
    owner: Owner,
}

impl std::fmt::Debug for ClusterLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterLock")
            .field("hosts", &self.hosts)
            .field("owner", &self.owner)
            .finish()
    }
}

impl ClusterLock {
    /// Takes the lock in the state directory, then on each of `hosts` that has a connection in
    /// `transports`, in order. On any refusal, gives back what this call took and returns it.
    pub async fn acquire(
        state: &StateDir,
        transports: &Transports,
        hosts: &[String],
        owner: Owner,
        steal: Option<&str>,
    ) -> Result<ClusterLock, LockError> {
        let local = LocalLock::acquire(state, &owner)?;
        Self::on_hosts(local, transports, hosts, owner, steal).await
    }

    /// With the local half held: the hosts' half.
    async fn on_hosts(
        local: LocalLock,
        transports: &Transports,
        hosts: &[String],
        owner: Owner,
        steal: Option<&str>,
    ) -> Result<ClusterLock, LockError> {
        let mut lock = ClusterLock {
            local: Some(local),
            transports: transports.clone(),
            hosts: Vec::new(),
            owner,
        };
        let mut new = Vec::new();
        for host in hosts.iter().filter(|h| transports.contains_key(*h)) {
            match acquire_on(transports, host, &lock.owner, steal).await {
                Ok(Taken::New) => new.push(host.clone()),
                Ok(Taken::Kept) => lock.hosts.push(host.clone()),
                Err(e) => {
                    // Only what this call made goes back: a lock this run already held (a
                    // resume) stays with it.
                    release_on(transports, &new, &lock.owner.run).await;
                    lock.hosts.clear();
                    return Err(e);
                }
            }
        }
        lock.hosts.extend(new);
        Ok(lock)
    }

    /// The hosts' half alone, for a command that must not write into its state directory
    /// before the cluster identity was checked (`up`, which may find no state directory at all):
    /// [`ClusterLock::add_local`] adds the local half once it may write there. Two processes of
    /// one machine still exclude each other, on the hosts.
    pub async fn on_hosts_first(
        transports: &Transports,
        hosts: &[String],
        owner: Owner,
    ) -> Result<ClusterLock, LockError> {
        let mut lock = ClusterLock {
            local: None,
            transports: transports.clone(),
            hosts: Vec::new(),
            owner,
        };
        let mut new = Vec::new();
        for host in hosts.iter().filter(|h| transports.contains_key(*h)) {
            match acquire_on(transports, host, &lock.owner, None).await {
                Ok(Taken::New) => new.push(host.clone()),
                Ok(Taken::Kept) => lock.hosts.push(host.clone()),
                Err(e) => {
                    release_on(transports, &new, &lock.owner.run).await;
                    lock.hosts.clear();
                    return Err(e);
                }
            }
        }
        lock.hosts.extend(new);
        Ok(lock)
    }

    /// Adds the local half (`locks/cluster.lock` in `state`) to a lock taken with
    /// [`ClusterLock::on_hosts_first`].
    pub fn add_local(&mut self, state: &StateDir) -> Result<(), LockError> {
        if self.local.is_none() {
            self.local = Some(LocalLock::acquire(state, &self.owner)?);
        }
        Ok(())
    }

    /// The owner this lock was taken as.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The hosts it is held on.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Gives the lock back, on the hosts and locally.
    pub async fn release(mut self) {
        let hosts = std::mem::take(&mut self.hosts);
        release_on(&self.transports, &hosts, &self.owner.run).await;
        self.local.take();
    }
}

impl Drop for ClusterLock {
    fn drop(&mut self) {
        if self.hosts.is_empty() {
            return;
        }
        let hosts = std::mem::take(&mut self.hosts);
        let multi = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi {
            let (transports, run) = (self.transports.clone(), self.owner.run.clone());
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(release_on(&transports, &hosts, &run))
            });
        } else {
            tracing::warn!(
                "the cluster lock of run {} stays on {} (released by its next taker on this machine)",
                self.owner.run,
                hosts.join(", ")
            );
        }
    }
}

/// The hosts a lock is taken on: the inventory's hosts with a role, in inventory order.
pub fn cluster_hosts(inv: &Inventory) -> Vec<String> {
    inv.hosts
        .iter()
        .filter(|h| !h.roles.is_empty())
        .map(|h| h.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(cmd: &RemoteCommand, dir: &Path) -> (i32, String) {
        let mut cmd = cmd.clone();
        cmd.argv[4] = dir.to_string_lossy().into_owned();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.line(false))
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    }

    fn owner(run: &str) -> Owner {
        Owner {
            command: "recover".into(),
            run: run.into(),
            operator: "me@ws".into(),
            machine: "another-machine".into(),
            pid: 1,
            since: "2026-01-01T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn the_host_lock_is_exclusive_reentrant_for_its_run_and_taken_over_only_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("locks");
        assert_eq!(
            sh(&acquire_command(&owner("a"), None), &dir),
            (0, "acquired".into())
        );
        assert_eq!(
            sh(&acquire_command(&owner("a"), None), &dir),
            (0, "held-by-this-run".into())
        );
        // Another run is refused with the owner line.
        let (code, text) = sh(&acquire_command(&owner("b"), None), &dir);
        assert_eq!(code, 3);
        assert_eq!(serde_json::from_str::<Owner>(&text).unwrap(), owner("a"));
        // Taking over needs the holder's run id.
        assert_eq!(sh(&acquire_command(&owner("b"), Some("x")), &dir).0, 3);
        assert_eq!(
            sh(&acquire_command(&owner("b"), Some("a")), &dir),
            (0, "taken-over".into())
        );
        // Only the holder releases.
        assert_eq!(sh(&release_command("a"), &dir).0, 0);
        assert!(dir.join("cluster/owner.json").exists());
        assert_eq!(sh(&release_command("b"), &dir).0, 0);
        assert!(!dir.join("cluster").exists());
        // A lock dir without an owner (its taker died between mkdir and write) is taken over.
        fs_err::create_dir_all(dir.join("cluster")).unwrap();
        assert_eq!(
            sh(&acquire_command(&owner("c"), None), &dir),
            (0, "taken-over".into())
        );
    }

    #[test]
    fn a_held_lock_asks_for_input_names_the_holder_and_what_to_run() {
        let elsewhere = LockError::Held {
            place: "host cp1".into(),
            owner: Box::new(owner("r7")),
            steal: None,
        };
        let r = elsewhere.refusal();
        assert_eq!(r.code, crate::exit::NEEDS_INPUT);
        for want in [
            "host cp1",
            "`hactl recover`",
            "run r7",
            "me@ws",
            "since 2026-01-01",
            "wait",
            "--steal-lock r7",
        ] {
            assert!(r.message.contains(want), "{want}: {}", r.message);
        }
        // A holder running on this machine: no steal is offered.
        let mut running = owner("r8");
        running.machine = machine_id();
        running.pid = std::process::id();
        assert_eq!(running.liveness(), Liveness::Running);
        let m = LockError::Held {
            place: "host cp1".into(),
            owner: Box::new(running.clone()),
            steal: Some("r8".into()),
        }
        .to_string();
        assert!(
            m.contains("--steal-lock r8 is refused") && m.contains("wait"),
            "{m}"
        );
        // A pid above the kernel's maximum (4194304) cannot be alive: proven dead.
        running.pid = 4_194_305;
        assert_eq!(running.liveness(), Liveness::Dead);
    }

    #[test]
    fn the_local_lock_refuses_a_live_holder_and_takes_over_a_dead_one() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let me = Owner::new("remove cp4", "remove-1");
        let held = LocalLock::acquire(&state, &me).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(fs_err::metadata(&held.path).unwrap().mode() & 0o777, 0o600);
        let e = LocalLock::acquire(&state, &Owner::new("up", "up-1")).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("`hactl remove cp4`") && m.contains("run remove-1"),
            "{m}"
        );
        assert_eq!(e.refusal().code, crate::exit::NEEDS_INPUT);
        let path = held.path.clone();
        drop(held);
        assert!(!path.exists());
        // A dead holder of this machine is taken over.
        let mut dead = me.clone();
        dead.pid = 4_194_305;
        fs_err::write(&path, dead.json()).unwrap();
        let taken = LocalLock::acquire(&state, &Owner::new("up", "up-2")).unwrap();
        assert!(fs_err::read_to_string(&taken.path)
            .unwrap()
            .contains("\"run\":\"up-2\""));
        drop(taken);
        // A garbled lock is refused, naming the file.
        fs_err::write(&path, "pid 12\n").unwrap();
        let m = LocalLock::acquire(&state, &me).unwrap_err().to_string();
        assert!(m.contains(&path.display().to_string()), "{m}");
    }
}
