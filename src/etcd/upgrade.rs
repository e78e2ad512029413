//! etcd version changes: what each member runs against what it will run after this run, which
//! changes are refused (a minor skip, a downgrade, a binary that is not the declared version),
//! and in which order the members roll (the leader last).
//!
//! Invariant: pure. Versions come from the facts (each member's `endpoint status`, each host's
//! installed binary) and from the operator's bundle or release binary; nothing here runs anything.

use semver::Version;

/// What one etcd host reported about versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberVersion {
    pub host: String,
    /// The version the running member reports (`endpoint status`), when it runs.
    pub running: Option<Version>,
    /// Whether that member is the leader.
    pub is_leader: bool,
}

/// An etcd version change hactl will not make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpgradeRefusal {
    #[error("refused by rule U-binary: the etcd binary from {origin} is version {binary}, but the inventory declares etcd.version {declared}; nothing was restarted: make {origin} provide etcd {declared} (a bundle: its binaries; a package: the version apt installs), or set etcd.version to {binary}, and run again")]
    BinaryMismatch {
        origin: String,
        binary: Version,
        declared: Version,
    },
    #[error("refused by rule U-skip: {host} runs etcd {running} and the target is {target}, which skips a minor version (etcd upgrades one minor at a time); nothing was restarted: upgrade to {running_major}.{next_minor}.x first (set etcd.version and the binaries to it, run `hactl up`), then to {target}")]
    MinorSkip {
        host: String,
        running: Version,
        target: Version,
        running_major: u64,
        next_minor: u64,
    },
    #[error("refused by rule U-downgrade: {host} runs etcd {running} and the target is {target}, an older minor version (etcd does not start an older minor on a newer cluster's data); nothing was restarted: set etcd.version and the binaries back to {running_major}.{running_minor}.x; to go back for real, restore a snapshot taken before the upgrade with `hactl recover`")]
    Downgrade {
        host: String,
        running: Version,
        target: Version,
        running_major: u64,
        running_minor: u64,
    },
}

/// The version the members will run after this run: the declared `etcd.version`, else the
/// version of the binary that will be installed. Refuses a binary that is not the declared version.
pub fn target(
    declared: Option<&Version>,
    binary: Option<&Version>,
    origin: &str,
) -> Result<Option<Version>, UpgradeRefusal> {
    match (declared, binary) {
        (Some(d), Some(b)) if !same_release(d, b) => Err(UpgradeRefusal::BinaryMismatch {
            origin: origin.to_string(),
            binary: b.clone(),
            declared: d.clone(),
        }),
        (Some(d), _) => Ok(Some(d.clone())),
        (None, b) => Ok(b.cloned()),
    }
}

/// Major, minor and patch agree (pre-release and build metadata aside).
fn same_release(a: &Version, b: &Version) -> bool {
    (a.major, a.minor, a.patch) == (b.major, b.minor, b.patch)
}

/// Checks every running member's move to `target`: at most one minor up, never a minor down.
/// A patch change in either direction within a minor is allowed (etcd supports it).
pub fn check(members: &[MemberVersion], target: &Version) -> Result<(), UpgradeRefusal> {
    for m in members {
        let Some(running) = &m.running else { continue };
        let from = (running.major, running.minor);
        let to = (target.major, target.minor);
        if to < from {
            return Err(UpgradeRefusal::Downgrade {
                host: m.host.clone(),
                running: running.clone(),
                target: target.clone(),
                running_major: running.major,
                running_minor: running.minor,
            });
        }
        if target.major != running.major || target.minor > running.minor + 1 {
            return Err(UpgradeRefusal::MinorSkip {
                host: m.host.clone(),
                running: running.clone(),
                target: target.clone(),
                running_major: running.major,
                next_minor: running.minor + 1,
            });
        }
    }
    Ok(())
}

/// Whether a running member must restart to run `target`.
pub fn needs_restart(m: &MemberVersion, target: Option<&Version>) -> bool {
    match (&m.running, target) {
        (Some(r), Some(t)) => !same_release(r, t),
        _ => false,
    }
}

/// The order in which `hosts` (inventory order) restart: followers first, the leader last, so
/// leadership moves once at most.
pub fn roll_order<'a>(hosts: &[&'a str], leader: Option<&str>) -> Vec<&'a str> {
    let mut order: Vec<&str> = hosts.iter().copied().filter(|h| Some(*h) != leader).collect();
    order.extend(hosts.iter().copied().filter(|h| Some(*h) == leader));
    order
}

