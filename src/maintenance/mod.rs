//! maintenance: take one control-plane host out of service and back, within the quorum budget
//! (`hactl maintenance plan|start|complete HOST`; docs/recovery.md, "Maintenance").
//!
//! Stages go forward only: Idle → Cordon → Drain → StopControlPlane → (operator work) → Complete.
//! `complete` during Cordon or Drain cancels: nothing was stopped, the host goes straight to
//! Complete. R-maint is checked at entry and again right before etcd stops. The stop order is
//! scheduler → controller-manager → load-balancer backend → apiserver → etcd leadership → etcd;
//! `complete` runs it backwards, waiting for etcd to catch up before the apiserver starts.
//!
//! start and complete are lists of journaled steps ([`steps`], pure, from facts read first) run
//! by [`crate::exec::journaled`]: each with a postcondition read from the hosts, an act and a
//! verification; `--dry-run` prints them as the live run sends them. Every unit start stops is
//! fenced ([`crate::fence`], a drop-in under `/etc`), so a host rebooted during
//! maintenance does not start etcd or the apiserver; complete lifts each fence before the start.
//!
//! complete gates on the returning member being healthy (a linearizable read through it, so
//! quorum is back), not on every member: with another member down (a power cut during the
//! maintenance) completing is how quorum returns, and it ends by naming what is still down.
//!
//! With a `kubernetes` section, Cordon marks the host's Node unschedulable and Drain evicts its
//! pods through the Eviction API by ascending priority, honouring PodDisruptionBudgets
//! ([`crate::operations::node`], decisions in [`crate::kubernetes::drain`]); Complete uncordons. A host with
//! no Node object (no kubelet) has nothing to cordon or drain, and the journal says so.
//!
//! The record lives in the state dir (`maintenance/<host>.json`), on the host
//! (`/var/lib/hactl/maintenance/<host>.json`) and, when the Node exists, in its annotation
//! `hactl.io/maintenance-stage`; while it exists the host's member counts as unhealthy in every
//! budget (M in docs/recovery.md, "Safety rules"), so a second host is refused while B = 0.

pub mod acts;
pub mod steps;

use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{bail, Context as _};

use crate::cli::{MaintenanceArgs, OutputFormat};
use crate::clock::now_rfc3339;
use crate::etcd::health::Observation;
use crate::etcd::safety;
use crate::exec::journaled::{self, JournaledStep, RunOptions};
use crate::exit::{self, refusal, refuse};
use crate::inventory::{Host, Inventory, Role};
use crate::operations::balancers::Balancers;
use crate::operations::journal::new_run_id;
use crate::operations::maintenance_record::{self, read_record, Stage};
use crate::operations::node::{self, Kube};
use crate::operations::{self, Journal, Reach};
use crate::state::StateDir;
use acts::Live;
use steps::{CompleteFacts, StartFacts};

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

fn units_active(s: &Setup, host: &str) -> Vec<String> {
    let f = s.reach.facts.get(host);
    operations::KUBE_UNITS
        .into_iter()
        .filter(|u| {
            f.and_then(|f| f.units.get(*u))
                .is_some_and(|x| x.active == "active")
        })
        .map(str::to_string)
        .collect()
}

/// The acts' shared context (connections, the API, the load balancers).
async fn live(s: Setup, args: &MaintenanceArgs, kube: Option<Kube>) -> Arc<Live> {
    let balancers = Balancers::connect(&s.inv, &s.state, &args.connect).await;
    Arc::new(Live {
        inv: s.inv,
        state: s.state,
        host: args.host.clone(),
        connect: args.connect.clone(),
        reach: s.reach,
        kube,
        balancers,
        max_unavailable: args.max_unavailable,
        drain_timeout: args.drain_timeout,
        leases: Mutex::new(Vec::new()),
        journal: OnceLock::new(),
    })
}

