//! `hactl recover`: rebuild an etcd cluster that lost quorum (docs/recovery.md, "Recover (R0–R6)").
//!
//! The shape: R0 assesses the hosts read-only ([`assess`]) and decides ([`Decisions`]: source,
//! seed, targets, token, bump, expected cluster ID); [`steps::build`] turns the decisions into
//! [`crate::operations::runner::JournaledStep`]s (pure: a dry run prints them); the journaled runner
//! executes them, re-checking each step's postcondition on every run, so `--resume` continues
//! from the hosts' real state. The decisions are saved in `<state>/runs/<run>/recover.json`; a
//! resumed run rebuilds exactly the same steps from them.
//!
//! Invariants: a recover always makes a new logical cluster (new token `hactl-<cluster>-<run>`,
//! so a new cluster ID that fences zombies); data dirs are moved aside (`*.hactl-pre-<run>`),
//! never deleted; every restore passes every identity flag; the cluster ID the restore logs is
//! compared with the one computed here before anything starts.

pub mod acts;
pub mod assess;
pub mod certs;
pub mod decide;
pub mod report;
pub mod source;
pub mod start;
pub mod steps;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha1::Digest as _;

use crate::exec::Transports;
use crate::exit::refuse;
use crate::inventory::Role;
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::runner::Outcome;

/// How the members get their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Restore one seed member, then join the others one at a time as learners.
    #[default]
    Seed,
    /// Restore every member from the same snapshot and start them together.
    All,
}

/// What `hactl recover` is asked.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Restore from this snapshot file.
    pub from_snapshot: Option<PathBuf>,
    /// Restore from this surviving member's data.
    pub from_member: Option<String>,
    /// Choose the source with the highest revision.
    pub auto: bool,
    pub mode: Mode,
    /// Hosts attested powered off.
    pub confirm_dead: Vec<String>,
    /// Proceed although quorum could be restored by starting members (needs the typed name).
    pub force_destructive: bool,
    pub accept_revision_rewind: bool,
    pub accept_data_loss_window: Option<Duration>,
    pub skip_hash_check: bool,
    /// Continue this run.
    pub resume: Option<String>,
    /// The new membership (name, address), or every reachable etcd host.
    pub members: Vec<(String, std::net::IpAddr)>,
    /// `--bump-revision N` (`None`: auto).
    pub bump_revision: Option<u64>,
}

/// Where a recover stages its work on each host: `<WORK_DIR>/<run>/` (same filesystem as the
/// default data dir, so the final swap is a rename; `reset` moves it aside).
pub const WORK_DIR: &str = crate::etcd::RECOVER_WORK_DIR;
/// The bump etcd's docs recommend: a week at under 1500 writes/s.
pub const MIN_BUMP: u64 = 1_000_000_000;
/// At most this many writes for an emulated bump (etcd 3.4).
pub const MAX_EMULATED_WRITES: i64 = 5_000_000;
/// Kubernetes control-plane units, in the order they are stopped.
pub const KUBE_UNITS: [&str; 3] = [
    "kube-apiserver.service",
    "kube-controller-manager.service",
    "kube-scheduler.service",
];
pub const KUBELET_UNIT: &str = "kubelet.service";
/// Static-pod mode: R1.2 moves the manifests to `<MANIFESTS_ASIDE>/<run>/` (docs/recovery.md, "The shared model").
pub const MANIFESTS_ASIDE: &str = "/etc/kubernetes/manifests.hactl";

/// Static-pod mode (`spec.kubernetes.mode: static-pod`): the components whose manifests each
/// reachable control-plane etcd host holds, in stop order; empty in systemd mode.
pub fn static_pod_manifests(
    inv: &crate::inventory::Inventory,
    hosts: &[String],
) -> Vec<(String, Vec<String>)> {
    let Some(k) = &inv.kubernetes else {
        return Vec::new();
    };
    if k.mode != crate::inventory::KubernetesMode::StaticPod {
        return Vec::new();
    }
    hosts
        .iter()
        .filter(|h| {
            inv.host(h)
                .is_some_and(|h| h.has(crate::inventory::Role::ControlPlane))
        })
        .map(|h| {
            (
                h.clone(),
                crate::kubernetes::Component::ALL
                    .iter()
                    .map(|c| c.binary().to_string())
                    .collect(),
            )
        })
        .collect()
}

/// Where the data comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Source {
    /// A snapshot file on the operator machine.
    File {
        path: String,
        sha256: String,
        size: u64,
        /// The file has no appended sha256 (a raw member/snap/db) and the operator accepted it.
        skip_hash_check: bool,
        /// From its sidecar, when it has one.
        revision: Option<i64>,
        time: Option<String>,
    },
    /// A surviving member's data dir, copied and opened by a scratch etcd.
    Member { host: String },
}

