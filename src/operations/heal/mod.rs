//! heal: find a failed etcd member and repair it within the safety budget
//! (`hactl heal [--once | --watch] [--dry-run]`; docs/recovery.md, "Replace and heal (P0–P10)").
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
//! Invariant: [`decide()`] (in `decide.rs`) is pure: what heal does follows from what it saw, its
//! records and the policy; [`round`] only gathers, asks `decide`, and runs the one action through
//! the operation manager: a restart is a one-step operation of its own ([`Restart`], `steps.rs`
//! and `acts.rs`), a replace is [`crate::operations::replace`] with its own options. The retry
//! records are [`crate::operations::remediation`], shared with replace, so replace never reaches
//! back into heal.

use std::time::Duration;

use async_trait::async_trait;

use crate::clock::now_rfc3339;
use crate::etcd::client::{self};
use crate::etcd::errors::identity_error;
use crate::etcd::safety::Counts;
use crate::etcd::{self as etcd_paths};
use crate::exec::Transports;
use crate::exit;
use crate::exit::refuse;
use crate::inventory::{Inventory, Role};
use crate::kubernetes::api::REMEDIATION_ANNOTATION;
use crate::operations::manager::{self, Confirmation, Context, Flags, Operation, Planned, Report, RunId};
use crate::operations::runner::Outcome;
use crate::operations::{self, maintenance_record, Reach};
use crate::plan::RemoteCommand;
use crate::state::StateDir;

pub mod acts;
pub mod decide;
pub mod fence;
pub mod steps;

/// What `hactl heal` is asked (one round; `--watch` is the command's loop).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Say what would be done, with the steps; change nothing.
    pub dry_run: bool,
}

pub use crate::operations::remediation::{
    load_records, record_failure, record_success, save_records, unix_now, Record, Records,
};
pub use decide::{
    complete_maintenance_first, decide, due_annotations, observe_records, remediation_annotation,
    restarted_ok, Action, Away, Decision, Signals,
};

