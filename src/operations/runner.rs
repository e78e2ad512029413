//! The runner of journaled steps: the unit of every day-two operation (recover, replace, remove,
//! maintenance, heal's restart, CA rotation), driven by [`super::manager`].
//!
//! A [`JournaledStep`] is data, like a plan's steps: a `postcondition` (a read-only probe: when it
//! holds, the step's work is already done), a `precheck` (must hold before acting), the `act`
//! itself (remote steps on its host, or operator-side actions), a `verify` wait, and what undoes
//! the act when it fails ([`OnFailure`]: a rollback is data too). The runner journals `started`,
//! then either `skipped` (the postcondition holds) or runs the precheck, the act and the verify
//! and journals `done` (or `failed`, with the rollback's outcome). Each operation names its steps
//! with an enum ([`StepCode`], declared with [`step_codes!`]), so a step's code lives in one place.
//!
//! Invariants: every run, first or resumed, re-evaluates each step's postcondition on the hosts
//! and never trusts the journal alone; a step whose postcondition holds does nothing; the text a
//! dry run prints for a step is what the runner sends; a Ctrl-C stops the run between steps,
//! never inside one.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Context as _};
use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::journal::{self, Journal, StepState};
use crate::exec::run::wait;
use crate::exec::{Transport, Transports, UploadOutcome};
use crate::plan::{Check, RemoteCommand, Step};

/// The code of one step of an operation (`RM3`, `P7`, `R1.3`, `stop-etcd`). Each operation lists
/// its steps as an enum ([`step_codes!`]), so the codes the journal, the dry run,
/// `HACTL_CRASH_AFTER` and the messages use are written once.
pub trait StepCode: Copy + fmt::Debug + Send + Sync + 'static {
    /// The code as the journal writes it.
    fn code(self) -> &'static str;
    /// The step acting for `host`: `RM3@cp4`.
    fn at(self, host: &str) -> StepId {
        StepId {
            code: self.code(),
            text: format!("{}@{host}", self.code()),
        }
    }
    /// The step for one thing of several: `stop-etcd`, `stage-Drain`.
    fn with(self, what: &str) -> StepId {
        StepId {
            code: self.code(),
            text: format!("{}-{what}", self.code()),
        }
    }
}

/// A step's id in a run: its [`StepCode`], with the host it acts for and a part when one code
/// runs several times (`R1.2@cp1:manifests`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepId {
    code: &'static str,
    text: String,
}

impl StepId {
    /// The step's code (`R1.2` of `R1.2@cp1:manifests`).
    pub fn code(&self) -> &'static str {
        self.code
    }
    /// One part of the step's work: `R1.2@cp1` → `R1.2@cp1:manifests`.
    pub fn part(mut self, part: &str) -> StepId {
        self.text.push(':');
        self.text.push_str(part);
        self
    }
}

