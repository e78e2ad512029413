//! The operation manager: the one driver every day-two operation runs through (recover, replace,
//! remove, maintenance start and complete, heal's restart and replace, `certs rotate-ca`,
//! `adopt`, `reset`).
//!
//! An operation ([`Operation`]) says what is particular to it: its kind and command, its run
//! (new or resumed), the hosts it reaches, its plan (observations and inputs through its pure
//! `decide`, then its steps as data, with the confirmation, the summary and the command that
//! resumes it) and the report it ends with. The driver ([`run`]) owns what is the same for all:
//!
//! 1. the run id, then the hosts (read-only);
//! 2. on a live run, the one lock ([`super::lock`]), locally and on the hosts that answered;
//! 3. the plan (read-only; a refusal here changes nothing);
//! 4. a dry run prints the plan (text, or `-o json`: [`plan_json`]) and stops;
//! 5. a live run prints the summary and the steps on stderr and asks (a new run only; `--yes`
//!    skips the y/N; a typed name is never skipped);
//! 6. the journal (a new run saves its decisions in `runs/<run>/decisions.json`), Ctrl-C between
//!    steps, the runner with `step N/M` on stderr;
//! 7. the report, or the exit code of a stopped run ([`exit_code`]) with the resume line;
//! 8. the lock given back, whatever happened.
//!
//! Why a trait and not a table of data: an operation's plan depends on what it observed after
//! the lock was taken, and its report on what its steps found, so an operation is a few async
//! calls the driver makes in a fixed order around the parts it owns; the steps themselves, and
//! everything the driver prints or journals, are data.
//!
//! Invariants: nothing is changed before the lock is held and (on a new run) the operator
//! confirmed; a dry run takes no lock, writes no journal and sends only read-only commands; every
//! stop after a change prints the command that resumes the run.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::journal::{Journal, StepState};
use super::lock::{self, ClusterLock, Owner};
use super::run_dir::RunDir;
use super::runner::{self, JournaledStep, Outcome, RunOptions, Stage, StepFailed, StepId};
use crate::exec::connect::ConnectSettings;
use crate::exec::Transports;
use crate::exit;
use crate::inventory::Inventory;
use crate::state::StateDir;

/// The cluster identity ([`crate::identity`]) of the hosts an operation reached, against its
/// state directory: a host whose trust files hold no CA the state knows is refused (exit 2).
pub(crate) async fn check_identity(ctx: &Context<'_>, transports: &Transports) -> anyhow::Result<()> {
    let cmd = crate::identity::probe_command();
    let asks = transports
        .iter()
        .filter(|(h, _)| ctx.inv.host(h).is_some())
        .map(|(h, t)| {
            let (h, t, cmd) = (h.clone(), t.clone(), cmd.clone());
            async move { (h, t.run(&cmd).await) }
        });
    let mut facts = std::collections::BTreeMap::new();
    for (host, out) in futures::future::join_all(asks).await {
        match out {
            Ok(out) if out.success() => {
                facts.insert(host, crate::facts::parse(&out.stdout_str()));
            }
            // A host that cannot be asked is the operation's own business (its reach decides).
            Ok(out) => tracing::debug!("{host}: trust files not read: {}", out.stderr_str().trim()),
            Err(e) => tracing::debug!("{host}: trust files not read: {e}"),
        }
    }
    let expected = crate::identity::Expected::from_pki_dir(&ctx.state.file("pki"))?;
    let findings = crate::identity::check(&expected, &facts);
    if findings.strangers.is_empty() {
        return Ok(());
    }
    let findings = crate::identity::Findings {
        cluster_ids: Default::default(),
        ..findings
    };
    Err(exit::refuse(
        exit::REFUSED,
        crate::identity::refusal(&findings, &expected, &ctx.state.path, &ctx.inv.source),
    ))
}

