//! The quorum arithmetic of docs/recovery.md ("Safety rules"), and the rules every membership change,
//! every automatic remediation and every maintenance start must pass.
//!
//! Invariant: pure. Each rule takes the numbers it needs ([`Counts`]) and returns [`Decision::Allowed`]
//! or a [`Refused`] that names the rule, the numbers it saw and what to do instead. Callers never
//! re-derive quorum themselves.
//!
//! Definitions (docs/recovery.md, "Safety rules"):
//! - V: voting members (learners excluded; an unstarted voting member counts in V and as unhealthy);
//! - Q = ⌊V/2⌋+1; F = V−Q = ⌊(V−1)/2⌋;
//! - H: healthy voting members, members stopped by hactl maintenance (M) counted as unhealthy;
//! - U = V−H; B = H−Q, the planned-disruption budget.

use std::fmt;

/// Quorum of `voters` voting members: ⌊V/2⌋+1 (1 for V = 0, so an empty cluster never "has" quorum).
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// Members that may fail without losing quorum: F = V−Q = ⌊(V−1)/2⌋.
pub fn fault_tolerance(voters: usize) -> usize {
    voters.saturating_sub(quorum(voters))
}

/// What a rule looks at. Built from an observation of the cluster (see `etcd::health`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// V: voting members.
    pub voters: usize,
    /// H: healthy voting members (not counting members stopped for maintenance).
    pub healthy: usize,
    /// Learners in the member list.
    pub learners: usize,
    /// Members added but never started (no name), learner or not.
    pub unstarted: usize,
    /// Active alarms, as etcd names them (`NOSPACE`, `CORRUPT`).
    pub alarms: Vec<String>,
    /// M: members stopped by hactl maintenance (already excluded from `healthy`).
    pub in_maintenance: usize,
    /// Another hactl operation holds the cluster (its description), if any.
    pub foreign_operation: Option<String>,
}

impl Counts {
    /// A cluster of `voters` members, all healthy, nothing in progress.
    pub fn healthy(voters: usize) -> Counts {
        Counts {
            voters,
            healthy: voters,
            ..Counts::default()
        }
    }
    pub fn quorum(&self) -> usize {
        quorum(self.voters)
    }
    pub fn fault_tolerance(&self) -> usize {
        fault_tolerance(self.voters)
    }
    /// U = V−H.
    pub fn unhealthy(&self) -> usize {
        self.voters.saturating_sub(self.healthy)
    }
    /// B = H−Q (negative when quorum is lost).
    pub fn budget(&self) -> i64 {
        self.healthy as i64 - self.quorum() as i64
    }
    pub fn has_quorum(&self) -> bool {
        self.voters > 0 && self.healthy >= self.quorum()
    }
    /// The numbers as a refusal prints them.
    pub fn numbers(&self) -> String {
        let mut s = format!(
            "V={} H={} Q={} F={} U={} B={}",
            self.voters,
            self.healthy,
            self.quorum(),
            self.fault_tolerance(),
            self.unhealthy(),
            self.budget()
        );
        if self.in_maintenance > 0 {
            s.push_str(&format!(" M={}", self.in_maintenance));
        }
        if self.learners > 0 {
            s.push_str(&format!(" learners={}", self.learners));
        }
        if self.unstarted > 0 {
            s.push_str(&format!(" unstarted={}", self.unstarted));
        }
        if !self.alarms.is_empty() {
            s.push_str(&format!(" alarms={}", self.alarms.join(",")));
        }
        s
    }
}

/// The rules of docs/recovery.md, "Safety rules", plus the conditions that refuse whatever the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// No leader / fewer than Q healthy voters.
    Quorum,
    /// A learner or unstarted member exists: a membership change is under way.
    Transition,
    /// An alarm (NOSPACE, CORRUPT) is raised.
    Alarm,
    /// Another hactl operation (or maintenance) holds the cluster.
    Lock,
    Maint,
    Remove,
    Add,
    Promote,
    Heal,
    Final,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Quorum => "quorum",
            Rule::Transition => "no-transition",
            Rule::Alarm => "no-alarm",
            Rule::Lock => "one-operation",
            Rule::Maint => "R-maint",
            Rule::Remove => "R-remove",
            Rule::Add => "R-add",
            Rule::Promote => "R-promote",
            Rule::Heal => "R-heal",
            Rule::Final => "R-final",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule said no: which, why (with the numbers), and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused by {rule}: {why} ({numbers}); instead: {instead}")]
pub struct Refused {
    pub rule: Rule,
    pub why: String,
    pub numbers: String,
    pub instead: String,
}

