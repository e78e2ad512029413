//! Leader-election Leases of kube-controller-manager and kube-scheduler: who holds them, how fresh
//! the holder's renewal is, and whether the holder is a healthy control-plane host.
//!
//! Invariant: pure (the JSON is read elsewhere, by `status`), so it is tested on recorded Leases.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Component;

/// The Leases hactl reports, in `kube-system`.
pub const LEASES: [(&str, Component); 2] = [
    ("kube-controller-manager", Component::ControllerManager),
    ("kube-scheduler", Component::Scheduler),
];

/// The part of a `coordination.k8s.io/v1` Lease that matters here.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Lease {
    pub metadata: LeaseMeta,
    #[serde(default)]
    pub spec: LeaseSpec,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct LeaseMeta {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    pub holder_identity: Option<String>,
    pub lease_duration_seconds: Option<i64>,
    /// RFC 3339 with microseconds (`MicroTime`).
    pub renew_time: Option<String>,
    pub acquire_time: Option<String>,
    pub lease_transitions: Option<i64>,
}

/// What `status` knows about one control-plane host's components.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostComponents {
    pub host: String,
    /// Component → unit (or pod) running and its health endpoint answering.
    pub apiserver: bool,
    pub controller_manager: bool,
    pub scheduler: bool,
}

impl HostComponents {
    /// Whether the holder of `component`'s Lease on this host can do its job: the component
    /// itself and the local apiserver it talks to are healthy.
    pub fn can_lead(&self, component: Component) -> bool {
        self.apiserver
            && match component {
                Component::ControllerManager => self.controller_manager,
                Component::Scheduler => self.scheduler,
                Component::ApiServer => true,
            }
    }
}

/// One Lease in `hactl status`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRow {
    /// `kube-system/kube-scheduler`.
    pub name: String,
    /// The holder identity as written (`cp1_5b0c…`); empty (`null`) when nobody holds it.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub holder: String,
    /// The inventory host the holder runs on, when it is one (else `null`).
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub holder_host: String,
    /// Empty (`null`) when the Lease was never renewed.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub renew_time: String,
    /// Seconds since the last renewal (negative: the holder's clock is ahead).
    /// 0 (`null`) when the Lease was never renewed.
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub age_seconds: f64,
    /// 0 (`null`) when the Lease names no duration.
    #[serde(serialize_with = "crate::output::zero_as_null")]
    pub lease_duration_seconds: i64,
    pub transitions: i64,
    /// Why this Lease is a problem; empty when it is fine.
    pub problems: Vec<String>,
}

/// The inventory host a holder identity names. controller-manager and scheduler write
/// `<hostname>_<uuid>`; the hostname may carry a domain.
pub fn holder_host<'a>(identity: &str, hosts: &'a [HostComponents]) -> Option<&'a HostComponents> {
    let hostname = identity.split('_').next().unwrap_or(identity);
    let short = hostname.split('.').next().unwrap_or(hostname);
    hosts.iter().find(|h| h.host == hostname || h.host == short)
}

/// How long past its duration a Lease may go unrenewed before `status` calls its holder stopped:
/// once it expires, client-go's candidates try every retry period (2 s for the controller-manager
/// and scheduler, with up to 20 % jitter), and the one that wins writes the Lease; a normal
/// handover (a holder that restarted and lost its Lease) was seen at 17 s of a 15 s Lease.
pub const HANDOVER_GRACE_SECONDS: i64 = 5;