/// How the revision moves past everything clients have seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Bump {
    /// `--bump-revision N --mark-compacted` at restore.
    Restore { by: u64 },
    /// etcd 3.4: sequential writes up to `target`, then a compaction there.
    Emulated { target: i64 },
    /// Accepted by the operator: no bump (clients may see the revision go back).
    None,
}

/// Everything R0 decided; saved as `<state>/runs/<run>/recover.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decisions {
    pub run: String,
    pub cluster: String,
    pub mode: Mode,
    pub source: Source,
    /// The member restored first (seed mode) or the one that runs cluster-wide commands.
    pub seed: String,
    /// The new membership, in inventory order.
    pub targets: Vec<String>,
    /// Hosts attested dead (left out, not fenced).
    pub confirmed_dead: Vec<String>,
    /// Reachable etcd hosts whose data dir exists (moved aside in R1.4).
    pub data_dirs: Vec<String>,
    /// Kubernetes units installed per host (stopped in R1.2, started in R5).
    pub kube_units: Vec<(String, Vec<String>)>,
    /// Hosts with a kubelet unit (restarted in R5.4): the etcd hosts', then the other nodes'.
    pub kubelets: Vec<String>,
    /// Nodes that are not etcd hosts and did not answer (at R0, or when the run resumed): their
    /// kubelets are not restarted, and the report says so.
    #[serde(default)]
    pub nodes_unreached: Vec<String>,
    pub token: String,
    pub bump: Bump,
    /// The high-water mark known at R0.
    pub hwm: Option<crate::hwm::Hwm>,
    /// The cluster ID the restore must log (hex), computed from the initial cluster and token.
    pub expected_cluster_id: String,
    /// The restored revision must reach at least this (0 when unknown).
    pub min_revision: i64,
    /// `etcdutl` or `etcdctl`, and the etcd version on the seed.
    pub tool: String,
    pub etcd_version: String,
    /// Static-pod mode: the control-plane components whose manifests R1.2 moves to
    /// `/etc/kubernetes/manifests.hactl/<run>/` and R5 moves back, per host (empty for systemd).
    #[serde(default)]
    pub kube_manifests: Vec<(String, Vec<String>)>,
    /// Old members (hosts of the member history that are not etcd hosts of the inventory) that
    /// answered: fenced for good in R1.5, before the new cluster starts.
    #[serde(default)]
    pub old_fenced: Vec<String>,
    /// Old members attested dead: recorded to be fenced the moment they answer again.
    #[serde(default)]
    pub old_attested: Vec<String>,
    /// What is left once etcd is back, for `hactl up`'s plan (R7; empty: nothing).
    #[serde(default)]
    pub converge: Vec<String>,
}

impl Decisions {
    pub fn work_dir(&self) -> String {
        format!("{WORK_DIR}/{}", self.run)
    }
    pub fn snapshot_path(&self) -> String {
        format!("{}/snapshot.db", self.work_dir())
    }
    pub fn aside(&self, data_dir: &str) -> String {
        format!("{data_dir}.hactl-pre-{}", self.run)
    }
    /// Where R1.2 keeps a host's static-pod manifests while the control plane is stopped.
    pub fn manifests_aside(&self) -> String {
        format!("{MANIFESTS_ASIDE}/{}", self.run)
    }
    /// R7 runs `hactl up`'s plan: something is left for it, and every member answers (`up`
    /// needs every host; with one attested dead the report names what is left instead).
    pub fn converges(&self) -> bool {
        !self.converge.is_empty() && self.confirmed_dead.is_empty()
    }
    pub fn kube_units_on(&self, host: &str) -> &[String] {
        self.kube_units
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, u)| u.as_slice())
            .unwrap_or(&[])
    }
}

/// `hactl recover` as an [`Operation`].
pub struct Recover {
    opts: Options,
    reach: Option<crate::exec::connect::Reach>,
    history: Option<crate::old_members::History>,
    decisions: Option<Decisions>,
}

impl Recover {
    pub fn new(opts: Options) -> Recover {
        Recover {
            opts,
            reach: None,
            history: None,
            decisions: None,
        }
    }
}

