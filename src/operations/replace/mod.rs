//! replace: quorum-safe replacement of one etcd member
//! (`hactl replace MEMBER (--reuse-host | --host NEW) [--planned]`; docs/recovery.md, "Replace and heal (P0–P10)").
//!
//! Flow F1 (a failed member, the default): P0 preflight → P1 move leadership off it → P2 fence it →
//! P3 `member remove` (safety re-checked right before) → P4 move its data aside and configure the
//! replacement host → P5 add it as a learner → P6 start it with state `existing` → P7 promote once
//! it caught up → P8 the replacement serves (kube-apiserver, controller-manager and scheduler
//! started there when the inventory has a kubernetes section; haproxy.cfg re-rendered when host
//! names changed; its backends readied on every load balancer; keepalived back) → P9 the new
//! member list rolled into every other apiserver's `--etcd-servers`, one host at a time behind a
//! drained backend → P10 verify. Flow F2 (`--planned`, a healthy member and a new host): P4–P7
//! for the new host first, then P1, P3 (remove), P2 (fence and stop) for the old one, then P8–P10.
//!
//! `--host NEW`: the operator first moves the `etcd` role (and `control-plane`) from MEMBER's host
//! to NEW in the inventory, keeping MEMBER's host with `roles: []` so hactl can reach and fence it
//! (or deleting it and passing `--confirm-dead MEMBER`). After the run the inventory and the
//! cluster agree, so `hactl up` says `no changes`.
//!
//! Invariants: every step re-checks its postcondition first and is skipped when it holds, so a
//! re-run (or `--resume RUN`) continues where a crash stopped; every destructive step names its
//! host and the member ID and re-checks that pair on the host; data dirs are renamed aside.
//!
//! Shape: P0 observes and decides (every precondition, or a refusal naming its rule); then P1–P10
//! are [`JournaledStep`]s built from P0's decisions (`steps.rs`, no I/O) and run by the one
//! runner recover uses ([`crate::operations::runner`]): each step has a postcondition read from the
//! hosts (so a re-run or `--resume` skips what is done), its act, and a verification. `--dry-run`
//! prints the same steps (`-o json`: as data) and changes nothing. Where a step's work needs a
//! fresh look at the cluster (the safety re-checks before remove, add and promote; the load
//! balancers; P8–P10) its act is an operator-side act whose line says what it does.
//!
//! Flow F2 removes the old member before it stops it, so the cluster never counts a stopped voter
//! among four; with `--host NEW` the old host's data dir is then moved aside
//! (`<dataDir>.hactl-replaced-<run>`) and its etcd unit disabled, beside the fence, which stays
//! across reboots.
//!
//! Layout: `decide.rs` (P0's decisions, pure), `preflight.rs` (P0's reading of the hosts),
//! `steps.rs` (the step list), `acts.rs` (the operator-side acts: safety gates, load balancers,
//! P8–P10, the P7 rollback), `member.rs` (the pure step builders: fence, remove, move aside,
//! learner env), `serve.rs` (P8–P10's work).

mod acts;
pub mod decide;
mod member;
mod preflight;
mod serve;
mod steps;

pub use member::{fence_kube_steps, fence_steps, initial_env, move_aside_step, remove_step, unfence_step};
pub use steps::P;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context as _};
use async_trait::async_trait;

use crate::clock::stamp;
use crate::etcd::client::ClientTls;
use crate::etcd::errors::{classify, ErrorClass};
use crate::etcd::health::Observation;
use crate::etcd::observer::{url_host, MemberHost, TunnelObserver};
use crate::etcd::{self, Member};
use crate::exec::Transports;
use crate::exit::{self, refuse};
use crate::inventory::{Host, Inventory, Role};
use crate::operations::balancers::Balancers;
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::runner::{JournaledStep, Outcome, StepFailed};
use crate::operations::{self, Journal, Reach};
use crate::pki::Pki;
use crate::state::StateDir;

pub use decide::Decisions;