/// start's facts: what the steps follow from, read before anything changes.
fn start_facts(
    s: &Setup,
    obs: &Observation,
    host: &Host,
    kube: Option<&Kube>,
    args: &MaintenanceArgs,
) -> StartFacts {
    let not_applicable = node::not_applicable(&s.inv, kube, &host.name);
    let cordon_skip = match (kube, &not_applicable) {
        (Some(k), None) if k.node.as_ref().is_some_and(|n| n.spec.unschedulable) => Some(format!(
            "Node {} was already unschedulable (cordoned by someone else): Complete leaves it cordoned",
            host.name
        )),
        (_, None) => None,
        (_, Some(why)) => Some(why.clone()),
    };
    let away = maintenance_record::in_maintenance(&s.state);
    let endpoints = obs
        .voters()
        // Members of hosts already in maintenance are stopped on purpose; those already down
        // (R-maint counted them in U) are not this run's to wait for.
        .filter(|m| m.name != host.name && !away.contains(&m.name) && obs.is_healthy(m))
        .flat_map(|m| m.client_urls.clone())
        .collect::<Vec<_>>()
        .join(",");
    StartFacts {
        host: host.name.clone(),
        since: now_rfc3339(),
        reason: args.reason.clone(),
        cordon_skip,
        drain_skip: not_applicable,
        kube: kube.is_some(),
        kube_active: units_active(s, &host.name),
        moves_vip: host.has(Role::LoadBalancer),
        balancers: !s.inv.with_role(Role::LoadBalancer).is_empty(),
        etcd: host.has(Role::Etcd),
        etcd_active: s.reach.etcd_active(&host.name),
        observer: Some((obs.observer.clone(), endpoints)),
    }
}

fn sudo_of(inv: &Inventory, s: &JournaledStep) -> bool {
    s.host
        .as_deref()
        .and_then(|h| inv.host(h))
        .is_some_and(|h| h.ssh.sudo)
}

