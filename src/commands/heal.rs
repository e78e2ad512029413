//! `hactl heal [--once | --watch] [--dry-run]`: find a failed etcd member and repair it within the
//! safety budget (../shared/specs/recovery.md §4.1–4.2).
//!
//! A member is unhealthy only when both vantage points say so (a healthy peer host running
//! `endpoint health`, and the operator through an SSH tunnel to the member's host) and that has
//! held for `spec.heal.unhealthyTimeout`. Cluster-wide conditions (NOSPACE) are alerts, never
//! replacements. The ladder: restart once per `retryPeriod`, then replace; a fatal identity error
//! in the member's journal goes straight to replace. `maxRetry` failed remediations within
//! `minHealthyPeriod` stop heal with exit 2. One change at a time, most broken first.
//!
//! The retry records live in `heal.json` in the state directory (the source); with a `kubernetes`
//! section each changed record is mirrored onto the member's Node as the annotation
//! `hactl.io/remediation-for` (`{"retryCount":1,"lastRemediation":"2026-11-22T05:00:00Z"}`), at
//! the end of the heal round that sees the change (also one made by a `hactl replace` run).
//!
//! Invariant: [`decide`] is pure: what heal does follows from what it saw, its records and the
//! policy; the command only gathers, asks `decide`, and runs the one action.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::membership::{self, refuse};
use crate::cli::{HealArgs, ReplaceArgs};
use crate::etcd::client::{self};
use crate::etcd::errors::identity_error;
use crate::etcd::safety::{self, Counts};
use crate::etcd::{self as etcd_paths};
use crate::exec::Mode;
use crate::exit;
use crate::inventory::{HealSpec, Inventory, Role};
use crate::kubernetes::api::REMEDIATION_ANNOTATION;
use crate::plan::{RemoteCommand, Step};
use crate::state::StateDir;

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

/// Per-member remediation record, kept in `heal.json` in the state dir.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Unix seconds when both vantage points first saw it unhealthy (cleared when healthy).
    #[serde(default)]
    pub first_unhealthy: Option<u64>,
    #[serde(default)]
    pub last_restart: Option<u64>,
    #[serde(default)]
    pub last_remediation: Option<u64>,
    #[serde(default)]
    pub last_failure: Option<u64>,
    #[serde(default)]
    pub retry_count: u32,
    #[serde(default)]
    pub last_error: String,
    /// The annotation value last written to the member's Node (or found to have no Node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotated: Option<String>,
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

