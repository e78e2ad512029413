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
//! by [`crate::operations::runner`]: each with a postcondition read from the hosts, an act and a
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
//! no Node object (its kubelet never registered) has nothing to cordon or drain, and the journal says so.
//!
//! The record lives in the state dir (`maintenance/<host>.json`), on the host
//! (`/var/lib/hactl/maintenance/<host>.json`) and, when the Node exists, in its annotation
//! `hactl.io/maintenance-stage`; while it exists the host's member counts as unhealthy in every
//! budget (M in docs/recovery.md, "Safety rules"), so a second host is refused while B = 0.

pub mod acts;
pub mod decide;
pub mod steps;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context as _};
use async_trait::async_trait;

use crate::clock::now_rfc3339;
use crate::etcd::health::Observation;
use crate::etcd::safety;
use crate::exec::Transports;
use crate::exit;
use crate::inventory::{Host, Inventory, Role};
use crate::operations::balancers::Balancers;
use crate::operations::maintenance_record::{self, read_record, Stage};
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::node::{self, Kube};
use crate::operations::runner::Outcome;
use crate::operations::{self, Journal, Reach};
use crate::state::StateDir;
use acts::Live;
use steps::{CompleteFacts, StartFacts};

pub use crate::operations::maintenance_record::HOST_RECORD_DIR;

/// What `hactl maintenance plan|start|complete` names.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub host: String,
    /// Hosts that may be in maintenance at once (never more than the budget allows).
    pub max_unavailable: usize,
    pub reason: String,
    /// How long Drain retries Evictions a PodDisruptionBudget refuses.
    pub drain_timeout: Duration,
}

struct Setup {
    inv: Inventory,
    state: StateDir,
    reach: Reach,
}

async fn setup(ctx: &Context<'_>, opts: &Options) -> anyhow::Result<Setup> {
    let inv = ctx.inv;
    let Some(h) = inv.host(&opts.host) else {
        bail!("{} is not a host in the inventory", opts.host);
    };
    if !h.has(Role::Etcd) && !h.has(Role::ControlPlane) {
        bail!(
            "{} is not a control-plane or etcd host: nothing to take out of service",
            opts.host
        );
    }
    let mut hosts: Vec<&Host> = inv.with_role(Role::Etcd);
    for h in inv.with_role(Role::ControlPlane) {
        if !hosts.iter().any(|x| x.name == h.name) {
            hosts.push(h);
        }
    }
    let reach = operations::reach::reach(inv, ctx.host_keys(), &hosts, ctx.connect).await;
    reach.refuse_changed_host_keys()?;
    Ok(Setup {
        inv: inv.clone(),
        state: ctx.state.clone(),
        reach,
    })
}

/// The hosts in maintenance other than `host`.
fn others(state: &StateDir, host: &str) -> std::collections::BTreeSet<String> {
    let mut others = maintenance_record::in_maintenance(state);
    others.remove(host);
    others
}

/// The budget as this host's maintenance sees it: other hosts in maintenance count as unhealthy.
fn counts_for(s: &Setup, obs: &Observation, host: &str) -> safety::Counts {
    obs.counts(&others(&s.state, host), None)
}