/// Judges one Lease at `now` against the hosts' health.
pub fn evaluate(
    lease: &Lease,
    component: Component,
    now: OffsetDateTime,
    hosts: &[HostComponents],
) -> LeaseRow {
    let name = format!(
        "{}/{}",
        if lease.metadata.namespace.is_empty() {
            "kube-system"
        } else {
            &lease.metadata.namespace
        },
        lease.metadata.name
    );
    let spec = &lease.spec;
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let duration = spec.lease_duration_seconds.unwrap_or(0);
    let renew = spec
        .renew_time
        .as_deref()
        .and_then(|t| OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok());
    let age = renew.map(|r| (now - r).as_seconds_f64());
    let mut problems = Vec::new();
    let host = holder_host(&holder, hosts);
    if holder.is_empty() {
        problems.push(format!("{name} has no holder: no {} leads", component.binary()));
    } else {
        match host {
            None => problems.push(format!(
                "{name} is held by {holder}, which is not a control-plane host of the inventory"
            )),
            Some(h) if !h.can_lead(component) => problems.push(format!(
                "{name} is held by {} ({holder}), whose {} or local apiserver is not healthy: the other control-plane hosts take over once the Lease expires; if they do not, check them",
                h.host,
                component.binary()
            )),
            Some(_) => {}
        }
        match age {
            None => problems.push(format!("{name} has no readable renewTime")),
            Some(age) if duration > 0 && age > (duration + HANDOVER_GRACE_SECONDS) as f64 => problems.push(format!(
                "{name} was last renewed {age:.0}s ago, longer than its {duration}s duration: its holder {holder} has stopped renewing"
            )),
            _ => {}
        }
    }
    LeaseRow {
        name,
        holder,
        holder_host: host.map(|h| h.host.clone()).unwrap_or_default(),
        renew_time: spec.renew_time.clone().unwrap_or_default(),
        age_seconds: age.unwrap_or(0.0),
        lease_duration_seconds: duration,
        transitions: spec.lease_transitions.unwrap_or(0),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `kubectl get lease -n kube-system kube-scheduler -o json` prints it (trimmed of
    /// managedFields), recorded from a kubeadm cluster.
    const SCHEDULER: &str = r#"{
  "apiVersion": "coordination.k8s.io/v1",
  "kind": "Lease",
  "metadata": {
    "creationTimestamp": "2024-11-20T09:12:44Z",
    "name": "kube-scheduler",
    "namespace": "kube-system",
    "resourceVersion": "481233",
    "uid": "2f0b8a57-4f8c-4c3e-9a2c-6f6f2a6d1b11"
  },
  "spec": {
    "acquireTime": "2024-11-21T16:40:02.118533Z",
    "holderIdentity": "cp2_0d1f6c3e-41c2-4f2e-8f55-6b1a3c9e2d40",
    "leaseDurationSeconds": 15,
    "leaseTransitions": 3,
    "renewTime": "2024-11-22T10:00:01.250111Z"
  }
}"#;

    const UNHELD: &str = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"kube-controller-manager","namespace":"kube-system"},"spec":{"leaseDurationSeconds":15,"leaseTransitions":4}}"#;

    fn hosts() -> Vec<HostComponents> {
        ["cp1", "cp2", "cp3"]
            .iter()
            .map(|h| HostComponents {
                host: h.to_string(),
                apiserver: true,
                controller_manager: true,
                scheduler: true,
            })
            .collect()
    }

    fn at(s: &str) -> OffsetDateTime {
        OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).unwrap()
    }

    #[test]
    fn a_fresh_lease_on_a_healthy_host_is_fine() {
        let lease: Lease = serde_json::from_str(SCHEDULER).unwrap();
        let row = evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:05Z"), &hosts());
        assert_eq!(row.name, "kube-system/kube-scheduler");
        assert_eq!(row.holder_host, "cp2");
        assert_eq!(row.lease_duration_seconds, 15);
        assert_eq!(row.transitions, 3);
        assert!((row.age_seconds - 3.749889).abs() < 1e-3, "{}", row.age_seconds);
        assert!(row.problems.is_empty(), "{:?}", row.problems);
    }

    #[test]
    fn a_stale_renewal_is_a_problem() {
        let lease: Lease = serde_json::from_str(SCHEDULER).unwrap();
        let row = evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:31Z"), &hosts());
        assert_eq!(row.problems, ["kube-system/kube-scheduler was last renewed 30s ago, longer than its 15s duration: its holder cp2_0d1f6c3e-41c2-4f2e-8f55-6b1a3c9e2d40 has stopped renewing"]);
    }

    #[test]
    fn a_lease_changing_hands_just_past_its_duration_is_not_yet_a_problem() {
        let lease: Lease = serde_json::from_str(SCHEDULER).unwrap();
        let row = evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:18Z"), &hosts());
        assert!(row.problems.is_empty(), "{:?}", row.problems);
        let row = evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:22Z"), &hosts());
        assert_eq!(row.problems.len(), 1, "{:?}", row.problems);
        assert!(row.problems[0].contains("renewed 21s ago"), "{:?}", row.problems);
    }

    #[test]
    fn a_holder_on_an_unhealthy_host_is_a_problem() {
        let lease: Lease = serde_json::from_str(SCHEDULER).unwrap();
        let mut hosts = hosts();
        hosts[1].scheduler = false;
        let row = evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:05Z"), &hosts);
        assert_eq!(row.problems.len(), 1);
        assert!(
            row.problems[0].starts_with("kube-system/kube-scheduler is held by cp2 (cp2_0d1f"),
            "{:?}",
            row.problems
        );
        // Its local apiserver down is as bad: the scheduler talks only to it.
        let mut hosts2 = self::hosts();
        hosts2[1].apiserver = false;
        assert_eq!(
            evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:05Z"), &hosts2)
                .problems
                .len(),
            1
        );
        // The controller-manager on cp2 being down says nothing about the scheduler's Lease.
        let mut hosts3 = self::hosts();
        hosts3[1].controller_manager = false;
        assert!(
            evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:05Z"), &hosts3)
                .problems
                .is_empty()
        );
    }

    #[test]
    fn no_holder_and_unknown_holders_are_problems() {
        let lease: Lease = serde_json::from_str(UNHELD).unwrap();
        let row = evaluate(
            &lease,
            Component::ControllerManager,
            at("2024-11-22T10:00:05Z"),
            &hosts(),
        );
        assert_eq!(
            row.problems,
            ["kube-system/kube-controller-manager has no holder: no kube-controller-manager leads"]
        );
        let mut lease: Lease = serde_json::from_str(SCHEDULER).unwrap();
        lease.spec.holder_identity = Some("laptop_1234".into());
        let row = evaluate(&lease, Component::Scheduler, at("2024-11-22T10:00:05Z"), &hosts());
        assert_eq!(row.problems, ["kube-system/kube-scheduler is held by laptop_1234, which is not a control-plane host of the inventory"]);
    }

    #[test]
    fn holder_names_may_carry_a_domain() {
        let hosts = hosts();
        assert_eq!(
            holder_host("cp3.example.com_abc", &hosts).map(|h| h.host.as_str()),
            Some("cp3")
        );
        assert_eq!(holder_host("cp4_abc", &hosts), None);
    }
}
