//! Operation locks on the hosts: `mkdir /var/lib/hactl/locks/<op>` (atomic) holding `owner.json`.
//!
//! A destructive operation (recover; replace, heal and maintenance reuse this) takes the lock on
//! every reachable control-plane host before it changes anything, on top of the state-directory
//! lock on the operator machine ([`crate::state::StateDir::lock`], which only keeps two hactl
//! processes of one workstation apart). A lock held by another run refuses with exit 3 unless
//! the operator names that run with `--steal-lock=<run-id>`; the same run (a `--resume`) re-takes
//! its own lock.
//!
//! Invariant: a lock is released only by the run that holds it (`release` checks the owner).

use serde::{Deserialize, Serialize};

use crate::exec::Transports;
use crate::plan::RemoteCommand;

/// Where hosts keep operation locks.
pub const HOST_LOCKS_DIR: &str = "/var/lib/hactl/locks";
/// The name of the state-directory lock shared by every command that changes a cluster
/// (`up`, `reset`, `recover`…), so they exclude one another on one workstation.
pub const LOCAL_LOCK: &str = "up";

/// Who holds a lock: written as one JSON line into `owner.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The operation: `recover`, `replace`, …
    pub op: String,
    pub run: String,
    /// `user@workstation`.
    pub operator: String,
    pub pid: u32,
    /// RFC 3339.
    pub since: String,
}

impl Owner {
    pub fn new(op: &str, run: &str) -> Owner {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "unknown".into());
        let host = fs_err::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| fs_err::read_to_string("/etc/hostname"))
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Owner {
            op: op.to_string(),
            run: run.to_string(),
            operator: format!("{user}@{host}"),
            pid: std::process::id(),
            since: crate::clock::timestamp(time::OffsetDateTime::now_utc()),
        }
    }
    fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{host}: the {op} lock is held by run {} ({}, pid {}, since {}): wait for it to finish, \
         resume it with --resume {}, or take the lock over with --steal-lock={} once you are sure it is not running",
        owner.run, owner.operator, owner.pid, owner.since, owner.run, owner.run
    )]
    Held { host: String, op: String, owner: Owner },
    #[error("{host}: the {op} lock is held by an unreadable owner: {text}")]
    Unreadable { host: String, op: String, text: String },
    #[error("{host}: failed to take the {op} lock")]
    Transport {
        host: String,
        op: String,
        #[source]
        source: crate::ssh::Error,
    },
    #[error("{host}: failed to take the {op} lock: {message}")]
    Failed {
        host: String,
        op: String,
        message: String,
    },
    #[error("no connection to {0}")]
    NotConnected(String),
}

impl LockError {
    /// The refusal to report: a held lock needs operator input (exit 3).
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

const ACQUIRE: &str = r#"
d="$1/$2"; run=$3; steal=$4; owner=$5
mkdir -p "$1" || exit 1
if mkdir -m 700 "$d" 2>/dev/null; then
  printf '%s\n' "$owner" > "$d/owner.json.tmp" && mv "$d/owner.json.tmp" "$d/owner.json" && echo acquired && exit 0
  exit 1
fi
cur=$(cat "$d/owner.json" 2>/dev/null || true)
case "$cur" in *"\"run\":\"$run\""*) echo held-by-this-run; exit 0 ;; esac
take=no
[ -z "$cur" ] && take=yes   # a taker died between mkdir and writing its owner
if [ -n "$steal" ]; then case "$cur" in *"\"run\":\"$steal\""*) take=yes ;; esac; fi
if [ $take = yes ]; then
  printf '%s\n' "$owner" > "$d/owner.json.tmp" && mv "$d/owner.json.tmp" "$d/owner.json" && echo stolen && exit 0
  exit 1
fi
printf '%s\n' "$cur"
exit 3
"#;

const RELEASE: &str = r#"
d="$1/$2"
if grep -q "\"run\":\"$3\"" "$d/owner.json" 2>/dev/null; then rm -f "$d/owner.json" && rmdir "$d"; fi
[ ! -e "$d" ] || grep -vq "\"run\":\"$3\"" "$d/owner.json"
"#;

const HOLDS: &str = r#"grep -q "\"run\":\"$3\"" "$1/$2/owner.json""#;

/// Takes (or re-takes, for the same run) the lock `op` on one host. Exit 0: held by this run;
/// exit 3: held by another run, whose owner line is printed.
pub fn acquire_command(owner: &Owner, steal: Option<&str>) -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        ACQUIRE,
        "hactl-lock",
        HOST_LOCKS_DIR,
        &owner.op,
        &owner.run,
        steal.unwrap_or(""),
        &owner.json(),
    ])
}

/// Releases the lock `op` if `run` holds it (otherwise leaves it alone).
pub fn release_command(op: &str, run: &str) -> RemoteCommand {
    RemoteCommand::new(["sh", "-c", RELEASE, "hactl-unlock", HOST_LOCKS_DIR, op, run])
}