#[async_trait(?Send)]
impl Operation for Recover {
    fn kind(&self) -> &'static str {
        "recover"
    }
    fn command(&self) -> String {
        "recover".into()
    }
    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        // No prefix: the id becomes part of the etcd token `hactl-<cluster>-<run>`.
        Ok(RunId::new_or_resumed(self.opts.resume.as_deref(), ""))
    }
    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        // The etcd hosts, every other host of the inventory that held a member (the old
        // members a recover accounts for), and the other nodes (their kubelets restart in R5.4).
        let history = crate::old_members::record::load(&ctx.state.view(), ctx.inv);
        let mut hosts = ctx.inv.with_role(Role::Etcd);
        hosts.extend(ctx.inv.hosts.iter().filter(|h| {
            !h.has(Role::Etcd)
                && (history.hosts.contains_key(&h.name) || ctx.inv.kubernetes.is_some() && h.is_node())
        }));
        let reach = crate::exec::connect::reach(ctx.host_keys(), &hosts, ctx.connect).await;
        // A re-installed survivor is not a dead one: only the operator can say which.
        reach.refuse_changed_host_keys()?;
        let t = reach.transports.clone();
        self.reach = Some(reach);
        self.history = Some(history);
        Ok(t)
    }
    async fn plan(&mut self, ctx: &Context<'_>, run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let (inv, state) = (ctx.inv, ctx.state);
        let reach = self.reach.take().expect("reach runs before plan");
        let history = self.history.take().unwrap_or_default();
        if !state.file("pki/etcd/ca.key").exists() {
            return Err(refuse(
                crate::exit::REFUSED,
                format!(
                    "the state directory {} has no etcd CA: a recover needs the cluster's PKI (restore it from a backup bundle first)",
                    state.path.display()
                ),
            ));
        }
        let pki = crate::pki::ensure(&state.file("pki"), inv, time::OffsetDateTime::now_utc())
            .context("failed to load the cluster's certificates")?;
        let tls = crate::etcd::client::client_tls(&state.file("pki"))?;
        let (decisions, transports) = if run.resumed {
            start::resume(inv, state, &run.id, reach)?
        } else {
            start::assess_and_decide(&self.opts, ctx.connect, inv, state, &run.id, reach, history).await?
        };
        // R2.3: the members' certificates carry their addresses and come from the etcd CA (else
        // they are re-issued from the CA in the state directory), checked before anything changes.
        let pki = match certs::ensure_member_certs(
            &state.file("pki"),
            inv,
            &decisions.targets,
            &decisions.run,
            pki,
        ) {
            Ok((pki, reissued)) => {
                for line in reissued {
                    eprintln!("{line}");
                }
                pki
            }
            Err(m) => return Err(refuse(crate::exit::REFUSED, m)),
        };
        let inputs = steps::Inputs {
            inv,
            pki: &pki,
            state,
            tls: &tls,
            connect: ctx.connect,
        };
        let steps = steps::build(&decisions, &inputs);
        let mut json = serde_json::to_value(&decisions)?;
        if let Some(o) = json.as_object_mut() {
            for (k, v) in report::plan_extras(&decisions, inv) {
                o.insert(k.to_string(), v);
            }
        }
        let confirmation = if self.opts.force_destructive {
            Confirmation::TypeName {
                what: format!(
                    "--force-destructive: this rolls cluster {} back although its quorum could be restored",
                    inv.name
                ),
                name: inv.name.clone(),
            }
        } else {
            Confirmation::Ask(
                "recover stops etcd (and the Kubernetes control plane) on every reachable host".into(),
            )
        };
        let sha = hex::encode(sha2::Digest::finalize(sha2::Digest::chain_update(
            <sha2::Sha256 as sha2::Digest>::new(),
            serde_json::to_string_pretty(&decisions)?.as_bytes(),
        )));
        let planned = Planned {
            summary: report::plan_header(&decisions, inv),
            decisions: json,
            steps,
            confirmation,
            resume: format!(
                "hactl recover -i {} --resume {}",
                inv.source.display(),
                decisions.run
            ),
            mirror_hosts: transports.keys().cloned().collect(),
            decided: start::r0_entries(&decisions, self.opts.force_destructive, &sha)?,
        };
        self.decisions = Some(decisions);
        Ok(planned)
    }
    async fn report(
        &mut self,
        ctx: &Context<'_>,
        run: &RunId,
        outcome: &Outcome,
        took: Duration,
    ) -> anyhow::Result<Report> {
        let d = self.decisions.as_ref().expect("plan runs before report");
        Ok(Report {
            code: report::finish_code(d),
            text: format!(
                "recover: run {} done in {:.1}s ({} steps done, {} already done)\n{}",
                run.id,
                took.as_secs_f64(),
                outcome.done.len(),
                outcome.skipped.len(),
                report::finish_report(d, ctx.inv, ctx.state)
            ),
        })
    }
}

/// The token of the lineage a recover starts.
pub fn token(cluster: &str, run: &str) -> String {
    format!("hactl-{cluster}-{run}")
}

/// A member ID as etcd computes it for a new cluster (`computeMemberID` with no time): the first
/// 8 bytes, big-endian, of sha1(sorted peer URLs joined, then the token).
pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut b = urls.join("").into_bytes();
    b.extend_from_slice(token.as_bytes());
    let h = sha1::Sha1::digest(&b);
    u64::from_be_bytes(h[..8].try_into().expect("sha1 has 20 bytes"))
}

/// The cluster ID etcd derives from its initial members (`genID`): sha1 of the sorted member
/// IDs, big-endian, first 8 bytes.
pub fn cluster_id(members: &[(String, String)], token: &str) -> u64 {
    let mut ids: Vec<u64> = members
        .iter()
        .map(|(_, url)| member_id(std::slice::from_ref(url), token))
        .collect();
    ids.sort_unstable();
    let b: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
    let h = sha1::Sha1::digest(&b);
    u64::from_be_bytes(h[..8].try_into().expect("sha1 has 20 bytes"))
}