/// The `apiVersion` of every JSON document hactl prints ([`crate::output::API_VERSION`]).
pub const API_VERSION: &str = crate::output::API_VERSION;
/// The `kind` of a dry run's document.
pub const PLAN_KIND: &str = "OperationPlan";

/// What every operation works with.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub inv: &'a Inventory,
    pub state: &'a StateDir,
    pub connect: &'a ConnectSettings,
    /// Set by the driver for a dry run: [`Context::host_keys`] then records no host key.
    pub dry_run: bool,
}

impl<'a> Context<'a> {
    pub fn new(inv: &'a Inventory, state: &'a StateDir, connect: &'a ConnectSettings) -> Self {
        Context {
            inv,
            state,
            connect,
            dry_run: false,
        }
    }

    /// How an operation's reach checks host keys: pinned on first use on a live run; checked
    /// and never recorded on a dry run (which writes nothing).
    pub fn host_keys(&self) -> crate::exec::connect::HostKeys<'a> {
        if self.dry_run {
            crate::exec::connect::HostKeys::Check(self.state)
        } else {
            crate::exec::connect::HostKeys::Pin(self.state)
        }
    }
}

/// Asks the operator a y/N question: `Ok` is yes.
pub type Ask = Arc<dyn Fn(&str) -> anyhow::Result<()> + Send + Sync>;

/// How a run was asked for: the flags every day-two command shares.
#[derive(Clone, Default)]
pub struct Flags {
    /// `--dry-run`: print the plan, change nothing.
    pub dry_run: bool,
    /// `--yes`/`-y`: do not ask (a typed confirmation is still asked).
    pub yes: bool,
    /// `-o json` (with `--dry-run` only: the command line refuses it without).
    pub json: bool,
    /// `--steal-lock RUN`: take the cluster lock over from run RUN on another machine.
    pub steal_lock: Option<String>,
    /// Set to stop between steps as a Ctrl-C does (tests).
    pub stop: Option<Arc<AtomicBool>>,
    /// Asks y/N (default: the terminal, [`crate::output::confirm`]; tests answer here).
    pub ask: Option<Ask>,
}

/// A run's id, and whether it continues an earlier run (`--resume`, or a CA rotation whose
/// marker names its run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunId {
    pub id: String,
    pub resumed: bool,
}

impl RunId {
    /// `--resume RUN`, or a new run `<prefix>-<time>` (`prefix` may be empty: recover's id
    /// becomes part of the etcd token).
    pub fn new_or_resumed(resume: Option<&str>, prefix: &str) -> RunId {
        match resume {
            Some(r) => RunId {
                id: r.to_string(),
                resumed: true,
            },
            None => RunId {
                id: super::journal::new_run_id(prefix),
                resumed: false,
            },
        }
    }
}

/// What the operator is asked before a new live run changes anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Runs without asking (`maintenance complete` brings a host back).
    None,
    /// A y/N on a terminal: `--yes` skips it; no terminal and no `--yes` needs input (exit 3).
    Ask(String),
    /// The cluster's name typed on stdin (`recover --force-destructive`); `--yes` does not skip it.
    TypeName { what: String, name: String },
    /// The cluster's name typed on a terminal (`reset`); `--yes` skips it, and with neither a
    /// terminal nor `--yes` the run needs input (exit 3).
    TypeNameUnlessYes { what: String, name: String },
}

/// An operation's plan: what the driver prints, asks, journals and runs.
pub struct Planned {
    /// What the run does, in a few lines (ends with a newline).
    pub summary: String,
    /// The decisions as data: saved as `runs/<run>/decisions.json` when a new run starts (a
    /// resume rebuilds the same steps from them), and the `decisions` of the dry run's JSON.
    pub decisions: serde_json::Value,
    pub steps: Vec<JournaledStep>,
    pub confirmation: Confirmation,
    /// The command line that continues this run.
    pub resume: String,
    /// Hosts that get a copy of each journal line.
    pub mirror_hosts: Vec<String>,
    /// Journal entries that record the decisions (recover's `R0.1`…, replace's `P0`), appended
    /// `done` when a new run starts, before its first step.
    pub decided: Vec<(StepId, serde_json::Value)>,
}