/// Read-only: exit 0 when `run` holds the lock `op` on the host.
pub fn held_by_command(op: &str, run: &str) -> RemoteCommand {
    RemoteCommand::read_only(["sh", "-c", HOLDS, "hactl-lock-holds", HOST_LOCKS_DIR, op, run])
}

/// Takes the lock on every host in `hosts`; on any refusal, releases what this call took and
/// returns the first refusal (every host's refusal is logged).
pub async fn acquire_all(
    transports: &Transports,
    hosts: &[String],
    owner: &Owner,
    steal: Option<&str>,
) -> Result<(), LockError> {
    let cmd = acquire_command(owner, steal);
    let mut taken = Vec::new();
    let mut first_error = None;
    for host in hosts {
        let Some(t) = transports.get(host) else {
            first_error.get_or_insert(LockError::NotConnected(host.clone()));
            continue;
        };
        let result = match t.run(&cmd).await {
            Ok(out) if out.success() => {
                if out.stdout_str().trim() == "acquired" {
                    taken.push(host.clone());
                }
                Ok(())
            }
            Ok(out) if out.status == Some(3) => {
                let text = out.stdout_str().trim().to_string();
                match serde_json::from_str::<Owner>(&text) {
                    Ok(o) => Err(LockError::Held {
                        host: host.clone(),
                        op: owner.op.clone(),
                        owner: o,
                    }),
                    Err(_) => Err(LockError::Unreadable {
                        host: host.clone(),
                        op: owner.op.clone(),
                        text,
                    }),
                }
            }
            Ok(out) => Err(LockError::Failed {
                host: host.clone(),
                op: owner.op.clone(),
                message: format!("{}{}", out.stderr_str().trim(), out.stdout_str().trim()),
            }),
            Err(source) => Err(LockError::Transport {
                host: host.clone(),
                op: owner.op.clone(),
                source,
            }),
        };
        if let Err(e) = result {
            tracing::warn!("{e}");
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        None => Ok(()),
        Some(e) => {
            release_all(transports, &taken, &owner.op, &owner.run).await;
            Err(e)
        }
    }
}

/// Releases the lock on every host that has a connection (best effort: warns on failure).
pub async fn release_all(transports: &Transports, hosts: &[String], op: &str, run: &str) {
    let cmd = release_command(op, run);
    for host in hosts {
        if let Some(t) = transports.get(host) {
            match t.run(&cmd).await {
                Ok(out) if out.success() => {}
                Ok(out) => tracing::warn!(
                    "{host}: failed to release the {op} lock: {}",
                    out.stderr_str().trim()
                ),
                Err(e) => tracing::warn!("{host}: failed to release the {op} lock: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(cmd: &RemoteCommand, dir: &std::path::Path) -> (i32, String) {
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
            op: "recover".into(),
            run: run.into(),
            operator: "me@ws".into(),
            pid: 1,
            since: "2026-01-01T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn the_lock_is_exclusive_reentrant_for_its_run_and_stealable_by_name() {
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
        assert_eq!(sh(&held_by_command("recover", "a"), &dir).0, 0);
        // Another run is refused with the owner line.
        let (code, text) = sh(&acquire_command(&owner("b"), None), &dir);
        assert_eq!(code, 3);
        assert_eq!(serde_json::from_str::<Owner>(&text).unwrap(), owner("a"));
        // Stealing needs the holder's run id.
        assert_eq!(sh(&acquire_command(&owner("b"), Some("x")), &dir).0, 3);
        assert_eq!(
            sh(&acquire_command(&owner("b"), Some("a")), &dir),
            (0, "stolen".into())
        );
        assert_eq!(sh(&held_by_command("recover", "a"), &dir).0, 1);
        // Only the holder releases.
        assert_eq!(sh(&release_command("recover", "a"), &dir).0, 0);
        assert!(dir.join("recover/owner.json").exists());
        assert_eq!(sh(&release_command("recover", "b"), &dir).0, 0);
        assert!(!dir.join("recover").exists());
        // A lock dir without an owner (its taker died between mkdir and write) is taken over.
        fs_err::create_dir_all(dir.join("recover")).unwrap();
        assert_eq!(
            sh(&acquire_command(&owner("c"), None), &dir),
            (0, "stolen".into())
        );
    }

    #[test]
    fn a_held_lock_asks_for_input_and_names_the_way_out() {
        let e = LockError::Held {
            host: "cp1".into(),
            op: "recover".into(),
            owner: owner("r7"),
        };
        let r = e.refusal();
        assert_eq!(r.code, crate::exit::NEEDS_INPUT);
        assert!(r.message.contains("--steal-lock=r7"), "{}", r.message);
        assert!(r.message.contains("--resume r7"), "{}", r.message);
    }
}
