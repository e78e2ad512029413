//! The executor: the one place where a run and a dry run differ.
//!
//! Invariants: phases run in order, each starting only when every host finished the previous one;
//! a `OneAtATime` phase stops at its first failure (it is used for quorum members); an `All` phase
//! lets every host finish and collects every failure with its error chain; a Ctrl-C stops the run
//! between steps, never inside one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};

use super::transport::{Transport, UploadOutcome};
use crate::plan::{ApiSender, Check, Parallelism, Plan, PlannedPhase, Probe, Step};

/// Who sends a plan's [`Step::Api`] requests, if anyone (a plan with such a step and no sender
/// fails at that step).
pub type Api = Option<Arc<dyn ApiSender>>;

/// Whether steps are sent to hosts or only printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Live,
    DryRun,
}

/// Hosts by inventory name.
pub type Transports = BTreeMap<String, Arc<dyn Transport>>;

/// Set by the Ctrl-C handler; the executor stops before the next step.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs a Ctrl-C handler that asks running plans to stop between steps.
pub fn stop_between_steps_on_ctrl_c() {
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupt: stopping after the steps under way (press Ctrl-C again to abort now)");
            INTERRUPTED.store(true, Ordering::SeqCst);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
}

/// Whether the operator pressed Ctrl-C (runners stop before their next step).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// What a live run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub commands_run: usize,
    pub files_written: usize,
    pub files_unchanged: usize,
    pub waits: usize,
    /// Steps that change something, run or tried: commands that are not read-only and API
    /// writes (a failed one may have run in part), and uploads that failed part-way.
    pub changes_tried: usize,
}

impl Report {
    fn add(&mut self, other: &Report) {
        self.commands_run += other.commands_run;
        self.files_written += other.files_written;
        self.files_unchanged += other.files_unchanged;
        self.waits += other.waits;
        self.changes_tried += other.changes_tried;
    }
    /// True when the run changed nothing on any host: no file written, no changing step run or
    /// tried (read-only commands and waits change nothing).
    pub fn no_changes(&self) -> bool {
        self.files_written == 0 && self.changes_tried == 0
    }
}

/// A phase in which one or more hosts failed.
#[derive(Debug, thiserror::Error)]
#[error("phase \"{phase}\" failed on {}", hosts.iter().map(|(h, _)| h.as_str()).collect::<Vec<_>>().join(", "))]
pub struct PhaseFailed {
    pub phase: String,
    /// Each failed host with its error (the chain is kept).
    pub hosts: Vec<(String, anyhow::Error)>,
    /// What completed before the failure.
    pub report: Report,
}

impl PhaseFailed {
    /// Every host's error chain, one block per host, each line prefixed with the host name.
    pub fn details(&self) -> String {
        let mut out = String::new();
        for (host, err) in &self.hosts {
            for line in format!("{err:#}").lines() {
                out.push_str(&format!("{host}: {line}\n"));
            }
        }
        out
    }
}

/// Runs `plan` (Live) or prints it to stdout (DryRun).
pub async fn run(plan: &Plan, mode: Mode, transports: &Transports) -> Result<Report, PhaseFailed> {
    run_with_api(plan, mode, transports, None).await
}

/// [`run`], with `api` sending the plan's Kubernetes API requests.
pub async fn run_with_api(
    plan: &Plan,
    mode: Mode,
    transports: &Transports,
    api: Api,
) -> Result<Report, PhaseFailed> {
    if mode == Mode::DryRun {
        print!("{plan}");
        return Ok(Report::default());
    }
    let mut report = Report::default();
    // On a terminal: the phase under way of how many, and below it each host's step counter.
    let phases = crate::output::Counter::new("", plan.phases.len());
    for phase in &plan.phases {
        tracing::info!("== {}", phase.title);
        phases.start(&phase.title);
        let started = std::time::Instant::now();
        let result = run_phase(phase, transports, &api).await;
        phases.inc();
        // Where a run's time went, phase by phase (a slow host or mirror shows here).
        tracing::info!(
            "== {}: {} in {:.1} s",
            phase.title,
            if result.is_ok() { "done" } else { "failed" },
            started.elapsed().as_secs_f64()
        );
        let phase_report = result.map_err(|mut failed| {
            phases.finish();
            failed.report.add(&report);
            failed
        })?;
        report.add(&phase_report);
    }
    phases.finish();
    Ok(report)
}