/// `3.5.16` from `3.5.16`, `etcd Version: 3.5.16` or `v3.5.16`.
pub fn parse(text: &str) -> Option<Version> {
    let t = text.trim();
    let t = t.strip_prefix("etcd Version:").unwrap_or(t).trim();
    let t = t.strip_prefix('v').unwrap_or(t);
    Version::parse(t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn running(host: &str, version: &str) -> MemberVersion {
        MemberVersion {
            host: host.into(),
            running: Some(v(version)),
            is_leader: false,
        }
    }

    #[test]
    fn the_target_is_the_declared_version_and_a_different_binary_is_refused() {
        assert_eq!(
            target(Some(&v("3.5.16")), Some(&v("3.5.16")), "bundle /b"),
            Ok(Some(v("3.5.16")))
        );
        assert_eq!(
            target(None, Some(&v("3.5.16")), "bundle /b"),
            Ok(Some(v("3.5.16")))
        );
        assert_eq!(target(Some(&v("3.5.16")), None, "package"), Ok(Some(v("3.5.16"))));
        assert_eq!(target(None, None, "package"), Ok(None));
        let err = target(Some(&v("3.5.17")), Some(&v("3.5.16")), "bundle /b").unwrap_err();
        assert_eq!(err.to_string(), "refused by rule U-binary: the etcd binary from bundle /b is version 3.5.16, but the inventory declares etcd.version 3.5.17; nothing was restarted: make bundle /b provide etcd 3.5.17 (a bundle: its binaries; a package: the version apt installs), or set etcd.version to 3.5.16, and run again");
    }

    #[test]
    fn one_minor_up_and_patch_changes_are_allowed_a_skip_or_a_minor_down_is_refused() {
        let table = [
            ("3.4.23", "3.5.16", Ok(())),
            ("3.5.16", "3.5.17", Ok(())),
            ("3.5.17", "3.5.16", Ok(())),
            ("3.5.16", "3.6.0", Ok(())),
            ("3.5.16", "3.5.16", Ok(())),
            ("3.4.23", "3.6.0", Err("U-skip")),
            ("2.3.8", "3.0.0", Err("U-skip")),
            ("3.5.16", "3.4.23", Err("U-downgrade")),
            ("3.6.0", "3.4.23", Err("U-downgrade")),
        ];
        for (from, to, want) in table {
            let got = check(&[running("cp1", from)], &v(to)).map_err(|e| {
                let text = e.to_string();
                if text.contains("rule U-skip") {
                    "U-skip"
                } else {
                    "U-downgrade"
                }
            });
            assert_eq!(got, want, "{from} -> {to}");
        }
    }

    #[test]
    fn refusals_name_the_member_and_what_to_do() {
        let members = [running("cp1", "3.5.16"), running("cp2", "3.4.23")];
        let err = check(&members, &v("3.6.1")).unwrap_err();
        assert_eq!(err.to_string(), "refused by rule U-skip: cp2 runs etcd 3.4.23 and the target is 3.6.1, which skips a minor version (etcd upgrades one minor at a time); nothing was restarted: upgrade to 3.5.x first (set etcd.version and the binaries to it, run `hactl up`), then to 3.6.1");
        let err = check(&[running("cp3", "3.5.16")], &v("3.4.23")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("refused by rule U-downgrade: cp3 runs etcd 3.5.16 and the target is 3.4.23"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("set etcd.version and the binaries back to 3.5.x"),
            "{err}"
        );
    }

    #[test]
    fn members_that_are_not_running_are_not_checked_or_restarted() {
        let stopped = MemberVersion {
            host: "cp1".into(),
            running: None,
            is_leader: false,
        };
        assert_eq!(check(std::slice::from_ref(&stopped), &v("3.6.0")), Ok(()));
        assert!(!needs_restart(&stopped, Some(&v("3.5.16"))));
        assert!(needs_restart(&running("cp1", "3.4.23"), Some(&v("3.5.16"))));
        assert!(!needs_restart(&running("cp1", "3.5.16"), Some(&v("3.5.16"))));
        assert!(!needs_restart(&running("cp1", "3.4.23"), None));
    }

    #[test]
    fn the_leader_rolls_last() {
        assert_eq!(
            roll_order(&["cp1", "cp2", "cp3"], Some("cp1")),
            ["cp2", "cp3", "cp1"]
        );
        assert_eq!(
            roll_order(&["cp1", "cp2", "cp3"], Some("cp3")),
            ["cp1", "cp2", "cp3"]
        );
        assert_eq!(roll_order(&["cp1", "cp2", "cp3"], None), ["cp1", "cp2", "cp3"]);
    }

    #[test]
    fn versions_parse_from_what_etcd_prints() {
        assert_eq!(parse("etcd Version: 3.4.23"), Some(v("3.4.23")));
        assert_eq!(parse("3.5.16"), Some(v("3.5.16")));
        assert_eq!(parse("v3.5.16"), Some(v("3.5.16")));
        assert_eq!(parse("Git SHA: x"), None);
    }
}
