//! maintenance's decisions, pure: whether `start` may begin (the host's record, its reach, the
//! concurrency bound, R-maint), `plan`'s verdict, and what `complete` advises for a member still
//! down. Table-tested below.
//!
//! Invariant: no I/O; every refusal names its rule, what it saw and what to run instead.

use std::collections::BTreeSet;

use crate::etcd::safety::{self, Counts};
use crate::exit::{self, Refusal};
use crate::operations::maintenance_record::{MaintenanceRecord, Stage};

/// What [`start`] needs.
pub struct StartInputs<'a> {
    pub host: &'a str,
    /// The host's record, if any.
    pub record: Option<&'a MaintenanceRecord>,
    /// Why the host does not answer over SSH, if it does not.
    pub unreachable: Option<&'a str>,
    /// Other hosts in maintenance now.
    pub others: &'a BTreeSet<String>,
    pub max_unavailable: usize,
    /// The budget as this host's maintenance sees it (others in maintenance count as unhealthy).
    pub counts: &'a Counts,
}

fn refused(code: i32, message: String) -> Refusal {
    Refusal { code, message }
}

/// maxUnavailable is the number of hosts in maintenance at once (default 1, KEP-4212's
/// concurrency): R-maint's budget bounds how many *more* members may stop, and this bounds how
/// many hosts are out together, counting those already in maintenance.
pub fn over_concurrency(
    others: &BTreeSet<String>,
    max_unavailable: usize,
    counts: &Counts,
) -> Option<String> {
    (others.len() + 1 > max_unavailable).then(|| {
        format!(
            "refused by R-maint: {} already in maintenance ({}) and maxUnavailable={max_unavailable} host(s) at once ({}); finish it first (`hactl maintenance complete HOST`), or allow {} with --max-unavailable {} where the budget permits",
            others.len(),
            others.iter().cloned().collect::<Vec<_>>().join(", "),
            counts.numbers(),
            others.len() + 1,
            others.len() + 1
        )
    })
}

/// The gate at entry to Cordon: [`entry`], then [`budget`].
pub fn start(i: &StartInputs<'_>) -> Result<(), Refusal> {
    entry(i.host, i.record, i.unreachable)?;
    budget(i.others, i.max_unavailable, i.counts)
}

/// What is refused before the cluster is asked: a host already in maintenance, or one that does
/// not answer.
pub fn entry(
    host: &str,
    record: Option<&MaintenanceRecord>,
    unreachable: Option<&str>,
) -> Result<(), Refusal> {
    if let Some(r) = record.filter(|r| r.stage != Stage::Complete) {
        return Err(refused(
            exit::REFUSED,
            format!(
                "{host} is already in maintenance (stage {}, since {}): run `hactl maintenance complete {host}` first",
                r.stage, r.since
            ),
        ));
    }
    if let Some(why) = unreachable {
        return Err(refused(exit::FAILED, format!("cannot reach {host}: {why}")));
    }
    Ok(())
}

/// Within the concurrency bound, and R-maint allows one more member to stop.
pub fn budget(others: &BTreeSet<String>, max_unavailable: usize, counts: &Counts) -> Result<(), Refusal> {
    if let Some(why) = over_concurrency(others, max_unavailable, counts) {
        return Err(refused(exit::REFUSED, why));
    }
    if let safety::Decision::Refused(r) = safety::r_maint(counts, 1, max_unavailable) {
        return Err(refused(exit::REFUSED, r.to_string()));
    }
    Ok(())
}

/// `plan`'s verdict and exit code: R-maint's decision, unless the API Cordon and Drain need did
/// not answer.
pub fn verdict(decision: &safety::Decision, blocked_by_kube: bool, counts: &Counts) -> (String, i32) {
    match decision {
        safety::Decision::Allowed if blocked_by_kube => (
            "blocked: the Kubernetes API is needed for Cordon and Drain".to_string(),
            exit::FAILED,
        ),
        safety::Decision::Allowed => (
            format!("allowed; budget after start: B = {}", counts.budget() - 1),
            exit::OK,
        ),
        safety::Decision::Refused(r) => (r.to_string(), exit::REFUSED),
    }
}