/// How a run ended, for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// [`exit::OK`], or [`exit::DEGRADED`] when the verification afterwards found the cluster
    /// degraded.
    pub code: i32,
    /// Printed on stdout.
    pub text: String,
}

/// One day-two operation, as the driver sees it ([`run`] calls these in order).
#[async_trait(?Send)]
pub trait Operation {
    /// Its name: `remove`, `replace`, … (run ids, messages).
    fn kind(&self) -> &'static str;
    /// What runs, for the lock's owner: `remove cp4`.
    fn command(&self) -> String;
    /// The run: a new one, or the one being resumed.
    fn run_id(&self, ctx: &Context<'_>) -> anyhow::Result<RunId>;
    /// Read-only: connects to the hosts it needs. The lock is taken on those of them that are
    /// hosts of the cluster ([`lock::cluster_hosts`]).
    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports>;
    /// Read-only: observes and decides (its pure `decide`), or reloads a resumed run's
    /// decisions; builds the steps. A refusal here changes nothing.
    async fn plan(
        &mut self,
        ctx: &Context<'_>,
        run: &RunId,
        transports: &Transports,
    ) -> anyhow::Result<Planned>;
    /// A live run's journal, before its first step: for acts that journal their own sub-steps.
    fn started(&mut self, _journal: &Journal) -> anyhow::Result<()> {
        Ok(())
    }
    /// After every step ran (done or skipped): the report.
    async fn report(
        &mut self,
        ctx: &Context<'_>,
        run: &RunId,
        outcome: &Outcome,
        took: Duration,
    ) -> anyhow::Result<Report>;
    /// What to add when a step failed (an identity error, what a rollback means for the next try).
    fn explain(&self, _failed: &StepFailed) -> Option<String> {
        None
    }
    /// Whether the driver checks the hosts it reached against the state directory's CAs
    /// before anything else ([`crate::identity`]). Only `adopt` says no: it builds the state
    /// directory from what the hosts trust, and checks their agreement itself.
    fn checks_identity(&self) -> bool {
        true
    }
}

/// The exit code of a run the runner stopped: 4 once anything changed (3 kept when a step asks
/// for operator input); before any change, a refusal keeps its code, a failed check or precheck
/// is a refusal (2), anything else a failure (1); a Ctrl-C is a stop after changes (4) or before
/// them (1).
pub fn exit_code(failed: &StepFailed) -> i32 {
    let refusal = failed.inner_refusal();
    match failed.stage {
        Stage::Interrupted if failed.changed => exit::FAILED_AFTER_CHANGES,
        Stage::Interrupted => exit::FAILED,
        _ if refusal == Some(exit::NEEDS_INPUT) => exit::NEEDS_INPUT,
        _ if failed.changed => exit::FAILED_AFTER_CHANGES,
        _ => match refusal {
            Some(code) => code,
            None if failed.stage == Stage::Precheck || failed.check_only => exit::REFUSED,
            None => exit::FAILED,
        },
    }
}

/// The message of a stopped run: what stopped it, what a rollback did, whether anything changed
/// and the command that continues it.
fn stopped_message(kind: &str, failed: &StepFailed, explain: Option<String>, resume: &str) -> String {
    let mut m = match failed.stage {
        Stage::Interrupted => format!("{kind} interrupted before step {} (Ctrl-C)", failed.step),
        _ => format!("{kind} stopped: {failed}: {:#}", failed.source),
    };
    if let Some(e) = explain {
        m.push_str(&format!("\n{e}"));
    }
    match &failed.rolled_back {
        Some(Ok(what)) => m.push_str(&format!("\nrolled back: {what}")),
        Some(Err(why)) => m.push_str(&format!("\nthe rollback failed too: {why}")),
        None => {}
    }
    if failed.changed {
        m.push_str(&format!(
            "\nchanges were made: fix the cause and continue with `{resume}`"
        ));
    } else {
        m.push_str("\nnothing was changed");
    }
    m
}

/// The document `--dry-run -o json` prints for every operation:
///
/// ```text
/// {"apiVersion": "hactl.io/v1alpha1", "kind": "OperationPlan",   (added when printed)
///  "operation": "remove", "run": "remove-…", "resumed": false,
///  "summary": "…", "confirmation": "…" | null, "resume": "hactl …",
///  "decisions": {…} | null,
///  "steps": [ {"id", "code", "title", "host", "skipWhen", "checkFirst", "acts", "verify",
///              "onFailure", "group", "changesCluster"} ]}
/// ```
/// (each step as [`JournaledStep::to_json`]). Unknown values are `null`, never `""` or `0`.
pub fn plan_json(kind: &str, run: &RunId, planned: &Planned, inv: &Inventory) -> serde_json::Value {
    let steps: Vec<serde_json::Value> = planned.steps.iter().map(|s| s.to_json(sudo(inv, s))).collect();
    serde_json::json!({
        "operation": kind,
        "run": run.id,
        "resumed": run.resumed,
        "summary": planned.summary.trim_end(),
        "confirmation": match &planned.confirmation {
            Confirmation::None => None,
            Confirmation::Ask(q) => Some(q.clone()),
            Confirmation::TypeName { what, .. } | Confirmation::TypeNameUnlessYes { what, .. } => {
                Some(what.clone())
            }
        },
        "resume": planned.resume,
        "decisions": planned.decisions,
        "steps": steps,
    })
}

fn sudo(inv: &Inventory, s: &JournaledStep) -> bool {
    s.host
        .as_deref()
        .and_then(|h| inv.host(h))
        .is_some_and(|h| h.ssh.sudo)
}

/// The plan as text: the summary, then every step as the runner sends it.
pub fn plan_text(planned: &Planned, inv: &Inventory) -> String {
    let mut out = planned.summary.clone();
    for s in &planned.steps {
        out.push_str(&s.render(sudo(inv, s)));
    }
    out
}

fn confirm(c: &Confirmation, flags: &Flags) -> anyhow::Result<()> {
    match c {
        Confirmation::None => Ok(()),
        Confirmation::Ask(_) if flags.yes => Ok(()),
        Confirmation::Ask(what) => match &flags.ask {
            Some(ask) => ask(what),
            None => crate::output::confirm(what),
        },
        Confirmation::TypeName { what, name } => type_name(what, name),
        Confirmation::TypeNameUnlessYes { .. } if flags.yes => Ok(()),
        Confirmation::TypeNameUnlessYes { what, name } => match &flags.ask {
            Some(ask) => ask(what),
            None if !std::io::IsTerminal::is_terminal(&std::io::stdin()) => Err(exit::refuse(
                exit::NEEDS_INPUT,
                format!("{what}; no terminal to confirm on: run again with --yes"),
            )),
            None => type_name(what, name),
        },
    }
}

/// Asks for the cluster's name on stdin: `Ok` when it was typed.
fn type_name(what: &str, name: &str) -> anyhow::Result<()> {
    use std::io::Write;
    eprint!("{what}. Type the cluster name to proceed: ");
    std::io::stderr().flush().ok();
    let answer = crate::bounded::read_answer(std::io::stdin().lock())?;
    if answer.trim() == name {
        Ok(())
    } else {
        Err(exit::refuse(
            exit::DECLINED,
            "the name did not match: not confirmed, nothing was changed",
        ))
    }
}

/// Installs the Ctrl-C handler once per process (heal `--watch` runs many operations).
fn stop_on_ctrl_c() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(crate::exec::run::stop_between_steps_on_ctrl_c);
}