/// `plan`: the order, what would block it, and the budget left; `-o json` gives the same as data
/// with start's steps exactly as `start --dry-run` prints them.
pub async fn plan(inv: Inventory, state: StateDir, args: &MaintenanceArgs) -> anyhow::Result<i32> {
    let s = setup(inv, state, args).await?;
    let obs = s.reach.observe(&s.inv, &[args.host.as_str()]).await?;
    let counts = counts_for(&s, &obs, &args.host);
    let decision = safety::r_maint(&counts, 1, args.max_unavailable);
    let json = args.output == OutputFormat::Json;
    let mut blockers: Vec<String> = Vec::new();
    if let Some(why) = over_concurrency(&s, &args.host, args.max_unavailable, &counts) {
        blockers.push(why);
    }
    let others = maintenance_record::maintenance_records(&s.state);
    for (h, r) in &others {
        if h != &args.host {
            blockers.push(format!(
                "{h} is in maintenance (stage {}, since {})",
                r.stage, r.since
            ));
        }
    }
    for m in obs.voters() {
        if !obs.is_healthy(m) && !others.contains_key(&m.name) {
            blockers.push(format!(
                "member {} is unhealthy ({})",
                m.name,
                obs.why_unhealthy(m)
            ));
        }
    }
    let lbs = s.inv.with_role(Role::LoadBalancer);
    let kube = node::kube_for(&s.inv, &s.state, &s.reach.transports, &args.connect, &args.host).await;
    let mut order: Vec<String> = Vec::new();
    let mut blocked_by_kube = false;
    match &kube {
        Err(e) => {
            blocked_by_kube = true;
            order.push(format!("1. Cordon, 2. Drain: blocked: {e:#}"));
        }
        Ok(k) => match node::not_applicable(&s.inv, k.as_ref(), &args.host) {
            Some(why) => {
                order.push(format!("1. Cordon: skipped: {why}"));
                order.push(format!("2. Drain: skipped: {why}"));
            }
            None => {
                let k = k.as_ref().expect("not_applicable is None only with a Kube");
                if k.node.as_ref().is_some_and(|n| n.spec.unschedulable) {
                    order.push(format!(
                        "1. Cordon: Node {} is already unschedulable (cordoned by someone else): left so, also after Complete",
                        args.host
                    ));
                } else {
                    order.push(format!(
                        "1. Cordon: Node {} spec.unschedulable=true (through {})",
                        args.host, k.api.through
                    ));
                }
                order.push(format!(
                    "2. Drain: Eviction API by ascending priority, PodDisruptionBudgets honoured for up to --drain-timeout {}s:",
                    args.drain_timeout.as_secs()
                ));
                match node::describe_drain(k, &args.host).await {
                    Ok(lines) => order.extend(lines.into_iter().map(|l| format!("   {l}"))),
                    Err(e) => {
                        blocked_by_kube = true;
                        order.push(format!(
                            "   blocked: cannot list the pods of {}: {e:#}",
                            args.host
                        ));
                    }
                }
            }
        },
    }
    order.push(
        "3. StopControlPlane: kube-scheduler, kube-controller-manager (when present), each fenced".into(),
    );
    order.push(format!(
        "   load-balancer backend drained on {} host(s)",
        lbs.len()
    ));
    order.push(format!("   kube-apiserver (when present); R-maint re-checked; etcd leadership moved if {} leads; etcd stopped and fenced (a reboot does not start it)", args.host));
    order.push("4. Complete (reverse): fences lifted, etcd started and caught up, apiserver, backend ready, controller-manager, scheduler, uncordon".into());
    let (verdict, code) = match decision {
        safety::Decision::Allowed if blocked_by_kube => (
            "blocked: the Kubernetes API is needed for Cordon and Drain".to_string(),
            exit::FAILED,
        ),
        safety::Decision::Allowed => (
            format!("allowed; budget after start: B = {}", counts.budget() - 1),
            exit::OK,
        ),
        safety::Decision::Refused(r) => (r.to_string(), exit::REFUSED),
    };
    if !json {
        println!("maintenance plan for {} ({})", args.host, counts.numbers());
        println!(
            "  budget: B = H − Q = {} − {} = {}; maxUnavailable = {}",
            counts.healthy,
            counts.quorum(),
            counts.budget(),
            args.max_unavailable
        );
        for b in &blockers {
            println!("  blocker: {b}");
        }
        println!("  order:");
        for l in &order {
            println!("    {l}");
        }
        println!("  verdict: {verdict}");
        return Ok(code);
    }
    let host = s.inv.host(&args.host).expect("checked in setup").clone();
    let kube = kube.ok().flatten();
    let facts = start_facts(&s, &obs, &host, kube.as_ref(), args);
    let inv = s.inv.clone();
    let live = live(s, args, kube).await;
    let steps: Vec<serde_json::Value> = steps::start(&facts, &live)
        .iter()
        .map(|st| steps::to_json(st, sudo_of(&inv, st)))
        .collect();
    let out = serde_json::json!({
        "host": args.host,
        "counts": {
            "voters": counts.voters,
            "healthy": counts.healthy,
            "quorum": counts.quorum(),
            "budget": counts.budget(),
            "inMaintenance": counts.in_maintenance,
            "text": counts.numbers(),
        },
        "maxUnavailable": args.max_unavailable,
        "blockers": blockers,
        "order": order,
        "verdict": verdict,
        "exitCode": code,
        "steps": steps,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(code)
}

/// Runs `steps` journaled in a new run `maintenance-<host>-…`; a failure maps to the exit codes
/// of docs/reference/exit-codes.md (a refusal inside keeps its code; after a change, 4 "failed
/// after changes").
async fn run_steps(live: &Arc<Live>, steps: &[JournaledStep], what: &str) -> anyhow::Result<()> {
    let state = &live.state;
    let run = new_run_id(&format!("maintenance-{}", live.host));
    let mut journal = Journal::create(state, &run)?;
    let _ = live.journal.set(Journal::open(state, &run)?);
    eprintln!(
        "maintenance: run {run} (journal {})",
        journal
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    let mirror_hosts = vec![live.host.clone()]
        .into_iter()
        .filter(|h| live.reach.transports.contains_key(h))
        .collect();
    match journaled::run(
        steps,
        &live.reach.transports,
        &mut journal,
        &RunOptions { mirror_hosts },
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(failed) => {
            let code = exit_code(&failed);
            let changed = if failed.changed {
                "changes were made"
            } else {
                "nothing was changed"
            };
            let detail = format!("{:#}", anyhow::Error::new(failed));
            Err(refuse(code, format!("{what} stopped ({changed}): {detail}")))
        }
    }
}

/// The exit code (docs/reference/exit-codes.md) for a failed step: a refusal inside keeps its
/// code; otherwise 4 ("failed after changes") once any step of the run changed something (a
/// `complete` that started etcd and then failed its gate), else 1.
pub fn exit_code(failed: &journaled::StepFailed) -> i32 {
    match failed.inner_refusal() {
        Some(c) => c,
        None if failed.changed => exit::FAILED_AFTER_CHANGES,
        None => exit::FAILED,
    }
}

fn print_steps(inv: &Inventory, steps: &[JournaledStep], to_stdout: bool) {
    for st in steps {
        if to_stdout {
            print!("{}", st.render(sudo_of(inv, st)));
        } else {
            eprintln!(
                "  [{}] {}{}",
                st.id,
                st.title,
                st.host.as_ref().map(|h| format!(" (on {h})")).unwrap_or_default()
            );
        }
    }
}

/// `start`: gates (R-maint, concurrency, the API), the steps, the confirmation, the run.
/// `confirm` asks the operator (skipped with `--yes`); it is the command layer's.
pub async fn start(
    inv: Inventory,
    state: StateDir,
    args: &MaintenanceArgs,
    confirm: &dyn Fn(&str) -> anyhow::Result<()>,
) -> anyhow::Result<i32> {
    let s = setup(inv, state, args).await?;
    let host = s.inv.host(&args.host).expect("checked in setup").clone();
    if let Some(r) = read_record(&s.state, &host.name).filter(|r| r.stage != Stage::Complete) {
        return Err(refuse(
            exit::REFUSED,
            format!("{} is already in maintenance (stage {}, since {}): run `hactl maintenance complete {}` first", host.name, r.stage, r.since, host.name),
        ));
    }
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
    let facts = start_facts(&s, &obs, &host, kube.as_ref(), args);
    let inv = s.inv.clone();
    let live = live(s, args, kube).await;
    let steps = steps::start(&facts, &live);
    if args.dry_run {
        print_steps(&inv, &steps, true);
        return Ok(exit::OK);
    }
    eprintln!("maintenance start {} ({}):", host.name, counts.numbers());
    print_steps(&inv, &steps, false);
    if !args.yes {
        confirm(&format!(
            "maintenance start cordons and drains {h}, then stops and fences its control plane (etcd included): the cluster runs with one member fewer until `hactl maintenance complete {h}`",
            h = host.name
        ))?;
    }
    let _lock = live.state.lock(operations::OPERATION_LOCK).map_err(|e| {
        refuse(
            exit::NEEDS_INPUT,
            format!("another hactl operation holds this cluster: {e:#}"),
        )
    })?;
    run_steps(&live, &steps, "maintenance start").await?;
    let rec = read_record(&live.state, &host.name);
    println!(
        "maintenance: {} is out of service (stage StopControlPlane; stopped and fenced: {}); run `hactl maintenance complete {}` when done",
        host.name,
        rec.map(|r| r.stopped.join(", ")).unwrap_or_default(),
        host.name
    );
    Ok(exit::OK)
}

/// `complete`: StopControlPlane backwards (or a cancel), uncordon, Complete; then what is still
/// down and what to run next.
pub async fn complete(inv: Inventory, state: StateDir, args: &MaintenanceArgs) -> anyhow::Result<i32> {
    let s = setup(inv, state, args).await?;
    let host = s.inv.host(&args.host).expect("checked in setup").clone();
    let Some(record) = read_record(&s.state, &host.name).filter(|r| r.stage != Stage::Complete) else {
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
    let facts = CompleteFacts {
        record,
        etcd: host.has(Role::Etcd),
        etcd_active: s.reach.etcd_active(&host.name),
        balancers: !s.inv.with_role(Role::LoadBalancer).is_empty(),
        now: now_rfc3339(),
    };
    let inv = s.inv.clone();
    // No API connection up front: with quorum lost (another member died during the maintenance)
    // no apiserver answers until this host's etcd is back; the acts that need it connect then.
    let live = live(s, args, None).await;
    let steps = steps::complete(&facts, &live);
    if args.dry_run {
        print_steps(&inv, &steps, true);
        return Ok(exit::OK);
    }
    // The same lock as start: a start still running is not raced; one that crashed left a
    // stale lock, which is taken over; dropping it at the end releases it.
    let _lock = live.state.lock(operations::OPERATION_LOCK).map_err(|e| {
        refuse(
            exit::NEEDS_INPUT,
            format!("another hactl operation holds this cluster ({e:#}); wait for it to finish, then run `hactl maintenance complete {}` again", host.name),
        )
    })?;
    run_steps(&live, &steps, "maintenance complete").await?;
    println!(
        "maintenance: {} is back in service{}",
        host.name,
        if steps::cancels(&facts.record) {
            " (cancelled before anything was stopped)"
        } else {
            ""
        }
    );
    for line in still_down(&live, &host).await {
        println!("{line}");
    }
    Ok(exit::OK)
}

/// After complete: the members still down (observed afresh) and the next command for each.
async fn still_down(live: &Live, host: &Host) -> Vec<String> {
    let Ok(obs) = live.reach.observe(&live.inv, &[]).await else {
        return vec![];
    };
    let away = maintenance_record::in_maintenance(&live.state);
    obs.voters()
        .filter(|m| m.name != host.name && !away.contains(&m.name) && !obs.is_healthy(m))
        .map(|m| {
            let name = if m.name.is_empty() {
                crate::etcd::hex_id(m.id)
            } else {
                m.name.clone()
            };
            still_down_advice(
                &name,
                &obs.why_unhealthy(m),
                live.reach.unreachable.contains_key(&name),
            )
        })
        .collect()
}

/// The line complete prints for a member that is still down.
pub fn still_down_advice(member: &str, why: &str, unreachable: bool) -> String {
    if unreachable {
        format!(
            "still down: {member} ({why}; its host does not answer). Next: `hactl heal --once` repairs it on its own host once it is back and unhealthy for spec.heal.unhealthyTimeout; if the host is gone, power it off and `hactl replace {member} --host SPARE --confirm-dead {member}`"
        )
    } else {
        format!(
            "still down: {member} ({why}). Next: `hactl heal --once` restarts or replaces it once it has been unhealthy for spec.heal.unhealthyTimeout (or `hactl replace {member} --reuse-host` now)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::journaled::{Stage as At, StepFailed};

    fn failed(changed: bool, source: anyhow::Error) -> StepFailed {
        StepFailed {
            step: "start-etcd".into(),
            host: Some("cp1".into()),
            stage: At::Verify,
            changed,
            source,
        }
    }

    #[test]
    fn a_failure_after_a_change_exits_4_and_a_refusal_keeps_its_code() {
        // complete started etcd, then its health gate timed out: failed after changes.
        let f = failed(true, anyhow::anyhow!("etcd member cp1 is healthy: timed out"));
        assert_eq!(exit_code(&f), exit::FAILED_AFTER_CHANGES);
        assert_eq!(exit_code(&failed(false, anyhow::anyhow!("x"))), exit::FAILED);
        let r = refuse(exit::REFUSED, "refused by R-maint");
        assert_eq!(exit_code(&failed(true, r)), exit::REFUSED);
    }

    #[test]
    fn still_down_names_the_next_command() {
        let a = still_down_advice("cp2", "unreachable", true);
        assert!(
            a.contains("still down: cp2") && a.contains("hactl heal --once"),
            "{a}"
        );
        assert!(a.contains("--confirm-dead cp2") && !a.contains("hactl up"), "{a}");
        let b = still_down_advice("cp2", "connection refused", false);
        assert!(b.contains("hactl replace cp2 --reuse-host"), "{b}");
    }
}