/// How long a learner may take to catch up before P7 rolls back, unless [`PROMOTE_TIMEOUT_VAR`]
/// says otherwise.
pub const PROMOTE_TIMEOUT_SECS: u64 = 600;
/// The environment variable that bounds P7's wait (docs/reference/environment.md); a value that is
/// not a whole number of seconds from 1 to [`PROMOTE_TIMEOUT_MAX_SECS`] stops the run before it
/// reaches any host.
pub const PROMOTE_TIMEOUT_VAR: &str = "HACTL_PROMOTE_TIMEOUT_SECS";
/// The longest P7 wait accepted (a day): longer is a typo, not a slow learner.
const PROMOTE_TIMEOUT_MAX_SECS: u64 = 86_400;

/// The order of flow F1's steps. Remove comes before add: etcd refuses any add while a voter is
/// down (docs/recovery.md, "Replace and heal (P0–P10)"), and this table is what the tests hold the flow to.
pub const F1_ORDER: [P; 10] = [
    P::MoveLeader,
    P::Fence,
    P::Remove,
    P::Prepare,
    P::AddLearner,
    P::Start,
    P::Promote,
    P::Serve,
    P::Propagate,
    P::Verify,
];
/// Flow F2: the new member first (every member is healthy), then the old one leaves: removed
/// (P3) before it is stopped (P2), so one more failure stays tolerable throughout.
pub const F2_ORDER: [P; 10] = [
    P::Prepare,
    P::AddLearner,
    P::Start,
    P::Promote,
    P::MoveLeader,
    P::Remove,
    P::Fence,
    P::Serve,
    P::Propagate,
    P::Verify,
];

/// What `hactl replace` (or heal) asks.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The member (its name, which is its host's inventory name).
    pub member: String,
    /// Re-create it on its own host.
    pub reuse_host: bool,
    /// Re-create it on this host (which has the member's roles in the inventory).
    pub host: Option<String>,
    /// Add the new member first (F2): the old one is healthy.
    pub planned: bool,
    /// Continue this run.
    pub resume: Option<String>,
    /// A learner (hex ID) no hactl run owns, removed first.
    pub cleanup_learner: Option<String>,
    /// Hosts the operator attests are powered off.
    pub confirm_dead: Vec<String>,
}

/// Everything a run needs, gathered once; shared with the operator-side acts of its steps.
pub(crate) struct Run {
    inv: Inventory,
    state: StateDir,
    pki: Pki,
    reach: Reach,
    run_id: String,
    /// The run's journal, for the sub-steps the operator-side acts record; set by the manager
    /// before the first step (the runner appends through another handle on the same file).
    journal: OnceLock<Journal>,
    opts: Options,
    /// The member being replaced, and its host in the inventory (if still there).
    target: String,
    target_host: Option<Host>,
    /// Its member ID when P0 saw it.
    old: Option<Member>,
    replacement: Host,
    new_url: String,
    stamp: String,
    /// Connections to the load balancers (P2 drains, P8 readies or re-renders).
    balancers: Balancers,
    /// What P10 concluded: the exit code and the line to print.
    verdict: Mutex<Option<(i32, String)>>,
    /// Observes through the operator's etcd client over the run's SSH sessions.
    observer: TunnelObserver,
    /// How P11's `up` connects (the operation's own settings).
    connect: crate::exec::connect::ConnectSettings,
    /// How long P7 waits for the learner ([`PROMOTE_TIMEOUT_VAR`]).
    promote_timeout: Duration,
}

/// The deadline of each request an observation makes (and of each connection it opens): a member
/// that does not answer within it counts as unhealthy for this look (the safety rules then refuse,
/// never allow, on a slow member). etcdctl's own default command timeout: on a loaded machine
/// (load ~25 on 2 cores) 2 s was too short right after a leadership move, and P0 refused a
/// healthy cluster as "quorum lost" (H=1 of 5). Only a member that accepts connections and then
/// hangs (a stopped process) costs the whole deadline; one whose etcd is down refuses at once.
const OBSERVE_DEADLINE: Duration = Duration::from_secs(5);

