//! Small helpers over the operator machine: running commands, the process table in /proc, mounts,
//! signals, lock files.
//!
//! Invariant: no `unsafe`; signals go through `kill(1)`, and every process is found by reading
//! /proc rather than trusted from a recorded pid (pids are reused).

use super::{LabError, Result};
use crate::local_command;
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The command line as a user would type it (for messages only).
pub fn display(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Runs `cmd` to completion; a non-zero exit is an error carrying its stderr.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().map_err(|source| LabError::Spawn {
        command: display(cmd),
        source,
    })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(LabError::Command {
            command: display(cmd),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Whether `tool` is an executable in one of the usual directories or on `PATH`.
pub fn on_path(tool: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"])
        .any(|d| !d.is_empty() && Path::new(d).join(tool).is_file());
    found
}

/// Creates `dir` (and parents) and makes it 0700.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| std::io::Error::new(e.kind(), format!("failed to create {}: {e}", dir.display())))?;
    fs_err::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(())
}

/// An exclusive lock on `path`, held until the returned file is dropped; waits for other holders.
pub fn lock_file(path: &Path) -> Result<File> {
    lock_file_or(path, || {})
}

/// Like [`lock_file`]; calls `waiting` first when another process holds the lock.
pub fn lock_file_or(path: &Path, waiting: impl FnOnce()) -> Result<File> {
    if let Some(parent) = path.parent() {
        fs_err::create_dir_all(parent)?;
    }
    let file = fs_err::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?
        .into_file();
    let failed = |e: std::io::Error| {
        let msg = format!("failed to lock {}: {e}", path.display());
        std::io::Error::new(e.kind(), msg)
    };
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => waiting(),
        Err(std::fs::TryLockError::Error(e)) => return Err(failed(e).into()),
    }
    file.lock().map_err(failed)?;
    Ok(file)
}

/// What /proc/<pid>/status says about a process.
#[derive(Debug, Clone)]
pub struct ProcStatus {
    pub ppid: u32,
    /// `R`, `S`, `Z`, ...
    pub state: char,
    /// The pid in each nested PID namespace, outermost first.
    pub nspid: Vec<u32>,
}

pub fn status(pid: u32) -> Option<ProcStatus> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut st = ProcStatus {
        ppid: 0,
        state: '?',
        nspid: Vec::new(),
    };
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("PPid:") {
            st.ppid = v.trim().parse().ok()?;
        } else if let Some(v) = line.strip_prefix("State:") {
            st.state = v.trim().chars().next().unwrap_or('?');
        } else if let Some(v) = line.strip_prefix("NSpid:") {
            st.nspid = v.split_whitespace().filter_map(|p| p.parse().ok()).collect();
        }
    }
    Some(st)
}

/// Alive and not a zombie (this machine's PID 1 reaps orphans only now and then).
pub fn alive(pid: u32) -> bool {
    status(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

pub fn all_pids() -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// The PID 1 of the container started by the systemd-nspawn process `nspawn`: its child that is
/// pid 1 in its own PID namespace.
pub fn container_init(nspawn: u32) -> Option<u32> {
    all_pids().into_iter().find(|&pid| {
        status(pid).is_some_and(|s| {
            s.ppid == nspawn && s.nspid.len() >= 2 && s.nspid.last() == Some(&1) && s.state != 'Z'
        })
    })
}

/// Sends `signal` (`TERM`, `KILL`) to `pid`; a process already gone is not an error.
pub fn signal(pid: u32, signal: &str) {
    let _ = local_command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .output();
}

/// Waits until none of `pids` is alive or `timeout` passes; returns those still alive.
pub fn wait_gone(pids: &[u32], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(50);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(interval);
        interval = (interval * 2).min(Duration::from_millis(500));
    }
}

/// Mount points at or under `dir` in this mount namespace, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mount(m)))
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub(super) fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if let (b'\\', Some(d)) = (b[i], octal) {
            let v = u32::from(d[0] - b'0') * 64 + u32::from(d[1] - b'0') * 8 + u32::from(d[2] - b'0');
            out.push(v as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn is_mounted(path: &Path) -> bool {
    mounts_under(path).iter().any(|m| m == path)
}

/// Unmounts every mount at or under `dir`, lazily when one is busy.
pub fn unmount_all_under(dir: &Path) -> Result<()> {
    for m in mounts_under(dir) {
        if run(local_command::new("umount").arg(&m)).is_err() {
            run(local_command::new("umount").arg("-l").arg(&m))?;
        }
    }
    Ok(())
}

/// The last `lines` lines of a log file (for error messages).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mount(r"/a\040b"), "/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
        assert_eq!(unescape_mount(r"/end\"), r"/end\");
    }

    #[test]
    fn a_second_locker_is_told_it_waits_then_gets_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.lock");
        let first = lock_file(&path).unwrap();
        let waited = std::thread::scope(|s| {
            let second = s.spawn(|| {
                let mut waited = false;
                let _lock = lock_file_or(&path, || waited = true).unwrap();
                waited
            });
            std::thread::sleep(Duration::from_millis(100));
            drop(first);
            second.join().unwrap()
        });
        assert!(waited);
        let mut waited_again = false;
        let _lock = lock_file_or(&path, || waited_again = true).unwrap();
        assert!(!waited_again);
    }

    #[test]
    fn this_process_is_alive_and_has_a_cmdline() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(!cmdline(me).unwrap().is_empty());
    }
}
