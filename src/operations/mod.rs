//! The day-two wing: the operation manager ([`manager`]: one driver for every operation, with the
//! one lock ([`lock`]), the one journal ([`journal`]) and the runner of journaled steps
//! ([`runner`])), what the operations share (who answered: [`reach`]; the load balancers'
//! backends and the VIP: [`balancers`]; the Kubernetes Node of a host: [`node`]; the maintenance
//! record: [`maintenance_record`]; the fence for good of an old member: [`old_members`]; the retry records of remediations: [`remediation`]; a run's
//! directory: [`run_dir`]), and the operations, one folder each: [`recover`], [`replace`],
//! [`remove`] (and [`remove_node`] for a worker), [`heal`], [`maintenance`], [`rotate_ca`], [`adopt`], [`reset`] (whose plan
//! is bring-up's, [`crate::converge::reset`]), each with its pure decisions
//! (`decide.rs`, table-tested) apart from its steps (`steps.rs`, data) and acts (`acts.rs`). The
//! fence they set is [`crate::fence`] (reset and bring-up lift it too).
//!
//! Invariants: every change goes through `exec` (a plan or journaled steps), so `--dry-run` prints
//! the exact lines a live run sends; observations only read; nothing below this module imports
//! it.

pub mod balancers;
pub mod journal;
pub mod lock;
pub mod maintenance_record;
pub mod manager;
pub mod node;
pub mod old_members;
pub mod reach;
pub mod remediation;
pub mod run_dir;
pub mod runner;

pub mod adopt;
pub mod heal;
pub mod maintenance;
pub mod recover;
pub mod remove;
pub mod remove_node;
pub mod replace;
pub mod reset;
pub mod rotate_ca;

pub use journal::{Journal, StepState};
pub use reach::Reach;

use crate::exec::{self, Mode, Transports};
use crate::inventory::Host;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, Step};

/// Kubernetes units a control-plane host may run; stopped and started only when present.
pub use crate::phases::query::KUBE_UNITS;

/// Runs `steps` on `host` as a one-phase plan (or prints them in a dry run).
pub async fn run_on(
    mode: Mode,
    transports: &Transports,
    title: &str,
    host: &Host,
    steps: Vec<Step>,
) -> anyhow::Result<()> {
    let mut plan = Plan::default();
    plan.push(PlannedPhase {
        title: title.to_string(),
        parallelism: Parallelism::OneAtATime,
        disruptive: true,
        hosts: vec![HostSteps {
            host: host.name.clone(),
            sudo: host.ssh.sudo,
            steps,
        }],
    });
    match exec::run(&plan, mode, transports).await {
        Ok(_) => Ok(()),
        Err(failed) => {
            let details = failed.details();
            Err(anyhow::Error::new(failed).context(details.trim_end().to_string()))
        }
    }
}