/// The revision bump (R0.5).
pub fn choose_bump(
    tool_bumps: bool,
    hwm: Option<i64>,
    snap_revision: Option<i64>,
    accept_rewind: bool,
) -> Result<Bump, String> {
    let gap = hwm.map(|h| (h - snap_revision.unwrap_or(0)).max(0));
    if tool_bumps {
        let by = MIN_BUMP.max(2 * gap.unwrap_or(0) as u64);
        return Ok(Bump::Restore { by });
    }
    match (hwm, gap) {
        (Some(h), Some(g)) => {
            let target = h + (g / 10).max(10_000);
            if target - snap_revision.unwrap_or(0) > MAX_EMULATED_WRITES {
                return Err(format!(
                    "an emulated revision bump to {target} needs more than {MAX_EMULATED_WRITES} writes; \
                     use a same-minor etcdctl ≥ 3.4.27 (it has --bump-revision), or pass --accept-revision-rewind"
                ));
            }
            Ok(Bump::Emulated { target })
        }
        _ if accept_rewind => Ok(Bump::None),
        _ => Err(
            "this etcd's restore tool has no --bump-revision (etcd 3.4 before 3.4.27) and no revision \
             high-water mark is known, so the revision cannot be moved past what clients have seen: \
             Kubernetes watchers could miss changes. Run `hactl status` against a healthy cluster in the \
             future to record one; now, pass --accept-revision-rewind to restore without a bump"
                .into(),
        ),
    }
}

/// R0.4c default without `--accept-data-loss-window`: refuse a source more than this many
/// revisions behind the high-water mark (minutes of a busy cluster's writes: worth a decision).
pub const DEFAULT_MAX_LOST_REVISIONS: i64 = 10_000;
/// R0.4c default without `--accept-data-loss-window`: refuse a snapshot older than this.
pub const DEFAULT_MAX_SOURCE_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What choosing a source would lose, as far as hactl can tell (R0.4c).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LossEstimate {
    /// `HWM − source revision`, when both are known.
    pub revisions: Option<i64>,
    /// The high-water mark and when it was seen (for the message).
    pub hwm: Option<(i64, String)>,
    pub source_revision: Option<i64>,
    /// How old the source is (a snapshot's sidecar time to now); None for a survivor or a file
    /// without a sidecar.
    pub source_age: Option<std::time::Duration>,
    /// How the source was named (for the message).
    pub source: String,
}

fn human_span(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 2 * 3600 {
        format!("{} h {} min", s / 3600, (s % 3600) / 60)
    } else {
        format!("{} min", s.div_ceil(60))
    }
}

/// R0.4c: refuse (the caller exits 3) a source older than the operator accepted. Without
/// `accept`, the defaults apply: at most [`DEFAULT_MAX_LOST_REVISIONS`] behind the high-water mark
/// and at most [`DEFAULT_MAX_SOURCE_AGE`] old. With `accept = D`, the source must be at most D old
/// (the revision threshold is then waived: the operator has chosen a window). What cannot be
/// estimated (no sidecar, no mark) does not refuse; the plan says the window is unknown.
pub fn data_loss_gate(est: &LossEstimate, accept: Option<std::time::Duration>) -> Result<(), String> {
    let too_old = |limit: std::time::Duration| est.source_age.is_some_and(|a| a > limit);
    let (refused, limit) = match accept {
        Some(d) => (too_old(d), format!("--accept-data-loss-window {}", human_span(d))),
        None => (
            too_old(DEFAULT_MAX_SOURCE_AGE)
                || est.revisions.is_some_and(|r| r > DEFAULT_MAX_LOST_REVISIONS),
            format!(
                "the default limits: at most {DEFAULT_MAX_LOST_REVISIONS} revisions behind the high-water mark, at most {} old",
                human_span(DEFAULT_MAX_SOURCE_AGE)
            ),
        ),
    };
    if !refused {
        return Ok(());
    }
    let mut loss = Vec::new();
    if let (Some(r), Some((h, at)), Some(src)) = (est.revisions, &est.hwm, est.source_revision) {
        loss.push(format!(
            "{r} revisions (source at revision {src}, the highest revision seen was {h} at {at})"
        ));
    }
    if let Some(a) = est.source_age {
        loss.push(format!(
            "up to {} of writes (the source is that old)",
            human_span(a)
        ));
    }
    // Suggest a window that covers this source, rounded up to the hour.
    let hours = est
        .source_age
        .map(|a| a.as_secs().div_ceil(3600).max(1))
        .unwrap_or(24);
    Err(format!(
        "R0.4c: the chosen source {} is older than allowed by {limit}: the estimated data loss is {}. \
         Pick a newer source (`--auto` takes the highest revision among survivors and backups), or accept \
         this loss with `--accept-data-loss-window {hours}h`",
        est.source,
        if loss.is_empty() {
            "unknown".to_string()
        } else {
            loss.join(" and ")
        },
    ))
}