/// A rule's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Refused(Refused),
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed)
    }
    /// `Ok(())` when allowed.
    pub fn into_result(self) -> Result<(), Refused> {
        match self {
            Decision::Allowed => Ok(()),
            Decision::Refused(r) => Err(r),
        }
    }
    pub fn refused(&self) -> Option<&Refused> {
        match self {
            Decision::Allowed => None,
            Decision::Refused(r) => Some(r),
        }
    }
}

fn refuse(rule: Rule, c: &Counts, why: impl Into<String>, instead: impl Into<String>) -> Decision {
    Decision::Refused(Refused {
        rule,
        why: why.into(),
        numbers: c.numbers(),
        instead: instead.into(),
    })
}

/// Refusals shared by every rule: quorum absent, an alarm, another operation.
fn always(c: &Counts) -> Option<Decision> {
    if !c.has_quorum() {
        return Some(refuse(
            Rule::Quorum,
            c,
            format!(
                "quorum lost: {} of {} voting members healthy, {} needed",
                c.healthy,
                c.voters,
                c.quorum()
            ),
            "start the stopped members whose data is intact: `hactl maintenance complete HOST` for a host in maintenance, `hactl up` when every host answers (else `systemctl start etcd` on each); if fewer than Q members have intact data, run `hactl recover`",
        ));
    }
    if !c.alarms.is_empty() {
        let nospace = c.alarms.iter().any(|a| a == "NOSPACE");
        let instead = if nospace {
            "NOSPACE is cluster-wide, not a member failure: run `hactl etcd maintenance --compact --defrag --disarm`"
        } else {
            "CORRUPT means a member's data diverged: find it with `hactl status` and replace that member (`hactl replace MEMBER --reuse-host`) once the alarm is understood"
        };
        return Some(refuse(
            Rule::Alarm,
            c,
            format!("alarm {} is raised", c.alarms.join(",")),
            instead,
        ));
    }
    if let Some(op) = &c.foreign_operation {
        return Some(refuse(
            Rule::Lock,
            c,
            format!("another operation holds the cluster: {op}"),
            "wait for it to finish (or finish it: `hactl maintenance complete HOST`, `--resume`), then run again",
        ));
    }
    None
}

fn transition(c: &Counts) -> Option<Decision> {
    if c.learners > 0 || c.unstarted > 0 {
        return Some(refuse(
            Rule::Transition,
            c,
            format!(
                "a membership change is in progress ({} learner(s), {} unstarted member(s))",
                c.learners, c.unstarted
            ),
            "finish or undo it first: `hactl up` finishes a join it began; a foreign learner is removed with `hactl replace MEMBER --cleanup-learner ID`",
        ));
    }
    None
}

/// R-maint: start maintenance on `k` more hosts iff `k ≤ min(maxUnavailable, B)`, with no
/// learner, unstarted member, alarm or other operation present.
pub fn r_maint(c: &Counts, k: usize, max_unavailable: usize) -> Decision {
    if let Some(d) = always(c).or_else(|| transition(c)) {
        return d;
    }
    let b = c.budget();
    let allowed = (max_unavailable as i64).min(b);
    if (k as i64) <= allowed {
        return Decision::Allowed;
    }
    let why = if k > max_unavailable {
        format!("{k} host(s) asked for, at most maxUnavailable={max_unavailable}")
    } else if c.in_maintenance > 0 {
        format!(
            "stopping {k} more member(s) would leave fewer than Q={} healthy; {} already in maintenance, budget B={b}",
            c.quorum(),
            c.in_maintenance
        )
    } else {
        format!(
            "stopping {k} member(s) would leave fewer than Q={} healthy; budget B={b}",
            c.quorum()
        )
    };
    let instead = if c.in_maintenance > 0 {
        "finish the maintenance under way first (`hactl maintenance complete HOST`)"
    } else if c.unhealthy() > 0 {
        "repair the unhealthy member first (`hactl heal --once` or `hactl replace MEMBER --reuse-host`); maintenance needs every member healthy at this size"
    } else {
        "take fewer hosts at once, or grow the cluster to 5 members for a budget of 2"
    };
    refuse(Rule::Maint, c, why, instead)
}