/// Runs `op`: reach, lock, plan, print or confirm, journal, run, report; gives the lock back.
/// Returns the exit code of a finished run; a stopped run is an error carrying its code.
pub async fn run<O: Operation + ?Sized>(op: &mut O, ctx: &Context<'_>, flags: &Flags) -> anyhow::Result<i32> {
    let ctx = &Context {
        dry_run: flags.dry_run,
        ..*ctx
    };
    let run = op.run_id(ctx)?;
    let transports = op.reach(ctx).await?;
    // Before the lock and the plan: hosts that belong to another cluster are refused.
    if op.checks_identity() {
        check_identity(ctx, &transports).await?;
    }
    if flags.dry_run {
        let planned = op.plan(ctx, &run, &transports).await?;
        if planned.steps.is_empty() && !flags.json {
            print!("{}", planned.summary);
            return Ok(exit::OK);
        }
        if flags.json {
            crate::output::print_document(PLAN_KIND, &plan_json(op.kind(), &run, &planned, ctx.inv))?;
        } else {
            print!("{}", plan_text(&planned, ctx.inv));
            println!("(dry run: nothing was changed)");
        }
        return Ok(exit::OK);
    }
    let lock = ClusterLock::acquire(
        ctx.state,
        &transports,
        &lock::cluster_hosts(ctx.inv),
        Owner::new(&op.command(), &run.id),
        flags.steal_lock.as_deref(),
    )
    .await
    .map_err(|e| anyhow::Error::new(e.refusal()))?;
    let result = live(op, ctx, flags, &run, &transports).await;
    lock.release().await;
    result
}

