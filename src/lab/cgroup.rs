//! Cgroups of its own for every lab host.
//!
//! A host's systemd, and a kubelet inside it, see the cgroup their systemd-nspawn was started in
//! as their root (nspawn gives the container a cgroup namespace there). Hosts spawned in one shared
//! cgroup therefore share one tree: two hosts' systemd put their `etcd.service` in the same
//! cgroup, and each host's kubelet deletes the other hosts' pod cgroups as orphans. So the launcher
//! of every host moves itself into `hactl-lab-<machine>` at the root of every cgroup hierarchy of
//! the machine (each v1 controller, the named `systemd` one, and the v2 one of a hybrid setup)
//! before it execs systemd-nspawn, and those cgroups are removed, deepest first, once the host has
//! stopped.
//!
//! Invariants: a host's cgroups are named after its machine name alone, so `lab down` finds them
//! without any record; only directories named `hactl-lab-<machine of this lab>` are ever removed,
//! and only with `rmdir` (which the kernel refuses while a process is in a cgroup).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Prefix of every cgroup the lab makes, at the root of each hierarchy.
pub const PREFIX: &str = "hactl-lab-";

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Where it is mounted (`/sys/fs/cgroup/cpuset`).
    pub mount: PathBuf,
    /// The cpuset controller: a new cgroup there has no CPUs and no memory nodes until given some.
    pub cpuset: bool,
}

/// The cgroup hierarchies mounted in this mount namespace (`cgroup` and `cgroup2` file systems),
/// one entry per mount point, in mountinfo order.
pub fn hierarchies() -> Vec<Hierarchy> {
    parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

fn parse_mountinfo(text: &str) -> Vec<Hierarchy> {
    let mut found: Vec<Hierarchy> = Vec::new();
    for line in text.lines() {
        // `<id> <parent> <dev> <root> <mount point> <options> [optional…] - <fstype> <source> <super options>`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut right = right.split(' ');
        let fstype = right.next().unwrap_or("");
        let super_options = right.nth(1).unwrap_or("");
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let Some(mount) = left.split(' ').nth(4) else {
            continue;
        };
        let mount = PathBuf::from(super::proc::unescape_mount(mount));
        if found.iter().any(|h| h.mount == mount) {
            continue;
        }
        found.push(Hierarchy {
            mount,
            cpuset: fstype == "cgroup" && super_options.split(',').any(|o| o == "cpuset"),
        });
    }
    found
}

/// The name of `machine`'s cgroup in every hierarchy.
pub fn name(machine: &str) -> String {
    format!("{PREFIX}{machine}")
}

/// Creates `machine`'s cgroup in every hierarchy (a stale one left by a host that stopped on its
/// own is emptied of subgroups first) and returns the `cgroup.procs` files its launcher writes
/// itself into.
pub fn create(machine: &str) -> std::io::Result<Vec<PathBuf>> {
    // What a host that stopped by itself left behind; refused by the kernel if anything runs there.
    let _ = remove(machine, Duration::ZERO);
    let mut procs = Vec::new();
    for h in hierarchies() {
        let dir = h.mount.join(name(machine));
        match fs_err::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if h.cpuset {
            // Copied from the parent (the hierarchy's root): empty values would refuse every task.
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let value = fs_err::read_to_string(h.mount.join(file))?;
                fs_err::write(dir.join(file), value.trim())?;
            }
        }
        procs.push(dir.join("cgroup.procs"));
    }
    Ok(procs)
}

/// Removes `machine`'s cgroups in every hierarchy, deepest first, retrying for up to `wait` while
/// the last processes of a stopped host exit. Returns the directories still there.
pub fn remove(machine: &str, wait: Duration) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = hierarchies()
        .into_iter()
        .map(|h| h.mount.join(name(machine)))
        .filter(|d| d.is_dir())
        .collect();
    remove_trees(&dirs, wait)
}

/// The machine names that have a lab cgroup in some hierarchy and belong to lab `lab`.
pub fn machines_of(lab: &str) -> Vec<String> {
    let mut machines = Vec::new();
    for h in hierarchies() {
        let Ok(entries) = std::fs::read_dir(&h.mount) else {
            continue;
        };
        for e in entries.flatten() {
            let file_name = e.file_name().to_string_lossy().into_owned();
            if let Some(machine) = file_name.strip_prefix(PREFIX) {
                if super::host::is_machine_of(machine, lab) && !machines.iter().any(|m| m == machine) {
                    machines.push(machine.to_string());
                }
            }
        }
    }
    machines.sort();
    machines
}

/// `rmdir` of every directory under each of `roots` and then the root, deepest first, until all
/// are gone or `wait` has passed (a cgroup whose last process is still exiting is busy for a
/// moment). Returns what is left.
fn remove_trees(roots: &[PathBuf], wait: Duration) -> Vec<PathBuf> {
    let deadline = Instant::now() + wait;
    let mut interval = Duration::from_millis(20);
    loop {
        let mut left = Vec::new();
        for root in roots {
            for dir in subdirs_deepest_first(root) {
                if std::fs::remove_dir(&dir).is_err() && dir.exists() {
                    left.push(dir);
                }
            }
        }
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(interval);
        interval = (interval * 2).min(Duration::from_millis(250));
    }
}

/// `root` and every directory under it, children before their parents.
fn subdirs_deepest_first(root: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                // Cgroup control files are files; only directories are cgroups.
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        if dir.is_dir() {
            all.push(dir);
        }
    }
    all.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /mnt/with\\040space rw - cgroup cgroup rw,pids
";

    #[test]
    fn every_cgroup_hierarchy_is_found_once_and_cpuset_is_marked() {
        let got = parse_mountinfo(HYBRID);
        let mounts: Vec<&str> = got.iter().map(|h| h.mount.to_str().unwrap()).collect();
        assert_eq!(
            mounts,
            [
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpuset",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup/systemd",
                "/sys/fs/cgroup/unified",
                "/mnt/with space",
            ]
        );
        let cpuset: Vec<bool> = got.iter().map(|h| h.cpuset).collect();
        assert_eq!(cpuset, [false, true, false, false, false, false]);
    }

    #[test]
    fn trees_are_removed_children_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("hactl-lab-t1-cp1");
        std::fs::create_dir_all(root.join("kubepods/burstable/pod1")).unwrap();
        std::fs::create_dir_all(root.join("system.slice/etcd.service")).unwrap();
        let order = subdirs_deepest_first(&root);
        let pos = |p: &str| order.iter().position(|d| d == &root.join(p)).unwrap();
        assert!(pos("kubepods/burstable/pod1") < pos("kubepods/burstable"));
        assert!(pos("kubepods/burstable") < pos("kubepods"));
        assert_eq!(order.last(), Some(&root));
        assert!(remove_trees(std::slice::from_ref(&root), Duration::ZERO).is_empty());
        assert!(!root.exists());
    }

    #[test]
    fn what_cannot_be_removed_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("hactl-lab-t1-cp1");
        std::fs::create_dir_all(root.join("busy")).unwrap();
        // A plain file stands for a cgroup the kernel refuses to remove (a process is in it).
        std::fs::write(root.join("busy/tasks"), "1").unwrap();
        let left = remove_trees(std::slice::from_ref(&root), Duration::ZERO);
        assert_eq!(left, [root.join("busy"), root.clone()]);
    }
}