async fn run_phase(phase: &PlannedPhase, transports: &Transports, api: &Api) -> Result<Report, PhaseFailed> {
    let bars: Vec<crate::output::Counter> = phase
        .hosts
        .iter()
        .map(|h| crate::output::Counter::new(format!("  {}", h.host), h.steps.len()))
        .collect();
    let result = run_phase_hosts(phase, transports, &bars, api).await;
    for bar in &bars {
        bar.finish();
    }
    result
}

async fn run_phase_hosts(
    phase: &PlannedPhase,
    transports: &Transports,
    bars: &[crate::output::Counter],
    api: &Api,
) -> Result<Report, PhaseFailed> {
    let mut report = Report::default();
    let mut failures = Vec::new();
    match phase.parallelism {
        Parallelism::OneAtATime => {
            for (host, bar) in phase.hosts.iter().zip(bars) {
                match run_host(&host.host, &host.steps, transports, bar, api).await {
                    Ok(r) => report.add(&r),
                    Err((r, e)) => {
                        report.add(&r);
                        failures.push((host.host.clone(), e));
                        break;
                    }
                }
            }
        }
        Parallelism::All => {
            let mut set = tokio::task::JoinSet::new();
            for (i, (host, bar)) in phase.hosts.iter().zip(bars).enumerate() {
                let transports = transports.clone();
                let name = host.host.clone();
                let steps = host.steps.clone();
                let bar = bar.clone();
                let api = api.clone();
                set.spawn(async move { (i, run_host(&name, &steps, &transports, &bar, &api).await) });
            }
            let mut results = Vec::new();
            while let Some(joined) = set.join_next().await {
                match joined {
                    Ok(r) => results.push(r),
                    Err(e) => failures.push(("?".to_string(), anyhow!("a host task panicked: {e}"))),
                }
            }
            results.sort_by_key(|(i, _)| *i);
            for (i, result) in results {
                match result {
                    Ok(r) => report.add(&r),
                    Err((r, e)) => {
                        report.add(&r);
                        failures.push((phase.hosts[i].host.clone(), e));
                    }
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(report)
    } else {
        Err(PhaseFailed {
            phase: phase.title.clone(),
            hosts: failures,
            report,
        })
    }
}

async fn run_host(
    host: &str,
    steps: &[Step],
    transports: &Transports,
    bar: &crate::output::Counter,
    api: &Api,
) -> Result<Report, (Report, anyhow::Error)> {
    let mut report = Report::default();
    let Some(t) = transports.get(host) else {
        return Err((report, anyhow!("no connection to {host}")));
    };
    for step in steps {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err((
                report,
                anyhow!("interrupted before: {}", describe(step, t.sudo())),
            ));
        }
        bar.start(&match step {
            Step::Upload(u) => format!("write {}", u.path),
            _ => describe(step, t.sudo()),
        });
        let result = run_step(t.as_ref(), step, &mut report, api).await;
        match step {
            Step::Upload(_) if result.is_err() => report.changes_tried += 1,
            Step::Run(c) if !c.read_only => report.changes_tried += 1,
            Step::Api(r) if !r.method.eq_ignore_ascii_case("GET") => report.changes_tried += 1,
            _ => {}
        }
        if let Err(e) = result {
            return Err((report, e));
        }
        bar.inc();
    }
    Ok(report)
}

fn describe(step: &Step, sudo: bool) -> String {
    match step {
        Step::Upload(u) => format!("write {u}"),
        Step::Run(c) => format!("run {}", c.line(sudo)),
        Step::Wait(c) => c.description.clone(),
        Step::Api(r) => format!("api {r}"),
    }
}

async fn run_step(t: &dyn Transport, step: &Step, report: &mut Report, api: &Api) -> anyhow::Result<()> {
    let host = t.host();
    match step {
        Step::Upload(u) => {
            let outcome = t
                .upload(u)
                .await
                .with_context(|| format!("failed to write {}", u.path))?;
            match outcome {
                UploadOutcome::Unchanged => {
                    report.files_unchanged += 1;
                    tracing::debug!("{host}: unchanged {}", u.path);
                }
                UploadOutcome::Written => {
                    report.files_written += 1;
                    tracing::info!("{host}: wrote {u}");
                }
            }
        }
        Step::Run(c) => {
            tracing::info!("{host}: run {}", c.line(t.sudo()));
            let out = t
                .run(c)
                .await
                .with_context(|| format!("failed to run {}", c.line(t.sudo())))?;
            report.commands_run += 1;
            if !out.success() {
                return Err(anyhow!(
                    "command exited with {}: {}\n{}",
                    out.status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "no status".into()),
                    c.line(t.sudo()),
                    tail(&out.stderr_str(), &out.stdout_str())
                ));
            }
        }
        Step::Wait(check) => {
            report.waits += 1;
            wait(t, check).await?;
        }
        Step::Api(request) => {
            let Some(api) = api else {
                return Err(anyhow!(
                    "no Kubernetes API client for: {request} (a bug in hactl: this plan was run without one)"
                ));
            };
            tracing::info!("{host}: api {request}");
            api.send(request)
                .await
                .with_context(|| format!("failed to send {request}"))?;
            report.commands_run += 1;
        }
    }
    Ok(())
}

/// The last lines of a command's output, for error messages.
fn tail(stderr: &str, stdout: &str) -> String {
    let text = if stderr.trim().is_empty() { stdout } else { stderr };
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let start = lines.len().saturating_sub(15);
    lines[start..].join("\n")
}

/// The longest pause between two probes of a wait. A probe is one command on an open SSH
/// connection, so a short pause costs little; with 2 s, a member healthy 1.6 s after its restart
/// was seen healthy at 3.15 s, and a 3-member roll spent several seconds on such overshoots.
pub const MAX_POLL: Duration = Duration::from_millis(500);

/// Polls `check` with a growing interval (50 ms upward, at most [`MAX_POLL`]) until it holds or
/// times out.
pub async fn wait(t: &dyn Transport, check: &Check) -> anyhow::Result<()> {
    let host = t.host();
    let deadline = Instant::now() + check.timeout;
    let mut interval = Duration::from_millis(50);
    tracing::info!("{host}: waiting: {}", check.description);
    loop {
        let last = match &check.probe {
            Probe::Command(cmd) => match t.run(cmd).await {
                Ok(out) if out.success() => return Ok(()),
                Ok(out) => tail(&out.stderr_str(), &out.stdout_str()),
                Err(e) => format!("{e:#}"),
            },
        };
        if Instant::now() + interval > deadline {
            let mut msg = format!(
                "timed out after {}s waiting for: {}\nlast probe said: {}",
                check.timeout.as_secs(),
                check.description,
                last.trim()
            );
            if let Some(diag) = &check.diagnose {
                if let Ok(out) = t.run(diag).await {
                    msg.push_str(&format!(
                        "\n{}:\n{}",
                        diag.line(t.sudo()),
                        out.stdout_str().trim_end()
                    ));
                }
            }
            return Err(anyhow!(msg));
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(MAX_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{HostSteps, PlannedPhase, RemoteCommand, Upload};
    use crate::ssh::{ForwardGuard, Output};
    use async_trait::async_trait;
    use std::sync::Arc;

    /// A host on which every command fails (exit 1) and every upload is written.
    struct Failing;

    #[async_trait]
    impl Transport for Failing {
        fn host(&self) -> &str {
            "h1"
        }
        fn sudo(&self) -> bool {
            false
        }
        async fn run(&self, _cmd: &RemoteCommand) -> Result<Output, crate::ssh::Error> {
            Ok(Output {
                status: Some(1),
                stdout: vec![],
                stderr: b"no".to_vec(),
            })
        }
        async fn upload(&self, _u: &Upload) -> Result<UploadOutcome, crate::ssh::Error> {
            Ok(UploadOutcome::Written)
        }
        async fn forward(&self, _h: &str, _p: u16) -> Result<(u16, ForwardGuard), crate::ssh::Error> {
            unimplemented!("not used")
        }
    }

    fn one_step(step: Step) -> Plan {
        Plan {
            phases: vec![PlannedPhase {
                title: "p".into(),
                parallelism: crate::plan::Parallelism::All,
                disruptive: false,
                hosts: vec![HostSteps {
                    host: "h1".into(),
                    sudo: false,
                    steps: vec![step],
                }],
            }],
        }
    }

    async fn failed(plan: &Plan) -> Report {
        let mut transports = Transports::new();
        transports.insert("h1".into(), Arc::new(Failing) as Arc<dyn Transport>);
        run(plan, Mode::Live, &transports).await.unwrap_err().report
    }

    #[tokio::test]
    async fn a_failed_changing_step_counts_as_a_change_and_a_failed_read_does_not() {
        let read = failed(&one_step(Step::Run(RemoteCommand::read_only(["true"])))).await;
        assert!(read.no_changes(), "{read:?}");
        assert_eq!(read.commands_run, 1, "{read:?}");
        let change = failed(&one_step(Step::Run(RemoteCommand::new([
            "systemctl",
            "restart",
            "etcd",
        ]))))
        .await;
        assert_eq!(change.changes_tried, 1, "{change:?}");
        assert!(!change.no_changes(), "{change:?}");
    }
}