/// R-remove: remove a voting member (the target) iff `H′ ≥ ⌊(V−1)/2⌋+1`, where H′ is H without
/// the target when the target is healthy, and no transition is in progress.
pub fn r_remove(c: &Counts, target_healthy: bool) -> Decision {
    if let Some(d) = always(c).or_else(|| transition(c)) {
        return d;
    }
    let h_after = c.healthy - usize::from(target_healthy && c.healthy > 0);
    let v_after = c.voters.saturating_sub(1);
    let q_after = quorum(v_after);
    if v_after == 0 {
        return refuse(
            Rule::Remove,
            c,
            "the target is the only voting member",
            "a one-member cluster cannot lose its member: take a backup and use `hactl recover`",
        );
    }
    if h_after >= q_after {
        return Decision::Allowed;
    }
    let (why, instead) = if target_healthy {
        (
            format!(
                "removing a healthy member would leave H′={h_after} healthy of V′={v_after}, below Q′={q_after}"
            ),
            "repair the unhealthy member(s) first; a healthy member is replaced only when the others are all healthy",
        )
    } else {
        (
            format!(
                "even without the target only H′={h_after} of V′={v_after} are healthy, below Q′={q_after}"
            ),
            "bring a second member back first (`hactl up`), or `hactl recover` if their data is lost",
        )
    };
    refuse(Rule::Remove, c, why, instead)
}

/// The fewest voters a declared removal (`hactl remove`) may leave: with fewer than 3 a single
/// failure stops the cluster.
pub const MIN_VOTERS_AFTER_REMOVE: usize = 3;

/// R-remove for a declared removal (`hactl remove`): R-remove, and the voters left are at least
/// [`MIN_VOTERS_AFTER_REMOVE`]. A replace removes only to add again, so it asks [`r_remove`].
pub fn r_remove_declared(c: &Counts, target_healthy: bool) -> Decision {
    if let Some(d) = always(c).or_else(|| transition(c)) {
        return d;
    }
    let v_after = c.voters.saturating_sub(1);
    if v_after < MIN_VOTERS_AFTER_REMOVE {
        return refuse(
            Rule::Remove,
            c,
            format!(
                "removing a member would leave V′={v_after} voting member(s), fewer than {MIN_VOTERS_AFTER_REMOVE}: one failure would then stop the cluster"
            ),
            "keep at least 3 members: add a host first (give it the etcd role and run `hactl up`), or move the member to another host with `hactl replace MEMBER --host NEW`",
        );
    }
    r_remove(c, target_healthy)
}

/// R-add: add a learner only when every current voter is healthy and no learner or unstarted
/// member exists (stricter than etcd ≥ 3.5.30, equal to etcd ≤ 3.5.29 and 3.4).
pub fn r_add(c: &Counts) -> Decision {
    if let Some(d) = always(c).or_else(|| transition(c)) {
        return d;
    }
    if c.unhealthy() == 0 {
        return Decision::Allowed;
    }
    refuse(
        Rule::Add,
        c,
        format!(
            "{} voting member(s) unhealthy; etcd refuses an add unless every voter is connected",
            c.unhealthy()
        ),
        "remove the failed member first: `hactl replace MEMBER` removes, then adds (flow F1)",
    )
}

/// R-promote: promote a learner iff `H+1 ≥ ⌊(V+1)/2⌋+1` and it has caught up.
pub fn r_promote(c: &Counts, learner_caught_up: bool) -> Decision {
    if let Some(d) = always(c) {
        return d;
    }
    let need = quorum(c.voters + 1);
    if c.healthy + 1 < need {
        return refuse(
            Rule::Promote,
            c,
            format!(
                "after promotion {} of {} voters would be healthy, below Q={need}",
                c.healthy + 1,
                c.voters + 1
            ),
            "repair the unhealthy members first, or remove the learner (quorum-neutral)",
        );
    }
    if !learner_caught_up {
        return refuse(
            Rule::Promote,
            c,
            "the learner has not caught up with the leader",
            "wait for it to catch up (etcd needs 90% of the leader's index); check its disk and peer traffic",
        );
    }
    Decision::Allowed
}

/// R-heal: remediate automatically only when `U ≤ min(F, maxUnhealthy)`, one target at a time.
pub fn r_heal(c: &Counts, max_unhealthy: usize) -> Decision {
    if let Some(d) = always(c) {
        return d;
    }
    let u = c.unhealthy();
    let limit = c.fault_tolerance().min(max_unhealthy);
    if u <= limit {
        return Decision::Allowed;
    }
    let instead = if u > c.fault_tolerance() {
        "too many members down to change membership safely: bring members back by hand (`hactl maintenance complete HOST` for a host in maintenance, `hactl up` when every host answers), or `hactl recover`"
    } else {
        "more members are unhealthy than maxUnhealthy allows automatic repair of: look at `hactl status`, then `hactl replace MEMBER` one at a time, or raise spec.heal.maxUnhealthy"
    };
    refuse(
        Rule::Heal,
        c,
        format!(
            "{u} member(s) unhealthy, more than min(F={}, maxUnhealthy={max_unhealthy})={limit}",
            c.fault_tolerance()
        ),
        instead,
    )
}

