//! What a kubelet needs inside a systemd-nspawn lab host, done at every boot by a oneshot unit
//! baked into the base image, ordered before containerd and the kubelet.
//!
//! These are quirks of the lab, not steps hactl takes on real hosts (where the kernel's cgroups,
//! `/dev/kmsg` and `/proc/sys` are the host's own):
//! - systemd-nspawn mounts the cgroup v1 controller hierarchies read-only; runc and the kubelet
//!   (cgroupfs driver) create cgroups there, so each is remounted read-write. The container's
//!   cgroup namespace makes the host's own cgroup (`hactl-lab-<machine>`, see `cgroup.rs`) its
//!   root: a host can only write under its own.
//! - the kubelet opens `/dev/kmsg` (its OOM watcher); a host has none, so it gets a link to
//!   `/dev/console`.
//! - pod cgroups a previous boot left behind are removed: the kubelet spends about 1.5 s on each
//!   at start.
//! - the kubelet reads six kernel settings and writes those that differ from what it wants
//!   (`vm.overcommit_memory=1`, `vm.panic_on_oom=0`, `kernel.panic=10`, `kernel.panic_on_oops=1`,
//!   `kernel.keys.root_maxkeys=1000000`, `kernel.keys.root_maxbytes=25000000`); it refuses to start
//!   when a write fails, and `/proc/sys` is read-only in a host. They are global to the machine,
//!   which keeps its own values: inside the host, a writable file holding the kubelet's value is
//!   bind-mounted over each `/proc/sys` entry, so the kubelet reads what it wants and writes nothing
//!   to the kernel. (On this kind of machine three of them differ: 0, 1, 0 against 1, 10, 1.)
//!
//! Invariant: nothing here changes anything outside the host.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::Result;

/// The unit's name, enabled in the base image.
pub const UNIT_NAME: &str = "hactl-lab-node-prep.service";

/// Where the script lives in the image.
pub const SCRIPT_PATH: &str = "usr/local/lib/hactl-lab/node-prep";

/// The kernel settings a kubelet 1.20 checks (`setupKernelTunables`), with the values it wants.
pub const KUBELET_SYSCTLS: [(&str, &str); 6] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

const UNIT: &str = "\
# hactl lab: what a kubelet needs in a systemd-nspawn host (a lab quirk, not something hactl does
# on real hosts). Runs at every boot, before containerd and the kubelet.
[Unit]
Description=hactl lab: cgroups, /dev/kmsg and kernel settings for a kubelet in this container
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target containerd.service kubelet.service kube-proxy.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/lib/hactl-lab/node-prep

[Install]
WantedBy=sysinit.target
";

const SCRIPT: &str = r#"#!/bin/sh
# hactl lab: see the unit hactl-lab-node-prep.service. Idempotent.
set -eu

# 1. The cgroup v1 controller hierarchies, read-write (the container's cgroup namespace keeps this
#    host under its own cgroup). Not the named systemd one, nor the v2 one: systemd owns those.
for d in /sys/fs/cgroup/*; do
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  case "${d##*/}" in systemd|unified) continue ;; esac
  mountpoint -q "$d" || continue
  mount -o remount,bind,rw "$d"
done

# 2. A /dev/kmsg for the kubelet's OOM watcher.
[ -e /dev/kmsg ] || ln -s /dev/console /dev/kmsg

# 3. Pod cgroups left by the previous boot (nothing runs in them before the kubelet starts; rmdir
#    refuses any that is in use).
for d in /sys/fs/cgroup/*/kubepods; do
  [ -d "$d" ] || continue
  find "$d" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# 4. The kernel settings the kubelet checks, as this host's own files over /proc/sys (the
#    machine's values stay as they are).
dir=/run/hactl-lab/sysctl
mkdir -p "$dir"
while read -r key value; do
  file="$dir/$(echo "$key" | tr / .)"
  echo "$value" >"$file"
  mountpoint -q "/proc/sys/$key" || mount --bind "$file" "/proc/sys/$key"
done <<EOF
@SYSCTLS@
EOF
"#;

/// The files baked into the base image: path (relative to its root), content, mode.
pub fn files() -> [(&'static str, String, u32); 2] {
    let table: Vec<String> = KUBELET_SYSCTLS.iter().map(|(k, v)| format!("{k} {v}")).collect();
    [
        (
            "etc/systemd/system/hactl-lab-node-prep.service",
            UNIT.to_string(),
            0o644,
        ),
        (SCRIPT_PATH, SCRIPT.replace("@SYSCTLS@", &table.join("\n")), 0o755),
    ]
}

/// Writes the unit and its script into the image at `root` (the caller enables the unit).
pub fn install(root: &Path) -> Result<()> {
    for (path, content, mode) in files() {
        let target = root.join(path);
        if let Some(parent) = target.parent() {
            fs_err::create_dir_all(parent)?;
        }
        fs_err::write(&target, content)?;
        fs_err::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_carries_every_kubelet_sysctl_and_runs_before_the_node_units() {
        let s = files()[1].1.clone();
        for (key, value) in KUBELET_SYSCTLS {
            assert!(s.contains(&format!("\n{key} {value}\n")), "{key} missing:\n{s}");
        }
        assert!(!s.contains("@SYSCTLS@"));
        assert!(UNIT.contains(&format!("ExecStart=/{SCRIPT_PATH}\n")));
        for unit in ["containerd.service", "kubelet.service"] {
            assert!(UNIT.lines().any(|l| l.starts_with("Before=") && l.contains(unit)));
        }
    }

    #[test]
    fn install_writes_an_executable_script_and_the_unit() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path()).unwrap();
        let script = dir.path().join(SCRIPT_PATH);
        let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert!(std::fs::read_to_string(script)
            .unwrap()
            .contains("kernel/panic 10"));
        assert!(dir.path().join("etc/systemd/system").join(UNIT_NAME).is_file());
    }
}
