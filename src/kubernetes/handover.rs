//! Lease handover when a control-plane host leaves service (maintenance's StopControlPlane): the
//! Leases the host holds are read before its kube-scheduler and kube-controller-manager stop, and
//! after they stop hactl waits until another host holds each one, before the host's apiserver
//! (which the other hosts' controllers do not need, but clients of the VIP do) goes too.
//!
//! Without a release on shutdown, a Lease moves only when it expires: client-go acquires after
//! `observedTime + leaseDuration` and retries every `retryPeriod` (15 s and 2 s by default, from
//! component-base's leader-election defaults), so the wait is bounded by the Lease's own duration
//! plus the retry period, with slack for the apiserver round trips.
//!
//! Invariant: read-only against the API (GET of two Leases).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::api::{ApiClient, ApiError};
use super::lease::{Lease, LEASES};

/// The host part of a holder identity (`cp1_5b0c…` → `cp1`; a domain is dropped).
pub fn holder_host(identity: &str) -> &str {
    let hostname = identity.split('_').next().unwrap_or(identity);
    hostname.split('.').next().unwrap_or(hostname)
}

/// One Lease as read: name (`kube-system/kube-scheduler`), holder host, transitions, duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub name: String,
    pub holder: String,
    pub transitions: i64,
    pub duration_seconds: i64,
}

/// Reads both Leases; a Lease that does not exist yet is left out.
pub async fn read(api: &ApiClient) -> Result<Vec<Held>, ApiError> {
    let mut out = Vec::new();
    for (name, _) in LEASES {
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}");
        let (code, body) = api.request(reqwest::Method::GET, &path, "", None).await?;
        if code == 404 {
            continue;
        }
        let lease: Lease = serde_json::from_str(&body).map_err(|source| ApiError::Decode {
            what: format!("GET {path}"),
            source,
        })?;
        out.push(Held {
            name: format!("kube-system/{name}"),
            holder: holder_host(lease.spec.holder_identity.as_deref().unwrap_or("")).to_string(),
            transitions: lease.spec.lease_transitions.unwrap_or(0),
            duration_seconds: lease.spec.lease_duration_seconds.unwrap_or(15),
        });
    }
    Ok(out)
}

/// The Leases `host` holds among `leases`.
pub fn held_by<'a>(leases: &'a [Held], host: &str) -> Vec<&'a Held> {
    leases.iter().filter(|l| l.holder == host).collect()
}

/// How long to wait for `held` to move: the longest Lease duration, the 2 s retry period, and
/// 10 s for the round trips.
pub fn deadline(held: &[&Held]) -> Duration {
    let longest = held.iter().map(|l| l.duration_seconds).max().unwrap_or(15).max(1);
    Duration::from_secs(longest as u64 + 2 + 10)
}

/// Which of `before` (Leases `from` held) have not moved in `now`: still on `from`, or nobody.
pub fn not_moved(before: &[&Held], now: &[Held], from: &str) -> Vec<String> {
    before
        .iter()
        .filter(|b| {
            now.iter()
                .find(|n| n.name == b.name)
                .is_none_or(|n| n.holder.is_empty() || n.holder == from)
        })
        .map(|b| b.name.clone())
        .collect()
}

/// Waits until every Lease of `before` is held by a host other than `from`; returns Lease →
/// new holder, or what still had not moved at the deadline.
pub async fn wait_moved(
    api: &ApiClient,
    before: &[&Held],
    from: &str,
) -> Result<BTreeMap<String, String>, String> {
    let limit = deadline(before);
    let started = Instant::now();
    loop {
        let now = read(api).await;
        if let Ok(now) = &now {
            if not_moved(before, now, from).is_empty() {
                return Ok(before
                    .iter()
                    .filter_map(|b| now.iter().find(|n| n.name == b.name))
                    .map(|n| (n.name.clone(), n.holder.clone()))
                    .collect());
            }
        }
        if started.elapsed() > limit {
            let what = match now {
                Ok(now) => format!("still not moved: {}", not_moved(before, &now, from).join(", ")),
                Err(e) => format!("the Leases cannot be read: {:#}", anyhow::Error::from(e)),
            };
            return Err(format!(
                "the Leases {from} held did not move to another host within {} s ({what})",
                limit.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(name: &str, holder: &str) -> Held {
        Held {
            name: name.into(),
            holder: holder.into(),
            transitions: 0,
            duration_seconds: 15,
        }
    }

    #[test]
    fn a_lease_moved_when_another_host_holds_it() {
        let before = [
            held("kube-system/kube-scheduler", "cp1"),
            held("kube-system/kube-controller-manager", "cp1"),
        ];
        let before: Vec<&Held> = before.iter().collect();
        let now = [
            held("kube-system/kube-scheduler", "cp2"),
            held("kube-system/kube-controller-manager", "cp1"),
        ];
        assert_eq!(
            not_moved(&before, &now, "cp1"),
            ["kube-system/kube-controller-manager"]
        );
        let now = [
            held("kube-system/kube-scheduler", "cp2"),
            held("kube-system/kube-controller-manager", ""),
        ];
        assert_eq!(
            not_moved(&before, &now, "cp1"),
            ["kube-system/kube-controller-manager"],
            "nobody holding it is not a handover"
        );
        let now = [
            held("kube-system/kube-scheduler", "cp2"),
            held("kube-system/kube-controller-manager", "cp3"),
        ];
        assert!(not_moved(&before, &now, "cp1").is_empty());
        assert_eq!(deadline(&before), Duration::from_secs(27));
    }

    #[test]
    fn holder_identities_name_the_host() {
        assert_eq!(holder_host("cp1_5b0c1d2e-aaaa"), "cp1");
        assert_eq!(holder_host("cp2.lab.example_x"), "cp2");
        assert_eq!(holder_host(""), "");
    }
}