impl<C: StepCode> From<C> for StepId {
    fn from(c: C) -> StepId {
        StepId {
            code: c.code(),
            text: c.code().to_string(),
        }
    }
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Declares an operation's step codes: an enum, its [`StepCode`] (the code of each variant), the
/// list of every code in order (`ALL`) and the reverse lookup (`from_code`).
///
/// ```ignore
/// step_codes! {
///     /// The steps of `hactl remove`.
///     pub enum Rm { Balancers = "RM1", Drain = "RM2" }
/// }
/// ```
#[macro_export]
macro_rules! step_codes {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($(#[$vm:meta])* $variant:ident = $code:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name { $($(#[$vm])* $variant),+ }
        impl $crate::operations::runner::StepCode for $name {
            fn code(self) -> &'static str {
                match self { $($name::$variant => $code),+ }
            }
        }
        #[allow(dead_code)]
        impl $name {
            /// Every step code, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The step whose code is `code`.
            pub fn from_code(code: &str) -> Option<$name> {
                match code { $($code => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

/// Work done on the operator machine (streaming a snapshot, writes through an etcd client…).
#[async_trait]
pub trait LocalAct: Send + Sync {
    /// One line for the plan: what it does and against which host.
    fn describe(&self) -> String;
    /// Performs it; the returned value is journaled as the step's outputs.
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value>;
    /// As a postcondition: whether the work is already done.
    async fn holds(&self, _transports: &Transports) -> anyhow::Result<bool> {
        Ok(false)
    }
}

/// One piece of a step's work.
#[derive(Clone)]
pub enum Act {
    /// A plan step on the step's host.
    Remote(Step),
    /// Work on the operator machine.
    Local(Arc<dyn LocalAct>),
}

/// A postcondition or precheck.
#[derive(Clone)]
pub enum Condition {
    /// Holds when the read-only command exits 0 on the step's host.
    Remote(RemoteCommand),
    Local(Arc<dyn LocalAct>),
}

/// What undoes a step's act when it fails (replace's P7: the learner that did not catch up is
/// removed again). The runner runs it after journaling the failure, unless a safety rule refused.
#[async_trait]
pub trait OnFailure: Send + Sync {
    /// One line for the plan: what it undoes, on which host.
    fn describe(&self) -> String;
    /// Undoes the act that failed with `cause`; the returned value is journaled.
    async fn undo(&self, cause: &anyhow::Error, transports: &Transports)
        -> anyhow::Result<serde_json::Value>;
}

/// One resumable step.
#[derive(Clone)]
pub struct JournaledStep {
    /// Unique within the run: `R2.4@cp1`.
    pub id: String,
    /// The step's code (`R2.4`): what the operation's enum names it.
    pub code: &'static str,
    pub title: String,
    /// The host it acts on; `None` when it runs on the operator machine only.
    pub host: Option<String>,
    pub postcondition: Option<Condition>,
    pub precheck: Option<RemoteCommand>,
    pub act: Vec<Act>,
    pub verify: Option<Check>,
    /// False for steps that change nothing the cluster serves from (a trial restore in a
    /// scratch dir): their failure before any other change is a refusal, not a failure after
    /// changes.
    pub changes_cluster: bool,
    /// `(group, lane)`: consecutive steps of one group run at once, one lane at a time per lane
    /// (see [`run`]). The lane is the host the work is for, so only work on different hosts
    /// overlaps.
    pub group: Option<(String, String)>,
    /// Run when the act or its verification fails (not when a safety rule refused).
    pub on_failure: Option<Arc<dyn OnFailure>>,
}

impl JournaledStep {
    /// A step `id` (a [`StepCode`], or a [`StepId`] from [`StepCode::at`]) acting on `host`.
    pub fn new(id: impl Into<StepId>, title: impl Into<String>, host: Option<&str>) -> Self {
        let id = id.into();
        JournaledStep {
            code: id.code(),
            id: id.to_string(),
            title: title.into(),
            host: host.map(str::to_string),
            postcondition: None,
            precheck: None,
            act: Vec::new(),
            verify: None,
            changes_cluster: true,
            group: None,
            on_failure: None,
        }
    }
    pub fn done_when(mut self, cmd: RemoteCommand) -> Self {
        self.postcondition = Some(Condition::Remote(RemoteCommand {
            read_only: true,
            ..cmd
        }));
        self
    }
    pub fn done_when_local(mut self, act: Arc<dyn LocalAct>) -> Self {
        self.postcondition = Some(Condition::Local(act));
        self
    }
    pub fn precheck(mut self, cmd: RemoteCommand) -> Self {
        self.precheck = Some(RemoteCommand {
            read_only: true,
            ..cmd
        });
        self
    }
    pub fn run(mut self, cmd: RemoteCommand) -> Self {
        self.act.push(Act::Remote(Step::Run(cmd)));
        self
    }
    pub fn step(mut self, step: Step) -> Self {
        self.act.push(Act::Remote(step));
        self
    }
    pub fn local(mut self, act: Arc<dyn LocalAct>) -> Self {
        self.act.push(Act::Local(act));
        self
    }
    pub fn no_cluster_change(mut self) -> Self {
        self.changes_cluster = false;
        self
    }
    pub fn verify(mut self, check: Check) -> Self {
        self.verify = Some(check);
        self
    }
    /// Undo the act with `undo` when it fails ([`OnFailure`]).
    pub fn on_failure(mut self, undo: Arc<dyn OnFailure>) -> Self {
        self.on_failure = Some(undo);
        self
    }
    /// Runs alongside the neighbouring steps of the same group that are in other lanes.
    pub fn group(mut self, group: impl Into<String>, lane: impl Into<String>) -> Self {
        self.group = Some((group.into(), lane.into()));
        self
    }

    /// The exact text of the step with the host's sudo setting: what a dry run prints.
    pub fn render(&self, sudo: bool) -> String {
        let mut out = format!("[{}] {}", self.id, self.title);
        match &self.host {
            Some(h) => out.push_str(&format!(" (on {h})\n")),
            None => out.push_str(" (on the operator machine)\n"),
        }
        match &self.postcondition {
            Some(Condition::Remote(c)) => out.push_str(&format!("    skip when: {}\n", c.line(sudo))),
            Some(Condition::Local(a)) => out.push_str(&format!("    skip when: {}\n", a.describe())),
            None => {}
        }
        if let Some(c) = &self.precheck {
            out.push_str(&format!("    check first: {}\n", c.line(sudo)));
        }
        for act in &self.act {
            match act {
                Act::Remote(Step::Run(c)) => out.push_str(&format!("    run: {}\n", c.line(sudo))),
                Act::Remote(Step::Upload(u)) => out.push_str(&format!("    write: {u}\n")),
                Act::Remote(Step::Wait(c)) => out.push_str(&format!("    {}\n", c.line(sudo))),
                Act::Remote(Step::Api(r)) => out.push_str(&format!("    api: {r}\n")),
                Act::Local(a) => out.push_str(&format!("    operator: {}\n", a.describe())),
            }
        }
        if let Some(c) = &self.verify {
            out.push_str(&format!("    verify: {}\n", c.line(sudo)));
        }
        if let Some(u) = &self.on_failure {
            out.push_str(&format!("    on failure: {}\n", u.describe()));
        }
        if let Some((g, lane)) = &self.group {
            out.push_str(&format!(
                "    runs alongside the other {g} steps for other hosts than {lane}\n"
            ));
        }
        out
    }

    /// The step as data, with the same content as [`JournaledStep::render`]: what every
    /// operation's `--dry-run -o json` prints per step. Field names are stable:
    /// `{"id", "code", "title", "host" (null: the operator machine), "skipWhen", "checkFirst",
    /// "acts", "verify", "onFailure", "group" ({"name", "lane"} or null), "changesCluster"}`. A
    /// condition or act is `{"kind": "run"|"upload"|"wait"|"operator", ...}` as in `plan -o
    /// json`; an operator act (and `onFailure`) is `{"kind": "operator", "description"}`.
    pub fn to_json(&self, sudo: bool) -> serde_json::Value {
        let run = |c: &RemoteCommand| Step::Run(c.clone()).to_json(sudo);
        let operator =
            |a: &Arc<dyn LocalAct>| serde_json::json!({ "kind": "operator", "description": a.describe() });
        serde_json::json!({
            "id": self.id,
            "code": self.code,
            "title": self.title,
            "host": self.host,
            "skipWhen": match &self.postcondition {
                Some(Condition::Remote(c)) => run(c),
                Some(Condition::Local(a)) => operator(a),
                None => serde_json::Value::Null,
            },
            "checkFirst": self.precheck.as_ref().map(run),
            "acts": self
                .act
                .iter()
                .map(|a| match a {
                    Act::Remote(step) => step.to_json(sudo),
                    Act::Local(a) => operator(a),
                })
                .collect::<Vec<_>>(),
            "verify": self.verify.as_ref().map(|c| c.to_json(sudo)),
            "onFailure": self
                .on_failure
                .as_ref()
                .map(|u| serde_json::json!({ "kind": "operator", "description": u.describe() })),
            "group": self
                .group
                .as_ref()
                .map(|(name, lane)| serde_json::json!({ "name": name, "lane": lane })),
            "changesCluster": self.changes_cluster,
        })
    }

    /// sha256 of the rendered step: the `inputs_sha` of its journal lines.
    pub fn inputs_sha(&self) -> String {
        hex::encode(Sha256::digest(self.render(false).as_bytes()))
    }
}

impl fmt::Display for JournaledStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(false))
    }
}

/// Where a step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Postcondition,
    Precheck,
    Act,
    Verify,
    /// Not started: the operator pressed Ctrl-C while the step before it ran.
    Interrupted,
}

/// A step that failed (or was not started after a Ctrl-C), with whether anything had been
/// changed by this run (in this process or an earlier one) before it: that decides between
/// "failed before any change" and "failed after changes" ([`super::manager::exit_code`]).
#[derive(Debug, thiserror::Error)]
#[error("step {step} {}{}", match stage { Stage::Interrupted => "not started: interrupted (Ctrl-C)".to_string(), s => format!("failed ({s:?})") }, host.as_ref().map(|h| format!(" on {h}")).unwrap_or_default())]
pub struct StepFailed {
    pub step: String,
    /// The step's code.
    pub code: &'static str,
    pub host: Option<String>,
    pub stage: Stage,
    /// Some step of this run is journaled `done`, or this one failed halfway through its act.
    pub changed: bool,
    /// The step changes nothing the cluster serves from (a check, a trial restore).
    pub check_only: bool,
    /// What its [`OnFailure`] did (`Ok`: undone, with what it says; `Err`: the undo failed too).
    pub rolled_back: Option<Result<String, String>>,
    #[source]
    pub source: anyhow::Error,
}

impl StepFailed {
    /// The code of a refusal inside the failure (a safety gate that said no), if any.
    pub fn inner_refusal(&self) -> Option<i32> {
        self.source
            .chain()
            .find_map(|e| e.downcast_ref::<crate::exit::Refusal>())
            .map(|r| r.code)
    }
}

/// What a runner does besides acting: where it mirrors the journal, and when it stops.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Hosts that receive a copy of each journal line.
    pub mirror_hosts: Vec<String>,
    /// Set to stop before the next step, as a Ctrl-C does ([`crate::exec::run::interrupted`]).
    pub stop: Option<Arc<AtomicBool>>,
}

impl RunOptions {
    /// Whether the run must stop before its next step.
    fn stopping(&self) -> bool {
        crate::exec::run::interrupted() || self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
    }
}

/// Counts of what a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub done: Vec<String>,
    pub skipped: Vec<String>,
}

/// Runs `steps` in order, journaling each transition; stops at the first failure.
///
/// Consecutive steps of one [`JournaledStep::group`] run concurrently, one lane per host (the
/// steps of a lane in their order); the next step starts once the whole group has finished. A
/// failure in a group lets the group's other lanes finish, then stops the run. Crash requests
/// (`HACTL_CRASH_AFTER`) are honoured once the step's group has finished, so a crash never
/// leaves a step half done that the journal does not show.
pub async fn run(
    steps: &[JournaledStep],
    transports: &Transports,
    journal: &mut Journal,
    options: &RunOptions,
) -> Result<Outcome, StepFailed> {
    run_inner(steps, transports, journal, options, false).await
}

/// [`run`], with a step counter on stderr: the bar on a terminal, otherwise a line as each step
/// starts (`step 3/11: P3 remove …`).
pub async fn run_with_progress(
    steps: &[JournaledStep],
    transports: &Transports,
    journal: &mut Journal,
    options: &RunOptions,
) -> Result<Outcome, StepFailed> {
    run_inner(steps, transports, journal, options, true).await
}

/// The counter line of step `index` (0-based) of `total`.
pub fn progress_line(index: usize, total: usize, step: &JournaledStep) -> String {
    format!(
        "step {}/{total}: {} {}{}",
        index + 1,
        step.id,
        step.title,
        step.host
            .as_ref()
            .map(|h| format!(" (on {h})"))
            .unwrap_or_default()
    )
}

async fn run_inner(
    steps: &[JournaledStep],
    transports: &Transports,
    journal: &mut Journal,
    options: &RunOptions,
    progress: bool,
) -> Result<Outcome, StepFailed> {
    let changing: std::collections::BTreeSet<&str> = steps
        .iter()
        .filter(|s| s.changes_cluster)
        .map(|s| s.id.as_str())
        .collect();
    let changed = journal
        .entries()
        .map(|e| {
            e.iter()
                .any(|e| e.phase == StepState::Done && changing.contains(e.step.as_str()))
        })
        .unwrap_or(false);
    let shared = Shared {
        transports,
        journal: std::sync::Mutex::new(journal),
        options,
        changed: std::sync::atomic::AtomicBool::new(changed),
        counter: crate::output::Counter::new("", steps.len()),
    };
    let mut outcome = Outcome::default();
    let mut i = 0;
    while i < steps.len() {
        if options.stopping() {
            shared.counter.finish();
            let s = &steps[i];
            return Err(StepFailed {
                step: s.id.clone(),
                code: s.code,
                host: s.host.clone(),
                stage: Stage::Interrupted,
                changed: shared.changed.load(Ordering::SeqCst),
                check_only: !s.changes_cluster,
                rolled_back: None,
                source: anyhow!("stopped before step {} as asked (Ctrl-C)", s.id),
            });
        }
        let mut end = i + 1;
        let group = |s: &JournaledStep| s.group.as_ref().map(|(g, _)| g.clone());
        if let Some(g) = group(&steps[i]) {
            while end < steps.len() && group(&steps[end]).as_ref() == Some(&g) {
                end += 1;
            }
        }
        let batch = &steps[i..end];
        // Lanes in order of first appearance; the steps of a lane in their order.
        let mut lanes: Vec<(Option<&str>, Vec<&JournaledStep>)> = Vec::new();
        for s in batch {
            let lane = s.group.as_ref().map(|(_, l)| l.as_str());
            match lanes.iter_mut().find(|(l, _)| *l == lane) {
                Some((_, steps)) => steps.push(s),
                None => lanes.push((lane, vec![s])),
            }
        }
        let results = futures::future::join_all(lanes.iter().map(|(_, lane)| {
            let shared = &shared;
            async move {
                let mut done = Vec::new();
                for s in lane {
                    if progress && !shared.counter.drawn() {
                        // Off a terminal the counter is a plain line per step.
                        let index = steps.iter().position(|x| std::ptr::eq(x, *s)).unwrap_or(0);
                        eprintln!("{}", progress_line(index, steps.len(), s));
                    }
                    shared.counter.start(&format!("{} {}", s.id, s.title));
                    let acted = one(s, shared).await;
                    shared.counter.inc();
                    done.push((s.id.as_str(), acted?));
                }
                Ok::<_, StepFailed>(done)
            }
        }))
        .await;
        let mut failures = Vec::new();
        let mut finished: Vec<(&str, bool)> = Vec::new();
        for r in results {
            match r {
                Ok(done) => finished.extend(done),
                Err(e) => failures.push(e),
            }
        }
        // Report in plan order, whatever order the lanes finished in.
        finished.sort_by_key(|(id, _)| batch.iter().position(|s| s.id == *id));
        for (id, acted) in &finished {
            if *acted {
                outcome.done.push(id.to_string());
            } else {
                outcome.skipped.push(id.to_string());
            }
        }
        if !failures.is_empty() {
            failures.sort_by_key(|f| batch.iter().position(|s| s.id == f.step));
            for f in &failures[1..] {
                tracing::error!("{f:#}");
            }
            shared.counter.finish();
            return Err(failures.remove(0));
        }
        for (id, _) in &finished {
            journal::crash_if_requested(id);
        }
        i = end;
    }
    shared.counter.finish();
    Ok(outcome)
}

/// What the steps of one run share while some of them run at once.
struct Shared<'a, 'j> {
    transports: &'a Transports,
    journal: std::sync::Mutex<&'j mut Journal>,
    options: &'a RunOptions,
    /// Some step of this run is journaled `done` (here or by an earlier process).
    changed: std::sync::atomic::AtomicBool,
    /// On a terminal, the step under way of how many.
    counter: crate::output::Counter,
}

/// Runs one step: `Ok(true)` when it acted, `Ok(false)` when its postcondition held.
async fn one(step: &JournaledStep, shared: &Shared<'_, '_>) -> Result<bool, StepFailed> {
    let transports = shared.transports;
    let sha = step.inputs_sha();
    let host = step.host.as_deref();
    let changed = || shared.changed.load(Ordering::SeqCst);
    let fail = |stage: Stage, source: anyhow::Error, changed: bool| StepFailed {
        step: step.id.clone(),
        code: step.code,
        host: step.host.clone(),
        stage,
        changed,
        check_only: !step.changes_cluster,
        rolled_back: None,
        source,
    };
    let record = |phase: StepState, outputs: serde_json::Value| {
        let j = shared.journal.lock().expect("the journal lock is never poisoned");
        j.append(&step.id, phase, host, &sha, outputs)
            .with_context(|| format!("failed to journal step {}", step.id))
    };
    let mirror = |entry| async move {
        journal::mirror(transports, &shared.options.mirror_hosts, &entry).await;
    };
    let entry = record(StepState::Started, serde_json::Value::Null)
        .map_err(|e| fail(Stage::Postcondition, e, changed()))?;
    mirror(entry).await;
    let transport = match host {
        Some(h) => match transports.get(h) {
            Some(t) => Some(t.clone()),
            None => {
                return Err(fail(
                    Stage::Postcondition,
                    anyhow!("no connection to {h}"),
                    changed(),
                ))
            }
        },
        None => None,
    };
    let t = transport.as_deref();
    let holds = match &step.postcondition {
        None => false,
        Some(c) => condition(c, t, transports)
            .await
            .map_err(|e| fail(Stage::Postcondition, e, changed()))?,
    };
    if holds {
        tracing::info!("[{}] {}: already done, skipped", step.id, step.title);
        let entry = record(StepState::Skipped, serde_json::Value::Null)
            .map_err(|e| fail(Stage::Postcondition, e, changed()))?;
        mirror(entry).await;
        return Ok(false);
    }
    tracing::info!("[{}] {}", step.id, step.title);
    let outputs = match act(step, t, transports).await {
        Ok(outputs) => outputs,
        Err((stage, e)) => {
            let refused = e
                .chain()
                .any(|c| c.downcast_ref::<crate::exit::Refusal>().is_some());
            let rolled_back = match &step.on_failure {
                Some(u) if !refused && stage != Stage::Precheck => {
                    tracing::warn!("[{}] failed: {e:#}; {}", step.id, u.describe());
                    Some(
                        u.undo(&e, transports)
                            .await
                            .map(|v| match v {
                                serde_json::Value::String(s) => s,
                                v => v.to_string(),
                            })
                            .map_err(|e| format!("{e:#}")),
                    )
                }
                _ => None,
            };
            let entry = record(
                StepState::Failed,
                serde_json::json!({
                    "stage": format!("{stage:?}"),
                    "error": format!("{e:#}"),
                    "rolledBack": rolled_back.as_ref().map(|r| match r {
                        Ok(what) => serde_json::json!({ "done": what }),
                        Err(why) => serde_json::json!({ "failed": why }),
                    }),
                }),
            );
            if let Ok(entry) = entry {
                mirror(entry).await;
            }
            // A refusal comes from a gate that said no before acting: the step changed nothing.
            let changed = changed() || (step.changes_cluster && stage != Stage::Precheck && !refused);
            let mut failed = fail(stage, e, changed);
            failed.rolled_back = rolled_back;
            return Err(failed);
        }
    };
    if step.changes_cluster {
        shared.changed.store(true, Ordering::SeqCst);
    }
    let entry = record(StepState::Done, outputs).map_err(|e| fail(Stage::Act, e, true))?;
    mirror(entry).await;
    Ok(true)
}

async fn condition(
    c: &Condition,
    t: Option<&dyn Transport>,
    transports: &Transports,
) -> anyhow::Result<bool> {
    match c {
        Condition::Remote(cmd) => {
            let t = t.ok_or_else(|| anyhow!("a remote condition needs a host"))?;
            let out = t
                .run(cmd)
                .await
                .with_context(|| format!("failed to run {}", cmd.line(t.sudo())))?;
            Ok(out.success())
        }
        Condition::Local(a) => a.holds(transports).await,
    }
}

async fn act(
    step: &JournaledStep,
    t: Option<&dyn Transport>,
    transports: &Transports,
) -> Result<serde_json::Value, (Stage, anyhow::Error)> {
    if let Some(cmd) = &step.precheck {
        let t = t.ok_or_else(|| (Stage::Precheck, anyhow!("a precheck needs a host")))?;
        let out = t
            .run(cmd)
            .await
            .with_context(|| format!("failed to run {}", cmd.line(t.sudo())))
            .map_err(|e| (Stage::Precheck, e))?;
        if !out.success() {
            return Err((
                Stage::Precheck,
                anyhow!(
                    "precondition does not hold: {}\n{}",
                    cmd.line(t.sudo()),
                    last_lines(&out.stderr_str(), &out.stdout_str())
                ),
            ));
        }
    }
    let mut outputs = serde_json::Value::Null;
    for a in &step.act {
        match a {
            Act::Local(l) => {
                outputs = l.act(transports).await.map_err(|e| (Stage::Act, e))?;
            }
            Act::Remote(s) => {
                let t = t.ok_or_else(|| (Stage::Act, anyhow!("a remote step needs a host")))?;
                if let Some(v) = remote(t, s).await.map_err(|e| (Stage::Act, e))? {
                    outputs = v;
                }
            }
        }
    }
    if let Some(check) = &step.verify {
        let t = t.ok_or_else(|| (Stage::Verify, anyhow!("a verification needs a host")))?;
        wait(t, check).await.map_err(|e| (Stage::Verify, e))?;
    }
    Ok(outputs)
}

/// Runs one plan step; a command whose last stdout line is a JSON object returns it as outputs.
async fn remote(t: &dyn Transport, step: &Step) -> anyhow::Result<Option<serde_json::Value>> {
    let host = t.host();
    match step {
        Step::Upload(u) => {
            let outcome = t
                .upload(u)
                .await
                .with_context(|| format!("failed to write {}", u.path))?;
            if outcome == UploadOutcome::Written {
                tracing::info!("{host}: wrote {u}");
            }
            Ok(None)
        }
        Step::Run(c) => {
            tracing::info!("{host}: run {}", c.line(t.sudo()));
            let out = t
                .run(c)
                .await
                .with_context(|| format!("failed to run {}", c.line(t.sudo())))?;
            if !out.success() {
                return Err(anyhow!(
                    "command exited with {}: {}\n{}",
                    out.status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "no status".into()),
                    c.line(t.sudo()),
                    last_lines(&out.stderr_str(), &out.stdout_str())
                ));
            }
            let stdout = out.stdout_str();
            Ok(stdout
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
                .filter(|v| v.is_object()))
        }
        Step::Wait(check) => {
            wait(t, check).await?;
            Ok(None)
        }
        // Journaled operations send API requests as operator-side acts (`LocalAct`).
        Step::Api(r) => Err(anyhow!(
            "{host}: an API request cannot be a remote act: {r} (a bug in hactl)"
        )),
    }
}

