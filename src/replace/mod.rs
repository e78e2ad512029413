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
//! runner recover uses ([`crate::exec::journaled`]): each step has a postcondition read from the
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
//! Layout: `preflight.rs` (P0), `steps.rs` (the step list), `acts.rs` (the operator-side acts:
//! safety gates, load balancers, P8–P10), `member.rs` (the pure step builders: fence, remove,
//! move aside, learner env; the P7 rollback), `serve.rs` (P8–P10's work).

mod acts;
mod member;
mod preflight;
mod serve;
mod steps;

pub use member::{fence_kube_steps, fence_steps, initial_env, move_aside_step, remove_step, unfence_step};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::cli::{OutputFormat, ReplaceArgs};
use crate::clock::stamp;
use crate::etcd::client::ClientTls;
use crate::etcd::errors::{classify, ErrorClass};
use crate::etcd::health::Observation;
use crate::etcd::observer::{url_host, MemberHost, TunnelObserver};
use crate::etcd::{self, Member};
use crate::exec::journaled::{self, JournaledStep, RunOptions};
use crate::exec::Mode;
use crate::exit::{self, refuse};
use crate::inventory::{Host, Inventory, Role};
use crate::operations::balancers::Balancers;
use crate::operations::journal::new_run_id;
use crate::operations::{self, Journal, Reach};
use crate::pki::{self, Pki};
use crate::state::StateDir;

/// How long a learner may take to catch up before P7 rolls back.
pub const PROMOTE_TIMEOUT_SECS: u64 = 600;

/// The order of flow F1's steps. Remove comes before add: etcd refuses any add while a voter is
/// down (docs/recovery.md, "Replace and heal (P0–P10)"), and this table is what the tests hold the flow to.
pub const F1_ORDER: [&str; 11] = ["P0", "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10"];
/// Flow F2: the new member first (every member is healthy), then the old one leaves: removed
/// (P3) before it is stopped (P2), so one more failure stays tolerable throughout.
pub const F2_ORDER: [&str; 11] = ["P0", "P4", "P5", "P6", "P7", "P1", "P3", "P2", "P8", "P9", "P10"];

/// Asks the operator before a live run changes anything (`hactl replace` passes the terminal
/// prompt; heal passes `--yes`).
pub type Confirm<'c> = &'c (dyn Fn(&str) -> anyhow::Result<()> + Sync);

/// Everything a run needs, gathered once; shared with the operator-side acts of its steps.
pub(crate) struct Run {
    inv: Inventory,
    state: StateDir,
    pki: Pki,
    reach: Reach,
    mode: Mode,
    /// The run's journal, for P0 and the sub-steps the operator-side acts record; the runner
    /// appends through a second handle on the same file.
    journal: Journal,
    args: ReplaceArgs,
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
}

/// The deadline of each request an observation makes: a member that does not answer within it
/// counts as unhealthy for this look (the safety rules then refuse, never allow, on a slow member).
const OBSERVE_DEADLINE: Duration = Duration::from_secs(2);

/// Replaces `args.member` (the inventory already loaded by the caller: heal, which passes
/// `--yes`). Without `--yes` a live run refuses, as there is no one to ask.
pub async fn run(inv: &Inventory, state: &StateDir, args: &ReplaceArgs) -> anyhow::Result<i32> {
    run_with_confirm(inv, state, args, &|what: &str| {
        Err(refuse(
            exit::NEEDS_INPUT,
            format!("{what}; nobody to confirm: run again with --yes to proceed"),
        ))
    })
    .await
}

