//! Version gates: what differs between the Kubernetes minors hactl supports (1.20 through the
//! newest), in flags and in APIs. Each gate names the upstream changelog entry it follows; the
//! "Kubernetes versions" table in docs/reference/kubernetes.md says the same in prose.
//!
//! | gate | before | from | upstream |
//! |---|---|---|---|
//! | PodDisruptionBudget API | `policy/v1beta1` | `policy/v1` (1.21) | CHANGELOG-1.21, API Change: PodDisruptionBudget promoted to `policy/v1` |
//! | Eviction API | `policy/v1beta1` | `policy/v1` (1.22) | CHANGELOG-1.22, API Change: `pods/eviction` accepts `policy/v1` Eviction |
//! | controller-manager `--port=0` | rendered (1.20 – 1.23) | not rendered (1.24) | CHANGELOG-1.22 #96216 (`--port` may only be 0, removal in 1.24); CHANGELOG-1.24 #106860 (removed) |
//! | scheduler `--port=0` | rendered (1.20 – 1.23) | not rendered (1.24) | CHANGELOG-1.23 #96345 (`--port` may only be 0, "would be removed in v1.24") |
//! | control-plane Node labels | `node-role.kubernetes.io/master` and `…/control-plane` (1.20 – 1.23) | `…/control-plane` alone (1.24) | CHANGELOG-1.20, Urgent Upgrade Notes, kubeadm: the `control-plane` label applied in parallel to the deprecated `master` one; KEP-2067 (kubeadm#2200): `master` label gone in 1.24 |
//! | control-plane Node taints | `node-role.kubernetes.io/master:NoSchedule` (1.20 – 1.23) | both (1.24), `…/control-plane:NoSchedule` alone (1.25) | KEP-2067: CHANGELOG-1.24, kubeadm: the `control-plane` taint applied beside `master`; CHANGELOG-1.25, kubeadm: the `master` taint removed |
//! | kubelet `--container-runtime=remote` | rendered (1.20 – 1.23) | not rendered (1.24) | CHANGELOG-1.24: dockershim removed, `remote` the only runtime; CHANGELOG-1.27: `--container-runtime` removed |
//! | kubelet `--pod-infra-container-image` | rendered (1.20 – 1.26): image GC spares only that image | not rendered (1.27) | CHANGELOG-1.27: flag deprecated, the image GC reads the sandbox image from the runtime |
//! | default pause image tag | 3.2 (1.20), 3.4.1 (1.21), 3.5 (1.22), 3.6 (1.23), 3.7 (1.24), 3.8 (1.25), 3.9 (1.26 – 1.30), 3.10 (1.31 on) | | kubeadm's `PauseVersion` constant of each minor (cmd/kubeadm/app/constants) |
//!
//! Before 1.22 (controller-manager) and 1.23 (scheduler) the insecure port still served plain
//! HTTP by default (10252, 10251) on every address; `--port=0` turns it off. From those minors on
//! the flag accepts only 0, and 1.24 removed it: a removed flag makes the component refuse to
//! start, so it is never rendered there.
//!
//! Upstream end of life ([`end_of_life`]) is a warning, never a refusal: the skew rules
//! ([`super::skew`]) decide what is refused.

use semver::Version;

use super::Component;

/// The PodDisruptionBudget API group/version Kubernetes `1.<minor>` serves.
/// PodDisruptionBudget was promoted to policy/v1 in 1.21 (CHANGELOG-1.21, API Change); 1.20 serves only
/// policy/v1beta1.
pub fn pdb_api_version(minor: u64) -> &'static str {
    if minor < 21 {
        "policy/v1beta1"
    } else {
        "policy/v1"
    }
}

/// The Eviction API group/version Kubernetes `1.<minor>` accepts on `pods/eviction`.
/// The eviction subresource accepts policy/v1 Eviction from 1.22 (CHANGELOG-1.22, API Change);
/// before it, policy/v1beta1.
pub fn eviction_api_version(minor: u64) -> &'static str {
    if minor < 22 {
        "policy/v1beta1"
    } else {
        "policy/v1"
    }
}

/// The collection path of every PodDisruptionBudget in the cluster.
pub fn pdb_list_path(minor: u64) -> String {
    format!("/apis/{}/poddisruptionbudgets", pdb_api_version(minor))
}

/// The collection path of the PodDisruptionBudgets of `namespace`.
pub fn pdb_path(minor: u64, namespace: &str) -> String {
    format!(
        "/apis/{}/namespaces/{namespace}/poddisruptionbudgets",
        pdb_api_version(minor)
    )
}

