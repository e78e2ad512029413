//! What day-two operations share: who answered ([`reach`]), the one run journal ([`journal`]),
//! the one fence ([`fence`]), the load balancers' backends and the VIP ([`balancers`]), the
//! Kubernetes Node of a host ([`node`]), the maintenance record ([`maintenance_record`]) and the
//! retry records of remediations ([`remediation`]) and the layout of a run's directory
//! ([`run_dir`]).
//!
//! The operations themselves sit beside this module: `crate::operations::recover`, `crate::operations::replace`,
//! `crate::operations::heal` and `crate::operations::maintenance`, each with its pure decisions apart from its acts.
//!
//! Invariant: every change goes through `exec` (a plan or journaled steps), so `--dry-run`
//! prints the exact lines a live run sends; observations only read.

pub mod balancers;
pub mod fence;
pub mod journal;
pub mod lock;
pub mod maintenance_record;
pub mod manager;
pub mod node;
pub mod reach;
pub mod remediation;
pub mod run_dir;
pub mod runner;

pub mod heal;
pub mod maintenance;
pub mod recover;
pub mod remove;
pub mod replace;
pub mod rotate_ca;

pub use journal::{Journal, StepState};
pub use reach::{ConnectOptions, Reach};

use crate::exec::{self, Mode, Transports};
use crate::inventory::Host;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, Step};

/// The local lock every quorum-changing operation takes (one change in flight per cluster).
pub const OPERATION_LOCK: &str = "etcd-operation";

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