/// R-final: an operation ends with an odd number of voters equal to the desired size, unless it
/// is a declared scale operation.
pub fn r_final(voters_after: usize, desired: usize, declared_scale: bool) -> Decision {
    let c = Counts::healthy(voters_after);
    if declared_scale {
        return Decision::Allowed;
    }
    if voters_after != desired {
        return refuse(
            Rule::Final,
            &c,
            format!("the operation would end with {voters_after} voters, the inventory wants {desired}"),
            "complete the transition (`--resume`), or change the inventory and run `hactl up`",
        );
    }
    if voters_after.is_multiple_of(2) {
        return refuse(
            Rule::Final,
            &c,
            format!("the operation would end with an even number of voters ({voters_after})"),
            "use 3 or 5 etcd hosts",
        );
    }
    Decision::Allowed
}

#[cfg(test)]
// The formulas are written as docs/recovery.md, "Safety rules" states them, not as clippy would simplify them.
#[allow(clippy::int_plus_one, clippy::manual_div_ceil)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_table_of_section_5_3() {
        // V, Q, F
        for (v, q, f) in [(1, 1, 0), (2, 2, 0), (3, 2, 1), (4, 3, 1), (5, 3, 2), (7, 4, 3)] {
            assert_eq!((quorum(v), fault_tolerance(v)), (q, f), "V={v}");
        }
        // N=3: maintenance of 1 only when U=0.
        assert!(r_maint(&Counts::healthy(3), 1, 1).is_allowed());
        assert!(!r_maint(&Counts::healthy(3), 2, 2).is_allowed());
        let one_down = Counts {
            healthy: 2,
            ..Counts::healthy(3)
        };
        assert!(!r_maint(&one_down, 1, 1).is_allowed());
        // N=5: 2 only with --max-unavailable 2 and U=0; a third refused.
        assert!(r_maint(&Counts::healthy(5), 2, 2).is_allowed());
        assert!(!r_maint(&Counts::healthy(5), 2, 1).is_allowed());
        assert!(!r_maint(&Counts::healthy(5), 3, 3).is_allowed());
        // Heal for N=3: exactly one target; two down is quorum lost.
        assert!(r_heal(&one_down, 1).is_allowed());
        let two_down = Counts {
            healthy: 1,
            ..Counts::healthy(3)
        };
        let r = r_heal(&two_down, 1);
        assert_eq!(r.refused().unwrap().rule, Rule::Quorum);
        // V=1 and V=2: never heal, never maintain.
        assert!(!r_maint(&Counts::healthy(1), 1, 1).is_allowed());
        assert!(!r_maint(&Counts::healthy(2), 1, 1).is_allowed());
    }

    #[test]
    fn a_refusal_names_the_rule_the_numbers_and_what_to_do() {
        let c = Counts {
            healthy: 2,
            ..Counts::healthy(3)
        };
        let text = r_remove(&c, true).into_result().unwrap_err().to_string();
        assert_eq!(
            text,
            "refused by R-remove: removing a healthy member would leave H′=1 healthy of V′=2, below Q′=2 \
(V=3 H=2 Q=2 F=1 U=1 B=0); instead: repair the unhealthy member(s) first; a healthy member is replaced only when the others are all healthy"
        );
        let nospace = Counts {
            alarms: vec!["NOSPACE".into()],
            ..Counts::healthy(3)
        };
        let text = r_heal(&nospace, 1).into_result().unwrap_err().to_string();
        assert!(
            text.contains("hactl etcd maintenance --compact --defrag --disarm"),
            "{text}"
        );
    }

    #[test]
    fn the_dead_member_of_three_may_be_removed_the_live_one_not() {
        let c = Counts {
            healthy: 2,
            ..Counts::healthy(3)
        };
        assert!(r_remove(&c, false).is_allowed());
        assert!(!r_remove(&c, true).is_allowed());
        assert!(!r_add(&c).is_allowed());
        let five = Counts {
            healthy: 4,
            ..Counts::healthy(5)
        };
        assert!(r_remove(&five, true).is_allowed());
        assert!(!r_add(&five).is_allowed());
    }

    #[test]
    fn final_size_must_be_odd_and_as_desired() {
        assert!(r_final(3, 3, false).is_allowed());
        assert!(!r_final(4, 3, false).is_allowed());
        assert!(!r_final(4, 4, false).is_allowed());
        assert!(r_final(4, 3, true).is_allowed());
    }

    fn counts() -> impl Strategy<Value = Counts> {
        (
            1usize..=7,
            0usize..=7,
            0usize..=2,
            0usize..=1,
            any::<bool>(),
            0usize..=3,
            any::<bool>(),
        )
            .prop_map(|(v, h, learners, unstarted, alarm, m, lock)| {
                let healthy = h.min(v);
                Counts {
                    voters: v,
                    healthy,
                    learners,
                    unstarted,
                    alarms: if alarm { vec!["NOSPACE".into()] } else { vec![] },
                    in_maintenance: m.min(v - healthy),
                    foreign_operation: lock.then(|| "maintenance of cp1".to_string()),
                }
            })
    }

    fn clean(c: &Counts) -> bool {
        c.alarms.is_empty() && c.foreign_operation.is_none() && c.healthy >= c.voters / 2 + 1
    }

    proptest! {
        /// R-maint equals the docs/recovery.md, "Safety rules" formula: k ≤ min(maxUnavailable, H−Q), nothing in progress.
        #[test]
        fn r_maint_is_the_formula(c in counts(), k in 1usize..=4, max in 0usize..=3) {
            let formula = clean(&c) && c.learners == 0 && c.unstarted == 0
                && (k as i64) <= (max as i64).min(c.healthy as i64 - (c.voters / 2 + 1) as i64);
            prop_assert_eq!(r_maint(&c, k, max).is_allowed(), formula);
        }

        /// R-remove equals the formula, and an allowed removal always keeps quorum.
        #[test]
        fn r_remove_is_the_formula(c in counts(), target_healthy in any::<bool>()) {
            let target_healthy = target_healthy && c.healthy > 0;
            let h_after = c.healthy - usize::from(target_healthy);
            let v_after = c.voters - 1;
            // docs/recovery.md, "Safety rules" R-remove: H′ ≥ ⌊(V−1)/2⌋+1 with V the voters before the removal, i.e. a
            // quorum of the V′ = V−1 that remain.
            let formula = clean(&c) && c.learners == 0 && c.unstarted == 0
                && v_after > 0 && h_after >= (c.voters - 1) / 2 + 1;
            let d = r_remove(&c, target_healthy);
            prop_assert_eq!(d.is_allowed(), formula);
            if d.is_allowed() {
                prop_assert!(h_after >= quorum(v_after));
            }
        }

        /// R-remove for `hactl remove`: R-remove, and at least 3 voters left.
        #[test]
        fn r_remove_declared_is_r_remove_with_three_left(c in counts(), target_healthy in any::<bool>()) {
            let d = r_remove_declared(&c, target_healthy);
            let expected = r_remove(&c, target_healthy).is_allowed() && c.voters >= 4;
            prop_assert_eq!(d.is_allowed(), expected);
            if let Some(r) = d.refused() {
                prop_assert!(!r.instead.is_empty());
            }
        }

        /// R-add: every voter healthy, nothing in progress.
        #[test]
        fn r_add_is_the_formula(c in counts()) {
            let formula = clean(&c) && c.learners == 0 && c.unstarted == 0 && c.healthy == c.voters;
            prop_assert_eq!(r_add(&c).is_allowed(), formula);
        }

        /// R-promote: H+1 ≥ ⌊(V+1)/2⌋+1 and caught up.
        #[test]
        fn r_promote_is_the_formula(c in counts(), caught_up in any::<bool>()) {
            let formula = clean(&c) && caught_up && c.healthy + 1 > (c.voters + 1) / 2;
            prop_assert_eq!(r_promote(&c, caught_up).is_allowed(), formula);
        }

        /// R-heal: U ≤ min(F, maxUnhealthy); an allowed heal never acts without quorum.
        #[test]
        fn r_heal_is_the_formula(c in counts(), max in 0usize..=3) {
            let u = c.voters - c.healthy;
            let formula = clean(&c) && u <= ((c.voters - 1) / 2).min(max);
            let d = r_heal(&c, max);
            prop_assert_eq!(d.is_allowed(), formula);
            if d.is_allowed() {
                prop_assert!(c.healthy >= quorum(c.voters));
            }
        }

        /// Every refusal names a rule, shows V and H, and says what to do instead.
        #[test]
        fn refusals_are_actionable(c in counts(), k in 1usize..=3) {
            for d in [r_maint(&c, k, 1), r_remove(&c, true), r_add(&c), r_heal(&c, 1)] {
                if let Decision::Refused(r) = d {
                    let text = r.to_string();
                    prop_assert!(text.starts_with("refused by "));
                    let numbers = format!("V={} H={}", c.voters, c.healthy);
                    prop_assert!(text.contains(&numbers));
                    prop_assert!(!r.instead.is_empty());
                }
            }
        }
    }
}