/// Mirrors the records that changed since they were last written onto the members' Nodes. The
/// state directory stays the source: an apiserver that does not answer is a warning.
async fn publish_records(ctx: &Context<'_>, opts: &Options) {
    let (inv, state) = (ctx.inv, ctx.state);
    if inv.kubernetes.is_none() || opts.dry_run {
        return;
    }
    let mut records = load_records(state);
    let due = due_annotations(&records);
    if due.is_empty() {
        return;
    }
    let stamp = now_rfc3339();
    let api = match operations::node::connect_api(inv, state, &Default::default(), ctx.connect, "").await {
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

/// Gathers signals: the peer vantage from an observation, the operator vantage through tunnels,
/// the unit state and the journal of each unhealthy member's host.
async fn gather(
    inv: &Inventory,
    state: &StateDir,
    ctx: &Context<'_>,
) -> anyhow::Result<(
    Counts,
    Vec<Signals>,
    Vec<Away>,
    Reach,
    crate::old_members::Current,
)> {
    let hosts = inv.with_role(Role::Etcd);
    let reach = operations::reach::reach(inv, ctx.host_keys(), &hosts, ctx.connect).await;
    // A member whose host key changed is neither healthy nor failed until the operator says so:
    // heal neither restarts nor replaces it (a watch prints the refusal each round).
    reach.refuse_changed_host_keys()?;
    let records = maintenance_record::maintenance_records(state);
    let obs = match reach.observe(inv, &[]).await {
        Ok(obs) => obs,
        Err(e) => {
            // No running member could even list the members: quorum is lost. When a
            // maintenance stopped a member quorum needs, completing it comes first.
            let away: Vec<Away> = records
                .iter()
                .map(|(h, r)| Away {
                    member: h.clone(),
                    stage: r.stage.to_string(),
                    healthy: false,
                    reachable: reach.transports.contains_key(h),
                })
                .collect();
            let running = hosts
                .iter()
                .filter(|h| !records.contains_key(&h.name) && reach.etcd_active(&h.name))
                .count();
            if let Some(Action::Alert { message, code }) =
                complete_maintenance_first(hosts.len(), running, &away)
            {
                return Err(refuse(code, format!("refused by quorum: {message}")));
            }
            return Err(e);
        }
    };
    let mut counts = obs.counts(&maintenance_record::in_maintenance(state), None);
    if let Some((h, r)) = maintenance_record::maintenance_records(state).iter().next() {
        counts.foreign_operation = Some(format!("maintenance of {h} (stage {})", r.stage));
    }
    let tls = crate::etcd::client::client_tls(&state.path.join("pki"))?;
    let maint = maintenance_record::in_maintenance(state);
    let mut signals = Vec::new();
    let mut away = Vec::new();
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
            // Never remediated; counted healthy for quorum only when its etcd answers healthy.
            away.push(Away {
                member: name.clone(),
                stage: records
                    .get(&name)
                    .map(|r| r.stage.to_string())
                    .unwrap_or_default(),
                healthy: obs.is_healthy(m),
                reachable: reach.transports.contains_key(&name),
            });
            continue;
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
    let current = crate::old_members::Current {
        cluster_id: Some(obs.members.header.cluster_id).filter(|c| *c != 0),
        member_urls: obs
            .members
            .members
            .iter()
            .flat_map(|m| m.peer_urls.iter().cloned())
            .collect(),
    };
    Ok((counts, signals, away, reach, current))
}

/// Old members first (one change per round, most broken first): the first zombie, or old
/// member attested dead that answers again, on an inventory host is fenced through the manager
/// (H2); `Ok(None)` when there is none. A peer of another cluster that no inventory host runs
/// is an alert only (printed here, heal's exit code then 7 when nothing else is to be done).
async fn old_members_first(
    ctx: &Context<'_>,
    reach: &Reach,
    current: &crate::old_members::Current,
    flags: &Flags,
    verb: &str,
) -> anyhow::Result<(Option<i32>, bool)> {
    let (inv, state) = (ctx.inv, ctx.state);
    let mut open: std::collections::BTreeMap<String, crate::exec::connect::Connection> = reach
        .transports
        .iter()
        .map(|(h, t)| (h.clone(), Ok(t.clone())))
        .collect();
    for (h, e) in &reach.unreachable {
        open.insert(h.clone(), Err(e.clone().into()));
    }
    let g =
        crate::old_members::gather(inv, &state.view(), ctx.host_keys(), ctx.connect, &open, current).await;
    let stamp = now_rfc3339();
    let alerts: Vec<&crate::old_members::Finding> =
        g.findings.iter().filter(|f| f.problem && !f.fenceable).collect();
    for f in &alerts {
        println!("{stamp} heal: alert: {}", f.problem_line());
    }
    let Some(f) = g.findings.iter().find(|f| f.fenceable) else {
        return Ok((None, !alerts.is_empty()));
    };
    let host = f.host.clone().unwrap_or_default();
    println!("{stamp} heal: {verb} fence {host} for good: {}", f.problem_line());
    let reference = current
        .cluster_id
        .or_else(|| u64::from_str_radix(&g.history.cluster_id, 16).ok());
    let etcd_role = inv.host(&host).is_some_and(|h| h.has(Role::Etcd));
    let guard = match reference {
        Some(c) if etcd_role => crate::old_members::retire::Guard::NotOfCluster(c),
        Some(c) => crate::old_members::retire::Guard::NotOfClusterOrSilent(c),
        None => crate::old_members::retire::Guard::None,
    };
    let mut op = fence::FenceOld {
        host,
        finding: f.clone(),
        guard,
        transports: g.transports.clone(),
    };
    Ok((Some(manager::run(&mut op, ctx, flags).await?), !alerts.is_empty()))
}

/// One round: look, decide, act (or print), then mirror changed retry records onto the Nodes.
pub async fn round(ctx: &Context<'_>, opts: &Options) -> anyhow::Result<i32> {
    let result = act(ctx, opts).await;
    publish_records(ctx, opts).await;
    result
}

async fn act(ctx: &Context<'_>, opts: &Options) -> anyhow::Result<i32> {
    let (inv, state) = (ctx.inv, ctx.state);
    let (counts, signals, away, reach, current) = gather(inv, state, ctx).await?;
    let verb = if opts.dry_run { "would" } else { "will" };
    // heal decided to act (its own dry run changes nothing): there is no one to ask.
    let flags = Flags {
        dry_run: opts.dry_run,
        yes: true,
        ..Flags::default()
    };
    let (fenced, dialled) = old_members_first(ctx, &reach, &current, &flags, verb).await?;
    if let Some(code) = fenced {
        return Ok(code);
    }
    let now = unix_now();
    let mut records = load_records(state);
    observe_records(&mut records, &signals, &inv.heal, now);
    if !opts.dry_run {
        save_records(state, &records)?;
    }
    let decision = decide(&counts, &signals, &records, &away, &inv.heal, now);
    let stamp = now_rfc3339();
    match &decision.action {
        Action::Nothing if dialled => {
            println!(
                "{stamp} heal: nothing else to do: {} (the peer of another cluster above is not on an inventory host: only its operator can stop it)",
                decision.reason
            );
            Ok(exit::ZOMBIE)
        }
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
            let mut op = Restart {
                member: member.clone(),
                reason: decision.reason.clone(),
                transports: reach.transports.clone(),
                now,
            };
            manager::run(&mut op, ctx, &flags).await
        }
        Action::Replace { member } => {
            println!(
                "{stamp} heal: {verb} replace {member} on its own host: {}",
                decision.reason
            );
            drop(reach);
            let mut op = crate::operations::replace::Replace::new(crate::operations::replace::Options {
                member: member.clone(),
                reuse_host: true,
                ..Default::default()
            });
            match manager::run(&mut op, ctx, &flags).await {
                Ok(code) => Ok(code),
                Err(e) => {
                    let code = crate::exit::exit_code_of(&e);
                    if code != exit::REFUSED && code != exit::NEEDS_INPUT && !opts.dry_run {
                        record_failure(state, member, &format!("{e:#}"))?;
                    }
                    Err(e)
                }
            }
        }
    }
}

/// heal's restart of one member, as an [`Operation`] of one step (`steps.rs`): recorded in
/// `heal.json` first, then `systemctl restart`, then the member must answer healthy.
pub struct Restart {
    pub member: String,
    /// Why heal restarts it.
    pub reason: String,
    /// The connections heal's look made.
    pub transports: Transports,
    /// Unix seconds of the decision.
    pub now: u64,
}

#[async_trait(?Send)]
impl Operation for Restart {
    fn kind(&self) -> &'static str {
        "heal"
    }
    fn command(&self) -> String {
        format!("heal: restart etcd on {}", self.member)
    }
    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(None, &format!("heal-{}", self.member)))
    }
    async fn reach(&mut self, _ctx: &Context<'_>) -> anyhow::Result<Transports> {
        Ok(self.transports.clone())
    }
    async fn plan(&mut self, ctx: &Context<'_>, _run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        Ok(Planned {
            summary: format!("heal: restart etcd on {}: {}\n", self.member, self.reason),
            decisions: serde_json::json!({ "action": "restart", "member": self.member, "reason": self.reason }),
            steps: steps::restart(ctx.state, &self.member, self.now),
            confirmation: Confirmation::None,
            resume: "hactl heal --once".into(),
            mirror_hosts: vec![self.member.clone()],
            decided: vec![],
        })
    }
    async fn report(
        &mut self,
        ctx: &Context<'_>,
        _run: &RunId,
        _o: &Outcome,
        _took: Duration,
    ) -> anyhow::Result<Report> {
        let mut r = load_records(ctx.state);
        restarted_ok(&mut r, &self.member);
        save_records(ctx.state, &r)?;
        Ok(Report {
            code: exit::OK,
            text: format!(
                "{} heal: {} is healthy after a restart\n",
                now_rfc3339(),
                self.member
            ),
        })
    }
}