/// Flags a component gets only on some minors, appended after the common ones.
/// (The common flags are built in [`super::files::flags`]; this block is the only version gate
/// there.)
pub fn version_flags(component: Component, minor: u64) -> Vec<String> {
    match component {
        // The insecure ports (controller-manager 10252, scheduler 10251) served plain HTTP on every
        // address until 1.22 / 1.23; `--port=0` turns them off. 1.24 removed the flag
        // (controller-manager: CHANGELOG-1.24 #106860; scheduler: CHANGELOG-1.23 #96345 announced
        // the removal for v1.24), and a removed flag stops the component from starting.
        Component::ControllerManager | Component::Scheduler if minor < 24 => {
            vec!["--port=0".to_string()]
        }
        _ => vec![],
    }
}

/// The labels a control-plane Node carries in Kubernetes `1.<minor>` (values empty, as kubeadm
/// writes them). NodeRestriction forbids a kubelet to set `node-role.kubernetes.io/*` on its own
/// Node, so hactl sets them through the API once the Node registered.
/// 1.20 introduced `…/control-plane` beside the deprecated `…/master` (CHANGELOG-1.20, Urgent
/// Upgrade Notes, kubeadm); KEP-2067 dropped `…/master` from 1.24 on.
pub fn control_plane_labels(minor: u64) -> Vec<&'static str> {
    if minor < 24 {
        vec![MASTER_ROLE, CONTROL_PLANE_ROLE]
    } else {
        vec![CONTROL_PLANE_ROLE]
    }
}

/// The taints a control-plane Node registers with (kubelet `--register-with-taints`), so
/// ordinary pods stay off it: `…/master:NoSchedule` until 1.23, both in 1.24 (CHANGELOG-1.24,
/// kubeadm), `…/control-plane:NoSchedule` alone from 1.25 (CHANGELOG-1.25, kubeadm; KEP-2067).
pub fn control_plane_taints(minor: u64) -> Vec<String> {
    let taint = |key: &str| format!("{key}:NoSchedule");
    match minor {
        0..=23 => vec![taint(MASTER_ROLE)],
        24 => vec![taint(MASTER_ROLE), taint(CONTROL_PLANE_ROLE)],
        _ => vec![taint(CONTROL_PLANE_ROLE)],
    }
}

/// The deprecated control-plane role label and taint key.
pub const MASTER_ROLE: &str = "node-role.kubernetes.io/master";
/// The control-plane role label and taint key.
pub const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

/// Kubelet flags only some minors take. Before 1.24 the kubelet ran dockershim unless told
/// `--container-runtime=remote`; 1.24 removed dockershim (`remote` was then the only value,
/// CHANGELOG-1.24) and 1.27 removed the flag (CHANGELOG-1.27), which a kubelet refuses to start
/// with. Before 1.27 the kubelet's image garbage collection spares only the image
/// `--pod-infra-container-image` names (it deletes an unused `pause` otherwise, and a node
/// without a registry could start no pod after that); 1.27 deprecated the flag, the collector
/// reading the sandbox image from the runtime instead (CHANGELOG-1.27).
pub fn kubelet_version_flags(minor: u64, pause: &str) -> Vec<String> {
    let mut flags = Vec::new();
    if minor < 24 {
        flags.push("--container-runtime=remote".to_string());
    }
    if minor < 27 {
        flags.push(format!("--pod-infra-container-image={pause}"));
    }
    flags
}

/// The pause image tag Kubernetes `1.<minor>` expects (kubeadm's `PauseVersion` of that minor),
/// for a registry source: what the sandbox image is pulled as.
pub fn pause_tag(minor: u64) -> &'static str {
    match minor {
        0..=20 => "3.2",
        21 => "3.4.1",
        22 => "3.5",
        23 => "3.6",
        24 => "3.7",
        25 => "3.8",
        26..=30 => "3.9",
        _ => "3.10",
    }
}

/// Upstream end of life of each minor (the last day of patch support, from the Kubernetes
/// "Patch Releases" page). Minors newer than the table are taken as supported.
const END_OF_LIFE: &[(u64, &str)] = &[
    (20, "2022-02-28"),
    (21, "2022-06-28"),
    (22, "2022-10-28"),
    (23, "2023-02-28"),
    (24, "2023-07-28"),
    (25, "2023-10-28"),
    (26, "2024-02-28"),
    (27, "2024-06-28"),
    (28, "2024-10-28"),
    (29, "2025-02-28"),
    (30, "2025-06-28"),
    (31, "2025-10-28"),
    (32, "2026-02-28"),
    (33, "2026-06-28"),
];

/// The end-of-life date of `1.<minor>`, when upstream has published one hactl knows of.
pub fn end_of_life(minor: u64) -> Option<&'static str> {
    END_OF_LIFE.iter().find(|(m, _)| *m == minor).map(|(_, d)| *d)
}