async fn live<O: Operation + ?Sized>(
    op: &mut O,
    ctx: &Context<'_>,
    flags: &Flags,
    run: &RunId,
    transports: &Transports,
) -> anyhow::Result<i32> {
    let kind = op.kind();
    let planned = op.plan(ctx, run, transports).await?;
    if planned.steps.is_empty() {
        // Nothing to do (`maintenance complete` of a host not in maintenance): no journal.
        print!("{}", planned.summary);
        return Ok(exit::OK);
    }
    let mut journal = if run.resumed {
        Journal::open_or_create(ctx.state, &run.id, crate::exec::Mode::Live)?
    } else {
        eprint!("{}", planned.summary);
        for s in &planned.steps {
            eprintln!(
                "  [{}] {}{}",
                s.id,
                s.title,
                s.host.as_ref().map(|h| format!(" (on {h})")).unwrap_or_default()
            );
        }
        confirm(&planned.confirmation, flags)?;
        let j = Journal::create(ctx.state, &run.id)?;
        if !planned.decisions.is_null() {
            let json = serde_json::to_string_pretty(&planned.decisions)?;
            ctx.state.write_file(
                RunDir::new(ctx.state, &run.id).decisions_relative(),
                format!("{json}\n").as_bytes(),
                0o600,
            )?;
        }
        for (step, outputs) in &planned.decided {
            let e = j.append(&step.to_string(), StepState::Done, None, "", outputs.clone())?;
            super::journal::mirror(transports, &planned.mirror_hosts, &e).await;
        }
        j
    };
    eprintln!(
        "{kind}: run {} (journal {})",
        run.id,
        journal
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    op.started(&journal)?;
    stop_on_ctrl_c();
    let started = Instant::now();
    let options = RunOptions {
        mirror_hosts: planned.mirror_hosts.clone(),
        stop: flags.stop.clone(),
    };
    match runner::run_with_progress(&planned.steps, transports, &mut journal, &options).await {
        Ok(outcome) => {
            let report = op.report(ctx, run, &outcome, started.elapsed()).await?;
            print!("{}", report.text);
            Ok(report.code)
        }
        Err(failed) => {
            let code = exit_code(&failed);
            let message = stopped_message(kind, &failed, op.explain(&failed), &planned.resume);
            Err(exit::refuse(code, message))
        }
    }
}

#[cfg(test)]
mod tests;
