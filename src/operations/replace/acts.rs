//! The operator-side acts of a replace's steps ([`LocalAct`]s): a read-only command on another
//! host than the step's own, a finding P0 already made, the safety re-checks right before a
//! membership change, the load balancers, and P8–P10.
//!
//! Invariant: each `describe()` says what the act does and against which host, so the dry run's
//! lines stay true; the gates only read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use async_trait::async_trait;

use super::Run;
use crate::etcd::{hex_id, safety};
use crate::exec::{Mode, Transports};
use crate::exit::refusal;
use crate::operations;
use crate::operations::runner::{LocalAct, OnFailure};
use crate::operations::StepState;
use crate::plan::RemoteCommand;

/// What P0 found (the old member already removed, confirmed dead…): holds or not, does nothing.
pub(super) struct Fact {
    pub text: String,
    pub holds: bool,
}

#[async_trait]
impl LocalAct for Fact {
    fn describe(&self) -> String {
        format!("P0 found: {}", self.text)
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::Value::Null)
    }
    async fn holds(&self, _t: &Transports) -> anyhow::Result<bool> {
        Ok(self.holds)
    }
}

/// A read-only command on `host`: as a postcondition it holds when the command exits 0; as an
/// act it must exit 0.
pub(super) struct RemoteOn {
    pub host: String,
    pub sudo: bool,
    pub cmd: RemoteCommand,
    /// What exit 0 means, for the error when it does not hold.
    pub what: String,
}

impl RemoteOn {
    async fn output(&self, transports: &Transports) -> anyhow::Result<crate::exec::Output> {
        let t = transports
            .get(&self.host)
            .ok_or_else(|| anyhow!("no connection to {}", self.host))?;
        t.run(&self.cmd)
            .await
            .with_context(|| format!("{}: failed to run {}", self.host, self.cmd.line(self.sudo)))
    }
}

#[async_trait]
impl LocalAct for RemoteOn {
    fn describe(&self) -> String {
        format!("on {}: {}", self.host, self.cmd.line(self.sudo))
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let out = self.output(transports).await?;
        if !out.success() {
            return Err(anyhow!(
                "{} does not hold on {}: {}",
                self.what,
                self.host,
                out.stderr_str().trim()
            ));
        }
        Ok(serde_json::Value::Null)
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        Ok(self.output(transports).await?.success())
    }
}

/// Holds when every part holds.
pub(super) struct AllOf(pub Vec<Arc<dyn LocalAct>>);