/// Mirrors the records that changed since they were last written onto the members' Nodes. The
/// state directory stays the source: an apiserver that does not answer is a warning.
async fn publish_records(inv: &Inventory, state: &StateDir, args: &HealArgs) {
    if inv.kubernetes.is_none() || args.dry_run {
        return;
    }
    let mut records = load_records(state);
    let due = due_annotations(&records);
    if due.is_empty() {
        return;
    }
    let stamp = membership::now_rfc3339();
    let api = match super::node::connect_api(inv, state, &Default::default(), &args.connect, "").await {
        Ok(a) => a,
        Err(e) => {
            println!(
                "{stamp} heal: warning: retry records not written to the Nodes ({e:#}); heal.json holds them"
            );
            return;
        }
    };
    for (member, value) in due {
        let written = match api.node(&member).await {
            Ok(Some(_)) => api
                .annotate_node(&member, REMEDIATION_ANNOTATION, Some(&value))
                .await
                .map(|_| true),
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        match written {
            Ok(on_node) => {
                if on_node {
                    println!("{stamp} heal: Node {member}: {REMEDIATION_ANNOTATION}={value}");
                }
                if let Some(r) = records.members.get_mut(&member) {
                    r.annotated = Some(value);
                }
            }
            Err(e) => println!(
                "{stamp} heal: warning: cannot annotate Node {member}: {:#} (heal.json holds the record)",
                anyhow::Error::from(e)
            ),
        }
    }
    if let Err(e) = save_records(state, &records) {
        println!("{stamp} heal: warning: {e:#}");
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Records {
    #[serde(default)]
    pub members: BTreeMap<String, Record>,
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
pub fn observe_records(records: &mut Records, signals: &[Signals], policy: &HealSpec, now: u64) {
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

/// Decides the one action of this round (pure).
pub fn decide(
    counts: &Counts,
    signals: &[Signals],
    records: &Records,
    policy: &HealSpec,
    now: u64,
) -> Decision {
    let d = |action, reason: String| Decision { action, reason };
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

fn records_path(state: &StateDir) -> std::path::PathBuf {
    state.path.join("heal.json")
}

pub fn load_records(state: &StateDir) -> Records {
    std::fs::read_to_string(records_path(state))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

pub fn save_records(state: &StateDir, r: &Records) -> anyhow::Result<()> {
    state.write_secret("heal.json", serde_json::to_string_pretty(r)?.as_bytes())?;
    Ok(())
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A remediation of `member` failed: count a retry. Returns the new count.
pub fn record_failure(state: &StateDir, member: &str, error: &str) -> anyhow::Result<u32> {
    let mut r = load_records(state);
    let rec = r.members.entry(member.to_string()).or_default();
    rec.retry_count += 1;
    rec.last_failure = Some(unix_now());
    rec.last_remediation = Some(unix_now());
    rec.last_error = error.lines().last().unwrap_or("").chars().take(300).collect();
    let n = rec.retry_count;
    save_records(state, &r)?;
    Ok(n)
}

/// A remediation of `member` succeeded.
pub fn record_success(state: &StateDir, member: &str) -> anyhow::Result<()> {
    let mut r = load_records(state);
    let rec = r.members.entry(member.to_string()).or_default();
    rec.last_remediation = Some(unix_now());
    rec.first_unhealthy = None;
    save_records(state, &r)
}

/// Gathers signals: the peer vantage from an observation, the operator vantage through tunnels,
/// the unit state and the journal of each unhealthy member's host.
async fn gather(
    inv: &Inventory,
    state: &StateDir,
    args: &HealArgs,
) -> anyhow::Result<(Counts, Vec<Signals>, membership::Reach)> {
    let hosts = inv.with_role(Role::Etcd);
    let reach = membership::reach(inv, state, &hosts, &args.connect).await;
    let obs = reach.observe(inv, &[]).await?;
    let mut counts = obs.counts(&membership::in_maintenance(state), None);
    if let Some((h, r)) = membership::maintenance_records(state).iter().next() {
        counts.foreign_operation = Some(format!("maintenance of {h} (stage {})", r.stage));
    }
    let tls = crate::etcd::client::client_tls(&state.path.join("pki"))?;
    let maint = membership::in_maintenance(state);
    let mut signals = Vec::new();
    for m in obs.voters() {
        let name = if m.is_started() {
            m.name.clone()
        } else {
            hosts
                .iter()
                .find(|h| m.peer_urls.contains(&etcd_paths::peer_url(inv, h)))
                .map(|h| h.name.clone())
                .unwrap_or_else(|| etcd_paths::hex_id(m.id))
        };
        if maint.contains(&name) {
            continue; // never remediate a member in maintenance
        }
        let peer_unhealthy = !obs.is_healthy(m);
        let t = reach.transports.get(&name);
        let operator_unhealthy = match t {
            None => true,
            Some(t) => {
                match client::connect(t.as_ref(), inv.etcd.client_port, &tls, Duration::from_secs(3)).await {
                    Ok(mut c) => {
                        !client::member_status(&mut c, Duration::from_secs(3))
                            .await
                            .healthy
                    }
                    Err(_) => true,
                }
            }
        };
        let process_down = t.map(|_| !reach.etcd_active(&name));
        let mut identity = None;
        if peer_unhealthy {
            if let Some(t) = t {
                let cmd = RemoteCommand::read_only([
                    "journalctl",
                    "-u",
                    etcd_paths::UNIT,
                    "-n",
                    "80",
                    "--no-pager",
                    "-o",
                    "cat",
                ]);
                if let Ok(out) = t.run(&cmd).await {
                    identity = identity_error(&out.stdout_str()).map(str::to_string);
                }
            }
        }
        signals.push(Signals {
            member: name,
            peer_unhealthy,
            operator_unhealthy: Some(operator_unhealthy),
            process_down,
            identity_error: identity,
            why: if peer_unhealthy {
                obs.why_unhealthy(m)
            } else {
                String::new()
            },
        });
    }
    Ok((counts, signals, reach))
}

/// One round: look, decide, act (or print), then mirror changed retry records onto the Nodes.
async fn round(inv: &Inventory, state: &StateDir, args: &HealArgs) -> anyhow::Result<i32> {
    let result = act(inv, state, args).await;
    publish_records(inv, state, args).await;
    result
}

async fn act(inv: &Inventory, state: &StateDir, args: &HealArgs) -> anyhow::Result<i32> {
    let (counts, signals, reach) = gather(inv, state, args).await?;
    let now = unix_now();
    let mut records = load_records(state);
    observe_records(&mut records, &signals, &inv.heal, now);
    if !args.dry_run {
        save_records(state, &records)?;
    }
    let decision = decide(&counts, &signals, &records, &inv.heal, now);
    let stamp = membership::now_rfc3339();
    let verb = if args.dry_run { "would" } else { "will" };
    match &decision.action {
        Action::Nothing => {
            println!("{stamp} heal: nothing to do: {}", decision.reason);
            Ok(exit::OK)
        }
        Action::Alert { message, code } => {
            println!("{stamp} heal: alert: {message} ({})", decision.reason);
            Ok(*code)
        }
        Action::Restart { member } => {
            println!(
                "{stamp} heal: {verb} restart etcd on {member}: {}",
                decision.reason
            );
            let host = inv.host(member).expect("members come from the inventory");
            let mode = if args.dry_run { Mode::DryRun } else { Mode::Live };
            let _lock = if args.dry_run {
                None
            } else {
                Some(
                    state
                        .lock(membership::OPERATION_LOCK)
                        .map_err(|e| refuse(exit::NEEDS_INPUT, format!("{e:#}")))?,
                )
            };
            if !args.dry_run {
                let mut r = load_records(state);
                r.members.entry(member.clone()).or_default().last_restart = Some(now);
                save_records(state, &r)?;
            }
            let steps = vec![
                Step::Run(RemoteCommand::new([
                    "systemctl",
                    "restart",
                    "--no-block",
                    etcd_paths::UNIT,
                ])),
                Step::Wait(crate::etcd::probe::member_healthy(
                    member,
                    Duration::from_secs(60),
                )),
            ];
            match membership::run_on(
                mode,
                &reach.transports,
                &format!("heal: restart etcd on {member}"),
                host,
                steps,
            )
            .await
            {
                Ok(()) => {
                    println!(
                        "{} heal: {member} is healthy after a restart",
                        membership::now_rfc3339()
                    );
                    Ok(exit::OK)
                }
                Err(e) => {
                    println!(
                        "{} heal: restart of {member} did not help: {e:#}",
                        membership::now_rfc3339()
                    );
                    Ok(exit::FAILED_AFTER_CHANGES)
                }
            }
        }
        Action::Replace { member } => {
            println!(
                "{stamp} heal: {verb} replace {member} on its own host: {}",
                decision.reason
            );
            drop(reach);
            let r = ReplaceArgs {
                inventory: args.inventory.clone(),
                connect: args.connect.clone(),
                member: member.clone(),
                reuse_host: true,
                host: None,
                planned: false,
                dry_run: args.dry_run,
                resume: None,
                cleanup_learner: None,
                confirm_dead: vec![],
            };
            match super::replace::run(&r).await {
                Ok(code) => Ok(code),
                Err(e) => {
                    let code = super::exit_code_of(&e);
                    if code != exit::REFUSED && !args.dry_run {
                        record_failure(state, member, &format!("{e:#}"))?;
                    }
                    Err(e)
                }
            }
        }
    }
}

pub async fn run(args: &HealArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    if !args.watch {
        return round(&inv, &state, args).await;
    }
    eprintln!(
        "heal --watch: every {}s; unhealthyTimeout={}s retryPeriod={}s maxUnhealthy={} maxRetry={}",
        args.interval,
        inv.heal.unhealthy_timeout.as_secs(),
        inv.heal.retry_period.as_secs(),
        inv.heal.max_unhealthy,
        inv.heal.max_retry
    );
    loop {
        if let Err(e) = round(&inv, &state, args).await {
            println!("{} heal: round failed: {e:#}", membership::now_rfc3339());
        }
        tokio::time::sleep(Duration::from_secs(args.interval)).await;
    }
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
        let d = decide(&Counts::healthy(3), &s, &Records::default(), &policy(), 1000);
        assert_eq!(d.action, Action::Nothing);
        assert!(d.reason.contains("one vantage point"), "{}", d.reason);
    }

    #[test]
    fn waits_for_the_unhealthy_timeout_then_restarts_then_replaces() {
        let s = [sig("cp1", false, false), sig("cp3", true, true)];
        let mut rec = Records::default();
        observe_records(&mut rec, &s, &policy(), 1000);
        let d = decide(&three_one_down(), &s, &rec, &policy(), 1030);
        assert_eq!(d.action, Action::Nothing, "{}", d.reason);
        let d = decide(&three_one_down(), &s, &rec, &policy(), 1061);
        assert_eq!(d.action, Action::Restart { member: "cp3".into() });
        rec.members.get_mut("cp3").unwrap().last_restart = Some(1061);
        let d = decide(&three_one_down(), &s, &rec, &policy(), 1200);
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
        let d = decide(&three_one_down(), &[s], &Records::default(), &p, 5);
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
        let d = decide(&c, &s, &Records::default(), &p, 0);
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
        let d = decide(&c, &[a.clone(), b.clone()], &Records::default(), &p, 0);
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
        let d = decide(&c, &[a, b], &rec, &p, 200);
        match d.action {
            Action::Alert { message, code } => {
                assert_eq!(code, exit::REFUSED);
                assert!(message.contains("retry-limit"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