/// What the quorum gate (R0.3) saw of one reachable member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberView {
    pub host: String,
    pub running: bool,
    /// Its data dir holds `member/wal` and `member/snap/db`.
    pub intact: bool,
    /// It names a leader and its `/health` is true.
    pub healthy_with_leader: bool,
}

/// The R0.3 verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Proceed,
    /// Quorum is present: replace the failed members instead.
    QuorumPresent {
        healthy: usize,
        quorum: usize,
    },
    /// Enough intact members to restore quorum by starting them.
    QuorumRestorable {
        intact: Vec<String>,
        quorum: usize,
    },
}

/// R0.3: refuse when a quorum is present or could be restored by starting members.
pub fn quorum_gate(members: usize, seen: &[MemberView]) -> Gate {
    let quorum = members / 2 + 1;
    let healthy = seen.iter().filter(|m| m.healthy_with_leader).count();
    if healthy >= quorum {
        return Gate::QuorumPresent { healthy, quorum };
    }
    let intact: Vec<String> = seen.iter().filter(|m| m.intact).map(|m| m.host.clone()).collect();
    if intact.len() >= quorum {
        return Gate::QuorumRestorable { intact, quorum };
    }
    Gate::Proceed
}

/// `--bump-revision N` (Some) or `auto` (None), R0.5. With N, the operator's bump is used as
/// given, but never one that leaves the revision at or below the high-water mark (watchers that
/// saw it would silently miss changes) unless `--accept-revision-rewind` says so.
pub fn choose_bump_requested(
    requested: Option<u64>,
    tool_bumps: bool,
    hwm: Option<i64>,
    snap_revision: Option<i64>,
    accept_rewind: bool,
) -> Result<Bump, String> {
    let Some(n) = requested else {
        return choose_bump(tool_bumps, hwm, snap_revision, accept_rewind);
    };
    if !tool_bumps {
        return Err(format!(
            "R0.5: --bump-revision {n}: this etcd's restore tool has no --bump-revision (etcd 3.4 before 3.4.27, \
             etcdutl before 3.5.10), so a bump of exactly {n} cannot be made. Use --bump-revision auto: it \
             emulates the bump with writes up to the high-water mark, then a compaction"
        ));
    }
    if let (Some(h), Some(r)) = (hwm, snap_revision) {
        let after = r.saturating_add(n as i64);
        if after <= h && !accept_rewind {
            let auto = match choose_bump(true, hwm, snap_revision, false) {
                Ok(Bump::Restore { by }) => by,
                _ => MIN_BUMP,
            };
            return Err(format!(
                "R0.5: --bump-revision {n}: the restored revision would be {after} (source at revision {r}), not above \
                 the high-water mark {h} that clients have seen, so their watches would miss changes. Use at \
                 least --bump-revision {}, or --bump-revision auto ({auto} here)",
                h - r + 1
            ));
        }
    }
    Ok(Bump::Restore { by: n })
}

/// Checks `--members NAME=IP,...` against the inventory's etcd hosts (`(name, address)`, in
/// inventory order). Returns the target names in inventory order, or every problem, each naming
/// the entry and the fix.
pub fn validate_members(
    etcd_hosts: &[(String, std::net::IpAddr)],
    requested: &[(String, std::net::IpAddr)],
) -> Result<Vec<String>, Vec<String>> {
    let mut problems = Vec::new();
    let known = etcd_hosts
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    for (i, (name, ip)) in requested.iter().enumerate() {
        let place = format!("--members {name}={ip}");
        if requested[..i].iter().any(|(n, _)| n == name) {
            problems.push(format!("{place}: {name} is named twice: name each member once"));
            continue;
        }
        if let Some((other, _)) = requested[..i].iter().find(|(_, a)| a == ip) {
            problems.push(format!(
                "{place}: {ip} is also given to {other}: every member needs its own address"
            ));
            continue;
        }
        match etcd_hosts.iter().find(|(n, _)| n == name) {
            None => problems.push(format!(
                "{place}: {name} is not an etcd host of the inventory (etcd hosts: {known}): add it to \
                 spec.hosts with the etcd role first, or leave it out"
            )),
            Some((_, addr)) if addr != ip => problems.push(format!(
                "{place}: the inventory gives {name} the address {addr}; hactl reaches and certifies a member at \
                 its inventory address. To move {name}, change its spec.hosts[].address in the inventory and \
                 run again; otherwise write --members {name}={addr}"
            )),
            Some(_) => {}
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(etcd_hosts
        .iter()
        .filter(|(n, _)| requested.iter().any(|(r, _)| r == n))
        .map(|(n, _)| n.clone())
        .collect())
}

/// Where an `--auto` candidate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutoSource {
    /// A surviving member's data dir (R0.4b copies it).
    Survivor { host: String },
    /// A verified scheduled backup on a host (`<spec.backup.dir>/latest.json`).
    HostBackup {
        host: String,
        file: String,
        sha256: String,
    },
    /// A snapshot file with a sidecar in the state directory's `backups/`.
    LocalFile { path: std::path::PathBuf },
    /// A snapshot the leader pushed to `spec.backup.remote` (with its checksum beside it).
    Remote {
        snapshot: crate::backup_remote::RemoteSnapshot,
        remote: String,
    },
}

/// One source `--auto` may choose (R0.4c).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoCandidate {
    pub source: AutoSource,
    /// None when it could not be read (such a candidate ranks below every known one).
    pub revision: Option<i64>,
    pub raft_index: u64,
    /// How old the data is (a backup's time to now); None for a survivor.
    pub age: Option<std::time::Duration>,
}

