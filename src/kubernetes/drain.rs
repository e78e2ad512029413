//! The ordered drain of `hactl maintenance` (docs/recovery.md, "Maintenance"; KEP-4212's drain
//! plan): which pods of a node are evicted, in which order, what an Eviction's answer means, and
//! what a refusal says.
//!
//! Order: non-DaemonSet, non-mirror pods that are not terminal, by ascending priority, one wave per
//! priority value: user classes (≤ 1e9) first, then `system-cluster-critical`, then
//! `system-node-critical`. A wave is gone before the next one starts. DaemonSet pods stay (they
//! stop with the control plane), mirror pods stay (their static manifests are the kubelet's),
//! terminal pods (`Succeeded`, `Failed`) are skipped.
//!
//! Invariant: pure. The API is read and written by [`super::api`]; the loop that drives it is
//! in `crate::operations::maintenance`. Everything here is tested on recorded JSON.

use std::time::Duration;

use super::objects::{LabelSelector, Pod, PodDisruptionBudget, Status};

/// The highest priority a user PriorityClass may have.
pub const USER_PRIORITY_MAX: i32 = 1_000_000_000;
/// The values of the two built-in system classes.
pub const SYSTEM_CLUSTER_CRITICAL: i32 = 2_000_000_000;
pub const SYSTEM_NODE_CRITICAL: i32 = 2_000_001_000;
/// The annotation the kubelet puts on the mirror pod of a static pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The three bands of the KEP's drain plan, in drain order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Band {
    User,
    ClusterCritical,
    NodeCritical,
}

impl std::fmt::Display for Band {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Band::User => "user classes",
            Band::ClusterCritical => "system-cluster-critical",
            Band::NodeCritical => "system-node-critical",
        })
    }
}

/// A pod by name and uid (a pod re-created under the same name is another pod).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    pub fn of(pod: &Pod) -> PodRef {
        PodRef {
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
        }
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a pod on the node is not evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// Owned by this DaemonSet: stays until StopControlPlane.
    DaemonSet(String),
    /// The mirror of a static pod: the kubelet owns it.
    Mirror,
    /// `Succeeded` or `Failed`: nothing runs.
    Terminal(String),
}

impl std::fmt::Display for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Keep::DaemonSet(ds) => write!(f, "DaemonSet {ds}: stays until StopControlPlane"),
            Keep::Mirror => f.write_str("static pod (mirror): the kubelet owns it"),
            Keep::Terminal(phase) => write!(f, "{phase}: already terminal"),
        }
    }
}

/// Pods evicted together: one priority value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wave {
    pub band: Band,
    pub priority: i32,
    pub pods: Vec<PodRef>,
}

/// What a drain of one node does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    pub waves: Vec<Wave>,
    pub kept: Vec<(PodRef, Keep)>,
}

impl DrainPlan {
    pub fn is_empty(&self) -> bool {
        self.waves.is_empty()
    }
    pub fn evictions(&self) -> impl Iterator<Item = &PodRef> {
        self.waves.iter().flat_map(|w| &w.pods)
    }
}

/// The pod's priority (the admission plugin's value, else the built-in class's, else 0) and band.
pub fn priority(pod: &Pod) -> (Band, i32) {
    let class = pod.spec.priority_class_name.as_deref().unwrap_or("");
    let value = pod.spec.priority.unwrap_or(match class {
        "system-node-critical" => SYSTEM_NODE_CRITICAL,
        "system-cluster-critical" => SYSTEM_CLUSTER_CRITICAL,
        _ => 0,
    });
    let band = if class == "system-node-critical" || value >= SYSTEM_NODE_CRITICAL {
        Band::NodeCritical
    } else if class == "system-cluster-critical" || value > USER_PRIORITY_MAX {
        Band::ClusterCritical
    } else {
        Band::User
    };
    (band, value)
}