fn last_lines(stderr: &str, stdout: &str) -> String {
    let text = if stderr.trim().is_empty() { stdout } else { stderr };
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Output;

    crate::step_codes! {
        enum T { S1 = "S1", S2 = "S2", A = "A", B = "B", C = "C", D = "D", F = "F", S = "S", R1_3 = "R1.3", R2_4 = "R2.4", R0_2 = "R0.2" }
    }
    use crate::plan::Upload;
    use std::sync::Mutex;

    /// A transport that runs commands in a local shell (the commands are real; the host is this
    /// machine), recording every line it sends.
    struct LocalShell {
        sent: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Transport for LocalShell {
        fn host(&self) -> &str {
            "h1"
        }
        fn sudo(&self) -> bool {
            false
        }
        async fn run(&self, cmd: &RemoteCommand) -> Result<Output, crate::ssh::Error> {
            self.sent.lock().unwrap().push(cmd.line(false));
            let out = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd.line(false))
                .output()
                .await
                .expect("sh");
            Ok(Output {
                status: out.status.code().map(|c| c as u32),
                stdout: out.stdout,
                stderr: out.stderr,
            })
        }
        async fn upload(&self, _u: &Upload) -> Result<UploadOutcome, crate::ssh::Error> {
            Ok(UploadOutcome::Unchanged)
        }
        async fn forward(
            &self,
            _h: &str,
            _p: u16,
        ) -> Result<(u16, crate::ssh::ForwardGuard), crate::ssh::Error> {
            unimplemented!("not used")
        }
    }

    fn setup() -> (
        tempfile::TempDir,
        crate::state::StateDir,
        Arc<LocalShell>,
        Transports,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let state = crate::state::StateDir::open(&tmp.path().join("s")).unwrap();
        let shell = Arc::new(LocalShell {
            sent: Mutex::new(vec![]),
        });
        let mut transports = Transports::new();
        transports.insert("h1".into(), shell.clone() as Arc<dyn Transport>);
        (tmp, state, shell, transports)
    }

    fn touch_step(id: T, path: &std::path::Path) -> JournaledStep {
        let p = path.to_string_lossy().into_owned();
        JournaledStep::new(id, format!("create {p}"), Some("h1"))
            .done_when(RemoteCommand::read_only(["test", "-e", &p]))
            .run(RemoteCommand::script(format!(
                "echo x >> '{p}.count' && touch '{p}' && echo '{{\"made\":\"{}\"}}'",
                id.code()
            )))
    }

    #[tokio::test]
    async fn a_resumed_run_skips_what_its_postconditions_show_done() {
        let (tmp, state, _shell, transports) = setup();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        let steps = vec![touch_step(T::S1, &a), touch_step(T::S2, &b)];
        let mut j = Journal::create(&state, "r1").unwrap();
        let out = run(&steps, &transports, &mut j, &RunOptions::default())
            .await
            .unwrap();
        assert_eq!(out.done, ["S1", "S2"]);
        // Resuming (even with a journal that says nothing) re-checks the hosts: nothing acts twice.
        let mut j2 = Journal::create(&state, "r2").unwrap();
        let out = run(&steps, &transports, &mut j2, &RunOptions::default())
            .await
            .unwrap();
        assert_eq!(out.skipped, ["S1", "S2"]);
        assert_eq!(fs_err::read_to_string(tmp.path().join("a.count")).unwrap(), "x\n");
        // The journal holds started/done with the command's JSON outputs, then started/skipped.
        let e = j.entries().unwrap();
        let phases: Vec<_> = e.iter().map(|e| (e.step.as_str(), e.phase)).collect();
        assert_eq!(
            phases,
            [
                ("S1", StepState::Started),
                ("S1", StepState::Done),
                ("S2", StepState::Started),
                ("S2", StepState::Done)
            ]
        );
        assert_eq!(e[1].outputs["made"], "S1");
        assert_eq!(e[1].inputs_sha, steps[0].inputs_sha());
        assert_eq!(j2.entries().unwrap()[1].phase, StepState::Skipped);
    }

    #[tokio::test]
    async fn a_failed_precheck_before_any_change_is_not_a_change() {
        let (tmp, state, shell, transports) = setup();
        let a = tmp.path().join("a");
        let steps = vec![touch_step(T::S1, &a).precheck(RemoteCommand::read_only(["false"]))];
        let mut j = Journal::create(&state, "r1").unwrap();
        let err = run(&steps, &transports, &mut j, &RunOptions::default())
            .await
            .unwrap_err();
        assert_eq!((err.stage, err.changed), (Stage::Precheck, false));
        assert!(!a.exists());
        assert!(!shell.sent.lock().unwrap().iter().any(|l| l.contains("touch")));
        assert_eq!(j.entries().unwrap().last().unwrap().phase, StepState::Failed);
        // After a step is done, a later failure is a failure after changes.
        let steps = vec![
            touch_step(T::S1, &a),
            JournaledStep::new(T::S2, "fail", Some("h1")).run(RemoteCommand::new(["false"])),
        ];
        let mut j = Journal::create(&state, "r2").unwrap();
        let err = run(&steps, &transports, &mut j, &RunOptions::default())
            .await
            .unwrap_err();
        assert_eq!(
            (err.step.as_str(), err.stage, err.changed),
            ("S2", Stage::Act, true)
        );
    }

    #[tokio::test]
    async fn the_lanes_of_a_group_run_at_once_and_a_failure_lets_the_others_finish() {
        let (tmp, state, _shell, transports) = setup();
        let p = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
        // A waits for the file B writes: it can only pass when B runs while A waits.
        let a = JournaledStep::new(T::A, "wait for b", Some("h1"))
            .group("G", "x")
            .run(RemoteCommand::script(format!(
                "for i in $(seq 1 100); do [ -e '{b}' ] && touch '{a}' && exit 0; sleep 0.05; done; exit 1",
                a = p("a"),
                b = p("b")
            )));
        let b = JournaledStep::new(T::B, "write b", Some("h1"))
            .group("G", "y")
            .run(RemoteCommand::script(format!("sleep 0.2; touch '{}'", p("b"))));
        let c = touch_step(T::C, &tmp.path().join("c"));
        let mut j = Journal::create(&state, "r1").unwrap();
        let out = run(
            &[a.clone(), b.clone(), c],
            &transports,
            &mut j,
            &RunOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(out.done, ["A", "B", "C"]);
        // A failing lane: the other lane's steps still run to their end; the run then stops
        // before the next step.
        let failing = JournaledStep::new(T::F, "fail", Some("h1"))
            .group("H", "x")
            .run(RemoteCommand::new(["false"]));
        let slow = JournaledStep::new(T::S, "write s", Some("h1"))
            .group("H", "y")
            .run(RemoteCommand::script(format!("sleep 0.2; touch '{}'", p("s"))));
        let after = touch_step(T::D, &tmp.path().join("d"));
        let mut j = Journal::create(&state, "r2").unwrap();
        let err = run(
            &[failing, slow, after],
            &transports,
            &mut j,
            &RunOptions::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.step, "F");
        assert!(tmp.path().join("s").exists());
        assert!(!tmp.path().join("d").exists());
        // The dry run says which steps run alongside each other.
        assert!(b.render(false).contains("runs alongside the other G steps"));
    }

    #[test]
    fn a_dry_run_prints_every_command_of_a_step() {
        let s = JournaledStep::new(T::R1_3.at("cp1"), "stop etcd", Some("cp1"))
            .done_when(RemoteCommand::read_only(["pgrep", "-x", "etcd"]))
            .precheck(RemoteCommand::read_only(["true"]))
            .run(RemoteCommand::new(["systemctl", "stop", "etcd.service"]));
        let text = s.render(true);
        assert_eq!(
            text,
            "[R1.3@cp1] stop etcd (on cp1)\n    skip when: sudo -n -- pgrep -x etcd\n    check first: sudo -n -- true\n    run: sudo -n -- systemctl stop etcd.service\n"
        );
        // The same lines as data, and the counter a live run prints.
        let json = s.to_json(true);
        assert_eq!(json["id"], "R1.3@cp1");
        assert_eq!(json["host"], "cp1");
        assert_eq!(json["skipWhen"]["command"], "sudo -n -- pgrep -x etcd");
        assert_eq!(json["checkFirst"]["command"], "sudo -n -- true");
        assert_eq!(
            json["acts"][0]["command"],
            "sudo -n -- systemctl stop etcd.service"
        );
        assert!(json["verify"].is_null());
        assert_eq!(progress_line(2, 11, &s), "step 3/11: R1.3@cp1 stop etcd (on cp1)");
    }

    struct Stream;

    #[async_trait]
    impl LocalAct for Stream {
        fn describe(&self) -> String {
            "stream the snapshot to cp1".into()
        }
        async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
            Ok(serde_json::Value::Null)
        }
    }

    #[test]
    fn a_steps_json_carries_what_its_text_says() {
        let wait = Check::command(
            "etcd is healthy",
            RemoteCommand::read_only(["etcdctl", "endpoint", "health"]),
            std::time::Duration::from_secs(30),
        );
        let s = JournaledStep::new(T::R2_4.at("cp1"), "restore", Some("cp1"))
            .done_when_local(Arc::new(Stream))
            .precheck(RemoteCommand::read_only(["true"]))
            .step(Step::Upload(Upload::new(
                "/etc/x",
                0o600,
                "etcd",
                "etcd",
                b"KEY".to_vec(),
            )))
            .run(RemoteCommand::new(["systemctl", "start", "etcd.service"]))
            .step(Step::Wait(wait.clone()))
            .local(Arc::new(Stream))
            .verify(wait)
            .group("R4", "cp1")
            .no_cluster_change();
        let text = s.render(true);
        let json = s.to_json(true);
        assert!(!json.to_string().contains("KEY"), "{json}");
        assert_eq!(json["id"], "R2.4@cp1");
        assert_eq!(json["title"], "restore");
        assert_eq!(json["host"], "cp1");
        assert_eq!(json["skipWhen"]["kind"], "operator");
        assert_eq!(json["changesCluster"], false);
        assert_eq!(json["group"], serde_json::json!({"name": "R4", "lane": "cp1"}));
        let kinds: Vec<&str> = json["acts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["upload", "run", "wait", "operator"]);
        // Every command and description of the JSON is in the text, sudo prefix included.
        let mut strings = vec![
            json["skipWhen"]["description"].clone(),
            json["checkFirst"]["command"].clone(),
            json["verify"]["command"].clone(),
            json["verify"]["description"].clone(),
        ];
        for a in json["acts"].as_array().unwrap() {
            strings.extend(["command", "description", "path", "sha256"].map(|k| a[k].clone()));
        }
        let strings: Vec<&str> = strings.iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(strings.len(), 10, "{strings:?}");
        for want in strings {
            assert!(text.contains(want), "{want:?} is not in\n{text}");
        }
        assert!(text.contains("(sudo -n -- etcdctl endpoint health)"), "{text}");
        // A step on the operator machine has a null host.
        let local = JournaledStep::new(T::R0_2, "check the snapshot", None).local(Arc::new(Stream));
        assert_eq!(local.to_json(false)["host"], serde_json::Value::Null);
        assert_eq!(local.to_json(false)["skipWhen"], serde_json::Value::Null);
    }
}