impl AutoCandidate {
    /// One line for the operator.
    pub fn describe(&self) -> String {
        let what = match &self.source {
            AutoSource::Survivor { host } => format!("survivor {host}"),
            AutoSource::HostBackup { host, file, .. } => format!("scheduled backup {host}:{file}"),
            AutoSource::LocalFile { path } => format!("snapshot {}", path.display()),
            AutoSource::Remote { snapshot, remote } => format!("remote backup {remote}: {}", snapshot.path),
        };
        let rev = self
            .revision
            .map(|r| format!("revision {r}"))
            .unwrap_or_else(|| "revision unknown".into());
        match self.age {
            Some(a) => format!("{what}: {rev}, {} old", human_span(a)),
            None => format!("{what}: {rev}"),
        }
    }
}

/// `--auto`: the candidate with the highest revision; on a tie a survivor (its WAL may hold
/// more than its db shows), then the higher raft index, then the newer. Candidates whose
/// revision is unknown come last (the first survivor among them, when nothing is known).
pub fn pick_auto(candidates: &[AutoCandidate]) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .max_by(|(ia, a), (ib, b)| {
            let key = |c: &AutoCandidate| {
                (
                    c.revision.is_some(),
                    c.revision.unwrap_or(i64::MIN),
                    matches!(c.source, AutoSource::Survivor { .. }),
                    c.raft_index,
                    std::cmp::Reverse(c.age.unwrap_or_default()),
                )
            };
            // Equal keys: the earlier candidate wins.
            key(a).cmp(&key(b)).then(ib.cmp(ia))
        })
        .map(|(i, _)| i)
}