/// Why `pod` stays, or `None` when it is evicted.
pub fn keep(pod: &Pod) -> Option<Keep> {
    if let Some(ds) = pod
        .metadata
        .owner_references
        .iter()
        .find(|o| o.kind == "DaemonSet" && o.controller == Some(true))
    {
        return Some(Keep::DaemonSet(format!("{}/{}", pod.metadata.namespace, ds.name)));
    }
    if pod.metadata.annotations.contains_key(MIRROR_ANNOTATION) {
        return Some(Keep::Mirror);
    }
    if pod.status.phase == "Succeeded" || pod.status.phase == "Failed" {
        return Some(Keep::Terminal(pod.status.phase.clone()));
    }
    None
}

/// The drain plan of the pods on one node (as listed with `fieldSelector=spec.nodeName=NODE`).
pub fn plan(pods: &[Pod]) -> DrainPlan {
    let mut out = DrainPlan::default();
    let mut evict: Vec<(Band, i32, PodRef)> = Vec::new();
    for pod in pods {
        match keep(pod) {
            Some(why) => out.kept.push((PodRef::of(pod), why)),
            None => {
                let (band, value) = priority(pod);
                evict.push((band, value, PodRef::of(pod)));
            }
        }
    }
    evict.sort();
    for (band, value, pod) in evict {
        match out.waves.last_mut() {
            Some(w) if w.band == band && w.priority == value => w.pods.push(pod),
            _ => out.waves.push(Wave {
                band,
                priority: value,
                pods: vec![pod],
            }),
        }
    }
    out.kept.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Whether `selector` selects a pod with `labels` (policy/v1: a missing selector selects none).
pub fn selects(
    selector: Option<&LabelSelector>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let Some(s) = selector else {
        return false;
    };
    s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && s.match_expressions.iter().all(|r| match r.operator.as_str() {
            "In" => labels.get(&r.key).is_some_and(|v| r.values.contains(v)),
            "NotIn" => !labels.get(&r.key).is_some_and(|v| r.values.contains(v)),
            "Exists" => labels.contains_key(&r.key),
            "DoesNotExist" => !labels.contains_key(&r.key),
            _ => false,
        })
}

/// The budgets that cover `pod` (same namespace, selector matches).
pub fn budgets_for<'a>(pod: &Pod, pdbs: &'a [PodDisruptionBudget]) -> Vec<&'a PodDisruptionBudget> {
    pdbs.iter()
        .filter(|b| b.metadata.namespace == pod.metadata.namespace)
        .filter(|b| selects(b.spec.selector.as_ref(), &pod.metadata.labels))
        .collect()
}

/// One budget for people: `default/web-pdb (minAvailable=2; disruptionsAllowed=0, healthy 2 of
/// desired 2, expected 2)`.
pub fn describe_budget(b: &PodDisruptionBudget) -> String {
    let rule = match (&b.spec.min_available, &b.spec.max_unavailable) {
        (Some(v), _) => format!("minAvailable={}", plain(v)),
        (None, Some(v)) => format!("maxUnavailable={}", plain(v)),
        (None, None) => "no minAvailable/maxUnavailable".to_string(),
    };
    format!(
        "{}/{} ({rule}; disruptionsAllowed={}, healthy {} of desired {}, expected {})",
        b.metadata.namespace,
        b.metadata.name,
        b.status.disruptions_allowed,
        b.status.current_healthy,
        b.status.desired_healthy,
        b.status.expected_pods
    )
}

