//! Version skew rules, checked before anything is installed.
//!
//! The rules follow the Kubernetes version skew policy
//! (<https://kubernetes.io/releases/version-skew-policy/>):
//! - kube-apiserver instances in an HA cluster are within one minor version of each other: every
//!   installed apiserver is within one minor of the version being rolled out (during a rollout old
//!   and new run side by side);
//! - kube-controller-manager and kube-scheduler are not newer than the apiservers they talk to and
//!   at most one minor older. hactl rolls apiservers first, so once they run the target version
//!   the installed controllers must be at most the target and at most one minor older;
//! - Kubernetes versions differ from each other only in minor (one major: 1).
//!
//! And etcd, by [`min_etcd`] (the table is in [`crate::inventory::versions`], which `validate`
//! reads too).

use semver::Version;

use super::Component;

pub use crate::inventory::versions::{min_etcd, MIN_KUBERNETES_MINOR};

/// A component version seen on a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub host: String,
    pub component: Component,
    pub version: Version,
}

/// `Kubernetes v1.31.4` (what `kube-apiserver --version` prints) → 1.31.4.
pub fn parse_kubernetes_version(text: &str) -> Option<Version> {
    let word = text.split_whitespace().find(|w| w.starts_with('v'))?;
    lenient(word.trim_start_matches('v'))
}

/// `etcd Version: 3.5.16` (what `etcd --version` prints first) → 3.5.16.
pub fn parse_etcd_version(text: &str) -> Option<Version> {
    lenient(text.split_whitespace().last()?)
}

/// `1.31.4`, `1.31.4-rc.0`, `1.31.4+k3s1`; drops build metadata.
fn lenient(s: &str) -> Option<Version> {
    let mut v = Version::parse(s).ok()?;
    v.build = semver::BuildMetadata::EMPTY;
    Some(v)
}