/// `hactl replace` as an [`Operation`].
pub struct Replace {
    opts: Options,
    /// P7's wait, read from the environment before any host is reached.
    promote_timeout: Duration,
    reached: Option<(Reach, Balancers)>,
    run: Option<Arc<Run>>,
}

impl Replace {
    pub fn new(opts: Options) -> Replace {
        Replace {
            opts,
            promote_timeout: Duration::from_secs(PROMOTE_TIMEOUT_SECS),
            reached: None,
            run: None,
        }
    }

    fn replacement_name(&self) -> anyhow::Result<String> {
        match (&self.opts.host, self.opts.reuse_host) {
            (Some(h), false) => Ok(h.clone()),
            (None, true) => Ok(self.opts.member.clone()),
            _ => bail!("say where the replacement runs: --reuse-host (same host) or --host NEW"),
        }
    }
}

#[async_trait(?Send)]
impl Operation for Replace {
    fn kind(&self) -> &'static str {
        "replace"
    }

    fn command(&self) -> String {
        format!("replace {}", self.opts.member)
    }

    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(self.opts.resume.as_deref(), "replace"))
    }

    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let inv = ctx.inv;
        let target = self.opts.member.as_str();
        // A typo in the timeout stops the run here, not at P7 with the old member gone.
        self.promote_timeout = crate::duration::env_seconds_from_env(
            PROMOTE_TIMEOUT_VAR,
            PROMOTE_TIMEOUT_SECS,
            PROMOTE_TIMEOUT_MAX_SECS,
        )?;
        // P0.10 next: it reads only the state dir, so no host needs to answer for it (a slow
        // SSH connect must neither delay nor hide this refusal).
        decide::retry_limit(
            &operations::remediation::load_records(ctx.state),
            &inv.heal,
            target,
            operations::remediation::unix_now(),
            &ctx.state.path.join("heal.json").display().to_string(),
            inv.etcd.peer_port,
        )?;
        let replacement_name = self.replacement_name()?;
        let Some(replacement) = inv.host(&replacement_name).filter(|h| h.has(Role::Etcd)) else {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "{replacement_name} has no etcd role in the inventory; for --host NEW, give NEW the roles of {target} (etcd, control-plane) in the inventory first, and keep {target} with `roles: []` so hactl can fence it"
                ),
            ));
        };
        let target_host = inv.host(target);
        if self.opts.host.is_some() && target_host.is_some_and(|h| h.has(Role::Etcd)) {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "{target} still has the etcd role in the inventory: move the etcd and control-plane roles from {target} to {replacement_name} (keep {target} with `roles: []`), then run again"
                ),
            ));
        }
        if self.opts.planned && self.opts.host.is_none() {
            return Err(refuse(
                exit::REFUSED,
                "--planned adds the new member before removing the old one, so it needs another host (--host NEW); to re-create a healthy member on its own host use --reuse-host without --planned",
            ));
        }
        let mut hosts: Vec<&Host> = inv.with_role(Role::Etcd);
        // P9 reaches every control-plane host (normally the etcd hosts themselves).
        for h in crate::phases::install_kubernetes::control_plane_hosts(inv) {
            if !hosts.iter().any(|x| x.name == h.name) {
                hosts.push(h);
            }
        }
        if let Some(h) = target_host {
            if !hosts.iter().any(|x| x.name == h.name) {
                hosts.push(h);
            }
        }
        // One after the other: both may add to the cluster's known_hosts file.
        let reach = operations::reach::reach(inv, ctx.host_keys(), &hosts, ctx.connect).await;
        reach.refuse_changed_host_keys()?;
        let balancers = Balancers::connect(inv, ctx.state, ctx.connect).await;
        if let Some(why) = reach.unreachable.get(&replacement.name) {
            bail!("cannot reach the replacement host {}: {why}", replacement.name);
        }
        let mut transports = reach.transports.clone();
        for (h, t) in &balancers.transports {
            transports.insert(h.clone(), t.clone());
        }
        self.reached = Some((reach, balancers));
        Ok(transports)
    }

    async fn plan(&mut self, ctx: &Context<'_>, run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let inv = ctx.inv;
        let (reach, balancers) = self.reached.take().expect("reach runs before plan");
        let pki = crate::pki::ensure(&ctx.state.path.join("pki"), inv, time::OffsetDateTime::now_utc())
            .context("failed to prepare the cluster's certificates")?;
        let replacement = inv
            .host(&self.replacement_name()?)
            .expect("checked by reach")
            .clone();
        let tls = ClientTls::from_pki(&pki);
        let mut r = Run {
            inv: inv.clone(),
            state: ctx.state.clone(),
            pki,
            reach,
            run_id: run.id.clone(),
            journal: OnceLock::new(),
            opts: self.opts.clone(),
            target: self.opts.member.clone(),
            target_host: inv.host(&self.opts.member).cloned(),
            old: None,
            new_url: etcd::peer_url(inv, &replacement),
            replacement,
            stamp: stamp(),
            balancers,
            verdict: Mutex::new(None),
            observer: TunnelObserver::new(tls, inv.etcd.client_port, OBSERVE_DEADLINE),
            connect: ctx.connect.clone(),
            promote_timeout: self.promote_timeout,
        };
        let resumed_old = if run.resumed {
            resumed_old(ctx.state, &run.id)?
        } else {
            None
        };
        let (obs, decisions) = r.preflight(resumed_old).await?;
        r.old = decisions.old.clone();
        let run_arc = Arc::new(r);
        let steps = steps::build(&run_arc, &obs, &decisions)?;
        let r = &run_arc;
        let planned = Planned {
            summary: r.summary(&steps),
            decisions: serde_json::to_value(&decisions)?,
            confirmation: Confirmation::Ask(format!(
                "replace changes etcd's membership: member {} leaves and a new member on {} joins",
                r.target, r.replacement.name
            )),
            resume: format!(
                "hactl replace -i {} {} {} --resume {}",
                inv.source.display(),
                r.target,
                if self.opts.reuse_host {
                    "--reuse-host".to_string()
                } else {
                    format!("--host {}", r.replacement.name)
                },
                run.id
            ),
            mirror_hosts: vec![],
            decided: vec![(
                P::Decide.into(),
                serde_json::json!({ "detail": decisions.detail, "observer": obs.observer }),
            )],
            steps,
        };
        self.run = Some(run_arc);
        Ok(planned)
    }

    fn started(&mut self, journal: &Journal) -> anyhow::Result<()> {
        let run = self.run.as_ref().expect("plan runs before the steps");
        let _ = run.journal.set(journal.reopen()?);
        Ok(())
    }

    async fn report(
        &mut self,
        ctx: &Context<'_>,
        _run: &RunId,
        _o: &Outcome,
        _took: Duration,
    ) -> anyhow::Result<Report> {
        let run = self.run.as_ref().expect("plan runs before report");
        // The member history: the new membership; the old member's host fenced for good when
        // the member moved off it (P2), or attested dead (fenced when it answers again).
        let by = format!("replace {}", run.run_id);
        let moved = run.replacement.name != run.target;
        let attested = self.opts.confirm_dead.contains(&run.target);
        let aside = format!("{}.hactl-replaced-{}", run.inv.etcd.data_dir, run.run_id);
        operations::old_members::record_change(
            ctx.inv,
            ctx.state,
            &run.reach.transports,
            &by,
            (moved && !attested && run.target_host.is_some())
                .then_some((run.target.as_str(), aside.as_str())),
            attested.then_some(run.target.as_str()),
        )
        .await;
        let (code, line) = run
            .verdict
            .lock()
            .expect("never poisoned")
            .take()
            .unwrap_or((exit::OK, String::new()));
        let mut text = format!("{line}\n");
        // P11 brought the replacement up as a Node (`hactl up`'s plan) when the member moved.
        if run.brings_up_node() {
            text.push_str(&format!(
                "Node {} was deleted; {} runs the node components (P11, `hactl up`'s plan)\n",
                run.target, run.replacement.name
            ));
        }
        Ok(Report { code, text })
    }

    fn explain(&self, failed: &StepFailed) -> Option<String> {
        let run = self.run.as_ref()?;
        match P::from_code(failed.code)? {
            P::Start if classify(&format!("{:#}", failed.source)) == ErrorClass::DataDirInvalid => Some(format!(
                "{} failed with an identity error (its data dir is unusable)",
                run.replacement.name
            )),
            P::Promote if failed.rolled_back.is_some() => Some(format!(
                "the learner {} did not catch up; check its disk and peer traffic, then run `hactl replace {} ...` again",
                run.replacement.name, run.target
            )),
            _ => None,
        }
    }
}

