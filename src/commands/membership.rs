//! What `replace`, `heal` and `maintenance` share: reaching the hosts that answer (a dead member's
//! host may not), observing the cluster from a healthy member, running one step at a time through
//! the executor, the run journal and the maintenance records that share one disruption budget.
//!
//! Invariant: every change goes through `exec::run`, so `--dry-run` prints the exact lines a live
//! run sends; observations only read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cli::ConnectArgs;
use crate::etcd::health::{self, Observation};
use crate::exec::{self, Mode, Transport, Transports};
use crate::facts::{self, HostFacts};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, Step};
use crate::state::StateDir;

/// The local lock every quorum-changing operation takes (one change in flight per cluster).
pub const OPERATION_LOCK: &str = "etcd-operation";

pub use crate::phases::query::KUBE_UNITS;

pub use crate::exit::{refusal, refuse};

/// The hosts that answered, their facts, and why the others did not.
pub struct Reach {
    pub transports: Transports,
    pub facts: BTreeMap<String, HostFacts>,
    pub unreachable: BTreeMap<String, String>,
}

/// Connects to `hosts` and gathers facts from those that answer; an unreachable host is
/// recorded, not fatal (the member being replaced may be dead with its host).
pub async fn reach(inv: &Inventory, state: &StateDir, hosts: &[&Host], args: &ConnectArgs) -> Reach {
    let connected = crate::exec::connect::reach(state, hosts, args).await;
    let mut r = Reach {
        transports: Transports::new(),
        facts: BTreeMap::new(),
        unreachable: connected.unreachable,
    };
    for h in hosts {
        let Some(t) = connected.transports.get(&h.name) else {
            continue;
        };
        match facts::gather(t.as_ref(), &crate::phases::member_query_for(inv, h)).await {
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
                crate::exit::REFUSED,
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

/// The run journal of replace, heal and maintenance: the recover branch's [`crate::journal`]
/// (append-only, fsynced, `HACTL_CRASH_AFTER`), with a line on stderr per transition and nothing
/// written in a dry run.
pub struct Journal {
    pub run: String,
    inner: Option<std::sync::Mutex<crate::journal::Journal>>,
    dry_run: bool,
}

pub fn now_rfc3339() -> String {
    crate::journal::timestamp(time::OffsetDateTime::now_utc())
}

/// A compact UTC stamp for names: `20261122t023412z` (lowercase: it may become part of a run id).
pub fn stamp() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}t{:02}{:02}{:02}z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// A new run id for operation `op` (`replace-20261122-024217-ab12`).
pub fn new_run_id(op: &str) -> String {
    let id = crate::journal::new_run_id(time::OffsetDateTime::now_utc());
    let full = format!("{op}-{id}");
    if crate::journal::valid_run_id(&full) {
        full
    } else {
        // A long host name: keep the operation's first word (the journal records the host).
        format!("{}-{id}", op.split('-').next().unwrap_or("run"))
    }
}

impl Journal {
    /// Starts run `run`, or continues it (`--resume`); a dry run writes nothing.
    pub fn open(state: &StateDir, run: &str, mode: Mode) -> anyhow::Result<Journal> {
        let inner = if mode == Mode::Live {
            let j = match crate::journal::Journal::open(state, run) {
                Ok(j) => j,
                Err(_) => crate::journal::Journal::create(state, run)?,
            };
            Some(std::sync::Mutex::new(j))
        } else {
            None
        };
        Ok(Journal {
            run: run.to_string(),
            inner,
            dry_run: mode == Mode::DryRun,
        })
    }
    pub fn path(&self) -> Option<std::path::PathBuf> {
        self.inner
            .as_ref()
            .map(|j| j.lock().expect("journal lock").path().to_path_buf())
    }
    /// Every entry of a run (for `--resume` and tests).
    pub fn read(state: &StateDir, run: &str) -> anyhow::Result<Vec<crate::journal::Entry>> {
        Ok(crate::journal::read(
            &state.path.join("runs").join(run).join("journal.jsonl"),
        )?)
    }
    /// The `detail` an entry was recorded with.
    pub fn detail(entry: &crate::journal::Entry) -> &str {
        entry.outputs.get("detail").and_then(|d| d.as_str()).unwrap_or("")
    }
    pub fn record(&self, step: &str, phase: &str, host: &str, detail: &str) -> anyhow::Result<()> {
        use crate::journal::StepPhase;
        let shown = if self.dry_run && phase == "done" {
            "planned"
        } else {
            phase
        };
        let detail_sep = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        match shown {
            "planned" => eprintln!("{step} {host}: planned (dry run){detail_sep}"),
            "skipped" | "failed" | "done" => eprintln!("{step} {host}: {shown}{detail_sep}"),
            _ => eprintln!("{step} {host}: {detail}"),
        }
        let phase = match phase {
            "started" => StepPhase::Started,
            "done" => StepPhase::Done,
            "skipped" => StepPhase::Skipped,
            _ => StepPhase::Failed,
        };
        if let Some(j) = &self.inner {
            let host = (!host.is_empty()).then_some(host);
            j.lock().expect("journal lock").record(
                step,
                phase,
                host,
                "",
                serde_json::json!({ "detail": detail }),
            )?;
            if matches!(phase, StepPhase::Done | StepPhase::Skipped) {
                crate::journal::crash_if_requested(step);
            }
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
