//! What `replace`, `heal` and `maintenance` share: reaching the hosts that answer (a dead member's
//! host may not), observing the cluster from a healthy member, running one step at a time through
//! the executor, the run journal and the maintenance records that share one disruption budget.
//!
//! Invariant: every change goes through `exec::run`, so `--dry-run` prints the exact lines a live
//! run sends; observations only read.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::sync::Arc;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::cli::ConnectArgs;
use crate::etcd::health::{self, Observation};
use crate::etcd::safety::Refused;
use crate::exec::{self, Mode, Transport, Transports};
use crate::facts::{self, HostFacts, Query};
use crate::inventory::{Host, Inventory, Role};
use crate::phases::etcd_files;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, Step};
use crate::state::StateDir;

/// The local lock every quorum-changing operation takes (one change in flight per cluster).
pub const OPERATION_LOCK: &str = "etcd-operation";

/// Kubernetes units a control-plane host may run; stopped and started only when present.
pub const KUBE_UNITS: [&str; 3] = [
    "kube-scheduler.service",
    "kube-controller-manager.service",
    "kube-apiserver.service",
];

/// A refusal from a safety rule, as a command error with exit code 2.
pub fn refusal(r: Refused) -> anyhow::Error {
    anyhow::Error::new(super::Refusal {
        code: super::exit::REFUSED,
        message: r.to_string(),
    })
}

/// A refusal with its own code and message.
pub fn refuse(code: i32, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(super::Refusal {
        code,
        message: message.into(),
    })
}

/// The facts query for a host that runs (or is about to run) an etcd member.
pub fn etcd_query(inv: &Inventory) -> Query {
    let mut units = vec![crate::etcd::UNIT.to_string()];
    units.extend(KUBE_UNITS.map(String::from));
    Query {
        data_dir: inv.etcd.data_dir.clone(),
        units,
        files: etcd_files::managed_paths(&inv.etcd.source),
        binaries: ["etcd", "etcdctl"].map(String::from).to_vec(),
    }
}

/// The hosts that answered, their facts, and why the others did not.
pub struct Reach {
    pub transports: Transports,
    pub facts: BTreeMap<String, HostFacts>,
    pub unreachable: BTreeMap<String, String>,
}

/// Connects to `hosts` and gathers facts from those that answer; an unreachable host is
/// recorded, not fatal (the member being replaced may be dead with its host).
pub async fn reach(inv: &Inventory, state: &StateDir, hosts: &[&Host], args: &ConnectArgs) -> Reach {
    let conns = super::connect(inv, state, hosts, args).await;
    let mut r = Reach {
        transports: Transports::new(),
        facts: BTreeMap::new(),
        unreachable: BTreeMap::new(),
    };
    for h in hosts {
        match conns.get(&h.name) {
            Some(Ok(t)) => {
                let query = etcd_query(inv);
                match facts::gather(t.as_ref(), &query).await {
                    Ok(f) => {
                        r.facts.insert(h.name.clone(), f);
                        r.transports.insert(h.name.clone(), t.clone());
                    }
                    Err(e) => {
                        r.unreachable
                            .insert(h.name.clone(), format!("{:#}", anyhow::Error::from(e)));
                    }
                }
            }
            Some(Err(e)) => {
                r.unreachable.insert(h.name.clone(), e.clone());
            }
            None => {
                r.unreachable.insert(h.name.clone(), "not connected".into());
            }
        }
    }
    r
}

impl Reach {
    /// Whether etcd is active on `host` per its facts.
    pub fn etcd_active(&self, host: &str) -> bool {
        self.facts
            .get(host)
            .and_then(|f| f.units.get(crate::etcd::UNIT))
            .is_some_and(|u| u.active == "active")
    }
    /// Hosts that can observe the cluster: reachable etcd hosts with etcd active, not in `except`,
    /// in inventory order.
    pub fn observers(&self, inv: &Inventory, except: &[&str]) -> Vec<(String, Arc<dyn Transport>)> {
        inv.with_role(Role::Etcd)
            .into_iter()
            .filter(|h| !except.contains(&h.name.as_str()) && self.etcd_active(&h.name))
            .filter_map(|h| Some((h.name.clone(), self.transports.get(&h.name)?.clone())))
            .collect()
    }
    /// Observes the cluster; a cluster no member can describe has lost quorum.
    pub async fn observe(&self, inv: &Inventory, except: &[&str]) -> anyhow::Result<Observation> {
        let observers = self.observers(inv, except);
        health::observe(&observers).await.map_err(|e| {
            refuse(
                super::exit::REFUSED,
                format!(
                    "refused by quorum: no running member could list the cluster's members ({e}); quorum lost → run `hactl recover` (or bring stopped members back with `hactl up` if their data is intact)"
                ),
            )
        })
    }
}

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

