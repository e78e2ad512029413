//! The base image: one Debian root filesystem per suite, built once with `debootstrap` and shared
//! read-only by every host (it is each host's overlayfs lower layer).
//!
//! Invariants: `<root>/base/<suite>/` exists only when complete (built in a temporary directory,
//! then renamed into place); one builder at a time (a lock file; a second `up` waits for the
//! first); nothing host-specific is in it (no sshd host keys, an empty machine-id).

use super::proc::{self, run};
use super::Result;
use crate::local_command;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Debian's own units for what hactl installs itself; disabled in the base.
const DISABLED_UNITS: &[&str] = &["etcd.service", "haproxy.service", "keepalived.service"];
/// Units a lab host needs at boot.
const ENABLED_UNITS: &[&str] = &["systemd-networkd.service", "ssh.service"];

/// The packages of the base image; the etcd packages are named per suite.
pub fn packages(suite: &str) -> Vec<&'static str> {
    let mut p = vec![
        "systemd",
        "systemd-sysv",
        "dbus",
        "openssh-server",
        "haproxy",
        "keepalived",
        "iproute2",
        "ca-certificates",
        "curl",
        "sudo",
        "procps",
        "iputils-ping",
        "openssl",
    ];
    match suite {
        // Before bookworm, one `etcd` package held server and client.
        "buster" | "bullseye" => p.push("etcd"),
        _ => p.extend(["etcd-server", "etcd-client"]),
    }
    p
}

/// Returns the cached base image for `suite`, building it first if there is none.
pub fn ensure_base(root: &Path, suite: &str, progress: &mut dyn FnMut(String)) -> Result<PathBuf> {
    let base_dir = root.join("base");
    let target = base_dir.join(suite);
    if target.is_dir() {
        return Ok(target);
    }
    let _lock = proc::lock_file_or(&base_dir.join(format!("{suite}.lock")), || {
        progress(format!(
            "waiting for another hactl building the base image for {suite}…"
        ))
    })?;
    // Another `up` may have finished the build while this one waited for the lock.
    if target.is_dir() {
        return Ok(target);
    }
    let started = Instant::now();
    // A spinner on a terminal (debootstrap takes a minute or two), a plain line otherwise.
    let spinner = crate::output::Progress::new(format!("building base image for {suite} (once)…"));
    let tmp = base_dir.join(format!(".build-{suite}"));
    if tmp.exists() {
        // Left by a crashed build: nothing in it is trusted.
        proc::unmount_all_under(&tmp)?;
        fs_err::remove_dir_all(&tmp)?;
    }
    let mut debootstrap = local_command::new("debootstrap");
    debootstrap
        .arg("--variant=minbase")
        .arg(format!("--include={}", packages(suite).join(",")))
        .arg(suite)
        .arg(&tmp);
    if let Some(mirror) = std::env::var_os("HACTL_LAB_MIRROR").filter(|m| !m.is_empty()) {
        debootstrap.arg(mirror);
    }
    let log = base_dir.join(format!("{suite}.debootstrap.log"));
    let log_file = fs_err::File::create(&log)?.into_file();
    debootstrap
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .stdin(std::process::Stdio::null());
    if let Err(e) = run(&mut debootstrap) {
        spinner.finish(format!("building base image for {suite} failed"));
        return Err(super::LabError::Host {
            host: format!("base image {suite}"),
            message: format!("{e}; last lines of {}:\n{}", log.display(), proc::tail(&log, 20)),
        });
    }
    customize(&tmp)?;
    fs_err::rename(&tmp, &target)?;
    spinner.finish(format!(
        "base image for {suite} built in {:.1} s ({})",
        started.elapsed().as_secs_f64(),
        target.display()
    ));
    Ok(target)
}

/// Makes a fresh debootstrap tree into a lab base: hactl's units only, networkd and sshd on,
/// root by key only, nothing host-specific.
fn customize(dir: &Path) -> Result<()> {
    let root_arg = format!("--root={}", dir.display());
    // `systemctl --root` edits unit symlinks offline; no chroot, no /proc needed.
    run(local_command::new("systemctl")
        .arg(&root_arg)
        .arg("disable")
        .args(DISABLED_UNITS))?;
    run(local_command::new("systemctl")
        .arg(&root_arg)
        .arg("enable")
        .args(ENABLED_UNITS))?;

    fs_err::create_dir_all(dir.join("etc/ssh/sshd_config.d"))?;
    fs_err::write(
        dir.join("etc/ssh/sshd_config.d/10-hactl-lab.conf"),
        "# hactl lab: root logs in with the lab key only.\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n",
    )?;
    for entry in fs_err::read_dir(dir.join("etc/ssh"))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with("ssh_host_") {
            fs_err::remove_file(entry.path())?;
        }
    }

    // Each host gets its own machine-id; an empty file in the base would make systemd invent a
    // transient one, which is fine if a host is ever booted without ours.
    fs_err::write(dir.join("etc/machine-id"), "")?;
    let dbus_id = dir.join("var/lib/dbus/machine-id");
    if dbus_id.exists() || dbus_id.is_symlink() {
        fs_err::remove_file(&dbus_id)?;
    }
    if dbus_id.parent().is_some_and(Path::is_dir) {
        std::os::unix::fs::symlink("/etc/machine-id", &dbus_id)?;
    }
    for leftover in ["var/lib/systemd/random-seed", "etc/hostname"] {
        let p = dir.join(leftover);
        if p.exists() {
            fs_err::remove_file(p)?;
        }
    }
    let archives = dir.join("var/cache/apt/archives");
    if archives.is_dir() {
        for entry in fs_err::read_dir(&archives)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "deb") {
                fs_err::remove_file(path)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_packages_follow_the_suite() {
        assert!(packages("trixie").contains(&"etcd-server"));
        assert!(packages("bookworm").contains(&"etcd-client"));
        assert!(packages("bullseye").contains(&"etcd"));
        assert!(!packages("bullseye").contains(&"etcd-server"));
    }
}