#[async_trait]
impl LocalAct for AllOf {
    fn describe(&self) -> String {
        self.0
            .iter()
            .map(|a| a.describe())
            .collect::<Vec<_>>()
            .join("; and ")
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        for a in &self.0 {
            a.act(transports).await?;
        }
        Ok(serde_json::Value::Null)
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        for a in &self.0 {
            if !a.holds(transports).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The safety rule re-checked on a fresh observation right before a membership change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    Remove,
    Add,
    Promote,
}

/// A safety gate (docs/recovery.md, "Replace and heal (P0–P10)"): refuses unless the rule holds
/// on the cluster as it is now.
pub(super) struct Gate {
    pub run: Arc<Run>,
    pub rule: Rule,
}

/// How long R-add waits for the voters to be healthy again after P3 (etcd's health interval is 5 s).
const ADD_GATE_TIMEOUT: Duration = Duration::from_secs(30);

#[async_trait]
impl LocalAct for Gate {
    fn describe(&self) -> String {
        let run = &self.run;
        match self.rule {
            Rule::Remove => format!(
                "re-check R-remove on a fresh observation (from the hosts other than {}): the cluster keeps its quorum without the old member",
                run.except().join(", ")
            ),
            Rule::Add => format!(
                "re-check R-add on a fresh observation: every voter healthy (waiting up to {} s for etcd's health interval)",
                ADD_GATE_TIMEOUT.as_secs()
            ),
            Rule::Promote => {
                "re-check R-promote on a fresh observation: the promotion keeps a quorum of healthy voters".into()
            }
        }
    }

    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        let run = &self.run;
        let maintenance = operations::maintenance_record::in_maintenance(&run.state);
        match self.rule {
            Rule::Remove => {
                let obs = run.observe().await?;
                let Some(old) = run.old.as_ref().and_then(|o| obs.by_id(o.id)).cloned() else {
                    return Ok(serde_json::json!({ "gate": "the old member is already removed" }));
                };
                let ours = run.new_member(&obs).filter(|m| m.is_learner).map(|m| m.id);
                let counts = obs.counts(&maintenance, ours);
                safety::r_remove(&counts, obs.is_healthy(&old))
                    .into_result()
                    .map_err(refusal)?;
                Ok(serde_json::json!({ "gate": counts.numbers() }))
            }
            Rule::Add => {
                let deadline = Instant::now() + ADD_GATE_TIMEOUT;
                let mut pause = Duration::from_millis(200);
                loop {
                    let obs = run.observe().await?;
                    if let Some(m) = run.new_member(&obs) {
                        return Ok(serde_json::json!({ "gate": format!("already member {}", hex_id(m.id)) }));
                    }
                    let mut counts = obs.counts(&maintenance, None);
                    if run.opts.planned {
                        counts.foreign_operation = None;
                    }
                    match safety::r_add(&counts) {
                        safety::Decision::Allowed => {
                            return Ok(serde_json::json!({ "gate": counts.numbers() }))
                        }
                        safety::Decision::Refused(why) if Instant::now() >= deadline => {
                            return Err(refusal(why))
                        }
                        safety::Decision::Refused(why) => {
                            tracing::info!("P5: {why}; checking again in {} ms", pause.as_millis());
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(Duration::from_secs(2));
                        }
                    }
                }
            }
            Rule::Promote => {
                let obs = run.observe().await?;
                let counts = obs.counts(&maintenance, run.new_member(&obs).map(|m| m.id));
                safety::r_promote(&counts, true).into_result().map_err(refusal)?;
                Ok(serde_json::json!({ "gate": counts.numbers() }))
            }
        }
    }
}

/// P2 at the load balancers: the VIP off the old member's host, its servers in MAINT.
pub(super) struct BalanceOff {
    pub run: Arc<Run>,
}

#[async_trait]
impl LocalAct for BalanceOff {
    fn describe(&self) -> String {
        let run = &self.run;
        let lbs: Vec<String> = run
            .inv
            .with_role(crate::inventory::Role::LoadBalancer)
            .iter()
            .map(|h| h.name.clone())
            .collect();
        format!(
            "on {}: move the VIP off {t} when it holds it (keepalived stopped there), then put {t} in MAINT in every backend ({}) and wait until HAProxy shows it",
            lbs.join(", "),
            operations::balancers::Balancers::backends(&run.inv)
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(", "),
            t = run.target
        )
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        let run = &self.run;
        if let Some(host) = &run.target_host {
            run.balancers
                .move_vip_off(Mode::Live, run.journal(), "P2 vip", host)
                .await?;
        }
        run.balancers
            .drain(Mode::Live, &run.inv, run.journal(), "P2 lb-drain", &run.target)
            .await?;
        Ok(serde_json::Value::Null)
    }
}

/// P8 (see `serve.rs`).
pub(super) struct Serve {
    pub run: Arc<Run>,
}

#[async_trait]
impl LocalAct for Serve {
    fn describe(&self) -> String {
        let r = &self.run.replacement.name;
        format!(
            "with a kubernetes section: install and start kube-apiserver, controller-manager and scheduler on {r} (until /readyz answers); on the load balancers: re-render haproxy.cfg when the host name changed, put {r} back in its backends and wait until HAProxy shows it UP, start keepalived on {r} again"
        )
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        self.run.p8_replacement_serves().await?;
        Ok(serde_json::Value::Null)
    }
}

/// P9 (see `serve.rs`).
pub(super) struct Propagate {
    pub run: Arc<Run>,
}

#[async_trait]
impl LocalAct for Propagate {
    fn describe(&self) -> String {
        "for each other control-plane host, one at a time, when its apiserver's --etcd-servers is stale: drain its kubernetes-api backend, write the new flags, restart, wait for /readyz, ready the backend (journaled as `P9 apiserver@HOST`)".into()
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        self.run.p9_propagate().await?;
        Ok(serde_json::Value::Null)
    }
}

/// P10 (see `serve.rs`).
pub(super) struct Verify {
    pub run: Arc<Run>,
}

#[async_trait]
impl LocalAct for Verify {
    fn describe(&self) -> String {
        "wait until every member is healthy and names the same leader; then every inventory etcd host is a healthy voter and no learner is left".into()
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        self.run.p10_verify().await
    }
}

/// P7's rollback: the learner that did not catch up is removed again (quorum-neutral), its etcd
/// fenced and stopped, and a failed replacement counted (the retry limit heal and replace share).
pub(super) struct RollbackLearner {
    pub run: Arc<Run>,
}

#[async_trait]
impl OnFailure for RollbackLearner {
    fn describe(&self) -> String {
        let r = &self.run.replacement.name;
        format!(
            "unless a safety rule refused: remove the learner at {} again (quorum-neutral), fence and stop etcd on {r}, count a failed replacement of {} (heal.json)",
            self.run.new_url, self.run.target
        )
    }
    async fn undo(&self, cause: &anyhow::Error, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        let run = &self.run;
        let obs = run.observe().await?;
        let r = &run.replacement;
        let observer = run.observer_host(&obs);
        let mut removed = String::from("no learner was left to remove");
        if let Some(m) = run.new_member(&obs).filter(|m| m.is_learner).cloned() {
            run.journal().record(
                "P7 rollback",
                StepState::Started,
                &observer.name,
                &format!("removing learner {} ({})", r.name, hex_id(m.id)),
            )?;
            operations::run_on(
                Mode::Live,
                &run.reach.transports,
                "P7 rollback: remove the learner",
                observer,
                vec![super::member::remove_step(m.id, &run.new_url)],
            )
            .await?;
            operations::run_on(
                Mode::Live,
                &run.reach.transports,
                "P7 rollback: stop the learner",
                r,
                super::member::fence_steps(&r.name, Some(m.id)),
            )
            .await?;
            removed = format!(
                "the learner {} ({}) was removed again (quorum-neutral) and its etcd stopped",
                r.name,
                hex_id(m.id)
            );
        }
        let retries =
            operations::remediation::record_failure(&run.state, &run.target, &format!("{cause:#}"))?;
        run.journal().record(
            "P7 rollback",
            StepState::Done,
            &observer.name,
            &format!("{removed}; retryCount={retries}"),
        )?;
        Ok(serde_json::Value::String(format!(
            "{removed}; retryCount={retries}"
        )))
    }
}