/// A warning when `version` is past upstream's end of life on `today` (`YYYY-MM-DD`); `None` when
/// it is supported or newer than hactl's table. Never a refusal.
pub fn end_of_life_warning(version: &Version, today: &str) -> Option<String> {
    let eol = end_of_life(version.minor)?;
    (today > eol).then(|| {
        format!(
            "Kubernetes {version}: upstream ended support for 1.{} on {eol} (no more security fixes); hactl installs it, but plan an upgrade one minor at a time",
            version.minor
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_apis_follow_the_minor() {
        // (minor, PodDisruptionBudget, Eviction)
        let table = [
            (20, "policy/v1beta1", "policy/v1beta1"),
            (21, "policy/v1", "policy/v1beta1"),
            (22, "policy/v1", "policy/v1"),
            (34, "policy/v1", "policy/v1"),
        ];
        for (minor, pdb, eviction) in table {
            assert_eq!(pdb_api_version(minor), pdb, "1.{minor} PodDisruptionBudget");
            assert_eq!(eviction_api_version(minor), eviction, "1.{minor} Eviction");
        }
        assert_eq!(pdb_list_path(20), "/apis/policy/v1beta1/poddisruptionbudgets");
        assert_eq!(
            pdb_path(21, "web"),
            "/apis/policy/v1/namespaces/web/poddisruptionbudgets"
        );
    }

    #[test]
    fn insecure_ports_are_closed_while_the_flag_exists_and_never_rendered_after() {
        for minor in 20..=23 {
            assert_eq!(version_flags(Component::ControllerManager, minor), ["--port=0"]);
            assert_eq!(version_flags(Component::Scheduler, minor), ["--port=0"]);
        }
        for minor in [24, 25, 31, 40] {
            for c in Component::ALL {
                assert!(version_flags(c, minor).is_empty(), "1.{minor} {c:?}");
            }
        }
        assert!(version_flags(Component::ApiServer, 20).is_empty());
    }

    #[test]
    fn control_plane_nodes_carry_the_names_of_their_minor() {
        // (minor, labels, taints)
        let table: [(u64, &[&str], &[&str]); 6] = [
            (
                20,
                &[MASTER_ROLE, CONTROL_PLANE_ROLE],
                &["node-role.kubernetes.io/master:NoSchedule"],
            ),
            (
                23,
                &[MASTER_ROLE, CONTROL_PLANE_ROLE],
                &["node-role.kubernetes.io/master:NoSchedule"],
            ),
            (
                24,
                &[CONTROL_PLANE_ROLE],
                &[
                    "node-role.kubernetes.io/master:NoSchedule",
                    "node-role.kubernetes.io/control-plane:NoSchedule",
                ],
            ),
            (
                25,
                &[CONTROL_PLANE_ROLE],
                &["node-role.kubernetes.io/control-plane:NoSchedule"],
            ),
            (
                31,
                &[CONTROL_PLANE_ROLE],
                &["node-role.kubernetes.io/control-plane:NoSchedule"],
            ),
            (
                40,
                &[CONTROL_PLANE_ROLE],
                &["node-role.kubernetes.io/control-plane:NoSchedule"],
            ),
        ];
        for (minor, labels, taints) in table {
            assert_eq!(control_plane_labels(minor), labels, "1.{minor} labels");
            assert_eq!(control_plane_taints(minor), taints, "1.{minor} taints");
        }
    }

    #[test]
    fn the_kubelet_is_told_remote_only_while_the_flag_exists_and_pause_follows_kubeadm() {
        let p = "hactl.local/pause:3.4";
        let both = [
            "--container-runtime=remote",
            "--pod-infra-container-image=hactl.local/pause:3.4",
        ];
        assert_eq!(kubelet_version_flags(20, p), both);
        assert_eq!(kubelet_version_flags(23, p), both);
        assert_eq!(kubelet_version_flags(24, p), both[1..]);
        assert_eq!(kubelet_version_flags(26, p), both[1..]);
        assert!(kubelet_version_flags(27, p).is_empty());
        let table = [
            (20, "3.2"),
            (21, "3.4.1"),
            (22, "3.5"),
            (23, "3.6"),
            (24, "3.7"),
            (25, "3.8"),
            (26, "3.9"),
            (30, "3.9"),
            (31, "3.10"),
            (35, "3.10"),
        ];
        for (minor, tag) in table {
            assert_eq!(pause_tag(minor), tag, "1.{minor}");
        }
    }

    #[test]
    fn end_of_life_warns_and_names_the_date() {
        let v = Version::new(1, 20, 2);
        let w = end_of_life_warning(&v, "2026-11-22").unwrap();
        assert!(w.contains("1.20 on 2022-02-28"), "{w}");
        assert_eq!(
            end_of_life_warning(&v, "2022-02-28"),
            None,
            "the last day is supported"
        );
        assert_eq!(end_of_life_warning(&Version::new(1, 33, 0), "2026-01-01"), None);
        assert!(end_of_life_warning(&Version::new(1, 33, 0), "2026-07-01").is_some());
        assert_eq!(
            end_of_life_warning(&Version::new(1, 36, 0), "2030-01-01"),
            None,
            "newer than the table"
        );
    }
}