/// [`run`], asking `confirm` before a live run (not a resumed one) changes anything.
pub async fn run_with_confirm(
    inv: &Inventory,
    state: &StateDir,
    args: &ReplaceArgs,
    confirm: Confirm<'_>,
) -> anyhow::Result<i32> {
    let mode = if args.dry_run { Mode::DryRun } else { Mode::Live };
    let target = args.member.clone();
    let replacement_name = match (&args.host, args.reuse_host) {
        (Some(h), false) => h.clone(),
        (None, true) => target.clone(),
        _ => bail!("say where the replacement runs: --reuse-host (same host) or --host NEW"),
    };
    let Some(replacement) = inv.host(&replacement_name).filter(|h| h.has(Role::Etcd)) else {
        return Err(refuse(
            exit::REFUSED,
            format!(
                "{replacement_name} has no etcd role in the inventory; for --host NEW, give NEW the roles of {target} (etcd, control-plane) in the inventory first, and keep {target} with `roles: []` so hactl can fence it"
            ),
        ));
    };
    let target_host = inv.host(&target);
    if args.host.is_some() && target_host.is_some_and(|h| h.has(Role::Etcd)) {
        return Err(refuse(
            exit::REFUSED,
            format!(
                "{target} still has the etcd role in the inventory: move the etcd and control-plane roles from {target} to {replacement_name} (keep {target} with `roles: []`), then run again"
            ),
        ));
    }
    if args.planned && args.host.is_none() {
        return Err(refuse(
            exit::REFUSED,
            "--planned adds the new member before removing the old one, so it needs another host (--host NEW); to re-create a healthy member on its own host use --reuse-host without --planned",
        ));
    }
    let _lock = if mode == Mode::Live {
        Some(state.lock(operations::OPERATION_LOCK).map_err(|e| {
            refuse(
                exit::NEEDS_INPUT,
                format!("another hactl operation holds this cluster: {e:#}; wait for it, then run again"),
            )
        })?)
    } else {
        None
    };
    let pki = pki::ensure(&state.path.join("pki"), inv, time::OffsetDateTime::now_utc())
        .context("failed to prepare the cluster's certificates")?;
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
    let reach = operations::reach::reach(inv, state, &hosts, &args.connect).await;
    let balancers = Balancers::connect(inv, state, &args.connect).await;
    if let Some(why) = reach.unreachable.get(&replacement.name) {
        bail!("cannot reach the replacement host {}: {why}", replacement.name);
    }
    let run_id = args.resume.clone().unwrap_or_else(|| new_run_id("replace"));
    let journal = Journal::open_or_create(state, &run_id, mode)?;
    let new_url = etcd::peer_url(inv, replacement);
    let pki_for_tls = pki.clone();
    let mut run = Run {
        inv: inv.clone(),
        state: state.clone(),
        pki,
        reach,
        mode,
        journal,
        args: args.clone(),
        target,
        target_host: target_host.cloned(),
        old: None,
        replacement: replacement.clone(),
        new_url,
        stamp: stamp(),
        balancers,
        verdict: Mutex::new(None),
        observer: TunnelObserver::new(
            ClientTls::from_pki(&pki_for_tls),
            inv.etcd.client_port,
            OBSERVE_DEADLINE,
        ),
    };
    let obs = run.preflight().await?;
    let run = Arc::new(run);
    let steps = steps::build(&run, &obs)?;
    run.go(steps, confirm).await
}

impl Run {
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
        let flow = if self.args.planned {
            "F2 (planned: add first)"
        } else {
            "F1 (remove first)"
        };
        let ids: Vec<String> = std::iter::once("P0 check".to_string())
            .chain(steps.iter().map(|s| format!("{} {}", s.id, steps::short(&s.id))))
            .collect();
        format!(
            "replace {} by a member on {} (run {}), flow {flow}: {}\n",
            self.target,
            self.replacement.name,
            self.journal.run(),
            ids.join(" → ")
        )
    }

    async fn go(self: &Arc<Self>, steps: Vec<JournaledStep>, confirm: Confirm<'_>) -> anyhow::Result<i32> {
        if self.mode == Mode::DryRun {
            if self.args.output == OutputFormat::Json {
                let list: Vec<serde_json::Value> = steps
                    .iter()
                    .map(|s| s.to_json(self.sudo(s.host.as_deref())))
                    .collect();
                let doc = serde_json::json!({
                    "run": self.journal.run(),
                    "member": self.target,
                    "replacement": self.replacement.name,
                    "flow": if self.args.planned { "F2" } else { "F1" },
                    "old_member": self.old.as_ref().map(|o| etcd::hex_id(o.id)),
                    "steps": list,
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                print!("{}", self.summary(&steps));
                for s in &steps {
                    print!("{}", s.render(self.sudo(s.host.as_deref())));
                }
                println!("(dry run: nothing was changed)");
            }
            return Ok(exit::OK);
        }
        if self.args.resume.is_none() && !self.args.yes {
            eprint!("{}", self.summary(&steps));
            confirm(&format!(
                "replace changes etcd's membership: member {} leaves and a new member on {} joins",
                self.target, self.replacement.name
            ))?;
        }
        let mut journal = self.journal.reopen()?;
        let options = RunOptions::default();
        let failed = journaled::run_with_progress(&steps, &self.reach.transports, &mut journal, &options)
            .await
            .err();
        if let Some(f) = failed {
            if let Some((code, line)) = self.verdict.lock().expect("never poisoned").take() {
                eprintln!("{line}");
                return Ok(code);
            }
            let step = f.step.clone();
            let mut e = f.source;
            let refused = e.chain().any(|c| c.downcast_ref::<exit::Refusal>().is_some());
            if step == "P7" && !refused {
                return self.rollback_learner(e).await;
            }
            if step == "P6" && classify(&format!("{e:#}")) == ErrorClass::DataDirInvalid {
                e = e.context(format!(
                    "{} failed with an identity error (its data dir is unusable)",
                    self.replacement.name
                ));
            }
            if refused {
                return Err(e);
            }
            return Err(refuse(
                exit::FAILED_AFTER_CHANGES,
                format!(
                    "replace stopped at {step}: {e:#}\nthe cluster keeps quorum; fix the cause and continue with `hactl replace {} {} --resume {}`",
                    self.target,
                    if self.args.reuse_host { "--reuse-host".to_string() } else { format!("--host {}", self.replacement.name) },
                    self.journal.run()
                ),
            ));
        }
        let (code, line) = self
            .verdict
            .lock()
            .expect("never poisoned")
            .take()
            .unwrap_or((exit::OK, String::new()));
        if code == exit::OK {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
        Ok(code)
    }
}
