//! heal's decisions, pure: what heal does follows from what it saw ([`Signals`]), its retry
//! records and the policy. Table-tested below.
//!
//! Invariant: nothing here reads a host or a file.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::etcd::safety::{self, Counts};
use crate::exit;
use crate::inventory::HealSpec;
use crate::operations::remediation::{Record, Records};

/// What heal saw of one member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signals {
    pub member: String,
    /// The peer vantage point (a healthy member host) says unhealthy.
    pub peer_unhealthy: bool,
    /// The operator's vantage point (tunnel) says unhealthy; `None` when not probed.
    pub operator_unhealthy: Option<bool>,
    /// The etcd unit is not active on its host (None: host unreachable).
    pub process_down: Option<bool>,
    /// A fatal identity error line from its journal.
    pub identity_error: Option<String>,
    /// Why, for people.
    pub why: String,
}

impl Signals {
    /// Unhealthy from two vantage points (one is not enough: it may be the observer's partition).
    pub fn failing(&self) -> bool {
        self.peer_unhealthy && self.operator_unhealthy.unwrap_or(false)
    }
    /// KCP's "most broken first": unreachable host > identity error > process down > other.
    fn brokenness(&self) -> u8 {
        if self.process_down.is_none() {
            3
        } else if self.identity_error.is_some() {
            2
        } else if self.process_down == Some(true) {
            1
        } else {
            0
        }
    }
}

/// The Node annotation `hactl.io/remediation-for` for a record: `{retryCount, lastRemediation}`,
/// or `None` when the member was never remediated.
pub fn remediation_annotation(r: &Record) -> Option<String> {
    let last = time::OffsetDateTime::from_unix_timestamp(i64::try_from(r.last_remediation?).ok()?).ok()?;
    Some(
        serde_json::json!({
            "retryCount": r.retry_count,
            "lastRemediation": last.format(&time::format_description::well_known::Rfc3339).ok()?,
        })
        .to_string(),
    )
}

/// The members whose annotation is due (never written, or the record changed since), with the
/// value to write.
pub fn due_annotations(records: &Records) -> Vec<(String, String)> {
    records
        .members
        .iter()
        .filter_map(|(m, r)| {
            let v = remediation_annotation(r)?;
            (r.annotated.as_deref() != Some(v.as_str())).then(|| (m.clone(), v))
        })
        .collect()
}

/// A member whose host has a maintenance record (heal never remediates it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Away {
    pub member: String,
    /// The record's stage, for messages.
    pub stage: String,
    /// Its etcd answers healthy (a `complete` that started it and then failed left the record).
    pub healthy: bool,
    /// Its etcd runs, or could be started by `hactl maintenance complete` (the host answers).
    pub reachable: bool,
}

/// The one thing heal does this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Everything is healthy (or nothing is confirmed unhealthy yet).
    Nothing,
    /// An alert only (cluster-wide condition, or more failures than heal may repair).
    Alert {
        message: String,
        code: i32,
    },
    Restart {
        member: String,
    },
    Replace {
        member: String,
    },
}

/// A decision with its reason, as `--dry-run` and `--watch` print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub reason: String,
}

/// Updates `records` with what was seen at `now` (first-unhealthy times; a member healthy for
/// `minHealthyPeriod` gets its retry count reset).
///
/// A member heal did not look at this round (in maintenance, or no longer a voter) loses its
/// unhealthy-since time: an outage heal did not follow to its end must not carry over into the
/// next one, which starts at its own first observation.
pub fn observe_records(records: &mut Records, signals: &[Signals], policy: &HealSpec, now: u64) {
    for (m, r) in records.members.iter_mut() {
        if !signals.iter().any(|s| &s.member == m) {
            r.first_unhealthy = None;
        }
    }
    for s in signals {
        let r = records.members.entry(s.member.clone()).or_default();
        if s.failing() {
            r.first_unhealthy.get_or_insert(now);
        } else {
            r.first_unhealthy = None;
            let healthy_since = r.last_failure.or(r.last_remediation).unwrap_or(0);
            if r.retry_count > 0 && now.saturating_sub(healthy_since) >= policy.min_healthy_period.as_secs() {
                r.retry_count = 0;
            }
        }
    }
}

