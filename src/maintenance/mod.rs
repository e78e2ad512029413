//! maintenance: take one control-plane host out of service and back, within the quorum budget
//! (`hactl maintenance plan|start|complete HOST`; docs/recovery.md, "Maintenance").
//!
//! Stages go forward only: Idle → Cordon → Drain → StopControlPlane → (operator work) → Complete.
//! `complete` during Cordon or Drain cancels: nothing was stopped, the host goes straight to
//! Complete. R-maint is checked at entry and again right before etcd stops. The stop order is
//! scheduler → controller-manager → load-balancer backend → apiserver → etcd leadership → etcd;
//! `complete` runs it backwards, waiting for etcd to catch up before the apiserver starts.
//!
//! With a `kubernetes` section, Cordon marks the host's Node unschedulable and Drain evicts its
//! pods through the Eviction API by ascending priority, honouring PodDisruptionBudgets
//! ([`crate::operations::node`], decisions in [`crate::kubernetes::drain`]); Complete uncordons. A host with
//! no Node object (no kubelet) has nothing to cordon or drain, and the journal says so.
//!
//! The record lives in the state dir (`maintenance/<host>.json`), on the host
//! (`/var/lib/hactl/maintenance/<host>.json`) and, when the Node exists, in its annotation
//! `hactl.io/maintenance-stage`; while it exists the host's member counts as unhealthy in every
//! budget (M in docs/recovery.md, "Safety rules"), so a second host is refused while B = 0. Every stage entered is journaled
//! as step `stage-<Stage>`.

use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::exit::{self, refusal, refuse};
use crate::operations::balancers::Balancers;
use crate::operations::journal::{new_run_id, now_rfc3339};
use crate::operations::maintenance_record::{self, read_record, MaintenanceRecord, Stage};
use crate::operations::node::{self, Kube};
use crate::operations::{self, Journal, Reach, StepState};

/// Marks in the maintenance record's `stopped` list: the host's HAProxy servers are in MAINT,
/// and keepalived was stopped on it (so `complete` undoes exactly what `start` did).
const DRAIN_MARK: &str = "haproxy-backends";
const VIP_MARK: &str = "keepalived.service";
use crate::cli::MaintenanceArgs;
use crate::etcd::health::Observation;
use crate::etcd::{self, hex_id, probe, safety, UNIT};
use crate::exec::Mode;
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{Check, RemoteCommand, Step};
use crate::state::StateDir;

pub use crate::operations::maintenance_record::HOST_RECORD_DIR;

struct Setup {
    inv: Inventory,
    state: StateDir,
    reach: Reach,
}

async fn setup(inv: Inventory, state: StateDir, args: &MaintenanceArgs) -> anyhow::Result<Setup> {
    let Some(h) = inv.host(&args.host) else {
        bail!("{} is not a host in the inventory", args.host);
    };
    if !h.has(Role::Etcd) && !h.has(Role::ControlPlane) {
        bail!(
            "{} is not a control-plane or etcd host: nothing to take out of service",
            args.host
        );
    }
    let mut hosts: Vec<&Host> = inv.with_role(Role::Etcd);
    for h in inv.with_role(Role::ControlPlane) {
        if !hosts.iter().any(|x| x.name == h.name) {
            hosts.push(h);
        }
    }
    let reach = operations::reach::reach(&inv, &state, &hosts, &args.connect).await;
    Ok(Setup { inv, state, reach })
}

/// Writes the record locally and on the host (when reachable).
async fn write_record(s: &Setup, mode: Mode, host: &Host, rec: &MaintenanceRecord) -> anyhow::Result<()> {
    if mode == Mode::DryRun {
        println!("{}: maintenance stage {}", host.name, rec.stage);
        return Ok(());
    }
    let json = serde_json::to_string_pretty(rec)?;
    s.state
        .write_secret(format!("maintenance/{}.json", host.name), json.as_bytes())
        .context("cannot record the maintenance stage")?;
    if s.reach.transports.contains_key(&host.name) {
        let path = format!("{HOST_RECORD_DIR}/{}.json", host.name);
        let script = format!(
            "mkdir -p {HOST_RECORD_DIR} && printf '%s\\n' '{}' > {path}.tmp && mv {path}.tmp {path}",
            json.replace('\'', "")
        );
        operations::run_on(
            mode,
            &s.reach.transports,
            "record the maintenance stage",
            host,
            vec![Step::Run(RemoteCommand::script(script))],
        )
        .await?;
    }
    Ok(())
}