fn plain(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What would block the drain now: evicted pods covered by a budget that allows no disruption,
/// and pods covered by more than one budget (the Eviction API refuses those outright).
pub fn blockers(pods: &[Pod], pdbs: &[PodDisruptionBudget]) -> Vec<String> {
    let mut out = Vec::new();
    for pod in pods.iter().filter(|p| keep(p).is_none()) {
        let budgets = budgets_for(pod, pdbs);
        let who = PodRef::of(pod);
        if budgets.len() > 1 {
            out.push(format!(
                "{who} is covered by {} PodDisruptionBudgets ({}): the Eviction API refuses such a pod; leave one budget selecting it",
                budgets.len(),
                budgets
                    .iter()
                    .map(|b| format!("{}/{}", b.metadata.namespace, b.metadata.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        } else if let Some(b) = budgets.first().filter(|b| b.status.disruptions_allowed < 1) {
            out.push(format!(
                "{who} is covered by PodDisruptionBudget {}: its eviction would be answered 429 until another replica is healthy",
                describe_budget(b)
            ));
        }
    }
    out
}

/// The answer to one Eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// 200/201: the pod is being deleted (gracefully).
    Accepted,
    /// 404: the pod is gone already.
    Gone,
    /// 429: a PodDisruptionBudget allows no disruption now; retry later.
    Blocked {
        message: String,
        /// Budget names from the causes (`web-pdb`).
        budgets: Vec<String>,
    },
    /// Anything else: not retried.
    Failed { code: u16, message: String },
}

/// Reads the answer to `POST .../pods/NAME/eviction` (`code` and the body, a `v1` Status).
pub fn eviction_outcome(code: u16, body: &str) -> Eviction {
    let status: Status = serde_json::from_str(body).unwrap_or_default();
    let causes: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.message.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    let message = if causes.is_empty() || causes.iter().all(|c| *c == status.message) {
        status.message.clone()
    } else {
        format!("{} {}", status.message, causes.join("; "))
    };
    match code {
        200 | 201 => Eviction::Accepted,
        404 => Eviction::Gone,
        429 => Eviction::Blocked {
            budgets: status
                .details
                .iter()
                .flat_map(|d| &d.causes)
                .filter(|c| c.reason == "DisruptionBudget")
                .filter_map(|c| {
                    c.message
                        .strip_prefix("The disruption budget ")
                        .and_then(|rest| rest.split_whitespace().next())
                        .map(str::to_string)
                })
                .collect(),
            message,
        },
        _ => Eviction::Failed {
            code,
            message: if message.is_empty() {
                body.trim().chars().take(300).collect()
            } else {
                message
            },
        },
    }
}

/// The wait before retrying an Eviction answered 429 (`attempt` counts from 0): 1 s doubling up
/// to 8 s. kubectl drain waits 5 s flat; a short first wait helps when the budget frees up soon.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(3))
}

/// The refusal when a pod's Eviction was answered 429 until `--drain-timeout`.
pub fn blocked_refusal(
    node: &str,
    pod: &PodRef,
    message: &str,
    budgets: &[&PodDisruptionBudget],
    named: &[String],
    timeout: Duration,
) -> String {
    let which = if budgets.is_empty() {
        if named.is_empty() {
            "a PodDisruptionBudget".to_string()
        } else {
            format!("PodDisruptionBudget {}/{}", pod.namespace, named.join(", "))
        }
    } else {
        format!(
            "PodDisruptionBudget {}",
            budgets
                .iter()
                .map(|b| describe_budget(b))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    format!(
        "refused by {which}: the eviction of pod {pod} from {node} was answered 429 for the whole --drain-timeout of {}s ({message}). {node} stays cordoned at stage Drain; nothing was stopped. Instead: make room for the budget (scale up the workload behind it, or wait until its pods are healthy), or relax the budget, then `hactl maintenance complete {node}` (uncordons) and `hactl maintenance start {node}` again, with a longer --drain-timeout if the budget frees up slowly",
        timeout.as_secs()
    )
}

/// The evicted pods still on the node (same name and uid); a pod re-created under the same name
/// by a StatefulSet on another node does not count, nor does one re-created here (new uid).
pub fn still_present(current: &[Pod], evicted: &[PodRef]) -> Vec<PodRef> {
    evicted
        .iter()
        .filter(|e| current.iter().any(|p| PodRef::of(p) == **e))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::objects::List;

    const PODS: &str = include_str!("../../tests/fixtures/kubernetes/pods-on-cp1.json");
    const PDBS: &str = include_str!("../../tests/fixtures/kubernetes/pdbs.json");
    const EVICTION_429: &str = include_str!("../../tests/fixtures/kubernetes/eviction-429.json");
    const EVICTION_201: &str = include_str!("../../tests/fixtures/kubernetes/eviction-201.json");
    const EVICTION_404: &str = include_str!("../../tests/fixtures/kubernetes/eviction-404.json");
    const EVICTION_500: &str = include_str!("../../tests/fixtures/kubernetes/eviction-500-two-pdbs.json");

    fn pods() -> Vec<Pod> {
        serde_json::from_str::<List<Pod>>(PODS).unwrap().items
    }
    fn pdbs() -> Vec<PodDisruptionBudget> {
        serde_json::from_str::<List<PodDisruptionBudget>>(PDBS)
            .unwrap()
            .items
    }
    fn names(w: &Wave) -> Vec<String> {
        w.pods.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn waves_go_by_ascending_priority_user_classes_first() {
        let p = plan(&pods());
        let order: Vec<(Band, i32, Vec<String>)> =
            p.waves.iter().map(|w| (w.band, w.priority, names(w))).collect();
        assert_eq!(
            order,
            vec![
                (
                    Band::User,
                    0,
                    vec!["default/debug".into(), "default/web-7d4b9c8f6d-x2x9k".into()]
                ),
                (Band::User, 1_000_000, vec!["monitoring/prometheus-0".into()]),
                (
                    Band::ClusterCritical,
                    SYSTEM_CLUSTER_CRITICAL,
                    vec!["kube-system/coredns-76f75df574-9hq2m".into()]
                ),
                (
                    Band::NodeCritical,
                    SYSTEM_NODE_CRITICAL,
                    vec!["kube-system/csi-controller-0".into()]
                ),
            ]
        );
    }

    #[test]
    fn daemonset_mirror_and_terminal_pods_stay() {
        let p = plan(&pods());
        let kept: Vec<(String, Keep)> = p.kept.iter().map(|(r, k)| (r.to_string(), k.clone())).collect();
        assert_eq!(
            kept,
            vec![
                (
                    "batch/report-29386020-7vq4d".into(),
                    Keep::Terminal("Succeeded".into())
                ),
                (
                    "default/web-7d4b9c8f6d-pl8zq".into(),
                    Keep::Terminal("Failed".into())
                ),
                ("kube-system/kube-apiserver-cp1".into(), Keep::Mirror),
                (
                    "kube-system/kube-proxy-8xk2p".into(),
                    Keep::DaemonSet("kube-system/kube-proxy".into())
                ),
            ]
        );
        // Nothing is both kept and evicted.
        assert!(p.evictions().all(|e| !p.kept.iter().any(|(k, _)| k == e)));
    }

    #[test]
    fn priority_falls_back_to_the_class_name_without_the_admission_plugin() {
        let mut pod = pods()
            .into_iter()
            .find(|p| p.metadata.name == "coredns-76f75df574-9hq2m")
            .unwrap();
        pod.spec.priority = None;
        assert_eq!(priority(&pod), (Band::ClusterCritical, SYSTEM_CLUSTER_CRITICAL));
        pod.spec.priority_class_name = None;
        assert_eq!(priority(&pod), (Band::User, 0));
        // A user class at the user maximum is still a user class.
        pod.spec.priority = Some(USER_PRIORITY_MAX);
        assert_eq!(priority(&pod).0, Band::User);
    }

    #[test]
    fn budgets_match_namespace_and_selector() {
        let pods = pods();
        let pdbs = pdbs();
        let of = |name: &str| {
            let pod = pods.iter().find(|p| p.metadata.name == name).unwrap();
            budgets_for(pod, &pdbs)
                .iter()
                .map(|b| b.metadata.name.clone())
                .collect::<Vec<_>>()
        };
        // staging/web-canary selects app=web too, but in another namespace.
        assert_eq!(of("web-7d4b9c8f6d-x2x9k"), ["web-pdb"]);
        assert_eq!(of("prometheus-0"), ["prometheus"]);
        assert_eq!(of("coredns-76f75df574-9hq2m"), ["coredns"]);
        assert!(of("debug").is_empty());
        // policy/v1: no selector selects nothing, an empty one everything in the namespace.
        assert!(!selects(None, &Default::default()));
        assert!(selects(Some(&LabelSelector::default()), &Default::default()));
    }

    #[test]
    fn blockers_name_the_pod_and_its_exhausted_budget() {
        let b = blockers(&pods(), &pdbs());
        assert_eq!(
            b,
            ["default/web-7d4b9c8f6d-x2x9k is covered by PodDisruptionBudget default/web-pdb (minAvailable=2; disruptionsAllowed=0, healthy 2 of desired 2, expected 2): its eviction would be answered 429 until another replica is healthy"]
        );
        // Two budgets over one pod: the Eviction API answers 500 for it.
        let mut pdbs = pdbs();
        let mut second = pdbs[0].clone();
        second.metadata.name = "web-pdb-2".into();
        second.status.disruptions_allowed = 1;
        pdbs.push(second);
        let b = blockers(&pods(), &pdbs);
        assert!(
            b[0].contains("covered by 2 PodDisruptionBudgets (default/web-pdb, default/web-pdb-2)"),
            "{b:?}"
        );
    }

    #[test]
    fn eviction_answers_are_read_from_the_status() {
        assert_eq!(eviction_outcome(201, EVICTION_201), Eviction::Accepted);
        assert_eq!(eviction_outcome(404, EVICTION_404), Eviction::Gone);
        assert_eq!(
            eviction_outcome(429, EVICTION_429),
            Eviction::Blocked {
                message: "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web-pdb needs 2 healthy pods and has 2 currently".into(),
                budgets: vec!["web-pdb".into()],
            }
        );
        assert_eq!(
            eviction_outcome(500, EVICTION_500),
            Eviction::Failed {
                code: 500,
                message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into()
            }
        );
        // A body that is not a Status (a proxy's HTML page) still yields a message.
        assert_eq!(
            eviction_outcome(502, "<html>Bad Gateway</html>"),
            Eviction::Failed {
                code: 502,
                message: "<html>Bad Gateway</html>".into()
            }
        );
    }

    #[test]
    fn the_refusal_names_pod_budget_and_what_to_do() {
        let pods = pods();
        let pdbs = pdbs();
        let pod = pods
            .iter()
            .find(|p| p.metadata.name == "web-7d4b9c8f6d-x2x9k")
            .unwrap();
        let Eviction::Blocked { message, budgets } = eviction_outcome(429, EVICTION_429) else {
            panic!()
        };
        let text = blocked_refusal(
            "cp1",
            &PodRef::of(pod),
            &message,
            &budgets_for(pod, &pdbs),
            &budgets,
            Duration::from_secs(1800),
        );
        assert!(
            text.starts_with("refused by PodDisruptionBudget default/web-pdb (minAvailable=2;"),
            "{text}"
        );
        assert!(
            text.contains("pod default/web-7d4b9c8f6d-x2x9k from cp1 was answered 429"),
            "{text}"
        );
        assert!(text.contains("--drain-timeout of 1800s"), "{text}");
        assert!(
            text.contains("needs 2 healthy pods and has 2 currently"),
            "{text}"
        );
        assert!(text.contains("`hactl maintenance complete cp1`"), "{text}");
    }

    #[test]
    fn evicted_pods_are_gone_when_their_uid_is() {
        let pods = pods();
        let p = plan(&pods);
        let evicted: Vec<PodRef> = p.evictions().cloned().collect();
        assert_eq!(still_present(&pods, &evicted).len(), 5);
        // prometheus-0 re-created under the same name: a new uid is a new pod.
        let mut later: Vec<Pod> = pods
            .iter()
            .filter(|p| p.metadata.name != "debug")
            .cloned()
            .collect();
        for p in later.iter_mut().filter(|p| p.metadata.name == "prometheus-0") {
            p.metadata.uid = "new".into();
        }
        let left: Vec<String> = still_present(&later, &evicted)
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(
            left,
            [
                "default/web-7d4b9c8f6d-x2x9k",
                "kube-system/coredns-76f75df574-9hq2m",
                "kube-system/csi-controller-0"
            ]
        );
    }

    #[test]
    fn backoff_grows_to_eight_seconds() {
        let waits: Vec<u64> = (0..6).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 8, 8]);
    }
}