/// The old member a resumed run decided the first time (from its `decisions.json`).
fn resumed_old(state: &StateDir, run: &str) -> anyhow::Result<Option<u64>> {
    let path = operations::run_dir::RunDir::new(state, run).decisions();
    let Ok(text) = crate::bounded::read_to_string(&path, crate::bounded::TEXT) else {
        return Ok(None);
    };
    let d: Decisions =
        serde_json::from_str(&text).with_context(|| format!("{} is not a replace run", path.display()))?;
    Ok(d.old.map(|m| m.id))
}

impl Run {
    /// Whether P11 runs: the member moved to a node host, with a kubernetes section.
    fn brings_up_node(&self) -> bool {
        let node_host = self
            .inv
            .node_hosts()
            .iter()
            .any(|h| h.name == self.replacement.name);
        decide::brings_up_node(
            self.inv.kubernetes.is_some(),
            self.replacement.name != self.target,
            node_host,
        )
    }

    /// The run's journal (set before the first step runs; only acts use it).
    fn journal(&self) -> &Journal {
        self.journal
            .get()
            .expect("the manager gives the run its journal before the first step")
    }

    fn except(&self) -> Vec<&str> {
        let mut v = vec![self.target.as_str(), self.replacement.name.as_str()];
        v.dedup();
        v
    }