/// A restart that made the member healthy ends its outage: the next one starts afresh.
pub fn restarted_ok(records: &mut Records, member: &str) {
    if let Some(r) = records.members.get_mut(member) {
        r.first_unhealthy = None;
    }
}

/// Quorum is lost and completing maintenance brings it back: the alert that says so, naming
/// `hactl maintenance complete HOST` first. `running` counts members outside maintenance whose
/// etcd runs.
pub fn complete_maintenance_first(voters: usize, running: usize, away: &[Away]) -> Option<Action> {
    let stopped: Vec<String> = away
        .iter()
        .filter(|a| a.reachable)
        .map(|a| a.member.clone())
        .collect();
    let hosts = crate::operations::maintenance_record::completing_restores_quorum(voters, running, &stopped)?;
    Some(Action::Alert {
        message: format!(
            "quorum lost: {running} of {voters} members run outside maintenance, {} needed; {}; heal then repairs the member still down (after spec.heal.unhealthyTimeout)",
            safety::quorum(voters),
            crate::operations::maintenance_record::complete_first_advice(&hosts)
        ),
        code: exit::REFUSED,
    })
}

/// Decides the one action of this round (pure). `away` are the members in maintenance: never
/// remediated, counted unhealthy in the budget unless their etcd answers healthy (a record left
/// by a `complete` that failed after starting etcd must not read as a lost quorum while a leader
/// exists).
pub fn decide(
    counts: &Counts,
    signals: &[Signals],
    records: &Records,
    away: &[Away],
    policy: &HealSpec,
    now: u64,
) -> Decision {
    let d = |action, reason: String| Decision { action, reason };
    let healthy_away = away.iter().filter(|a| a.healthy).count();
    let counts = &Counts {
        healthy: counts.healthy + healthy_away,
        in_maintenance: counts.in_maintenance.saturating_sub(healthy_away),
        ..counts.clone()
    };
    if !counts.has_quorum() {
        let running = signals.iter().filter(|s| s.process_down == Some(false)).count() + healthy_away;
        let not_healthy: Vec<Away> = away.iter().filter(|a| !a.healthy).cloned().collect();
        if let Some(action) = complete_maintenance_first(counts.voters, running, &not_healthy) {
            return d(
                action,
                format!(
                    "a maintenance stopped a member that quorum now needs ({})",
                    counts.numbers()
                ),
            );
        }
    }
    if counts.alarms.iter().any(|a| a == "NOSPACE") {
        return d(
            Action::Alert {
                message: "NOSPACE: run hactl etcd maintenance --compact --defrag --disarm".into(),
                code: exit::DEGRADED,
            },
            format!(
                "the NOSPACE alarm is cluster-wide, not a member failure: no membership change ({})",
                counts.numbers()
            ),
        );
    }
    let one_vantage: Vec<&Signals> = signals
        .iter()
        .filter(|s| s.peer_unhealthy != s.operator_unhealthy.unwrap_or(false))
        .collect();
    let failing: Vec<&Signals> = signals.iter().filter(|s| s.failing()).collect();
    if failing.is_empty() {
        let mut reason = format!(
            "every member healthy from both vantage points ({})",
            counts.numbers()
        );
        if !one_vantage.is_empty() {
            let names: Vec<&str> = one_vantage.iter().map(|s| s.member.as_str()).collect();
            reason = format!(
                "{} unhealthy from one vantage point only: not acted on (a partition of one observer must not trigger a repair)",
                names.join(", ")
            );
        }
        return d(Action::Nothing, reason);
    }
    let confirmed: Vec<&Signals> = failing
        .iter()
        .copied()
        .filter(|s| {
            let since = records
                .members
                .get(&s.member)
                .and_then(|r| r.first_unhealthy)
                .unwrap_or(now);
            now.saturating_sub(since) >= policy.unhealthy_timeout.as_secs()
        })
        .collect();
    if confirmed.is_empty() {
        let s = failing[0];
        let since = records
            .members
            .get(&s.member)
            .and_then(|r| r.first_unhealthy)
            .unwrap_or(now);
        return d(
            Action::Nothing,
            format!(
                "{} unhealthy for {}s of the {}s unhealthyTimeout ({}): waiting",
                s.member,
                now.saturating_sub(since),
                policy.unhealthy_timeout.as_secs(),
                s.why
            ),
        );
    }
    if let safety::Decision::Refused(r) = safety::r_heal(counts, policy.max_unhealthy) {
        return d(
            Action::Alert {
                message: r.to_string(),
                code: exit::REFUSED,
            },
            "automatic repair is outside the safety budget".into(),
        );
    }
    let mut ordered = confirmed.clone();
    ordered.sort_by(|a, b| b.brokenness().cmp(&a.brokenness()).then(a.member.cmp(&b.member)));
    let target = ordered[0];
    let rec = records.members.get(&target.member).cloned().unwrap_or_default();
    let within =
        |t: Option<u64>, period: Duration| t.is_some_and(|t| now.saturating_sub(t) < period.as_secs());
    if rec.retry_count >= policy.max_retry && within(rec.last_failure, policy.min_healthy_period) {
        return d(
            Action::Alert {
                message: format!(
                    "refused by retry-limit: {} failed {} remediation(s) within minHealthyPeriod={}s (maxRetry={}); last error: {}; instead: find the cause on the host first, then delete its entry in heal.json (or wait for minHealthyPeriod to pass) and run `hactl replace {} --reuse-host` (replace refuses at the same limit)",
                    target.member,
                    rec.retry_count,
                    policy.min_healthy_period.as_secs(),
                    policy.max_retry,
                    rec.last_error,
                    target.member
                ),
                code: exit::REFUSED,
            },
            "loop protection".into(),
        );
    }
    if within(rec.last_remediation, policy.retry_period) {
        return d(
            Action::Nothing,
            format!(
                "{} was repaired less than retryPeriod={}s ago: waiting before another attempt",
                target.member,
                policy.retry_period.as_secs()
            ),
        );
    }
    if let Some(line) = &target.identity_error {
        return d(
            Action::Replace {
                member: target.member.clone(),
            },
            format!(
                "{}: its data dir is unusable (journal: {}); a restart cannot help, replacing on its own host",
                target.member,
                line.trim()
            ),
        );
    }
    if target.process_down.is_none() {
        return d(
            Action::Alert {
                message: format!(
                    "{} is unhealthy and its host is unreachable: fence it (power it off), then `hactl replace {} --host SPARE --confirm-dead {}`",
                    target.member, target.member, target.member
                ),
                code: exit::NEEDS_INPUT,
            },
            "a member on an unreachable host cannot be restarted or re-created in place".into(),
        );
    }
    if !within(rec.last_restart, policy.retry_period) {
        return d(
            Action::Restart {
                member: target.member.clone(),
            },
            format!(
                "{} unhealthy ({}); first rung of the ladder: restart etcd",
                target.member, target.why
            ),
        );
    }
    d(
        Action::Replace {
            member: target.member.clone(),
        },
        format!(
            "{} still unhealthy after a restart within retryPeriod ({}): replacing on its own host",
            target.member, target.why
        ),
    )
}