/// The line complete prints for a member that is still down.
pub fn still_down_advice(member: &str, why: &str, unreachable: bool) -> String {
    if unreachable {
        format!(
            "still down: {member} ({why}; its host does not answer). Next: `hactl heal --once` repairs it on its own host once it is back and unhealthy for spec.heal.unhealthyTimeout; if the host is gone, power it off and `hactl replace {member} --host SPARE --confirm-dead {member}`"
        )
    } else {
        format!(
            "still down: {member} ({why}). Next: `hactl heal --once` restarts or replaces it once it has been unhealthy for spec.heal.unhealthyTimeout (or `hactl replace {member} --reuse-host` now)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(stage: Stage) -> MaintenanceRecord {
        MaintenanceRecord {
            host: "cp1".into(),
            stage,
            since: "t".into(),
            reason: String::new(),
            stopped: vec![],
        }
    }

    #[test]
    fn start_is_gated_by_the_record_the_reach_the_concurrency_and_r_maint() {
        let three = Counts::healthy(3);
        let mut two_of_three = Counts::healthy(3);
        two_of_three.healthy = 2;
        let five = Counts::healthy(5);
        let none = BTreeSet::new();
        let cp2: BTreeSet<String> = ["cp2".to_string()].into();
        let drain = record(Stage::Drain);
        let done = record(Stage::Complete);
        // (record, unreachable, others, maxUnavailable, counts, Ok or a word of the refusal and its code)
        type Case<'a> = (
            Option<&'a MaintenanceRecord>,
            Option<&'a str>,
            &'a BTreeSet<String>,
            usize,
            &'a Counts,
            Result<(), (&'a str, i32)>,
        );
        let cases: Vec<Case> = vec![
            (None, None, &none, 1, &three, Ok(())),
            (Some(&done), None, &none, 1, &three, Ok(())),
            (
                Some(&drain),
                None,
                &none,
                1,
                &three,
                Err(("already in maintenance (stage Drain", exit::REFUSED)),
            ),
            (
                None,
                Some("timed out"),
                &none,
                1,
                &three,
                Err(("cannot reach cp1: timed out", exit::FAILED)),
            ),
            // Another host out and maxUnavailable 1: the concurrency bound.
            (
                None,
                None,
                &cp2,
                1,
                &five,
                Err(("--max-unavailable 2", exit::REFUSED)),
            ),
            (None, None, &cp2, 2, &five, Ok(())),
            // One of three already down: B = 0, R-maint refuses.
            (
                None,
                None,
                &none,
                1,
                &two_of_three,
                Err(("R-maint", exit::REFUSED)),
            ),
        ];
        for (n, (rec, unreachable, others, max, counts, want)) in cases.into_iter().enumerate() {
            let got = start(&StartInputs {
                host: "cp1",
                record: rec,
                unreachable,
                others,
                max_unavailable: max,
                counts,
            });
            match (got, want) {
                (Ok(()), Ok(())) => {}
                (Err(r), Err((word, code))) => {
                    assert_eq!(r.code, code, "case {n}: {}", r.message);
                    assert!(r.message.contains(word), "case {n}: {}", r.message);
                }
                (got, want) => panic!("case {n}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_plan_verdict_follows_r_maint_unless_the_api_is_missing() {
        let c = Counts::healthy(3);
        let (v, code) = verdict(&safety::r_maint(&c, 1, 1), false, &c);
        assert_eq!(code, exit::OK);
        assert!(v.starts_with("allowed; budget after start: B = 0"), "{v}");
        assert_eq!(verdict(&safety::r_maint(&c, 1, 1), true, &c).1, exit::FAILED);
        let mut down = Counts::healthy(3);
        down.healthy = 2;
        let (v, code) = verdict(&safety::r_maint(&down, 1, 1), false, &down);
        assert_eq!(code, exit::REFUSED);
        assert!(v.contains("R-maint"), "{v}");
    }

    #[test]
    fn still_down_names_the_next_command() {
        let a = still_down_advice("cp2", "unreachable", true);
        assert!(
            a.contains("still down: cp2") && a.contains("hactl heal --once"),
            "{a}"
        );
        assert!(a.contains("--confirm-dead cp2") && !a.contains("hactl up"), "{a}");
        let b = still_down_advice("cp2", "connection refused", false);
        assert!(b.contains("hactl replace cp2 --reuse-host"), "{b}");
    }
}