/// One journal line (`runs/<run>/journal.jsonl` in the state dir).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JournalEntry {
    pub run: String,
    pub step: String,
    /// `started`, `done`, `skipped`, `failed`.
    pub phase: String,
    /// RFC 3339, UTC, with fractions.
    pub ts: String,
    pub host: String,
    pub detail: String,
}

/// The append-only record of one run; a step is `started` then `done`, `skipped` or `failed`.
/// (A stand-in with the shape of the recover branch's journal, to be replaced by it.)
pub struct Journal {
    pub run: String,
    path: Option<std::path::PathBuf>,
    /// `HACTL_CRASH_AFTER`: exit 137 right after this step's `done` (crash-resume tests).
    crash_after: Option<String>,
    dry_run: bool,
}

pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A compact UTC stamp for names: `20261122T023412Z`.
pub fn stamp() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

impl Journal {
    /// Opens (or continues, for `--resume`) run `run`; a dry run writes nothing.
    pub fn open(state: &StateDir, run: &str, mode: Mode) -> anyhow::Result<Journal> {
        let path = if mode == Mode::Live {
            let dir = state
                .subdir(format!("runs/{run}"))
                .context("cannot create the run's journal directory")?;
            Some(dir.join("journal.jsonl"))
        } else {
            None
        };
        Ok(Journal {
            run: run.to_string(),
            path,
            crash_after: std::env::var("HACTL_CRASH_AFTER").ok().filter(|s| !s.is_empty()),
            dry_run: mode == Mode::DryRun,
        })
    }
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }
    /// Every entry of a run (for `--resume` and tests).
    pub fn read(state: &StateDir, run: &str) -> anyhow::Result<Vec<JournalEntry>> {
        let path = state.path.join("runs").join(run).join("journal.jsonl");
        let text = fs_err::read_to_string(&path)?;
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
    pub fn record(&self, step: &str, phase: &str, host: &str, detail: &str) -> anyhow::Result<()> {
        let line = JournalEntry {
            run: self.run.clone(),
            step: step.to_string(),
            phase: phase.to_string(),
            ts: now_rfc3339(),
            host: host.to_string(),
            detail: detail.to_string(),
        };
        let phase_shown = if self.dry_run && phase == "done" {
            "planned"
        } else {
            phase
        };
        match phase_shown {
            "planned" => eprintln!(
                "{step} {host}: planned (dry run){}",
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(": {detail}")
                }
            ),
            "skipped" => eprintln!("{step} {host}: skipped: {detail}"),
            "failed" => eprintln!("{step} {host}: failed: {detail}"),
            "done" => eprintln!(
                "{step} {host}: done{}",
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(": {detail}")
                }
            ),
            _ => eprintln!("{step} {host}: {detail}"),
        }
        if let Some(path) = &self.path {
            let mut f = fs_err::OpenOptions::new().create(true).append(true).open(path)?;
            writeln!(f, "{}", serde_json::to_string(&line)?)?;
            f.sync_all()?;
        }
        if phase == "done" && self.crash_after.as_deref() == Some(step) {
            eprintln!("HACTL_CRASH_AFTER={step}: exiting with 137");
            std::process::exit(137);
        }
        Ok(())
    }
}

/// A host in maintenance, as recorded in the state dir (`maintenance/<host>.json`) and on the host
/// (`/var/lib/hactl/maintenance/<host>.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceRecord {
    pub host: String,
    /// `Idle`, `Cordon`, `Drain`, `StopControlPlane`, `Complete`.
    pub stage: String,
    pub since: String,
    #[serde(default)]
    pub reason: String,
    /// Units hactl stopped, in stop order.
    #[serde(default)]
    pub stopped: Vec<String>,
}

/// Hosts with a maintenance record that has not reached `Complete`.
pub fn maintenance_records(state: &StateDir) -> BTreeMap<String, MaintenanceRecord> {
    let dir = state.path.join("maintenance");
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if let Ok(r) = serde_json::from_str::<MaintenanceRecord>(&text) {
            if r.stage != "Complete" {
                out.insert(r.host.clone(), r);
            }
        }
    }
    out
}

/// Member names in maintenance past `Drain` (their etcd may be stopped: counted unhealthy).
pub fn in_maintenance(state: &StateDir) -> BTreeSet<String> {
    maintenance_records(state).into_keys().collect()
}