#[allow(dead_code)]
fn _names(s: &[Signals]) -> BTreeSet<&str> {
    s.iter().map(|x| x.member.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HealSpec {
        HealSpec {
            unhealthy_timeout: Duration::from_secs(60),
            ..HealSpec::default()
        }
    }

    fn sig(member: &str, peer: bool, op: bool) -> Signals {
        Signals {
            member: member.into(),
            peer_unhealthy: peer,
            operator_unhealthy: Some(op),
            process_down: Some(peer),
            identity_error: None,
            why: "context deadline exceeded".into(),
        }
    }

    fn three_one_down() -> Counts {
        Counts {
            healthy: 2,
            ..Counts::healthy(3)
        }
    }

    #[test]
    fn the_node_annotation_carries_retry_count_and_last_remediation() {
        assert_eq!(remediation_annotation(&Record::default()), None);
        let r = Record {
            retry_count: 2,
            last_remediation: Some(1_795_323_600),
            last_failure: Some(1_795_323_600),
            ..Record::default()
        };
        assert_eq!(
            remediation_annotation(&r).unwrap(),
            r#"{"lastRemediation":"2026-11-22T05:00:00Z","retryCount":2}"#
        );
    }

    #[test]
    fn an_annotation_is_due_once_per_change() {
        let mut records = Records::default();
        records.members.insert("cp1".into(), Record::default());
        assert!(due_annotations(&records).is_empty(), "never remediated");
        let r = records.members.get_mut("cp1").unwrap();
        r.retry_count = 1;
        r.last_remediation = Some(1_795_323_600);
        let due = due_annotations(&records);
        assert_eq!(due.len(), 1);
        records.members.get_mut("cp1").unwrap().annotated = Some(due[0].1.clone());
        assert!(due_annotations(&records).is_empty(), "written already");
        // A replace that failed again (record_failure) makes it due again.
        records.members.get_mut("cp1").unwrap().retry_count = 2;
        assert_eq!(
            due_annotations(&records),
            [(
                "cp1".to_string(),
                r#"{"lastRemediation":"2026-11-22T05:00:00Z","retryCount":2}"#.to_string()
            )]
        );
    }

    #[test]
    fn one_vantage_point_is_not_enough() {
        let s = [sig("cp1", false, false), sig("cp3", true, false)];
        let d = decide(&Counts::healthy(3), &s, &Records::default(), &[], &policy(), 1000);
        assert_eq!(d.action, Action::Nothing);
        assert!(d.reason.contains("one vantage point"), "{}", d.reason);
    }

    #[test]
    fn waits_for_the_unhealthy_timeout_then_restarts_then_replaces() {
        let s = [sig("cp1", false, false), sig("cp3", true, true)];
        let mut rec = Records::default();
        observe_records(&mut rec, &s, &policy(), 1000);
        let d = decide(&three_one_down(), &s, &rec, &[], &policy(), 1030);
        assert_eq!(d.action, Action::Nothing, "{}", d.reason);
        let d = decide(&three_one_down(), &s, &rec, &[], &policy(), 1061);
        assert_eq!(d.action, Action::Restart { member: "cp3".into() });
        rec.members.get_mut("cp3").unwrap().last_restart = Some(1061);
        let d = decide(&three_one_down(), &s, &rec, &[], &policy(), 1200);
        assert_eq!(d.action, Action::Replace { member: "cp3".into() });
    }

    #[test]
    fn an_identity_error_goes_straight_to_replace() {
        let mut s = sig("cp3", true, true);
        s.identity_error = Some("member 921b590400393280 has already been bootstrapped".into());
        let p = HealSpec {
            unhealthy_timeout: Duration::ZERO,
            ..HealSpec::default()
        };
        let d = decide(&three_one_down(), &[s], &Records::default(), &[], &p, 5);
        assert_eq!(d.action, Action::Replace { member: "cp3".into() });
        assert!(d.reason.contains("already been bootstrapped"));
    }

    #[test]
    fn nospace_is_an_alert_never_a_replacement() {
        let c = Counts {
            alarms: vec!["NOSPACE".into()],
            ..Counts::healthy(3)
        };
        let d = decide(
            &c,
            &[sig("cp3", true, true)],
            &Records::default(),
            &[],
            &HealSpec::default(),
            0,
        );
        match d.action {
            Action::Alert { message, .. } => {
                assert_eq!(
                    message,
                    "NOSPACE: run hactl etcd maintenance --compact --defrag --disarm"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn two_of_three_down_is_refused_as_quorum_lost() {
        let c = Counts {
            healthy: 1,
            ..Counts::healthy(3)
        };
        let p = HealSpec {
            unhealthy_timeout: Duration::ZERO,
            ..HealSpec::default()
        };
        let s = [sig("cp2", true, true), sig("cp3", true, true)];
        let d = decide(&c, &s, &Records::default(), &[], &p, 0);
        match d.action {
            Action::Alert { message, code } => {
                assert_eq!(code, exit::REFUSED);
                assert!(message.contains("quorum lost"), "{message}");
                assert!(message.contains("hactl recover"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn most_broken_first_and_retry_limit() {
        let p = HealSpec {
            unhealthy_timeout: Duration::ZERO,
            max_unhealthy: 2,
            ..HealSpec::default()
        };
        let c = Counts {
            healthy: 3,
            ..Counts::healthy(5)
        };
        let mut a = sig("cp2", true, true);
        a.process_down = Some(false);
        let mut b = sig("cp4", true, true);
        b.identity_error = Some("tocommit(16) is out of range".into());
        let d = decide(&c, &[a.clone(), b.clone()], &Records::default(), &[], &p, 0);
        assert_eq!(d.action, Action::Replace { member: "cp4".into() });
        let mut rec = Records::default();
        rec.members.insert(
            "cp4".into(),
            Record {
                retry_count: 3,
                last_failure: Some(100),
                ..Record::default()
            },
        );
        let d = decide(&c, &[a, b], &rec, &[], &p, 200);
        match d.action {
            Action::Alert { message, code } => {
                assert_eq!(code, exit::REFUSED);
                assert!(message.contains("retry-limit"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    fn away(member: &str, healthy: bool) -> Away {
        Away {
            member: member.into(),
            stage: "StopControlPlane".into(),
            healthy,
            reachable: true,
        }
    }

    #[test]
    fn quorum_lost_with_a_member_in_maintenance_names_maintenance_complete_first() {
        // maintenance start cp1, then a power cut of cp2: cp3 runs alone, no leader.
        let c = Counts {
            healthy: 0,
            in_maintenance: 1,
            ..Counts::healthy(3)
        };
        let mut cp2 = sig("cp2", true, true);
        cp2.process_down = None;
        let mut cp3 = sig("cp3", true, true);
        cp3.process_down = Some(false);
        let p = HealSpec {
            unhealthy_timeout: Duration::ZERO,
            ..HealSpec::default()
        };
        let d = decide(&c, &[cp2, cp3], &Records::default(), &[away("cp1", false)], &p, 0);
        match d.action {
            Action::Alert { message, code } => {
                assert_eq!(code, exit::REFUSED);
                assert!(
                    message.contains("`hactl maintenance complete cp1` first"),
                    "{message}"
                );
                assert!(!message.contains("hactl up"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_healthy_member_left_in_maintenance_is_not_counted_down_while_a_leader_exists() {
        // complete started etcd on cp1, then failed: the record still says StopControlPlane, but
        // cp1 and cp3 make quorum. cp2 is dead.
        let c = Counts {
            healthy: 1,
            in_maintenance: 1,
            foreign_operation: Some("maintenance of cp1 (stage StopControlPlane)".into()),
            ..Counts::healthy(3)
        };
        let mut cp2 = sig("cp2", true, true);
        cp2.process_down = None;
        let p = HealSpec {
            unhealthy_timeout: Duration::ZERO,
            ..HealSpec::default()
        };
        let d = decide(&c, &[cp2], &Records::default(), &[away("cp1", true)], &p, 0);
        match d.action {
            Action::Alert { message, .. } => {
                assert!(!message.contains("quorum lost"), "{message}");
                assert!(message.contains("H=2"), "{message}");
                assert!(message.contains("maintenance complete"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // Without the record's member counted healthy, the same round read as quorum lost.
        let d = decide(
            &c,
            &[sig("cp2", true, true)],
            &Records::default(),
            &[away("cp1", false)],
            &p,
            0,
        );
        assert!(matches!(d.action, Action::Alert { ref message, .. } if message.contains("quorum lost")));
    }

    #[test]
    fn a_new_outage_starts_its_own_unhealthy_timeout() {
        let p = HealSpec {
            unhealthy_timeout: Duration::from_secs(10),
            ..HealSpec::default()
        };
        let down = [sig("cp1", false, false), sig("cp2", true, true)];
        let mut rec = Records::default();
        // Outage 1, seen at 1000; then cp2 went into maintenance (heal does not look at it) and
        // came back healthy without a heal round in between.
        observe_records(&mut rec, &down, &p, 1000);
        observe_records(&mut rec, &[sig("cp1", false, false)], &p, 1100);
        // Outage 2 starts at 1200: 5 s later heal still waits.
        observe_records(&mut rec, &down, &p, 1200);
        let d = decide(&three_one_down(), &down, &rec, &[], &p, 1205);
        assert_eq!(d.action, Action::Nothing, "{}", d.reason);
        assert!(d.reason.contains("5s of the 10s"), "{}", d.reason);
        // A restart that helped ends outage 2; outage 3 waits its own 10 s.
        restarted_ok(&mut rec, "cp2");
        observe_records(&mut rec, &down, &p, 1300);
        let d = decide(&three_one_down(), &down, &rec, &[], &p, 1305);
        assert_eq!(d.action, Action::Nothing, "{}", d.reason);
        let d = decide(&three_one_down(), &down, &rec, &[], &p, 1311);
        assert_eq!(d.action, Action::Restart { member: "cp2".into() });
    }
}