fn units_active(s: &Setup, host: &str) -> Vec<String> {
    // Static-pod mode: no unit runs the control plane; each component's manifest is moved aside
    // (a step that finds it aside already is done), so all three count on a control-plane host.
    if let Some(k) = &s.inv.kubernetes {
        if k.mode == crate::inventory::KubernetesMode::StaticPod {
            let control_plane = s
                .inv
                .host(host)
                .is_some_and(|h| h.has(crate::inventory::Role::ControlPlane));
            return if control_plane {
                operations::KUBE_UNITS.into_iter().map(str::to_string).collect()
            } else {
                vec![]
            };
        }
    }
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
async fn live(s: Setup, ctx: &Context<'_>, opts: &Options, kube: Option<Kube>) -> Arc<Live> {
    let balancers = Balancers::connect(&s.inv, &s.state, ctx.connect).await;
    Arc::new(Live {
        inv: s.inv,
        state: s.state,
        host: opts.host.clone(),
        connect: ctx.connect.clone(),
        reach: s.reach,
        kube,
        balancers,
        max_unavailable: opts.max_unavailable,
        drain_timeout: opts.drain_timeout,
        leases: Mutex::new(Vec::new()),
        journal: OnceLock::new(),
    })
}

/// start's facts: what the steps follow from, read before anything changes.
fn start_facts(s: &Setup, obs: &Observation, host: &Host, kube: Option<&Kube>, opts: &Options) -> StartFacts {
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
        reason: opts.reason.clone(),
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

/// `plan`: the order, what would block it, and the budget left; `json` gives the same as data
/// (`apiVersion`, `kind: MaintenancePlan`) with start's steps exactly as `start --dry-run -o json`
/// gives them.
pub async fn plan(ctx: &Context<'_>, opts: &Options, json: bool) -> anyhow::Result<i32> {
    let s = setup(ctx, opts).await?;
    let host_name = opts.host.as_str();
    let obs = s.reach.observe(&s.inv, &[host_name]).await?;
    let counts = counts_for(&s, &obs, host_name);
    let decision = safety::r_maint(&counts, 1, opts.max_unavailable);
    let mut blockers: Vec<String> = Vec::new();
    if let Some(why) = decide::over_concurrency(&others(&s.state, host_name), opts.max_unavailable, &counts) {
        blockers.push(why);
    }
    let records = maintenance_record::maintenance_records(&s.state);
    for (h, r) in &records {
        if h != host_name {
            blockers.push(format!(
                "{h} is in maintenance (stage {}, since {})",
                r.stage, r.since
            ));
        }
    }
    for m in obs.voters() {
        if !obs.is_healthy(m) && !records.contains_key(&m.name) {
            blockers.push(format!(
                "member {} is unhealthy ({})",
                m.name,
                obs.why_unhealthy(m)
            ));
        }
    }
    let lbs = s.inv.with_role(Role::LoadBalancer);
    let kube = node::kube_for(&s.inv, &s.state, &s.reach.transports, ctx.connect, host_name).await;
    let mut order: Vec<String> = Vec::new();
    let mut blocked_by_kube = false;
    match &kube {
        Err(e) => {
            blocked_by_kube = true;
            order.push(format!("1. Cordon, 2. Drain: blocked: {e:#}"));
        }
        Ok(k) => match node::not_applicable(&s.inv, k.as_ref(), host_name) {
            Some(why) => {
                order.push(format!("1. Cordon: skipped: {why}"));
                order.push(format!("2. Drain: skipped: {why}"));
            }
            None => {
                let k = k.as_ref().expect("not_applicable is None only with a Kube");
                if k.node.as_ref().is_some_and(|n| n.spec.unschedulable) {
                    order.push(format!(
                        "1. Cordon: Node {host_name} is already unschedulable (cordoned by someone else): left so, also after Complete"
                    ));
                } else {
                    order.push(format!(
                        "1. Cordon: Node {host_name} spec.unschedulable=true (through {})",
                        k.api.through
                    ));
                }
                order.push(format!(
                    "2. Drain: Eviction API by ascending priority, PodDisruptionBudgets honoured for up to --drain-timeout {}s:",
                    opts.drain_timeout.as_secs()
                ));
                match node::describe_drain(k, host_name).await {
                    Ok(lines) => order.extend(lines.into_iter().map(|l| format!("   {l}"))),
                    Err(e) => {
                        blocked_by_kube = true;
                        order.push(format!("   blocked: cannot list the pods of {host_name}: {e:#}"));
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
    order.push(format!("   kube-apiserver (when present); R-maint re-checked; etcd leadership moved if {host_name} leads; etcd stopped and fenced (a reboot does not start it)"));
    order.push("4. Complete (reverse): fences lifted, etcd started and caught up, apiserver, backend ready, controller-manager, scheduler, uncordon".into());
    let (verdict, code) = decide::verdict(&decision, blocked_by_kube, &counts);
    if !json {
        println!("maintenance plan for {host_name} ({})", counts.numbers());
        println!(
            "  budget: B = H − Q = {} − {} = {}; maxUnavailable = {}",
            counts.healthy,
            counts.quorum(),
            counts.budget(),
            opts.max_unavailable
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
    let host = s.inv.host(host_name).expect("checked in setup").clone();
    let kube = kube.ok().flatten();
    let facts = start_facts(&s, &obs, &host, kube.as_ref(), opts);
    let inv = s.inv.clone();
    let live = live(s, ctx, opts, kube).await;
    let steps: Vec<serde_json::Value> = steps::start(&facts, &live)
        .iter()
        .map(|st| {
            st.to_json(
                st.host
                    .as_deref()
                    .and_then(|h| inv.host(h))
                    .is_some_and(|h| h.ssh.sudo),
            )
        })
        .collect();
    let out = plan_json(&PlanReport {
        host: host_name,
        counts: &counts,
        max_unavailable: opts.max_unavailable,
        blockers: &blockers,
        order: &order,
        verdict: &verdict,
        code,
        steps,
    });
    crate::output::print_document(PLAN_KIND, &out)?;
    Ok(code)
}

/// The `kind` of `hactl maintenance plan HOST -o json`'s document.
pub const PLAN_KIND: &str = "MaintenancePlan";

/// What `maintenance plan` found and decided, for its JSON document.
pub struct PlanReport<'a> {
    pub host: &'a str,
    pub counts: &'a crate::etcd::safety::Counts,
    pub max_unavailable: usize,
    pub blockers: &'a [String],
    pub order: &'a [String],
    pub verdict: &'a str,
    pub code: i32,
    /// `start`'s steps as `start --dry-run -o json` gives them.
    pub steps: Vec<serde_json::Value>,
}

/// The body of `hactl maintenance plan HOST -o json` (docs/reference/json.md). Pure.
pub fn plan_json(r: &PlanReport<'_>) -> serde_json::Value {
    serde_json::json!({
        "host": r.host,
        "counts": {
            "voters": r.counts.voters,
            "healthy": r.counts.healthy,
            "quorum": r.counts.quorum(),
            "budget": r.counts.budget(),
            "inMaintenance": r.counts.in_maintenance,
            "text": r.counts.numbers(),
        },
        "maxUnavailable": r.max_unavailable,
        "blockers": r.blockers,
        "order": r.order,
        "verdict": r.verdict,
        "exitCode": r.code,
        "steps": r.steps,
    })
}

/// `maintenance start` as an [`Operation`]: the gates (R-maint, concurrency, the API), the steps
/// Cordon, Drain, StopControlPlane.
pub struct Start {
    opts: Options,
    setup: Option<Setup>,
    live: Option<Arc<Live>>,
}

impl Start {
    pub fn new(opts: Options) -> Start {
        Start {
            opts,
            setup: None,
            live: None,
        }
    }
}

#[async_trait(?Send)]
impl Operation for Start {
    fn kind(&self) -> &'static str {
        "maintenance start"
    }
    fn command(&self) -> String {
        format!("maintenance start {}", self.opts.host)
    }
    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(
            None,
            &format!("maintenance-{}", self.opts.host),
        ))
    }
    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let s = setup(ctx, &self.opts).await?;
        let t = s.reach.transports.clone();
        self.setup = Some(s);
        Ok(t)
    }
    async fn plan(&mut self, ctx: &Context<'_>, _run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let s = self.setup.take().expect("reach runs before plan");
        let opts = &self.opts;
        let host = s.inv.host(&opts.host).expect("checked in setup").clone();
        let record = read_record(&s.state, &host.name);
        let unreachable = (!s.reach.transports.contains_key(&host.name))
            .then(|| s.reach.unreachable.get(&host.name).cloned().unwrap_or_default());
        // A host already in maintenance or unreachable is refused before the cluster is asked.
        decide::entry(&host.name, record.as_ref(), unreachable.as_deref())?;
        let obs = s.reach.observe(&s.inv, &[host.name.as_str()]).await?;
        let counts = counts_for(&s, &obs, &host.name);
        decide::budget(&others(&s.state, &host.name), opts.max_unavailable, &counts)?;
        // The API before anything changes: Cordon and Drain cannot run without it.
        let kube = node::kube_for(&s.inv, &s.state, &s.reach.transports, ctx.connect, &host.name)
            .await
            .context("the Cordon and Drain stages need the Kubernetes API; nothing was changed")?;
        let facts = start_facts(&s, &obs, &host, kube.as_ref(), opts);
        let live = live(s, ctx, opts, kube).await;
        let steps = steps::start(&facts, &live);
        let h = &host.name;
        let planned = Planned {
            summary: format!("maintenance start {h} ({}):\n", counts.numbers()),
            decisions: serde_json::json!({
                "host": h,
                "counts": counts.numbers(),
                "maxUnavailable": opts.max_unavailable,
                "reason": opts.reason,
            }),
            steps,
            confirmation: Confirmation::Ask(format!(
                "maintenance start cordons and drains {h}, then stops and fences its control plane (etcd included): the cluster runs with one member fewer until `hactl maintenance complete {h}`"
            )),
            // A start does not resume: `complete` brings the host back from wherever it stopped.
            resume: format!("hactl maintenance complete -i {} {h}", ctx.inv.source.display()),
            mirror_hosts: vec![h.clone()],
            decided: vec![],
        };
        self.live = Some(live);
        Ok(planned)
    }
    fn started(&mut self, journal: &Journal) -> anyhow::Result<()> {
        let live = self.live.as_ref().expect("plan runs before the steps");
        let _ = live.journal.set(journal.reopen()?);
        Ok(())
    }
    async fn report(
        &mut self,
        _ctx: &Context<'_>,
        _run: &RunId,
        _o: &Outcome,
        _took: Duration,
    ) -> anyhow::Result<Report> {
        let live = self.live.as_ref().expect("plan runs before report");
        let rec = read_record(&live.state, &live.host);
        Ok(Report {
            code: exit::OK,
            text: format!(
                "maintenance: {} is out of service (stage StopControlPlane; stopped and fenced: {}); run `hactl maintenance complete {}` when done\n",
                live.host,
                rec.map(|r| r.stopped.join(", ")).unwrap_or_default(),
                live.host
            ),
        })
    }
}

/// `maintenance complete` as an [`Operation`]: StopControlPlane backwards (or a cancel), uncordon,
/// Complete; then what is still down and what to run next. It asks nothing: it brings a host back.
pub struct Complete {
    opts: Options,
    setup: Option<Setup>,
    live: Option<Arc<Live>>,
    cancels: bool,
}

impl Complete {
    pub fn new(opts: Options) -> Complete {
        Complete {
            opts,
            setup: None,
            live: None,
            cancels: false,
        }
    }
}

#[async_trait(?Send)]
impl Operation for Complete {
    fn kind(&self) -> &'static str {
        "maintenance complete"
    }
    fn command(&self) -> String {
        format!("maintenance complete {}", self.opts.host)
    }
    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(
            None,
            &format!("maintenance-{}", self.opts.host),
        ))
    }
    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let s = setup(ctx, &self.opts).await?;
        let t = s.reach.transports.clone();
        self.setup = Some(s);
        Ok(t)
    }
    async fn plan(&mut self, ctx: &Context<'_>, _run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let s = self.setup.take().expect("reach runs before plan");
        let host = s.inv.host(&self.opts.host).expect("checked in setup").clone();
        let h = host.name.clone();
        let resume = format!("hactl maintenance complete -i {} {h}", ctx.inv.source.display());
        let Some(record) = read_record(&s.state, &h).filter(|r| r.stage != Stage::Complete) else {
            return Ok(Planned {
                summary: format!("{h} is not in maintenance: nothing to do\n"),
                decisions: serde_json::Value::Null,
                steps: vec![],
                confirmation: Confirmation::None,
                resume,
                mirror_hosts: vec![],
                decided: vec![],
            });
        };
        if !s.reach.transports.contains_key(&h) {
            bail!(
                "cannot reach {h}: {}",
                s.reach.unreachable.get(&h).cloned().unwrap_or_default()
            );
        }
        self.cancels = steps::cancels(&record);
        let facts = CompleteFacts {
            etcd: host.has(Role::Etcd),
            etcd_active: s.reach.etcd_active(&h),
            balancers: !s.inv.with_role(Role::LoadBalancer).is_empty(),
            now: now_rfc3339(),
            record,
        };
        // No API connection up front: with quorum lost (another member died during the
        // maintenance) no apiserver answers until this host's etcd is back; the acts that need it
        // connect then.
        let live = live(s, ctx, &self.opts, None).await;
        let planned = Planned {
            summary: format!(
                "maintenance complete {h}: from stage {}{}\n",
                facts.record.stage,
                if self.cancels {
                    " (a cancel: nothing was stopped)"
                } else {
                    ""
                }
            ),
            decisions: serde_json::json!({ "host": h, "record": facts.record }),
            steps: steps::complete(&facts, &live),
            confirmation: Confirmation::None,
            resume,
            mirror_hosts: vec![h.clone()],
            decided: vec![],
        };
        self.live = Some(live);
        Ok(planned)
    }
    fn started(&mut self, journal: &Journal) -> anyhow::Result<()> {
        let live = self.live.as_ref().expect("plan runs before the steps");
        let _ = live.journal.set(journal.reopen()?);
        Ok(())
    }
    async fn report(
        &mut self,
        _ctx: &Context<'_>,
        _run: &RunId,
        _o: &Outcome,
        _took: Duration,
    ) -> anyhow::Result<Report> {
        let live = self.live.as_ref().expect("plan runs before report");
        let host = live.inv.host(&live.host).expect("checked in setup");
        let mut text = format!(
            "maintenance: {} is back in service{}\n",
            live.host,
            if self.cancels {
                " (cancelled before anything was stopped)"
            } else {
                ""
            }
        );
        for line in still_down(live, host).await {
            text.push_str(&line);
            text.push('\n');
        }
        Ok(Report { code: exit::OK, text })
    }
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
            decide::still_down_advice(
                &name,
                &obs.why_unhealthy(m),
                live.reach.unreachable.contains_key(&name),
            )
        })
        .collect()
}