/// The loss line `--auto` prints for its choice: revisions behind the high-water mark and age.
pub fn describe_loss(est: &LossEstimate) -> String {
    let mut parts = Vec::new();
    match (est.revisions, &est.hwm) {
        (Some(r), Some((h, at))) => parts.push(format!(
            "{r} revisions behind the high-water mark {h} (seen {at})"
        )),
        (None, Some((h, at))) => parts.push(format!(
            "unknown in revisions (the high-water mark is {h}, seen {at})"
        )),
        _ => parts.push("unknown in revisions (no high-water mark recorded)".into()),
    }
    if let Some(a) = est.source_age {
        parts.push(format!("the source is {} old", human_span(a)));
    }
    format!("estimated data loss: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_and_member_ids_match_what_etcd_logged() {
        // Recorded from etcdutl 3.5.16 in the lab: `snapshot restore --name cp1 --initial-cluster
        // cp1=https://10.213.235.11:2380 --initial-cluster-token tok` logged these IDs.
        let url = "https://10.213.235.11:2380".to_string();
        assert_eq!(
            format!("{:x}", member_id(std::slice::from_ref(&url), "tok")),
            "a1684e3e1918715d"
        );
        assert_eq!(
            format!("{:x}", cluster_id(&[("cp1".into(), url)], "tok")),
            "bd64556880bc1085"
        );
        // The spec's defaults pitfall: member `default` at http://localhost:2380 with token
        // `etcd-cluster` gives the IDs of the field reports.
        let d = "http://localhost:2380".to_string();
        assert_eq!(
            format!("{:x}", member_id(std::slice::from_ref(&d), "etcd-cluster")),
            "8e9e05c52164694d"
        );
        assert_eq!(
            format!("{:x}", cluster_id(&[("default".into(), d)], "etcd-cluster")),
            "cdf818194e3a8c32"
        );
    }

    #[test]
    fn a_new_token_makes_a_new_cluster() {
        let m = vec![("cp1".to_string(), "https://10.0.0.1:2380".to_string())];
        assert_ne!(
            cluster_id(&m, &token("c", "r1")),
            cluster_id(&m, &token("c", "r2"))
        );
        assert_eq!(
            token("lab", "20260101-000000-abcd"),
            "hactl-lab-20260101-000000-abcd"
        );
    }

    #[test]
    fn the_bump_follows_the_tool_and_the_high_water_mark() {
        assert_eq!(
            choose_bump(true, None, None, false),
            Ok(Bump::Restore { by: MIN_BUMP })
        );
        assert_eq!(
            choose_bump(true, Some(900_000_000), Some(100), false),
            Ok(Bump::Restore {
                by: 2 * (900_000_000 - 100)
            })
        );
        assert_eq!(
            choose_bump(false, Some(5_000), Some(4_000), false),
            Ok(Bump::Emulated { target: 15_000 })
        );
        assert_eq!(
            choose_bump(false, Some(1_000_000), Some(0), false),
            Ok(Bump::Emulated { target: 1_100_000 })
        );
        assert!(choose_bump(false, Some(9_000_000), Some(0), false).is_err());
        assert!(choose_bump(false, None, Some(10), false).is_err());
        assert_eq!(choose_bump(false, None, Some(10), true), Ok(Bump::None));
    }

    #[test]
    fn the_data_loss_gate_refuses_old_sources_unless_accepted() {
        use std::time::Duration;
        let h = |n: u64| Duration::from_secs(n * 3600);
        let est = |revisions: Option<i64>, age: Option<Duration>| LossEstimate {
            revisions,
            hwm: Some((50_000, "2026-11-22T03:00:00.000Z".into())),
            source_revision: revisions.map(|r| 50_000 - r),
            source_age: age,
            source: "snap.db".into(),
        };
        // (estimate, --accept-data-loss-window, allowed?)
        let cases = [
            (est(Some(100), Some(h(1))), None, true),
            (est(Some(10_000), Some(h(24))), None, true),
            (est(Some(10_001), Some(h(1))), None, false),
            (est(Some(100), Some(h(25))), None, false),
            (est(Some(100), Some(h(25))), Some(h(26)), true),
            (est(Some(100), Some(h(25))), Some(h(2)), false),
            // The window waives the revision threshold.
            (est(Some(90_000), Some(h(1))), Some(h(2)), true),
            // Nothing known (a survivor, no mark): the gate cannot refuse.
            (est(None, None), None, true),
            (est(Some(20_000), None), None, false),
            (est(Some(20_000), None), Some(Duration::from_secs(60)), true),
        ];
        for (e, accept, allowed) in cases {
            let got = data_loss_gate(&e, accept);
            assert_eq!(got.is_ok(), allowed, "{e:?} with {accept:?}: {got:?}");
        }
        let msg = data_loss_gate(&est(Some(12_345), Some(h(30))), None).unwrap_err();
        assert!(msg.contains("12345 revisions"), "{msg}");
        assert!(msg.contains("up to 30 h 0 min of writes"), "{msg}");
        assert!(msg.contains("--accept-data-loss-window 30h"), "{msg}");
    }

    #[test]
    fn the_quorum_gate_refuses_what_replace_or_a_start_can_fix() {
        let m = |host: &str, running, intact, healthy| MemberView {
            host: host.into(),
            running,
            intact,
            healthy_with_leader: healthy,
        };
        // Two of three healthy: replace, not recover.
        assert_eq!(
            quorum_gate(
                3,
                &[
                    m("a", true, true, true),
                    m("b", true, true, true),
                    m("c", false, false, false)
                ]
            ),
            Gate::QuorumPresent {
                healthy: 2,
                quorum: 2
            }
        );
        // A4: two stopped with intact data: start them.
        assert_eq!(
            quorum_gate(
                3,
                &[
                    m("a", true, true, false),
                    m("b", false, true, false),
                    m("c", false, true, false)
                ]
            ),
            Gate::QuorumRestorable {
                intact: vec!["a".into(), "b".into(), "c".into()],
                quorum: 2
            }
        );
        // A1: two wiped.
        assert_eq!(
            quorum_gate(
                3,
                &[
                    m("a", true, true, false),
                    m("b", false, false, false),
                    m("c", false, false, false)
                ]
            ),
            Gate::Proceed
        );
        // Five members, two intact: not enough.
        assert_eq!(
            quorum_gate(5, &[m("a", true, true, false), m("b", false, true, false)]),
            Gate::Proceed
        );
    }

    #[test]
    fn an_explicit_bump_must_pass_the_high_water_mark() {
        // auto is the spec's rule.
        assert_eq!(
            choose_bump_requested(None, true, Some(100), Some(50), false),
            Ok(Bump::Restore { by: MIN_BUMP })
        );
        assert_eq!(
            choose_bump_requested(Some(5_000), true, Some(1_000), Some(900), false),
            Ok(Bump::Restore { by: 5_000 })
        );
        let e = choose_bump_requested(Some(100), true, Some(1_000), Some(900), false).unwrap_err();
        assert!(e.contains("at least --bump-revision 101"), "{e}");
        assert!(e.contains("--bump-revision auto (1000000000 here)"), "{e}");
        // Exactly at the mark is not past it.
        assert!(choose_bump_requested(Some(100), true, Some(1_000), Some(900), false).is_err());
        assert!(choose_bump_requested(Some(101), true, Some(1_000), Some(900), false).is_ok());
        assert_eq!(
            choose_bump_requested(Some(100), true, Some(1_000), Some(900), true),
            Ok(Bump::Restore { by: 100 })
        );
        // Nothing to compare with: taken as given.
        assert_eq!(
            choose_bump_requested(Some(7), true, None, Some(900), false),
            Ok(Bump::Restore { by: 7 })
        );
        // No tool support: only auto can emulate.
        let e = choose_bump_requested(Some(5_000), false, Some(1_000), Some(900), false).unwrap_err();
        assert!(e.contains("--bump-revision auto"), "{e}");
    }

    #[test]
    fn members_must_be_inventory_etcd_hosts_at_their_addresses() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let inv = vec![
            ("cp1".to_string(), ip("10.0.0.11")),
            ("cp2".to_string(), ip("10.0.0.12")),
            ("cp3".to_string(), ip("10.0.0.13")),
        ];
        let m = |n: &str, a: &str| (n.to_string(), ip(a));
        // Given in any order, returned in inventory order.
        assert_eq!(
            validate_members(&inv, &[m("cp3", "10.0.0.13"), m("cp1", "10.0.0.11")]),
            Ok(vec!["cp1".to_string(), "cp3".to_string()])
        );
        let errs = validate_members(
            &inv,
            &[
                m("cp1", "10.0.0.11"),
                m("cp1", "10.0.0.11"),
                m("cp9", "10.0.0.19"),
                m("cp2", "10.0.0.99"),
                m("cp3", "10.0.0.11"),
            ],
        )
        .unwrap_err();
        assert_eq!(errs.len(), 4, "{errs:#?}");
        assert!(
            errs[0].starts_with("--members cp1=10.0.0.11: cp1 is named twice"),
            "{}",
            errs[0]
        );
        assert!(
            errs[1].contains("cp9 is not an etcd host of the inventory (etcd hosts: cp1, cp2, cp3)"),
            "{}",
            errs[1]
        );
        assert!(
            errs[2].contains("the inventory gives cp2 the address 10.0.0.12")
                && errs[2].contains("--members cp2=10.0.0.12"),
            "{}",
            errs[2]
        );
        assert!(errs[3].contains("10.0.0.11 is also given to cp1"), "{}", errs[3]);
    }

    #[test]
    fn auto_takes_the_highest_revision_among_survivors_and_backups() {
        use std::time::Duration;
        let survivor = |h: &str, r: Option<i64>| AutoCandidate {
            source: AutoSource::Survivor { host: h.into() },
            revision: r,
            raft_index: 0,
            age: None,
        };
        let backup = |h: &str, r: i64, age: u64| AutoCandidate {
            source: AutoSource::HostBackup {
                host: h.into(),
                file: format!("/b/{h}.db"),
                sha256: "ab".into(),
            },
            revision: Some(r),
            raft_index: 0,
            age: Some(Duration::from_secs(age)),
        };
        let local = |r: i64, age: u64| AutoCandidate {
            source: AutoSource::LocalFile {
                path: "/s/backups/x.db".into(),
            },
            revision: Some(r),
            raft_index: 0,
            age: Some(Duration::from_secs(age)),
        };
        // A host backup ahead of a stale survivor and an older local snapshot.
        let c = [survivor("cp3", Some(20)), backup("cp1", 130, 60), local(110, 600)];
        assert_eq!(pick_auto(&c), Some(1));
        // A survivor at least as far as every backup wins (its WAL may hold more).
        let c = [backup("cp1", 130, 60), survivor("cp3", Some(130))];
        assert_eq!(pick_auto(&c), Some(1));
        // Two backups at one revision: the newer.
        let c = [backup("cp1", 130, 600), backup("cp2", 130, 60)];
        assert_eq!(pick_auto(&c), Some(1));
        // Unknown revisions rank last, but a lone survivor is still a source.
        let c = [survivor("cp1", None), local(5, 60)];
        assert_eq!(pick_auto(&c), Some(1));
        assert_eq!(
            pick_auto(&[survivor("cp1", None), survivor("cp2", None)]),
            Some(0)
        );
        assert_eq!(pick_auto(&[]), None);
        assert_eq!(
            backup("cp1", 130, 120).describe(),
            "scheduled backup cp1:/b/cp1.db: revision 130, 2 min old"
        );
        let est = LossEstimate {
            revisions: Some(12),
            hwm: Some((142, "2026-11-22T05:00:00Z".into())),
            source_revision: Some(130),
            source_age: Some(Duration::from_secs(120)),
            source: "x".into(),
        };
        assert_eq!(
            describe_loss(&est),
            "estimated data loss: 12 revisions behind the high-water mark 142 (seen 2026-11-22T05:00:00Z); the source is 2 min old"
        );
    }
}
