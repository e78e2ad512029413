//! The base image: one Debian root filesystem per suite and content, built once with `debootstrap`
//! and shared read-only by every host (it is each host's overlayfs lower layer).
//!
//! It carries what any lab host may run as OS packages, since hosts have no network: etcd,
//! HAProxy, keepalived, and a node's containerd, runc, CNI plugins, iptables and conntrack; the
//! Debian units of what hactl installs itself are disabled. It also carries the lab's node-prep
//! unit (`node_prep.rs`).
//!
//! Invariants: `<root>/base/<suite>-<key>/` exists only when complete (built in a temporary
//! directory, then renamed into place); the key is a hash of everything that decides the content
//! (packages, units, baked-in files), so a change to any of them builds a new image instead of
//! reusing an old one; one builder per image at a time (a lock file; a second `up` waits for the
//! first); nothing host-specific is in it (no sshd host keys, an empty machine-id).

use super::proc::{self, run};
use super::{node_prep, Result};
use crate::local_command;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Debian's own units for what hactl installs and configures itself; disabled in the base.
const DISABLED_UNITS: &[&str] = &[
    "etcd.service",
    "haproxy.service",
    "keepalived.service",
    "containerd.service",
];
/// Units a lab host needs at boot.
const ENABLED_UNITS: &[&str] = &["systemd-networkd.service", "ssh.service", node_prep::UNIT_NAME];
/// Raise it when `customize` changes what it writes, so cached images are rebuilt.
const CUSTOMIZE_VERSION: u32 = 2;

/// What a node (kubelet, kube-proxy, pods) needs from the OS, for hosts that cannot install
/// anything: the runtime, the CNI reference plugins (in /usr/lib/cni), and what kube-proxy and the
/// kubelet call. runc needs libseccomp2 (a dependency, named to say so).
const NODE_PACKAGES: &[&str] = &[
    "containerd",
    "runc",
    "libseccomp2",
    "containernetworking-plugins",
    "iptables",
    "conntrack",
];

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
    p.extend(NODE_PACKAGES);
    p
}

/// The cache key of `suite`'s image: the first 12 hex digits of a SHA-256 over the package list,
/// the units disabled and enabled, the node-prep files and [`CUSTOMIZE_VERSION`].
pub fn key(suite: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut feed = |part: &str| {
        h.update(part.as_bytes());
        h.update([0u8]);
    };
    feed(&format!("customize {CUSTOMIZE_VERSION}"));
    for p in packages(suite) {
        feed(p);
    }
    feed("disabled");
    DISABLED_UNITS.iter().for_each(|u| feed(u));
    feed("enabled");
    ENABLED_UNITS.iter().for_each(|u| feed(u));
    for (path, content, _) in node_prep::files() {
        feed(path);
        feed(&content);
    }
    hex::encode(h.finalize())[..12].to_string()
}

/// Where the image of `suite` is cached: `<root>/base/<suite>-<key>`.
pub fn base_path(root: &Path, suite: &str) -> PathBuf {
    root.join("base").join(format!("{suite}-{}", key(suite)))
}

/// Where images were cached before they had a key (labs made then still boot from it).
pub fn legacy_base(root: &Path, suite: &str) -> PathBuf {
    root.join("base").join(suite)
}

/// Returns the cached base image for `suite`, building it first if there is none.
pub fn ensure_base(root: &Path, suite: &str, progress: &mut dyn FnMut(String)) -> Result<PathBuf> {
    let base_dir = root.join("base");
    let target = base_path(root, suite);
    if target.is_dir() {
        return Ok(target);
    }
    let image = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if legacy_base(root, suite).is_dir() {
        progress(format!(
            "the cached base image {} lacks what this hactl puts in one: building {image} (labs made \
             on the old one keep it; remove it once none is left)",
            legacy_base(root, suite).display()
        ));
    }
    let _lock = proc::lock_file_or(&base_dir.join(format!("{image}.lock")), || {
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
    let tmp = base_dir.join(format!(".build-{image}"));
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
    if let Some(mirror) = debian_mirror() {
        debootstrap.arg(mirror);
    }
    let log = base_dir.join(format!("{image}.debootstrap.log"));
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

/// The Debian archive the base image comes from: what the scripts' one lookup,
/// `scripts/lib/debian-mirror.sh` (embedded), prints: `HACTL_DEBIAN_MIRROR` (or one of its older
/// names, `HACTL_LAB_MIRROR` among them), else the archive this machine's apt sources name. `None`
/// when it finds none (debootstrap's own default then).
fn debian_mirror() -> Option<String> {
    let script = format!("{}\ndebian_mirror\n", super::kubernetes::DEBIAN_MIRROR_LIB);
    let out = local_command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let mirror = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !mirror.is_empty()).then_some(mirror)
}

/// Makes a fresh debootstrap tree into a lab base: hactl's units only, networkd and sshd on,
/// root by key only, nothing host-specific.
fn customize(dir: &Path) -> Result<()> {
    node_prep::install(dir)?;
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

    #[test]
    fn every_image_carries_the_node_packages_and_its_key_follows_its_content() {
        for suite in ["trixie", "bookworm"] {
            for p in NODE_PACKAGES {
                assert!(packages(suite).contains(p), "{suite} lacks {p}");
            }
        }
        // The suite names the directory; the key follows the content (bullseye has other etcd packages).
        assert_ne!(key("trixie"), key("bullseye"));
        assert_eq!(key("trixie"), key("trixie"));
        let path = base_path(Path::new("/r"), "trixie");
        assert_eq!(
            path,
            Path::new("/r/base").join(format!("trixie-{}", key("trixie")))
        );
        assert_ne!(path, legacy_base(Path::new("/r"), "trixie"));
    }

    /// The base image's mirror comes from the scripts' lookup, overrides included (hactl passes
    /// its `HACTL_*` variables on to what it runs): this test runs itself again with the older
    /// name set.
    #[test]
    fn the_mirror_is_the_scripts_lookup_and_reads_the_older_name() {
        const CHILD: &str = "HACTL_TEST_MIRROR_CHILD";
        if std::env::var_os(CHILD).is_some() {
            println!("mirror={:?}", debian_mirror());
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "lab::image::tests::the_mirror_is_the_scripts_lookup_and_reads_the_older_name",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env_remove("HACTL_DEBIAN_MIRROR")
            .env_remove("HACTL_APT_MIRROR")
            .env_remove("HACTL_FRESH_MIRROR")
            .env("HACTL_LAB_MIRROR", "http://lab-mirror.invalid/debian")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("mirror=Some(\"http://lab-mirror.invalid/debian\")"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
