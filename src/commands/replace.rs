//! `hactl replace MEMBER (--reuse-host | --host NEW) [--planned]`: quorum-safe replacement of
//! one etcd member (../shared/specs/recovery.md §4.3–4.5).
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

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::membership::{self, refusal, refuse, Journal, Reach};
use crate::cli::ReplaceArgs;
use crate::etcd::errors::{classify, ErrorClass};
use crate::etcd::health::Observation;
use crate::etcd::{self, hex_id, probe, safety, Member, UNIT};
use crate::exec::Mode;
use crate::exit;
use crate::inventory::{Host, Inventory, Role};
use crate::phases::{etcd_files, install_etcd::InstallEtcd, Ctx, EtcdView, Phase};
use crate::pki::{self, Pki};
use crate::plan::{Check, RemoteCommand, Step, Upload};
use crate::render;

/// The drop-in that keeps a fenced member from starting (a runtime mask cannot override a unit in
/// /etc; a failed start assertion can, and `systemctl status` shows why).
pub const FENCE_DROPIN: &str = "/run/systemd/system/etcd.service.d/hactl-fence.conf";

/// How long a learner may take to catch up before P7 rolls back.
pub const PROMOTE_TIMEOUT_SECS: u64 = 600;

/// The order of flow F1's steps. Remove comes before add: etcd refuses any add while a voter is
/// down (spec §4.6), and this table is what the tests hold the flow to.
pub const F1_ORDER: [&str; 11] = ["P0", "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10"];
/// Flow F2: the new member first (every member is healthy), then the old one leaves.
pub const F2_ORDER: [&str; 11] = ["P0", "P4", "P5", "P6", "P7", "P1", "P2", "P3", "P8", "P9", "P10"];

/// The fence: a runtime drop-in that fails every start, then stop.
pub fn fence_steps(member: &str, id: Option<u64>) -> Vec<Step> {
    let who = match id {
        Some(id) => format!("member {member} ({})", hex_id(id)),
        None => format!("member {member}"),
    };
    let dropin = format!(
        "[Unit]\n# Written by hactl: {who} is being replaced; it must not start on its old data.\n\
# hactl removes this file when the replacement starts. A reboot removes it too (it lives in /run).\n\
AssertPathExists=!{FENCE_DROPIN}\n"
    );
    let dir = FENCE_DROPIN.rsplit_once('/').map(|(d, _)| d).unwrap_or("/run");
    vec![
        Step::Run(RemoteCommand::script(format!(
            "mkdir -p {dir} && printf '%s' '{dropin}' > {FENCE_DROPIN} && systemctl daemon-reload && systemctl stop {UNIT}"
        ))),
        Step::Wait(Check::command(
            format!("{who} is stopped: no etcd process, nothing on the peer port"),
            RemoteCommand::script(format!(
                "! systemctl is-active --quiet {UNIT} && ! pgrep -x etcd >/dev/null"
            )),
            Duration::from_secs(60),
        )),
    ]
}

/// Stops the Kubernetes units that run on a host being fenced (scheduler, controller-manager,
/// then the apiserver, whose backend was drained first), each with a runtime drop-in like
/// etcd's so none starts again on the old host; P8 lifts them on a host that is reused.
pub fn fence_kube_steps(active: &[&str]) -> Vec<Step> {
    if active.is_empty() {
        return vec![];
    }
    let mut script = String::new();
    for unit in active {
        let dropin = crate::phases::replace_control_plane::fence_dropin(unit);
        let dir = dropin.rsplit_once('/').map(|(d, _)| d).unwrap_or("/run");
        script.push_str(&format!(
            "mkdir -p {dir} && printf '%s\\n' '[Unit]' '# Written by hactl: this host is being replaced.' 'AssertPathExists=!{dropin}' > {dropin}\n"
        ));
    }
    script.push_str(&format!(
        "systemctl daemon-reload && systemctl stop {}",
        active.join(" ")
    ));
    vec![Step::Run(RemoteCommand::script(script))]
}

/// Lifts the fence (before the replacement starts).
pub fn unfence_step() -> Step {
    Step::Run(RemoteCommand::script(format!(
        "if [ -e {FENCE_DROPIN} ]; then rm -f {FENCE_DROPIN} && systemctl daemon-reload; fi"
    )))
}

/// `member remove ID` on a healthy member, after re-checking on that host that ID is still the
/// member at PEER_URL; an ID already gone is success (spec §4.4 P3).
pub fn remove_step(id: u64, peer_url: &str) -> Step {
    let hex = hex_id(id);
    let ctl = etcd::ETCDCTL_WRAPPER;
    Step::Run(RemoteCommand::script(format!(
        "line=$({ctl} member list | awk -F', ' -v id={hex} '$1 == id')\n\
if [ -z \"$line\" ]; then echo \"member {hex} is not in the member list: already removed\"; exit 0; fi\n\
case \"$line\" in *\", {peer_url}, \"*) ;; *) echo \"refusing: member {hex} is not the member at {peer_url}: $line\" >&2; exit 1 ;; esac\n\
out=$({ctl} member remove {hex} 2>&1) && {{ echo \"$out\"; exit 0; }}\n\
case \"$out\" in *\"member not found\"*|*\"ID not found\"*) echo \"member {hex} already removed\"; exit 0 ;; esac\n\
echo \"$out\" >&2; exit 1"
    )))
}