/// Moves the record to `stage`: state dir, host, Node annotation, and the journal step
/// `stage-<stage>` (which `HACTL_CRASH_AFTER` can name).
async fn enter(
    s: &Setup,
    mode: Mode,
    host: &Host,
    rec: &mut MaintenanceRecord,
    kube: Option<&Kube>,
    journal: &Journal,
    stage: Stage,
) -> anyhow::Result<()> {
    rec.stage = stage;
    write_record(s, mode, host, rec).await?;
    node::annotate_stage(kube, mode, &host.name, stage.as_str()).await;
    journal.record(&format!("stage-{stage}"), StepState::Done, &host.name, "")
}

/// The budget as this host's maintenance sees it: other hosts in maintenance count as unhealthy.
fn counts_for(s: &Setup, obs: &Observation, host: &str) -> safety::Counts {
    let mut others = maintenance_record::in_maintenance(&s.state);
    others.remove(host);
    obs.counts(&others, None)
}

/// maxUnavailable is the number of hosts in maintenance at once (default 1, KEP-4212's
/// concurrency): R-maint's budget bounds how many *more* members may stop, and this bounds how
/// many hosts are out together, counting those already in maintenance.
fn over_concurrency(
    s: &Setup,
    host: &str,
    max_unavailable: usize,
    counts: &safety::Counts,
) -> Option<String> {
    let mut others = maintenance_record::in_maintenance(&s.state);
    others.remove(host);
    (others.len() + 1 > max_unavailable).then(|| {
        format!(
            "refused by R-maint: {} already in maintenance ({}) and maxUnavailable={max_unavailable} host(s) at once ({}); finish it first (`hactl maintenance complete HOST`), or allow {} with --max-unavailable {} where the budget permits",
            others.len(),
            others.iter().cloned().collect::<Vec<_>>().join(", "),
            counts.numbers(),
            others.len() + 1,
            others.len() + 1
        )
    })
}

fn units_active(s: &Setup, host: &str) -> Vec<&'static str> {
    let f = s.reach.facts.get(host);
    operations::KUBE_UNITS
        .into_iter()
        .filter(|u| {
            f.and_then(|f| f.units.get(*u))
                .is_some_and(|x| x.active == "active")
        })
        .collect()
}