    /// The cluster now, through the etcd client over the tunnels (each request with a
    /// deadline); the etcdctl probe is the fallback when no tunnel answers.
    async fn observe(&self) -> anyhow::Result<Observation> {
        let except = self.except();
        let observers = self.reach.observers(&self.inv, &except);
        let hosts: Vec<MemberHost> = self
            .inv
            .hosts
            .iter()
            .filter_map(|h| {
                let t = self.reach.transports.get(&h.name)?;
                let addr = url_host(&etcd::client_url(&self.inv, h)).to_string();
                Some((h.name.clone(), addr, t.clone()))
            })
            .collect();
        match self.observer.observe(&observers, &hosts).await {
            Ok(obs) => Ok(obs),
            Err(e) => {
                tracing::info!("observing through the etcd client failed ({e}); asking etcdctl on the hosts");
                self.reach.observe(&self.inv, &except).await
            }
        }
    }

    fn observer_host(&self, obs: &Observation) -> &Host {
        self.inv
            .host(&obs.observer)
            .expect("observers come from the inventory")
    }

    /// The member at the replacement's peer URL, unless it is the old member itself.
    fn new_member<'o>(&self, obs: &'o Observation) -> Option<&'o Member> {
        obs.members
            .by_peer_url(&self.new_url)
            .filter(|m| self.old.as_ref().is_none_or(|o| o.id != m.id))
    }

    fn sudo(&self, host: Option<&str>) -> bool {
        host.and_then(|h| self.inv.host(h)).is_some_and(|h| h.ssh.sudo)
    }

    /// The flow in one line: the summary a dry run and a confirmation show.
    fn summary(&self, steps: &[JournaledStep]) -> String {
        let flow = if self.opts.planned {
            "F2 (planned: add first)"
        } else {
            "F1 (remove first)"
        };
        let ids: Vec<String> = std::iter::once("P0 check".to_string())
            .chain(steps.iter().map(|s| match P::from_code(s.code) {
                Some(p) => format!("{} {}", s.id, p.short()),
                None => s.id.clone(),
            }))
            .collect();
        format!(
            "replace {} by a member on {} (run {}), flow {flow}: {}\n",
            self.target,
            self.replacement.name,
            self.run_id,
            ids.join(" → ")
        )
    }
}