/// Moves the data dir of a removed member aside on its host, after checking etcd is not running
/// there (never touch a running member's directory).
pub fn move_aside_step(data_dir: &str, host: &str, old_id: Option<u64>, stamp: &str) -> Step {
    let aside = format!("{data_dir}.hactl-removed-{stamp}");
    let who = old_id.map(hex_id).unwrap_or_else(|| "(none)".into());
    Step::Run(RemoteCommand::script(format!(
        "if systemctl is-active --quiet {UNIT} || pgrep -x etcd >/dev/null; then echo \"refusing: etcd runs on {host}; its data dir stays\" >&2; exit 1; fi\n\
if [ -e {data_dir} ] && [ -n \"$(ls -A {data_dir} 2>/dev/null)\" ]; then mv --no-clobber -- {data_dir} {aside} && echo \"{host}: data of removed member {who} moved to {aside}\"; fi\n\
install -d -m 0700 -o etcd -g etcd {data_dir}"
    )))
}

/// The initial env of a learner joining `members` (the current list, which already holds it).
pub fn initial_env(inv: &Inventory, host: &Host, members: &[Member]) -> Result<Upload, render::RenderError> {
    let url = etcd::peer_url(inv, host);
    let mut parts = Vec::new();
    for m in members {
        let name = if m.peer_urls.contains(&url) {
            host.name.clone()
        } else if m.is_started() {
            m.name.clone()
        } else {
            continue; // a foreign unstarted member cannot be in our initial cluster
        };
        for u in &m.peer_urls {
            parts.push(format!("{name}={u}"));
        }
    }
    let text = render::render(
        "etcd-initial.env",
        &render::EtcdInitialEnv {
            name: host.name.clone(),
            initial_cluster: parts.join(","),
            state: "existing".into(),
            token: etcd::token(inv),
        },
    )?;
    Ok(Upload::new(
        etcd::INITIAL_ENV_PATH,
        0o644,
        "root",
        "root",
        text.into_bytes(),
    ))
}

/// Everything a run needs, gathered once.
struct Run<'a> {
    inv: &'a Inventory,
    state: &'a crate::state::StateDir,
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
    balancers: super::balancers::Balancers,
}