/// `plan`: the order, what would block it, and the budget left.
pub async fn plan(inv: Inventory, state: StateDir, args: &MaintenanceArgs) -> anyhow::Result<i32> {
    let s = setup(inv, state, args).await?;
    let obs = s.reach.observe(&s.inv, &[args.host.as_str()]).await?;
    let counts = counts_for(&s, &obs, &args.host);
    let decision = safety::r_maint(&counts, 1, args.max_unavailable);
    println!("maintenance plan for {} ({})", args.host, counts.numbers());
    if let Some(why) = over_concurrency(&s, &args.host, args.max_unavailable, &counts) {
        println!("  blocked: {why}");
    }
    println!(
        "  budget: B = H − Q = {} − {} = {}; maxUnavailable = {}",
        counts.healthy,
        counts.quorum(),
        counts.budget(),
        args.max_unavailable
    );
    let others = maintenance_record::maintenance_records(&s.state);
    for (h, r) in &others {
        if h != &args.host {
            println!(
                "  blocker: {h} is in maintenance (stage {}, since {})",
                r.stage, r.since
            );
        }
    }
    for m in obs.voters() {
        if !obs.is_healthy(m) && !others.contains_key(&m.name) {
            println!(
                "  blocker: member {} is unhealthy ({})",
                m.name,
                obs.why_unhealthy(m)
            );
        }
    }
    let lbs = s.inv.with_role(Role::LoadBalancer);
    let kube = node::kube_for(&s.inv, &s.state, &s.reach.transports, &args.connect, &args.host).await;
    let mut blocked_by_kube = false;
    println!("  order:");
    match &kube {
        Err(e) => {
            blocked_by_kube = true;
            println!("    1. Cordon, 2. Drain: blocked: {e:#}");
        }
        Ok(k) => match node::not_applicable(&s.inv, k.as_ref(), &args.host) {
            Some(why) => {
                println!("    1. Cordon: skipped: {why}");
                println!("    2. Drain: skipped: {why}");
            }
            None => {
                let k = k.as_ref().expect("not_applicable is None only with a Kube");
                if k.node.as_ref().is_some_and(|n| n.spec.unschedulable) {
                    println!(
                        "    1. Cordon: Node {} is already unschedulable (cordoned by someone else): left so, also after Complete",
                        args.host
                    );
                } else {
                    println!(
                        "    1. Cordon: Node {} spec.unschedulable=true (through {})",
                        args.host, k.api.through
                    );
                }
                println!(
                    "    2. Drain: Eviction API by ascending priority, PodDisruptionBudgets honoured for up to --drain-timeout {}s:",
                    args.drain_timeout.as_secs()
                );
                match node::describe_drain(k, &args.host).await {
                    Ok(lines) => {
                        for l in lines {
                            println!("       {l}");
                        }
                    }
                    Err(e) => {
                        blocked_by_kube = true;
                        println!("       blocked: cannot list the pods of {}: {e:#}", args.host);
                    }
                }
            }
        },
    }
    println!("    3. StopControlPlane: kube-scheduler, kube-controller-manager (when present)");
    println!("       load-balancer backend drained on {} host(s)", lbs.len());
    println!("       kube-apiserver (when present); R-maint re-checked; etcd leadership moved if {} leads; etcd stopped", args.host);
    println!("    4. Complete (reverse): etcd started and caught up, apiserver, backend ready, controller-manager, scheduler, uncordon");
    match decision {
        safety::Decision::Allowed if blocked_by_kube => {
            println!("  verdict: blocked: the Kubernetes API is needed for Cordon and Drain");
            Ok(exit::FAILED)
        }
        safety::Decision::Allowed => {
            println!(
                "  verdict: allowed; budget after start: B = {}",
                counts.budget() - 1
            );
            Ok(exit::OK)
        }
        safety::Decision::Refused(r) => {
            println!("  verdict: {r}");
            Ok(exit::REFUSED)
        }
    }
}

