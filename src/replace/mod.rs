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
//! for the new host first, then P1–P3 for the old one, then P8–P10.
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
//! Layout: `preflight.rs` (P0: every precondition, or a refusal naming its rule),
//! `member.rs` (P1–P7: leadership, fence, remove, prepare, learner, start, promote; and the pure
//! step builders they send), `serve.rs` (P8–P10: the replacement serves, the new member list
//! reaches every apiserver, verification).

mod member;
mod preflight;
mod serve;

pub use member::{fence_kube_steps, fence_steps, initial_env, move_aside_step, remove_step, unfence_step};

use anyhow::{bail, Context as _};

use crate::cli::ReplaceArgs;
use crate::etcd::health::Observation;
use crate::etcd::{self, Member};
use crate::exec::Mode;
use crate::exit::{self, refuse};
use crate::inventory::{Host, Inventory, Role};
use crate::operations::balancers::Balancers;
use crate::operations::journal::{new_run_id, stamp};
use crate::operations::{self, Journal, Reach, StepState};
use crate::pki::{self, Pki};
use crate::state::StateDir;

/// How long a learner may take to catch up before P7 rolls back.
pub const PROMOTE_TIMEOUT_SECS: u64 = 600;

/// The order of flow F1's steps. Remove comes before add: etcd refuses any add while a voter is
/// down (docs/recovery.md, "Replace and heal (P0–P10)"), and this table is what the tests hold the flow to.
pub const F1_ORDER: [&str; 11] = ["P0", "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10"];
/// Flow F2: the new member first (every member is healthy), then the old one leaves.
pub const F2_ORDER: [&str; 11] = ["P0", "P4", "P5", "P6", "P7", "P1", "P2", "P3", "P8", "P9", "P10"];

/// Everything a run needs, gathered once.
struct Run<'a> {
    inv: &'a Inventory,
    state: &'a StateDir,
    pki: &'a Pki,
    reach: Reach,
    mode: Mode,
    journal: Journal,
    args: &'a ReplaceArgs,
    /// The member being replaced, and its host in the inventory (if still there).
    target: String,
    target_host: Option<&'a Host>,
    /// Its member ID when P0 saw it.
    old: Option<Member>,
    replacement: &'a Host,
    new_url: String,
    stamp: String,
    /// Connections to the load balancers (P2 drains, P9 readies or re-renders).
    balancers: Balancers,
}

/// Replaces `args.member` (the inventory already loaded by the caller: `hactl replace`, or heal).
pub async fn run(inv: &Inventory, state: &StateDir, args: &ReplaceArgs) -> anyhow::Result<i32> {
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
    let reach = operations::reach::reach(inv, state, &hosts, &args.connect).await;
    if let Some(why) = reach.unreachable.get(&replacement.name) {
        bail!("cannot reach the replacement host {}: {why}", replacement.name);
    }
    let run_id = args.resume.clone().unwrap_or_else(|| new_run_id("replace"));
    let journal = Journal::open_or_create(state, &run_id, mode)?;
    let new_url = etcd::peer_url(inv, replacement);
    let balancers = Balancers::connect(inv, state, &args.connect).await;
    let mut run = Run {
        inv,
        state,
        pki: &pki,
        reach,
        mode,
        journal,
        args,
        target,
        target_host,
        old: None,
        replacement,
        new_url,
        stamp: stamp(),
        balancers,
    };
    run.go().await
}

impl<'a> Run<'a> {
    fn except(&self) -> Vec<&str> {
        vec![self.target.as_str(), self.replacement.name.as_str()]
    }

    async fn observe(&self) -> anyhow::Result<Observation> {
        self.reach.observe(self.inv, &self.except()).await
    }

    fn observer_host(&self, obs: &Observation) -> &'a Host {
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

    async fn go(&mut self) -> anyhow::Result<i32> {
        let obs = self.preflight().await?;
        let order = if self.args.planned { F2_ORDER } else { F1_ORDER };
        for step in &order[1..] {
            let r = match *step {
                "P1" => self.p1_move_leader().await,
                "P2" => self.p2_fence().await,
                "P3" => self.p3_remove().await,
                "P4" => self.p4_prepare().await,
                "P5" => self.p5_add_learner().await,
                "P6" => self.p6_start().await,
                "P7" => self.p7_promote().await,
                "P8" => self.p8_replacement_serves().await,
                "P9" => self.p9_propagate().await,
                "P10" => return self.p10_verify().await,
                _ => unreachable!(),
            };
            if let Err(e) = r {
                let _ = self
                    .journal
                    .record(step, StepState::Failed, "", &format!("{e:#}"));
                if e.chain()
                    .any(|c| c.downcast_ref::<crate::exit::Refusal>().is_some())
                {
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
        }
        drop(obs);
        Ok(exit::OK)
    }
}