pub async fn run(args: &ReplaceArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
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
        Some(state.lock(membership::OPERATION_LOCK).map_err(|e| {
            refuse(
                exit::NEEDS_INPUT,
                format!("another hactl operation holds this cluster: {e:#}; wait for it, then run again"),
            )
        })?)
    } else {
        None
    };
    let pki = pki::ensure(&state.path.join("pki"), &inv, time::OffsetDateTime::now_utc())
        .context("failed to prepare the cluster's certificates")?;
    let mut hosts: Vec<&Host> = inv.with_role(Role::Etcd);
    // P9 reaches every control-plane host (normally the etcd hosts themselves).
    for h in crate::phases::install_kubernetes::control_plane_hosts(&inv) {
        if !hosts.iter().any(|x| x.name == h.name) {
            hosts.push(h);
        }
    }
    if let Some(h) = target_host {
        if !hosts.iter().any(|x| x.name == h.name) {
            hosts.push(h);
        }
    }
    let reach = membership::reach(&inv, &state, &hosts, &args.connect).await;
    if let Some(why) = reach.unreachable.get(&replacement.name) {
        bail!("cannot reach the replacement host {}: {why}", replacement.name);
    }
    let run_id = args
        .resume
        .clone()
        .unwrap_or_else(|| membership::new_run_id("replace"));
    let journal = Journal::open(&state, &run_id, mode)?;
    let new_url = etcd::peer_url(&inv, replacement);
    let balancers = super::balancers::Balancers::connect(&inv, &state, &args.connect).await;
    let mut run = Run {
        inv: &inv,
        state: &state,
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
        stamp: membership::stamp(),
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
                let _ = self.journal.record(step, "failed", "", &format!("{e:#}"));
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
                        self.journal.run
                    ),
                ));
            }
        }
        drop(obs);
        Ok(exit::OK)
    }

    /// P0: every precondition of spec §4.3 that hactl can see, or a refusal naming the rule.
    async fn preflight(&mut self) -> anyhow::Result<Observation> {
        self.journal.record(
            "P0",
            "started",
            "",
            &format!("replace {} on {}", self.target, self.replacement.name),
        )?;
        self.refuse_over_retry_limit()?;
        let mut obs = self.observe().await?;
        // Single cluster view: every running member reports the same cluster and member set.
        let ids = obs.cluster_ids();
        let sets: BTreeSet<Vec<u64>> = self
            .reach
            .facts
            .values()
            .filter_map(|f| f.members.as_ref())
            .map(|m| {
                let mut v: Vec<u64> = m.members.iter().map(|x| x.id).collect();
                v.sort();
                v
            })
            .collect();
        let cluster_ids: BTreeSet<u64> = self
            .reach
            .facts
            .values()
            .filter_map(|f| f.members.as_ref().map(|m| m.header.cluster_id))
            .chain(ids.iter().copied())
            .collect();
        if cluster_ids.len() > 1 || sets.len() > 1 {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "refused by single-cluster-view: members disagree ({} cluster IDs, {} different member sets); run `hactl status` and resolve it before changing membership",
                    cluster_ids.len(),
                    sets.len()
                ),
            ));
        }
        // The old member: by name, else by the peer URL of its host.
        let target_url = self.target_host.map(|h| etcd::peer_url(self.inv, h));
        self.old = obs
            .by_name(&self.target)
            .or_else(|| target_url.as_deref().and_then(|u| obs.members.by_peer_url(u)))
            .filter(|m| !m.is_learner)
            .cloned();
        if let Some(run) = &self.args.resume {
            // A resumed run knows the old ID from its journal: a voter at the same URL is new.
            if let Ok(entries) = Journal::read(self.state, run) {
                let old_id = entries
                    .iter()
                    .find(|e| e.step == "P0" && e.phase == crate::journal::StepPhase::Done)
                    .and_then(|e| Journal::detail(e).split("old member ").nth(1))
                    .and_then(|s| s.split_whitespace().next())
                    .and_then(|hex| u64::from_str_radix(hex, 16).ok());
                if let Some(id) = old_id {
                    self.old = obs.by_id(id).cloned();
                    if self.old.is_none() {
                        self.journal.record(
                            "P0",
                            "started",
                            "",
                            &format!("old member {id:x} is already removed"),
                        )?;
                    }
                }
            }
        }
        // Learners: ours (at the replacement's URL) is adopted; a foreign one blocks, unless named.
        let ours = self.new_member(&obs).filter(|m| m.is_learner).map(|m| m.id);
        let foreign: Vec<&Member> = obs.learners().filter(|m| Some(m.id) != ours).collect();
        if let Some(l) = foreign.first() {
            let id = hex_id(l.id);
            if self.args.cleanup_learner.as_deref() != Some(id.as_str()) {
                return Err(refuse(
                    exit::REFUSED,
                    format!(
                        "refused by no-transition: foreign learner {id} (peer URL {}) is in the cluster; etcd allows one learner, so no member can be added. If no hactl run owns it, remove it with `--cleanup-learner {id}` (removing a learner is quorum-neutral)",
                        l.peer_urls.join(",")
                    ),
                ));
            }
            let observer = self.observer_host(&obs);
            self.journal.record(
                "P0",
                "started",
                &observer.name,
                &format!("removing foreign learner {id}"),
            )?;
            let url = l.peer_urls.first().cloned().unwrap_or_default();
            membership::run_on(
                self.mode,
                &self.reach.transports,
                &format!("Remove foreign learner {id}"),
                observer,
                vec![remove_step(l.id, &url)],
            )
            .await?;
            if self.mode == Mode::Live {
                obs = self.observe().await?;
            }
        }
        let maintenance = membership::maintenance_records(self.state);
        let mut counts = obs.counts(&membership::in_maintenance(self.state), ours);
        if let Some((host, r)) = maintenance.iter().next() {
            counts.foreign_operation = Some(format!("maintenance of {host} (stage {})", r.stage));
        }
        let decision = match &self.old {
            Some(old) if self.args.planned => {
                let _ = old;
                safety::r_add(&counts)
            }
            Some(old) => safety::r_remove(&counts, obs.is_healthy(old)),
            None if self.new_member(&obs).is_some() => safety::Decision::Allowed,
            None => safety::r_add(&counts),
        };
        decision.into_result().map_err(refusal)?;
        // Versions: one minor everywhere.
        let minors: BTreeSet<String> = self
            .reach
            .facts
            .iter()
            .filter(|(h, _)| self.inv.host(h).is_some_and(|h| h.has(Role::Etcd)))
            .filter_map(|(_, f)| f.etcd_version.as_deref())
            .filter_map(|v| v.rsplit(' ').next())
            .map(|v| v.split('.').take(2).collect::<Vec<_>>().join("."))
            .collect();
        if minors.len() > 1 {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "refused by versions: etcd hosts run different minor versions ({}); finish the upgrade first",
                    minors.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let detail = match &self.old {
            Some(o) => format!(
                "old member {} at {} ({}); {}",
                hex_id(o.id),
                o.peer_urls.join(","),
                if obs.is_healthy(o) { "healthy" } else { "unhealthy" },
                counts.numbers()
            ),
            None => format!("old member already removed; {}", counts.numbers()),
        };
        self.journal.record("P0", "done", &obs.observer, &detail)?;
        Ok(obs)
    }

    /// P0.10: `maxRetry` failed replacements of this member within `minHealthyPeriod` stop
    /// further attempts (KCP's loop protection), for replace as for heal.
    fn refuse_over_retry_limit(&self) -> anyhow::Result<()> {
        let records = super::heal::load_records(self.state);
        let Some(rec) = records.members.get(&self.target) else {
            return Ok(());
        };
        let policy = &self.inv.heal;
        let now = super::heal::unix_now();
        let recent = rec
            .last_failure
            .is_some_and(|t| now.saturating_sub(t) < policy.min_healthy_period.as_secs());
        if rec.retry_count >= policy.max_retry && recent {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "refused by retry-limit: {} failed {} replacement(s) within minHealthyPeriod={}s (maxRetry={}), the retry limit; last error: {}. Find the cause first (the replacement host's disk, its peer traffic on port {}), then remove the `{}` entry from {} (or wait for minHealthyPeriod to pass) and run again",
                    self.target,
                    rec.retry_count,
                    policy.min_healthy_period.as_secs(),
                    policy.max_retry,
                    rec.last_error,
                    self.inv.etcd.peer_port,
                    self.target,
                    self.state.path.join("heal.json").display()
                ),
            ));
        }
        Ok(())
    }

    async fn p1_move_leader(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let Some(old) = self.old.as_ref().and_then(|o| obs.by_id(o.id)) else {
            return self
                .journal
                .record("P1", "skipped", "", "the old member is not in the cluster");
        };
        if obs.leader() != Some(old.id) || !obs.is_healthy(old) {
            return self
                .journal
                .record("P1", "skipped", "", "the old member does not lead");
        }
        let Some(next) = obs
            .voters()
            .filter(|m| m.id != old.id && obs.is_healthy(m))
            .max_by_key(|m| obs.status_of(m).map(|s| s.status.raft_applied_index).unwrap_or(0))
        else {
            bail!("no healthy member to take over leadership");
        };
        let observer = self.observer_host(&obs);
        let endpoints = old.client_urls.join(",");
        self.journal.record(
            "P1",
            "started",
            &observer.name,
            &format!(
                "moving leadership from {} to {} ({})",
                self.target,
                next.name,
                hex_id(next.id)
            ),
        )?;
        membership::run_on(
            self.mode,
            &self.reach.transports,
            "P1 move leadership",
            observer,
            vec![Step::Run(RemoteCommand::new([
                etcd::ETCDCTL_WRAPPER.to_string(),
                format!("--endpoints={endpoints}"),
                "move-leader".to_string(),
                hex_id(next.id),
            ]))],
        )
        .await?;
        self.journal
            .record("P1", "done", &observer.name, &format!("leader is {}", next.name))
    }

    async fn p2_fence(&mut self) -> anyhow::Result<()> {
        // Fence at the load balancers first: clients through the VIP stop reaching the old
        // member (and, if it holds the VIP, the VIP moves) before its etcd stops.
        if let Some(host) = self.target_host {
            self.balancers
                .move_vip_off(self.mode, &self.journal, "P2 vip", host)
                .await?;
        }
        self.balancers
            .drain(self.mode, self.inv, &self.journal, "P2 lb-drain", &self.target)
            .await?;
        let Some(host) = self.target_host else {
            return self.need_confirm_dead("it is not in the inventory");
        };
        let Some(_) = self.reach.transports.get(&host.name) else {
            let why = self
                .reach
                .unreachable
                .get(&host.name)
                .cloned()
                .unwrap_or_default();
            return self.need_confirm_dead(&format!("its host is unreachable ({why})"));
        };
        if self.args.planned
            || self.old.is_some()
            || self.target_host.is_some_and(|h| h.name != self.replacement.name)
        {
            let id = self.old.as_ref().map(|o| o.id);
            let kube: Vec<&str> = membership::KUBE_UNITS
                .into_iter()
                .filter(|u| {
                    self.reach
                        .facts
                        .get(&host.name)
                        .and_then(|f| f.units.get(*u))
                        .is_some_and(|x| x.active == "active")
                })
                .collect();
            self.journal.record(
                "P2",
                "started",
                &host.name,
                &format!(
                    "fencing member {}{}",
                    self.target,
                    if kube.is_empty() {
                        String::new()
                    } else {
                        format!(" and stopping {}", kube.join(", "))
                    }
                ),
            )?;
            let mut steps = fence_kube_steps(&kube);
            steps.extend(fence_steps(&self.target, id));
            membership::run_on(
                self.mode,
                &self.reach.transports,
                "P2 fence the old member",
                host,
                steps,
            )
            .await?;
            return self
                .journal
                .record("P2", "done", &host.name, "etcd stopped and fenced");
        }
        self.journal
            .record("P2", "skipped", &host.name, "the old member is already removed")
    }

    fn need_confirm_dead(&self, why: &str) -> anyhow::Result<()> {
        if self.args.confirm_dead.contains(&self.target) {
            return self.journal.record(
                "P2",
                "skipped",
                &self.target,
                &format!("confirmed dead by the operator ({why})"),
            );
        }
        Err(refuse(
            exit::NEEDS_INPUT,
            format!(
                "cannot fence {}: {why}. Power it off (it could come back as a zombie member), then run again with --confirm-dead {}",
                self.target, self.target
            ),
        ))
    }

    async fn p3_remove(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let Some(old) = self.old.as_ref().and_then(|o| obs.by_id(o.id)).cloned() else {
            return self.journal.record(
                "P3",
                "skipped",
                "",
                "the old member is not in the member list (already removed)",
            );
        };
        // Re-check R-remove right before acting (KCP's pre-terminate hook does the same).
        let ours = self.new_member(&obs).filter(|m| m.is_learner).map(|m| m.id);
        let counts = obs.counts(&membership::in_maintenance(self.state), ours);
        safety::r_remove(&counts, obs.is_healthy(&old))
            .into_result()
            .map_err(refusal)?;
        let observer = self.observer_host(&obs);
        let url = old.peer_urls.first().cloned().unwrap_or_default();
        self.journal.record(
            "P3",
            "started",
            &observer.name,
            &format!("removing member {} ({}) at {url}", self.target, hex_id(old.id)),
        )?;
        membership::run_on(
            self.mode,
            &self.reach.transports,
            "P3 remove the old member",
            observer,
            vec![remove_step(old.id, &url)],
        )
        .await?;
        self.journal.record(
            "P3",
            "done",
            &observer.name,
            &format!("member {} removed", hex_id(old.id)),
        )
    }

    async fn p4_prepare(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        if let Some(m) = self.new_member(&obs) {
            return self.journal.record(
                "P4",
                "skipped",
                &r.name,
                &format!("member {} already added at {}", hex_id(m.id), self.new_url),
            );
        }
        if obs.members.by_peer_url(&self.new_url).is_some() && self.mode == Mode::Live {
            bail!(
                "the old member still holds {}: it must be removed before its host is prepared",
                self.new_url
            );
        }
        let facts = self.reach.facts.clone();
        let view = EtcdView::default();
        let ctx = Ctx {
            inv: self.inv,
            pki: self.pki,
            facts: &facts,
            etcd: &view,
            binaries: None,
            kubernetes: None,
            vrrp_password: None,
        };
        let mut steps = InstallEtcd.steps(r, &ctx)?;
        steps.push(move_aside_step(
            &self.inv.etcd.data_dir,
            &r.name,
            self.old.as_ref().map(|o| o.id),
            &self.stamp,
        ));
        let f = ctx.facts(r);
        steps.extend(crate::phases::uploads_needed(
            f,
            etcd_files::member_files(r, &ctx)?,
        ));
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
        // The replacement gets the scheduled backups `up` gives every etcd host, so the
        // inventory and the hosts agree again when the replace is done.
        steps.extend(crate::phases::schedule_backups::ScheduleBackups.steps(r, &ctx)?);
        self.journal.record(
            "P4",
            "started",
            &r.name,
            "moving old data aside; installing and configuring etcd",
        )?;
        membership::run_on(
            self.mode,
            &self.reach.transports,
            "P4 prepare the replacement host",
            r,
            steps,
        )
        .await?;
        self.journal.record("P4", "done", &r.name, "")
    }

    async fn p5_add_learner(&mut self) -> anyhow::Result<()> {
        let r = self.replacement;
        for attempt in 1..=6 {
            let obs = self.observe().await?;
            if let Some(m) = self.new_member(&obs) {
                return self.journal.record(
                    "P5",
                    "skipped",
                    &r.name,
                    &format!(
                        "{} is already member {} (learner: {})",
                        self.new_url,
                        hex_id(m.id),
                        m.is_learner
                    ),
                );
            }
            let mut counts = obs.counts(&membership::in_maintenance(self.state), None);
            if self.args.planned {
                counts.foreign_operation = None;
            }
            let decision = if self.mode == Mode::DryRun {
                safety::Decision::Allowed // P3 has not run in a dry run; the live run checks R-add here
            } else {
                safety::r_add(&counts)
            };
            if let safety::Decision::Refused(why) = &decision {
                if self.mode == Mode::DryRun || attempt == 6 {
                    return Err(refusal(why.clone()));
                }
                tracing::info!("P5: {why}; waiting 5 s (etcd's health interval) and checking again");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
            let observer = self.observer_host(&obs);
            self.journal.record(
                "P5",
                "started",
                &observer.name,
                &format!("adding {} at {} as a learner", r.name, self.new_url),
            )?;
            let step = Step::Run(RemoteCommand::new([
                etcd::MEMBER_SCRIPT,
                "add-learner",
                r.name.as_str(),
                self.new_url.as_str(),
            ]));
            match membership::run_on(
                self.mode,
                &self.reach.transports,
                "P5 add the replacement as a learner",
                observer,
                vec![step],
            )
            .await
            {
                Ok(()) => return self.journal.record("P5", "done", &observer.name, ""),
                Err(e) if classify(&format!("{e:#}")) == ErrorClass::RetryAfterHealthGate && attempt < 6 => {
                    tracing::info!("P5: etcd said the cluster is unhealthy; retrying in 5 s");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                Err(e) => return Err(e),
            }
        }
        bail!("the learner could not be added after 6 attempts")
    }

    async fn p6_start(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        let member = self.new_member(&obs).cloned();
        let running = self.reach.etcd_active(&r.name);
        if let Some(m) = member.as_ref().filter(|m| m.is_started() && running) {
            // Started before (a resumed run): its postcondition holds. Whether it keeps up is
            // P7's catch-up gate to judge, not a reason to wait here.
            return self.journal.record(
                "P6",
                "skipped",
                &r.name,
                &format!(
                    "member {} has started and etcd is active on {}",
                    hex_id(m.id),
                    r.name
                ),
            );
        }
        let members: Vec<Member> = if self.mode == Mode::DryRun && member.is_none() {
            // The dry run cannot add the learner; show the env the live run will write.
            let mut m = obs.members.members.clone();
            m.retain(|x| self.old.as_ref().is_none_or(|o| o.id != x.id) || self.args.planned);
            m.push(Member {
                id: 0,
                name: String::new(),
                peer_urls: vec![self.new_url.clone()],
                client_urls: vec![],
                is_learner: true,
            });
            m
        } else {
            obs.members.members.clone()
        };
        let env = initial_env(self.inv, r, &members)?;
        let steps = vec![
            Step::Upload(env),
            unfence_step(),
            Step::Run(RemoteCommand::new(["systemctl", "enable", UNIT])),
            Step::Run(RemoteCommand::new(["systemctl", "start", "--no-block", UNIT])),
            Step::Wait(
                Check::command(
                    format!("member {} serves (as a learner until promoted)", r.name),
                    RemoteCommand::read_only([etcd::ETCDCTL_WRAPPER, "endpoint", "status"]),
                    Duration::from_secs(120),
                )
                .diagnose_with(probe::journal_tail()),
            ),
        ];
        self.journal
            .record("P6", "started", &r.name, "starting etcd with state existing")?;
        if let Err(e) = membership::run_on(
            self.mode,
            &self.reach.transports,
            "P6 start the replacement",
            r,
            steps,
        )
        .await
        {
            let text = format!("{e:#}");
            if classify(&text) == ErrorClass::DataDirInvalid {
                bail!(
                    "{} failed with an identity error (its data dir is unusable): {text}",
                    r.name
                );
            }
            return Err(e);
        }
        self.journal.record("P6", "done", &r.name, "")
    }

    async fn p7_promote(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        if let Some(m) = self.new_member(&obs) {
            if !m.is_learner {
                return self.journal.record(
                    "P7",
                    "skipped",
                    &r.name,
                    &format!("member {} is already a voter", hex_id(m.id)),
                );
            }
        }
        let counts = obs.counts(
            &membership::in_maintenance(self.state),
            self.new_member(&obs).map(|m| m.id),
        );
        if self.mode == Mode::Live {
            safety::r_promote(&counts, true).into_result().map_err(refusal)?;
        }
        let observer = self.observer_host(&obs);
        let timeout = std::env::var("HACTL_PROMOTE_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(PROMOTE_TIMEOUT_SECS);
        self.journal.record(
            "P7",
            "started",
            &observer.name,
            &format!("promoting {} once it caught up (up to {timeout} s)", r.name),
        )?;
        let steps = vec![
            Step::Run(
                RemoteCommand::new([
                    etcd::MEMBER_SCRIPT,
                    "promote",
                    self.new_url.as_str(),
                    &timeout.to_string(),
                ])
                .with_timeout(Duration::from_secs(timeout + 30)),
            ),
            Step::Wait(probe::cluster_healthy(
                &format!("after promoting {}", r.name),
                Duration::from_secs(60),
            )),
        ];
        if let Err(e) = membership::run_on(
            self.mode,
            &self.reach.transports,
            "P7 promote the replacement",
            observer,
            steps,
        )
        .await
        {
            return self.rollback_learner(e).await;
        }
        self.journal
            .record("P7", "done", &observer.name, &format!("{} is a voter", r.name))
    }

    /// P7 timed out: remove the learner (quorum-neutral), fence its host, count a retry.
    async fn rollback_learner(&mut self, cause: anyhow::Error) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        let observer = self.observer_host(&obs);
        if let Some(m) = self.new_member(&obs).filter(|m| m.is_learner).cloned() {
            self.journal.record(
                "P7",
                "started",
                &observer.name,
                &format!("rollback: removing learner {} ({})", r.name, hex_id(m.id)),
            )?;
            membership::run_on(
                self.mode,
                &self.reach.transports,
                "P7 rollback: remove the learner",
                observer,
                vec![remove_step(m.id, &self.new_url)],
            )
            .await?;
            membership::run_on(
                self.mode,
                &self.reach.transports,
                "P7 rollback: stop the learner",
                r,
                fence_steps(&r.name, Some(m.id)),
            )
            .await?;
        }
        let retries = super::heal::record_failure(self.state, &self.target, &format!("{cause:#}"))?;
        self.journal.record(
            "P7",
            "failed",
            &observer.name,
            &format!("learner did not catch up; removed; retryCount={retries}"),
        )?;
        Err(refuse(
            exit::FAILED_AFTER_CHANGES,
            format!(
                "P7: the learner {} did not catch up: {cause:#}\nit was removed again (quorum-neutral) and its etcd stopped; retryCount={retries}. Check its disk and peer traffic, then run `hactl replace {} ...` again",
                r.name, self.target
            ),
        ))
    }

    /// Fresh facts (the `up` query: Kubernetes files and units included) of reachable `hosts`.
    async fn fresh_facts(
        &self,
        hosts: &[&Host],
    ) -> anyhow::Result<std::collections::BTreeMap<String, crate::facts::HostFacts>> {
        let mut facts = std::collections::BTreeMap::new();
        for h in hosts {
            if let Some(t) = self.reach.transports.get(&h.name) {
                let q = crate::phases::query_for(self.inv, h);
                let f = crate::facts::gather(t.as_ref(), &q)
                    .await
                    .map_err(anyhow::Error::from)
                    .with_context(|| format!("failed to read the state of {}", h.name))?;
                facts.insert(h.name.clone(), f);
            }
        }
        Ok(facts)
    }

    /// P8: the replacement serves. With a kubernetes section its apiserver (with
    /// `--etcd-servers` = every member), controller-manager and scheduler are installed and
    /// started and `/readyz` answers; then the load balancers take it: haproxy.cfg re-rendered
    /// when the host name changed (the old server leaves, the new one joins), its servers readied
    /// (`kubernetes-api` only where an apiserver was started), keepalived started again.
    async fn p8_replacement_serves(&mut self) -> anyhow::Result<()> {
        let r = self.replacement;
        let kube = crate::phases::replace_control_plane::runs_kubernetes(self.inv, r);
        let lbs = !self.inv.with_role(Role::LoadBalancer).is_empty();
        if !kube && !lbs {
            return self.journal.record(
                "P8",
                "skipped",
                &r.name,
                "no kubernetes section and no load balancer: etcd clients already see the member",
            );
        }
        self.journal.record(
            "P8",
            "started",
            &r.name,
            "the replacement serves behind the load balancers",
        )?;
        if kube {
            let inputs = super::up::kubernetes_inputs(self.inv, self.state).await?;
            let facts = self.fresh_facts(&[r]).await?;
            let view = EtcdView::default();
            let ctx = Ctx {
                inv: self.inv,
                pki: self.pki,
                facts: &facts,
                etcd: &view,
                binaries: None,
                kubernetes: inputs.as_ref(),
                vrrp_password: None,
            };
            let steps = crate::phases::replace_control_plane::start_on_replacement(r, &ctx)?;
            membership::run_on(
                self.mode,
                &self.reach.transports,
                "P8 start the Kubernetes control plane on the replacement",
                r,
                steps,
            )
            .await?;
            self.journal.record(
                "P8 kubernetes",
                "done",
                &r.name,
                "kube-apiserver answers /readyz; controller-manager and scheduler running",
            )?;
        }
        if lbs {
            if r.name != self.target {
                let n = self
                    .balancers
                    .reconfigure(self.mode, self.inv, self.state, self.pki)
                    .await?;
                self.journal.record(
                    "P8 lb-configure",
                    "done",
                    "",
                    &format!("haproxy.cfg re-rendered for the new membership ({n} step(s))"),
                )?;
            }
            let mut backends = vec![crate::phases::load_balancer::Backend::EtcdClient];
            if kube {
                backends.push(crate::phases::load_balancer::Backend::KubernetesApi);
            }
            self.balancers
                .ready_backends(
                    self.mode,
                    self.inv,
                    &self.journal,
                    "P8 lb-ready",
                    &r.name,
                    &backends,
                    Duration::from_secs(60),
                )
                .await?;
            self.balancers
                .restore_vip(self.mode, &self.journal, "P8 vip", r)
                .await?;
        }
        self.journal.record("P8", "done", &r.name, "")
    }

    /// P9: every other apiserver gets the new member list in `--etcd-servers` (and a serving
    /// certificate with the new address), one host at a time: its `kubernetes-api` backend in
    /// MAINT on every load balancer, files written, restart, `/readyz`, backend ready. Each host
    /// is journaled (`P9 apiserver@HOST`); a resumed run re-plans it from fresh facts and the
    /// running process's command line, so a host already rolled is skipped.
    async fn p9_propagate(&mut self) -> anyhow::Result<()> {
        if self.inv.kubernetes.is_none() {
            return self.journal.record(
                "P9",
                "skipped",
                "",
                "no kubernetes section: no apiserver to roll (HAProxy followed in P8)",
            );
        }
        let others: Vec<&Host> = crate::phases::install_kubernetes::control_plane_hosts(self.inv)
            .into_iter()
            .filter(|h| h.name != self.replacement.name)
            .collect();
        self.journal.record(
            "P9",
            "started",
            "",
            "rolling the new member list into the other apiservers, one at a time",
        )?;
        let inputs = super::up::kubernetes_inputs(self.inv, self.state).await?;
        let mut transports = self.reach.transports.clone();
        for (name, t) in &self.balancers.transports {
            transports.insert(name.clone(), t.clone());
        }
        for host in others {
            let step = format!("P9 apiserver@{}", host.name);
            let Some(t) = self.reach.transports.get(&host.name) else {
                let why = self
                    .reach
                    .unreachable
                    .get(&host.name)
                    .cloned()
                    .unwrap_or_default();
                bail!(
                    "cannot reach control-plane host {} to give its apiserver the new member list ({why}); bring it back, then continue with --resume",
                    host.name
                );
            };
            let facts = self.fresh_facts(&[host]).await?;
            let stale = match crate::phases::replace_control_plane::etcd_servers_flag(self.inv, host) {
                Some(flag)
                    if self
                        .inv
                        .kubernetes
                        .as_ref()
                        .is_some_and(|k| k.mode == crate::inventory::KubernetesMode::Systemd) =>
                {
                    let probe = crate::phases::replace_control_plane::running_flag_probe(&flag);
                    let out = t.run(&probe).await.map_err(anyhow::Error::from)?;
                    out.stdout_str().trim() == "stale"
                }
                _ => false,
            };
            let view = EtcdView::default();
            let ctx = Ctx {
                inv: self.inv,
                pki: self.pki,
                facts: &facts,
                etcd: &view,
                binaries: None,
                kubernetes: inputs.as_ref(),
                vrrp_password: None,
            };
            let hosts: Vec<crate::plan::HostSteps> =
                crate::phases::replace_control_plane::propagate_to(host, &ctx, stale)?
                    .into_iter()
                    .filter(|h| transports.contains_key(&h.host))
                    .collect();
            if hosts.is_empty() {
                self.journal.record(
                    &step,
                    "skipped",
                    &host.name,
                    "its apiserver already runs with the new member list",
                )?;
                continue;
            }
            self.journal.record(
                &step,
                "started",
                &host.name,
                "drain, update, restart, /readyz, ready",
            )?;
            let mut plan = crate::plan::Plan::default();
            plan.push(crate::plan::PlannedPhase {
                title: format!("P9 roll the new member list into {}'s apiserver", host.name),
                parallelism: crate::plan::Parallelism::OneAtATime,
                disruptive: true,
                hosts,
            });
            crate::exec::run(&plan, self.mode, &transports)
                .await
                .map_err(|failed| {
                    let details = failed.details();
                    anyhow::Error::new(failed).context(details.trim_end().to_string())
                })?;
            self.journal.record(&step, "done", &host.name, "")?;
        }
        self.journal.record("P9", "done", "", "")
    }

    async fn p10_verify(&mut self) -> anyhow::Result<i32> {
        if self.mode == Mode::DryRun {
            println!("(dry run: nothing was changed)");
            return Ok(exit::OK);
        }
        let obs = self.observe().await?;
        let observer = self.observer_host(&obs);
        membership::run_on(
            self.mode,
            &self.reach.transports,
            "P10 verify",
            observer,
            vec![Step::Wait(probe::cluster_has_one_leader(Duration::from_secs(60)))],
        )
        .await?;
        let obs = self.observe().await?;
        let counts = obs.counts(&BTreeSet::new(), None);
        let desired = self.inv.with_role(Role::Etcd).len();
        let new = self.new_member(&obs).map(|m| hex_id(m.id)).unwrap_or_default();
        if let safety::Decision::Refused(r) = safety::r_final(counts.voters, desired, false) {
            self.journal
                .record("P10", "failed", &observer.name, &r.to_string())?;
            eprintln!("replace: degraded: {r}");
            return Ok(exit::DEGRADED);
        }
        if counts.unhealthy() > 0 || counts.learners > 0 {
            self.journal
                .record("P10", "failed", &observer.name, &counts.numbers())?;
            eprintln!("replace: degraded: {}", counts.numbers());
            return Ok(exit::DEGRADED);
        }
        self.journal.record(
            "P10",
            "done",
            &observer.name,
            &format!(
                "member {} replaced by {} ({new}); {}",
                self.target,
                self.replacement.name,
                counts.numbers()
            ),
        )?;
        super::heal::record_success(self.state, &self.target)?;
        println!(
            "replace: {} replaced by member {} ({new}) on {}; {} voters, all healthy; journal {}",
            self.target,
            self.replacement.name,
            self.replacement.name,
            counts.voters,
            self.journal
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        Ok(exit::OK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(order: &[&str], s: &str) -> usize {
        order.iter().position(|x| *x == s).unwrap()
    }

    /// B10's static assertion: for a failed member, hactl never adds before it removes.
    #[test]
    fn f1_removes_before_it_adds_and_f2_adds_first() {
        assert!(pos(&F1_ORDER, "P3") < pos(&F1_ORDER, "P5"));
        assert!(pos(&F1_ORDER, "P1") < pos(&F1_ORDER, "P2"));
        assert!(pos(&F1_ORDER, "P2") < pos(&F1_ORDER, "P3"));
        assert!(pos(&F1_ORDER, "P4") < pos(&F1_ORDER, "P6"));
        assert!(pos(&F2_ORDER, "P7") < pos(&F2_ORDER, "P3"));
    }

    #[test]
    fn the_remove_step_rechecks_the_id_and_url_on_the_host() {
        let Step::Run(cmd) = remove_step(0x921b590400393280, "https://10.0.0.13:2380") else {
            panic!()
        };
        let line = cmd.line(false);
        assert!(line.contains("921b590400393280"), "{line}");
        assert!(line.contains("https://10.0.0.13:2380"), "{line}");
        assert!(line.contains("already removed"), "{line}");
    }

    #[test]
    fn the_kube_fence_writes_a_dropin_per_unit_then_stops_them_in_order() {
        assert!(fence_kube_steps(&[]).is_empty());
        let steps = fence_kube_steps(&["kube-scheduler.service", "kube-apiserver.service"]);
        let Step::Run(cmd) = &steps[0] else { panic!() };
        let script = &cmd.argv[2];
        assert!(
            script.contains("printf '%s\\n' '[Unit]' '# Written by hactl: this host is being replaced.' 'AssertPathExists=!/run/systemd/system/kube-apiserver.service.d/hactl-fence.conf' > /run/systemd/system/kube-apiserver.service.d/hactl-fence.conf"),
            "{script}"
        );
        assert!(
            script.ends_with(
                "systemctl daemon-reload && systemctl stop kube-scheduler.service kube-apiserver.service"
            ),
            "{script}"
        );
    }

    #[test]
    fn moving_aside_never_deletes() {
        let Step::Run(cmd) = move_aside_step("/var/lib/etcd", "cp3", Some(1), "20261122T000000Z") else {
            panic!()
        };
        let line = cmd.line(false);
        assert!(
            line.contains("mv --no-clobber -- /var/lib/etcd /var/lib/etcd.hactl-removed-20261122T000000Z")
        );
        assert!(!line.contains("rm "), "{line}");
    }

    #[test]
    fn the_learner_env_lists_current_members_and_itself() {
        let yaml = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata: {name: t}\nspec:\n  ssh: {user: root, keyFile: k}\n  hosts:\n  - {name: cp1, address: 10.0.0.11, roles: [etcd]}\n  - {name: cp2, address: 10.0.0.12, roles: [etcd]}\n  - {name: cp3, address: 10.0.0.13, roles: [etcd]}\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.yaml");
        std::fs::write(&path, yaml).unwrap();
        std::fs::write(dir.path().join("k"), "").unwrap();
        let inv = crate::inventory::load(&path).unwrap();
        let m = |id, name: &str, ip: &str, learner| Member {
            id,
            name: name.into(),
            peer_urls: vec![format!("https://{ip}:2380")],
            client_urls: vec![],
            is_learner: learner,
        };
        let members = [
            m(1, "cp1", "10.0.0.11", false),
            m(2, "cp2", "10.0.0.12", false),
            m(3, "", "10.0.0.13", true),
        ];
        let up = initial_env(&inv, inv.host("cp3").unwrap(), &members).unwrap();
        let text = String::from_utf8(up.content.to_vec()).unwrap();
        assert!(text.contains("ETCD_INITIAL_CLUSTER=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380"), "{text}");
        assert!(text.contains("ETCD_INITIAL_CLUSTER_STATE=existing"));
        assert!(text.contains("ETCD_INITIAL_CLUSTER_TOKEN=hactl-t"));
    }
}