pub async fn start(inv: Inventory, state: StateDir, args: &MaintenanceArgs) -> anyhow::Result<i32> {
    let s = setup(inv, state, args).await?;
    let mode = if args.dry_run { Mode::DryRun } else { Mode::Live };
    let host = s.inv.host(&args.host).expect("checked in setup");
    if let Some(r) = read_record(&s.state, &host.name).filter(|r| r.stage != Stage::Complete) {
        return Err(refuse(
            exit::REFUSED,
            format!("{} is already in maintenance (stage {}, since {}): run `hactl maintenance complete {}` first", host.name, r.stage, r.since, host.name),
        ));
    }
    let _lock = if mode == Mode::Live {
        Some(s.state.lock(operations::OPERATION_LOCK).map_err(|e| {
            refuse(
                exit::NEEDS_INPUT,
                format!("another hactl operation holds this cluster: {e:#}"),
            )
        })?)
    } else {
        None
    };
    if !s.reach.transports.contains_key(&host.name) {
        bail!(
            "cannot reach {}: {}",
            host.name,
            s.reach.unreachable.get(&host.name).cloned().unwrap_or_default()
        );
    }
    // Gate at entry to Cordon.
    let obs = s.reach.observe(&s.inv, &[host.name.as_str()]).await?;
    let counts = counts_for(&s, &obs, &host.name);
    if let Some(why) = over_concurrency(&s, &host.name, args.max_unavailable, &counts) {
        return Err(refuse(exit::REFUSED, why));
    }
    safety::r_maint(&counts, 1, args.max_unavailable)
        .into_result()
        .map_err(refusal)?;
    // The API before anything changes: Cordon and Drain cannot run without it.
    let kube = node::kube_for(&s.inv, &s.state, &s.reach.transports, &args.connect, &host.name)
        .await
        .context("the Cordon and Drain stages need the Kubernetes API; nothing was changed")?;
    let journal =
        Journal::open_or_create(&s.state, &new_run_id(&format!("maintenance-{}", host.name)), mode)?;
    let mut rec = MaintenanceRecord {
        host: host.name.clone(),
        stage: Stage::Cordon,
        since: now_rfc3339(),
        reason: args.reason.clone(),
        stopped: vec![],
    };
    let not_applicable = node::not_applicable(&s.inv, kube.as_ref(), &host.name);
    enter(&s, mode, host, &mut rec, kube.as_ref(), &journal, Stage::Cordon).await?;
    match (&kube, &not_applicable) {
        (Some(k), None) if k.node.as_ref().is_some_and(|n| n.spec.unschedulable) => journal.record(
            "cordon",
            StepState::Skipped,
            &host.name,
            &format!(
                "Node {} was already unschedulable (cordoned by someone else): Complete leaves it cordoned",
                host.name
            ),
        )?,
        (Some(k), None) => {
            rec.stopped.push(node::CORDON_MARK.into());
            write_record(&s, mode, host, &rec).await?;
            node::set_unschedulable(k, mode, &journal, "cordon", &host.name, true).await?
        }
        _ => journal.record(
            "cordon",
            StepState::Skipped,
            &host.name,
            not_applicable.as_deref().unwrap_or(""),
        )?,
    }
    enter(&s, mode, host, &mut rec, kube.as_ref(), &journal, Stage::Drain).await?;
    match (&kube, &not_applicable) {
        (Some(k), None) => node::drain(k, mode, &journal, &host.name, args.drain_timeout).await?,
        _ => journal.record(
            "drain",
            StepState::Skipped,
            &host.name,
            not_applicable.as_deref().unwrap_or(""),
        )?,
    }

    enter(
        &s,
        mode,
        host,
        &mut rec,
        kube.as_ref(),
        &journal,
        Stage::StopControlPlane,
    )
    .await?;
    let active = units_active(&s, &host.name);
    // The Leases this host holds, read before its controllers stop (the handover is awaited
    // after they stop and before its apiserver does: crate::kubernetes::handover).
    let leases_before = match (&kube, mode) {
        (Some(k), Mode::Live) => crate::kubernetes::handover::read(&k.api)
            .await
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    for unit in ["kube-scheduler.service", "kube-controller-manager.service"] {
        if active.contains(&unit) {
            journal.record(&format!("stop-{unit}"), StepState::Started, &host.name, "")?;
            operations::run_on(
                mode,
                &s.reach.transports,
                &format!("stop {unit}"),
                host,
                vec![Step::Run(RemoteCommand::new(["systemctl", "stop", unit]))],
            )
            .await?;
            rec.stopped.push(unit.to_string());
            journal.record(&format!("stop-{unit}"), StepState::Done, &host.name, "")?;
        }
    }
    let held = crate::kubernetes::handover::held_by(&leases_before, &host.name);
    if let (Some(k), false) = (&kube, held.is_empty()) {
        let names: Vec<&str> = held.iter().map(|l| l.name.as_str()).collect();
        journal.record(
            "lease-handover",
            StepState::Started,
            &host.name,
            &names.join(", "),
        )?;
        match crate::kubernetes::handover::wait_moved(&k.api, &held, &host.name).await {
            Ok(moved) => {
                let detail: Vec<String> = moved.iter().map(|(l, h)| format!("{l} → {h}")).collect();
                journal.record("lease-handover", StepState::Done, &host.name, &detail.join(", "))?;
            }
            Err(e) => {
                write_record(&s, mode, host, &rec).await?;
                return Err(refuse(
                    exit::FAILED_AFTER_CHANGES,
                    format!("{e}; {} stays at stage StopControlPlane with its apiserver and etcd running: check the other control-plane hosts' kube-controller-manager and kube-scheduler (`hactl status`), then `hactl maintenance start {}` again or `hactl maintenance complete {}`", host.name, host.name, host.name),
                ));
            }
        }
    }
    // HAProxy next: no new client reaches this host's apiserver or etcd through the VIP, and
    // the VIP leaves it if it is a load balancer itself, before either stops.
    let balancers = Balancers::connect(&s.inv, &s.state, &args.connect).await;
    if balancers.move_vip_off(mode, &journal, "vip-move", host).await? {
        rec.stopped.push(VIP_MARK.into());
        write_record(&s, mode, host, &rec).await?;
    }
    rec.stopped.push(DRAIN_MARK.into());
    write_record(&s, mode, host, &rec).await?;
    balancers
        .drain(mode, &s.inv, &journal, "lb-drain", &host.name)
        .await?;
    if active.contains(&"kube-apiserver.service") {
        journal.record("stop-kube-apiserver.service", StepState::Started, &host.name, "")?;
        operations::run_on(
            mode,
            &s.reach.transports,
            "stop kube-apiserver",
            host,
            vec![Step::Run(RemoteCommand::new([
                "systemctl",
                "stop",
                "kube-apiserver.service",
            ]))],
        )
        .await?;
        rec.stopped.push("kube-apiserver.service".into());
        journal.record("stop-kube-apiserver.service", StepState::Done, &host.name, "")?;
    }
    if host.has(Role::Etcd) && s.reach.etcd_active(&host.name) {
        // Gate again right before etcd stops: the cluster may have changed while we drained.
        let obs = s.reach.observe(&s.inv, &[host.name.as_str()]).await?;
        if let safety::Decision::Refused(r) =
            safety::r_maint(&counts_for(&s, &obs, &host.name), 1, args.max_unavailable)
        {
            write_record(&s, mode, host, &rec).await?;
            return Err(refuse(
                exit::REFUSED,
                format!("{r}\n{} stays at stage StopControlPlane with etcd running; `hactl maintenance complete {}` brings the rest back", host.name, host.name),
            ));
        }
        let me = obs.by_name(&host.name).cloned();
        if let Some(me) = me.filter(|m| obs.leader() == Some(m.id)) {
            let next = obs
                .voters()
                .filter(|m| m.id != me.id && obs.is_healthy(m))
                .max_by_key(|m| obs.status_of(m).map(|s| s.status.raft_applied_index).unwrap_or(0))
                .context("no healthy member to take over leadership")?;
            journal.record(
                "move-leader",
                StepState::Started,
                &host.name,
                &format!("to {} ({})", next.name, hex_id(next.id)),
            )?;
            let observer = s.inv.host(&obs.observer).expect("observer from inventory");
            operations::run_on(
                mode,
                &s.reach.transports,
                "move etcd leadership",
                observer,
                vec![Step::Run(RemoteCommand::new([
                    etcd::ETCDCTL_WRAPPER.to_string(),
                    format!("--endpoints={}", me.client_urls.join(",")),
                    "move-leader".to_string(),
                    hex_id(next.id),
                ]))],
            )
            .await?;
            journal.record("move-leader", StepState::Done, &host.name, "")?;
        } else {
            journal.record("move-leader", StepState::Skipped, &host.name, "not the leader")?;
        }
        journal.record("stop-etcd", StepState::Started, &host.name, "")?;
        operations::run_on(
            mode,
            &s.reach.transports,
            "stop etcd",
            host,
            vec![
                Step::Run(RemoteCommand::new(["systemctl", "stop", UNIT])),
                Step::Wait(Check::command(
                    format!("etcd on {} is stopped", host.name),
                    RemoteCommand::script(format!(
                        "! systemctl is-active --quiet {UNIT} && ! pgrep -x etcd >/dev/null"
                    )),
                    Duration::from_secs(60),
                )),
            ],
        )
        .await?;
        rec.stopped.push(UNIT.to_string());
        journal.record("stop-etcd", StepState::Done, &host.name, "")?;
        write_record(&s, mode, host, &rec).await?;
        let observer = s.inv.host(&obs.observer).expect("observer from inventory");
        let away = maintenance_record::in_maintenance(&s.state);
        let endpoints = obs
            .voters()
            // Members of hosts already in maintenance are stopped on purpose.
            .filter(|m| m.name != host.name && !away.contains(&m.name))
            // Those healthy before etcd stopped must stay so; one already down (R-maint counted
            // it in U) is not this step's to wait for.
            .filter(|m| obs.is_healthy(m))
            .flat_map(|m| m.client_urls.clone())
            .collect::<Vec<_>>()
            .join(",");
        operations::run_on(
            mode,
            &s.reach.transports,
            "the rest of the cluster is healthy",
            observer,
            vec![Step::Wait(Check::command(
                format!("the other members are healthy ({endpoints}; away: {away:?})"),
                RemoteCommand::read_only([
                    etcd::ETCDCTL_WRAPPER.to_string(),
                    format!("--endpoints={endpoints}"),
                    "endpoint".into(),
                    "health".into(),
                ]),
                Duration::from_secs(30),
            ))],
        )
        .await?;
    }
    write_record(&s, mode, host, &rec).await?;
    println!(
        "maintenance: {} is out of service (stage StopControlPlane; stopped: {}); run `hactl maintenance complete {}` when done",
        host.name,
        if rec.stopped.is_empty() { "nothing".to_string() } else { rec.stopped.join(", ") },
        host.name
    );
    Ok(exit::OK)
}

pub async fn complete(inv: Inventory, state: StateDir, args: &MaintenanceArgs) -> anyhow::Result<i32> {
    let s = setup(inv, state, args).await?;
    let mode = if args.dry_run { Mode::DryRun } else { Mode::Live };
    let host = s.inv.host(&args.host).expect("checked in setup");
    let Some(mut rec) = read_record(&s.state, &host.name).filter(|r| r.stage != Stage::Complete) else {
        println!("{} is not in maintenance: nothing to do", host.name);
        return Ok(exit::OK);
    };
    if !s.reach.transports.contains_key(&host.name) {
        bail!(
            "cannot reach {}: {}",
            host.name,
            s.reach.unreachable.get(&host.name).cloned().unwrap_or_default()
        );
    }
    // The same lock as start: a start still running is not raced; one that crashed left a
    // stale lock, which is taken over; dropping it at the end releases it.
    let _lock = if mode == Mode::Live {
        Some(s.state.lock(operations::OPERATION_LOCK).map_err(|e| {
            refuse(
                exit::NEEDS_INPUT,
                format!("another hactl operation holds this cluster ({e:#}); wait for it to finish, then run `hactl maintenance complete {}` again", host.name),
            )
        })?)
    } else {
        None
    };
    let journal =
        Journal::open_or_create(&s.state, &new_run_id(&format!("maintenance-{}", host.name)), mode)?;
    // Cancel (docs/recovery.md, "Maintenance"): during Idle, Cordon or Drain nothing was stopped, so Complete is only the
    // uncordon.
    let cordoned = rec.stopped.iter().any(|x| x == node::CORDON_MARK);
    let cancelled = rec.stage.cancels() && rec.stopped.iter().all(|x| x == node::CORDON_MARK);
    if cancelled {
        journal.record(
            "cancel",
            StepState::Done,
            &host.name,
            &format!(
                "cancelled during {}: nothing was stopped, straight to Complete",
                rec.stage
            ),
        )?;
    } else {
        restart_stopped(&s, mode, host, &rec, &journal, &args.connect).await?;
    }
    let kube = node::kube_for(&s.inv, &s.state, &s.reach.transports, &args.connect, &host.name).await;
    let kube = match kube {
        Ok(k) => k,
        Err(e) => {
            // Everything is running again; only the cordon is left for the next `complete`.
            rec.stopped.retain(|x| x == node::CORDON_MARK);
            write_record(&s, mode, host, &rec).await?;
            journal.record("uncordon", StepState::Failed, &host.name, &format!("{e:#}"))?;
            return Err(refuse(
                exit::FAILED_AFTER_CHANGES,
                format!("{}: everything hactl stopped runs again, but the Node could not be uncordoned: {e:#}; run `hactl maintenance complete {}` again once an apiserver answers", host.name, host.name),
            ));
        }
    };
    match node::not_applicable(&s.inv, kube.as_ref(), &host.name) {
        None if cordoned => {
            let k = kube.as_ref().expect("not_applicable is None only with a Kube");
            node::set_unschedulable(k, mode, &journal, "uncordon", &host.name, false).await?;
        }
        None => journal.record(
            "uncordon",
            StepState::Skipped,
            &host.name,
            &format!("hactl did not cordon Node {}: it stays as it was", host.name),
        )?,
        Some(why) => journal.record("uncordon", StepState::Skipped, &host.name, &why)?,
    }
    rec.since = now_rfc3339();
    rec.stopped.clear();
    enter(&s, mode, host, &mut rec, kube.as_ref(), &journal, Stage::Complete).await?;
    println!(
        "maintenance: {} is back in service{}",
        host.name,
        if cancelled {
            " (cancelled before anything was stopped)"
        } else {
            ""
        }
    );
    Ok(exit::OK)
}

/// Complete's reverse order for what StopControlPlane stopped: etcd (caught up), apiserver, the
/// load-balancer backend and the VIP, controller-manager, scheduler.
async fn restart_stopped(
    s: &Setup,
    mode: Mode,
    host: &Host,
    rec: &MaintenanceRecord,
    journal: &Journal,
    connect: &crate::cli::ConnectArgs,
) -> anyhow::Result<()> {
    let balancers = Balancers::connect(&s.inv, &s.state, connect).await;
    let mut others_away = maintenance_record::in_maintenance(&s.state);
    others_away.remove(&host.name);
    let stopped = rec.stopped.clone();
    let was = |u: &str| {
        stopped.iter().any(|x| x == u)
            || (u == UNIT && host.has(Role::Etcd) && !s.reach.etcd_active(&host.name))
    };
    if was(UNIT) {
        journal.record("start-etcd", StepState::Started, &host.name, "")?;
        operations::run_on(
            mode,
            &s.reach.transports,
            "start etcd and wait until it caught up",
            host,
            {
                let mut steps = vec![
                    Step::Run(RemoteCommand::new(["systemctl", "start", "--no-block", UNIT])),
                    // A linearizable read through the member waits until it applied the
                    // leader's commit index: healthy here means caught up.
                    Step::Wait(probe::member_healthy(&host.name, Duration::from_secs(120))),
                ];
                // The whole cluster only when no other host is out on purpose (its stopped
                // member would never answer).
                if others_away.is_empty() {
                    steps.push(Step::Wait(probe::cluster_healthy(
                        &format!("after {} returned", host.name),
                        Duration::from_secs(60),
                    )));
                }
                steps
            },
        )
        .await?;
        journal.record("start-etcd", StepState::Done, &host.name, "")?;
    }
    for unit in [
        "kube-apiserver.service",
        "kube-controller-manager.service",
        "kube-scheduler.service",
    ] {
        if was(unit) {
            journal.record(&format!("start-{unit}"), StepState::Started, &host.name, "")?;
            operations::run_on(
                mode,
                &s.reach.transports,
                &format!("start {unit}"),
                host,
                vec![Step::Run(RemoteCommand::new(["systemctl", "start", unit]))],
            )
            .await?;
            journal.record(&format!("start-{unit}"), StepState::Done, &host.name, "")?;
        }
        if unit == "kube-apiserver.service" {
            // etcd caught up and the apiserver started: the backend returns.
            if was(DRAIN_MARK) {
                balancers
                    .ready(
                        mode,
                        &s.inv,
                        journal,
                        "lb-ready",
                        &host.name,
                        Duration::from_secs(60),
                    )
                    .await?;
            } else {
                journal.record(
                    "lb-ready",
                    StepState::Skipped,
                    &host.name,
                    "its backends were never drained",
                )?;
            }
            if was(VIP_MARK) {
                balancers.restore_vip(mode, journal, "vip-restore", host).await?;
            }
        }
    }
    Ok(())
}
