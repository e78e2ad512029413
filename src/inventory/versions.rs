//! Which etcd a Kubernetes minor works with: the one table both `validate` (a pinned
//! `etcd.version` against `kubernetes.version`, before any host is reached) and the skew check
//! of `up` (the etcd each host runs, from its facts) read. Pure.
//!
//! | Kubernetes | etcd (minimum) | why |
//! |---|---|---|
//! | < 1.20 | refused | older than hactl's flags and APIs support |
//! | 1.20 – 1.28 | 3.4.22 on the 3.4 line, or 3.5.6 | "Operating etcd clusters for Kubernetes" (kubernetes.io docs): the minimum recommended versions for production are 3.4.22+ and 3.5.6+ |
//! | ≥ 1.29 | 3.5.6 | kubeadm's `SupportedEtcdVersion` table (cmd/kubeadm/app/constants/constants.go) lists only 3.5.x (3.6.x from 1.34) for these minors; 3.4 is no longer tested with them |
//!
//! etcd 4.x or a major other than 3 is refused (untested with any Kubernetes release).

use semver::Version;

/// The oldest Kubernetes minor hactl installs.
pub const MIN_KUBERNETES_MINOR: u64 = 20;

/// The lowest etcd version supported for Kubernetes `1.<minor>` that is compatible with `etcd`'s
/// own minor line (so 3.4.23 is judged against 3.4.22, not against 3.5.6). `None`: that etcd line
/// is not supported with this Kubernetes minor at all.
pub fn min_etcd(kube_minor: u64, etcd: &Version) -> Option<Version> {
    if etcd.major != 3 || kube_minor < MIN_KUBERNETES_MINOR {
        return None;
    }
    match (kube_minor, etcd.minor) {
        (..=28, 4) => Some(Version::new(3, 4, 22)),
        (_, 0..=4) => None,
        (_, _) => Some(Version::new(3, 5, 6)),
    }
}

/// Why etcd `etcd` does not work with Kubernetes `kube` (`None`: it does), with the fix: the
/// etcd to give, or the newest Kubernetes minor that still takes this etcd.
pub fn etcd_problem(kube: &Version, etcd: &Version) -> Option<String> {
    match min_etcd(kube.minor, etcd) {
        Some(min) if *etcd >= min => None,
        Some(min) => Some(format!(
            "etcd {etcd} is older than Kubernetes {kube} supports (at least {min})"
        )),
        None if etcd.major == 3 && etcd.minor == 4 && kube.minor > 28 => Some(format!(
            "etcd {etcd} is not supported with Kubernetes {kube}, which needs etcd 3.5.6 or newer \
             (etcd 3.4 works up to Kubernetes 1.28)"
        )),
        None => Some(format!("etcd {etcd} is not supported with Kubernetes {kube}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn etcd_3_4_works_up_to_1_28_and_3_5_from_3_5_6() {
        assert_eq!(etcd_problem(&v("1.28.15"), &v("3.4.23")), None);
        assert_eq!(etcd_problem(&v("1.31.4"), &v("3.5.16")), None);
        assert!(etcd_problem(&v("1.31.4"), &v("3.4.23")).unwrap().contains("1.28"));
        assert!(etcd_problem(&v("1.31.4"), &v("3.5.1"))
            .unwrap()
            .contains("at least 3.5.6"));
        assert!(etcd_problem(&v("1.20.2"), &v("3.4.13"))
            .unwrap()
            .contains("at least 3.4.22"));
        assert!(etcd_problem(&v("1.31.4"), &v("4.0.0")).is_some());
    }
}