/// Every rule the planned rollout of `target` breaks, given the installed Kubernetes components
/// and the etcd versions (host, version) the apiservers will talk to. Empty: the rollout is allowed.
pub fn violations(target: &Version, installed: &[Installed], etcd: &[(String, Version)]) -> Vec<String> {
    let mut out = Vec::new();
    if target.major != 1 || target.minor < MIN_KUBERNETES_MINOR {
        out.push(format!(
            "Kubernetes {target} is older than hactl supports (1.{MIN_KUBERNETES_MINOR} or newer): set kubernetes.version to a supported release"
        ));
        return out;
    }
    for i in installed {
        let what = format!("{} {} on {}", i.component.binary(), i.version, i.host);
        if i.version.major != target.major {
            out.push(format!(
                "{what} and the planned {target} differ in major version: install a 1.x release"
            ));
            continue;
        }
        let (have, want) = (i.version.minor as i64, target.minor as i64);
        match i.component {
            Component::ApiServer if (have - want).abs() > 1 => out.push(format!(
                "{what} is more than one minor version from the planned {target}: apiservers in one cluster must stay within one minor of each other, so upgrade (or downgrade) one minor at a time: set kubernetes.version to 1.{}.x first",
                if want > have { have + 1 } else { have - 1 }
            )),
            Component::ControllerManager | Component::Scheduler if have > want => out.push(format!(
                "{what} is newer than the planned apiserver {target}: controller-manager and scheduler must not be newer than the apiserver; downgrading the control plane is not supported, set kubernetes.version to at least 1.{have}.0"
            )),
            Component::ControllerManager | Component::Scheduler if want - have > 1 => out.push(format!(
                "{what} is more than one minor older than the planned apiserver {target}: upgrade one minor at a time: set kubernetes.version to 1.{}.x first",
                have + 1
            )),
            _ => {}
        }
    }
    for (host, v) in etcd {
        match min_etcd(target.minor, v) {
            Some(min) if *v >= min => {}
            Some(min) => out.push(format!(
                "etcd {v} on {host} is older than Kubernetes {target} supports (at least {min}): upgrade etcd first (set etcd.version / etcd.source to {min} or newer and run `hactl up`)"
            )),
            None => out.push(format!(
                "etcd {v} on {host} is not supported with Kubernetes {target} (it needs etcd 3.5.6 or newer): upgrade etcd to 3.5 first, or choose a Kubernetes release that supports etcd {}.{}",
                v.major, v.minor
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }
    fn at(host: &str, component: Component, version: &str) -> Installed {
        Installed {
            host: host.into(),
            component,
            version: v(version),
        }
    }
    fn etcd(host: &str, version: &str) -> (String, Version) {
        (host.into(), v(version))
    }

    #[test]
    fn the_etcd_table() {
        // (Kubernetes minor, etcd, allowed)
        let table = [
            (19, "3.5.16", false),
            (20, "3.4.23", true),
            (20, "3.4.21", false),
            (20, "3.5.16", true),
            (25, "3.5.16", true),
            (26, "3.4.21", false),
            (26, "3.4.22", true),
            (28, "3.4.23", true),
            (28, "3.5.5", false),
            (28, "3.5.6", true),
            (29, "3.4.23", false),
            (29, "3.5.6", true),
            (31, "3.5.16", true),
            (31, "3.5.1", false),
            (34, "3.6.4", true),
            (31, "4.0.0", false),
            (31, "2.3.8", false),
        ];
        for (minor, etcd_version, allowed) in table {
            let got = violations(&Version::new(1, minor, 0), &[], &[etcd("cp1", etcd_version)]);
            assert_eq!(
                got.is_empty(),
                allowed,
                "1.{minor} with etcd {etcd_version}: {got:?}"
            );
        }
    }

    #[test]
    fn a_refusal_names_both_versions_and_the_fix() {
        let got = violations(&v("1.31.4"), &[], &[etcd("cp2", "3.4.23")]);
        assert_eq!(got, ["etcd 3.4.23 on cp2 is not supported with Kubernetes 1.31.4 (it needs etcd 3.5.6 or newer): upgrade etcd to 3.5 first, or choose a Kubernetes release that supports etcd 3.4"]);
        let got = violations(&v("1.31.4"), &[], &[etcd("cp2", "3.5.1")]);
        assert_eq!(got, ["etcd 3.5.1 on cp2 is older than Kubernetes 1.31.4 supports (at least 3.5.6): upgrade etcd first (set etcd.version / etcd.source to 3.5.6 or newer and run `hactl up`)"]);
    }

    #[test]
    fn apiservers_stay_within_one_minor() {
        use Component::ApiServer;
        assert!(violations(&v("1.31.4"), &[at("cp1", ApiServer, "1.30.9")], &[]).is_empty());
        assert!(violations(&v("1.31.4"), &[at("cp1", ApiServer, "1.31.0")], &[]).is_empty());
        assert!(violations(&v("1.30.4"), &[at("cp1", ApiServer, "1.31.0")], &[]).is_empty());
        let got = violations(&v("1.31.4"), &[at("cp3", ApiServer, "1.29.2")], &[]);
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with(
                "kube-apiserver 1.29.2 on cp3 is more than one minor version from the planned 1.31.4"
            ) && got[0].ends_with("set kubernetes.version to 1.30.x first"),
            "{got:?}"
        );
        let got = violations(&v("1.29.0"), &[at("cp1", ApiServer, "1.31.0")], &[]);
        assert!(
            got[0].ends_with("set kubernetes.version to 1.30.x first"),
            "{got:?}"
        );
    }

    #[test]
    fn controllers_are_not_newer_and_at_most_one_minor_older() {
        use Component::{ControllerManager, Scheduler};
        assert!(violations(&v("1.31.4"), &[at("cp1", ControllerManager, "1.30.1")], &[]).is_empty());
        assert!(
            violations(&v("1.31.4"), &[at("cp1", Scheduler, "1.31.9")], &[]).is_empty(),
            "patch versions may differ"
        );
        let newer = violations(&v("1.30.4"), &[at("cp1", Scheduler, "1.31.0")], &[]);
        assert_eq!(newer, ["kube-scheduler 1.31.0 on cp1 is newer than the planned apiserver 1.30.4: controller-manager and scheduler must not be newer than the apiserver; downgrading the control plane is not supported, set kubernetes.version to at least 1.31.0"]);
        let older = violations(&v("1.31.4"), &[at("cp2", ControllerManager, "1.29.3")], &[]);
        assert_eq!(older, ["kube-controller-manager 1.29.3 on cp2 is more than one minor older than the planned apiserver 1.31.4: upgrade one minor at a time: set kubernetes.version to 1.30.x first"]);
    }

    #[test]
    fn every_violation_is_reported_at_once() {
        let got = violations(
            &v("1.31.4"),
            &[
                at("cp1", Component::ApiServer, "1.28.0"),
                at("cp2", Component::Scheduler, "1.32.0"),
            ],
            &[etcd("cp1", "3.4.23"), etcd("cp2", "3.5.16")],
        );
        assert_eq!(got.len(), 3, "{got:?}");
    }

    #[test]
    fn old_kubernetes_and_other_majors_are_refused() {
        assert_eq!(violations(&v("1.19.16"), &[], &[]).len(), 1);
        assert!(violations(&v("1.20.2"), &[], &[]).is_empty(), "1.20 is supported");
        assert_eq!(violations(&v("2.0.0"), &[], &[]).len(), 1);
    }

    #[test]
    fn parses_what_the_binaries_print() {
        assert_eq!(parse_kubernetes_version("Kubernetes v1.31.4"), Some(v("1.31.4")));
        assert_eq!(
            parse_kubernetes_version("Kubernetes v1.32.0-rc.1"),
            Some(v("1.32.0-rc.1"))
        );
        assert_eq!(
            parse_kubernetes_version("Kubernetes v1.30.2+k3s1"),
            Some(v("1.30.2"))
        );
        assert_eq!(parse_kubernetes_version("garbage"), None);
        assert_eq!(parse_etcd_version("etcd Version: 3.5.16"), Some(v("3.5.16")));
        assert_eq!(parse_etcd_version(""), None);
    }
}
