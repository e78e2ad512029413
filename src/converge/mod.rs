//! Bring-up as a library: what `hactl up`, `plan`, `reset`, `check` and `status` do, without
//! the command line. [`phases`] is the table of contents of a bring-up; [`prepare`] connects,
//! gathers facts (one round trip per host) and builds the plan, which [`apply`] runs and `plan`
//! prints. Beside it: [`reset`] (the plan that undoes a bring-up), [`check`] (the read-only
//! preflight and its verdicts) and [`status`] (the cluster as its members, balancers and
//! control plane report it).
//!
//! Invariants: planning sends only read-only commands to hosts (it may create the cluster's local
//! PKI in the state directory, so the sha256 `plan` prints are the ones `up` will upload); a
//! converged cluster plans nothing; nothing here parses a command line (callers pass [`Options`]
//! and [`ConnectSettings`]).

pub mod check;
pub mod member_history;
pub mod reset;
pub mod status;

use crate::output::confirm;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures::StreamExt;

use crate::binaries::{self, LocalBinaries};
use crate::exec::connect::ConnectSettings;
use crate::exec::{self, Mode, Transport, Transports};
use crate::facts::{self, HostFacts};
use crate::inventory::{Host, Inventory, Role};
use crate::local_digests::LocalDigests;
use crate::phases::{self, configure_etcd, install_etcd, join_etcd, roll_etcd, schedule_backups, start_etcd};
use crate::phases::{
    configure_kubernetes, install_kubernetes, roll_apiservers, roll_controllers, start_kubernetes,
};
use crate::phases::{configure_load_balancer, install_load_balancer};
use crate::phases::{Ctx, EtcdView, Phase};
use crate::pki::{self, Pki};
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, Step};
use crate::state::{StateDir, StateView};

/// The table of contents of a cluster bring-up, in order.
pub fn phases() -> Vec<Box<dyn Phase>> {
    vec![
        Box::new(install_etcd::InstallEtcd),
        Box::new(configure_etcd::ConfigureEtcd),
        Box::new(start_etcd::StartEtcd),
        Box::new(join_etcd::JoinEtcd),
        Box::new(roll_etcd::RollEtcd),
        // Local snapshots on every etcd host (spec.backup), once the members are up.
        Box::new(schedule_backups::ScheduleBackups),
        // Old members on hosts without the etcd role: a zombie, or one attested dead that
        // answers again, fenced for good; the others left without the role start no etcd at boot.
        Box::new(crate::phases::fence_old_members::FenceOldMembers),
        Box::new(crate::phases::retire_etcd::RetireEtcd),
        // Load balancers (before the Kubernetes roll, which drains their backends).
        Box::new(install_load_balancer::InstallLoadBalancer),
        Box::new(configure_load_balancer::ConfigureLoadBalancer),
        // The Kubernetes control plane (control-plane hosts, when the inventory has a kubernetes section).
        Box::new(install_kubernetes::InstallKubernetes),
        Box::new(configure_kubernetes::ConfigureKubernetes),
        // The node components on every control-plane and worker host (kubelet, containerd,
        // kube-proxy, the pod network) are installed and configured with the control plane;
        // in static-pod mode the control-plane hosts' kubelets start before it, since they run it.
        Box::new(crate::phases::install_nodes::InstallNodes),
        Box::new(crate::phases::configure_nodes::ConfigureNodes),
        Box::new(crate::phases::start_kubelets::StartKubelets),
        Box::new(start_kubernetes::StartKubernetes),
        Box::new(crate::phases::switch_mode::SwitchMode),
        Box::new(roll_apiservers::RollApiservers),
        Box::new(roll_controllers::RollControllers),
        // Servers a cut run of an earlier `up` left out of the load balancers, once their hosts
        // answer (after the rolls, which bring back the servers they take out themselves).
        Box::new(crate::phases::return_held_servers::ReturnHeldServers),
        // The rest of the node components start once an apiserver answers.
        Box::new(crate::phases::start_nodes::StartNodes),
        Box::new(crate::phases::label_nodes::LabelNodes),
        // Cluster DNS, with kubernetes.dns (its pods need the Nodes and the pod network).
        Box::new(crate::phases::deploy_dns::DeployDns),
    ]
}

/// What `up` is told.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub connect: ConnectSettings,
    /// Do not ask before disruptive steps (restarts of running members).
    pub yes: bool,
}

/// Everything a plan was built from, kept for executing it.
pub struct Prepared {
    pub inv: Inventory,
    /// The state directory the plan was built from (read only: `up` writes through its own
    /// [`StateDir`]).
    pub state: StateView,
    pub pki: Pki,
    pub transports: Transports,
    pub facts: BTreeMap<String, HostFacts>,
    pub view: EtcdView,
    pub binaries: Option<LocalBinaries>,
    pub kubernetes: Option<crate::kubernetes::KubernetesInputs>,
    /// `spec.backup.remote`'s push key and the remote's host key, once the remote was reached.
    pub backup_remote: Option<crate::backup_remote::HostFiles>,
    pub plan: Plan,
    /// Host keys seen for the first time and not recorded (a [`preview`]): `host keytype
    /// SHA256:…`, for the operator to compare.
    pub unrecorded_host_keys: Vec<String>,
    /// Node hosts whose Node the facts showed without a pod CIDR (not registered yet): the plan
    /// waits for their registration, and `apply` plans their pod network in a second round.
    pub pending_nodes: Vec<String>,
}

/// What a command that changes the cluster does between reaching the hosts and its first
/// write: `up` takes the cluster lock there (on the hosts once they answered, in the state
/// directory once it is opened), so nothing, not even the lock, is written into a state
/// directory before the cluster identity was checked.
#[async_trait::async_trait]
pub trait Gate: Send {
    /// The hosts answered (nothing was written anywhere yet).
    async fn hosts_reached(&mut self, _transports: &Transports) -> anyhow::Result<()> {
        Ok(())
    }
    /// The identity check passed and the state directory is open for writing.
    fn state_opened(&mut self, _state: &StateDir) -> anyhow::Result<()> {
        Ok(())
    }
}

/// No gate: the caller already holds the lock (a roll of `certs rotate-ca`).
pub struct NoGate;
impl Gate for NoGate {}

/// Connects to every host, gathers facts, checks the cluster identity ([`crate::identity`]),
/// and only then touches the state directory (opening it creates it; the PKI, host keys first
/// seen, the binaries' cache) and builds the plan, re-issuing the leaves named in `renew` first
/// (`hactl certs renew`: the plan then uploads them and restarts what reads them, as for any
/// changed certificate). Changes nothing on hosts.
pub async fn prepare(
    inv: Inventory,
    state: StateView,
    connect: &ConnectSettings,
    renew: &[String],
    gate: &mut dyn Gate,
) -> anyhow::Result<Prepared> {
    prepare_with(inv, state, connect, renew, gate, |t| t).await
}

/// [`prepare`], with every host's transport passed through `wrap` first (tests wrap it in a
/// transport that fails on any mutation, to prove that planning changes nothing).
pub async fn prepare_with(
    inv: Inventory,
    view: StateView,
    connect: &ConnectSettings,
    renew: &[String],
    gate: &mut dyn Gate,
    wrap: impl Fn(Arc<dyn Transport>) -> Arc<dyn Transport>,
) -> anyhow::Result<Prepared> {
    // Read now, written once the state directory is known to be this cluster's (below).
    let downloads = view.file("downloads");
    let digests = LocalDigests::open(crate::kubernetes::inputs::digests_file(&downloads));
    let reached = reach_and_check(&inv, &view, connect, &wrap, Some(gate), &digests).await?;
    let state = StateDir::open(&view.path)
        .with_context(|| format!("cannot use the state directory of cluster {}", inv.name))?;
    if let Some(known) = &reached.known {
        let pinned = crate::ssh::KnownHosts::load(state.known_hosts_path())?;
        for line in pinned.pin_from(known)? {
            tracing::info!("recorded host key {line}");
        }
    }
    gate.state_opened(&state)?;
    let pki = pki::ensure_renewing(
        &state.path.join("pki"),
        &inv,
        time::OffsetDateTime::now_utc(),
        renew,
    )
    .context("failed to prepare the cluster's certificates")?;
    let backup_key = match &inv.backup.remote {
        Some(_) => Some(crate::backup_remote::ensure_key(&state, &inv.name)?),
        None => None,
    };
    let binaries = binaries::ensure(
        &inv.etcd.source,
        &downloads,
        &["etcd", "etcdctl"],
        &["etcdutl"],
        &digests,
    )
    .await
    .context("failed to prepare the etcd binaries")?;
    let binary_version = binaries
        .as_ref()
        .and_then(|b| binaries::reported_version(b, "etcd", &downloads.join("run"), &digests));
    let kubernetes = crate::kubernetes::inputs::prepare_with(&inv, &state, &digests).await?;
    crate::kubernetes::inputs::save_digests(&digests);
    let dns = read_dns(&inv, &reached.transports, &state.path.join("pki")).await;
    let prepared = build_plan(
        inv,
        state.view(),
        reached,
        Materials {
            pki,
            backup_key,
            binaries,
            binary_version,
            kubernetes,
            preview: false,
            dns,
        },
    )?;
    // Raise the revision high-water mark from what the members answered. etcd 3.5 leaves the
    // revision out of a member list's header, so each member's own `endpoint status` counts
    // too: a revision a member has applied was committed by a quorum.
    if let Some(rev) = prepared
        .facts
        .values()
        .flat_map(|f| {
            let listed = f.members.as_ref().map(|m| m.header.revision);
            let own = f.etcd_status.as_ref().map(|s| s.header.revision);
            listed.into_iter().chain(own)
        })
        .max()
    {
        if rev > 0 {
            let cluster_id = prepared
                .view
                .members
                .as_ref()
                .map(|m| format!("{:x}", m.header.cluster_id))
                .unwrap_or_default();
            if let Err(e) = crate::hwm::record(&state, crate::hwm::Hwm::now(rev, &cluster_id, "up")) {
                tracing::warn!("could not record the high-water mark: {e}");
            }
        }
    }
    Ok(prepared)
}

/// What `hactl plan` prints: [`prepare`]'s plan, built from a state directory it can only read
/// ([`StateView`]; a missing one is a cluster to create). Nothing is written anywhere: host keys
/// seen for the first time are trusted for this run and listed
/// ([`Prepared::unrecorded_host_keys`]); a CA, certificate or key `up` would create is made in
/// memory ([`pki::preview`]), so its sha256 is not the one `up` will upload.
/// `renew` as for [`prepare`] (`hactl certs renew --dry-run`), the leaves re-issued in memory.
pub async fn preview(
    inv: Inventory,
    view: StateView,
    connect: &ConnectSettings,
    renew: &[String],
) -> anyhow::Result<Prepared> {
    preview_with(inv, view, connect, renew, |t| t).await
}

/// [`preview`] through wrapped transports (tests: a transport that fails on any mutation).
pub async fn preview_with(
    inv: Inventory,
    view: StateView,
    connect: &ConnectSettings,
    renew: &[String],
    wrap: impl Fn(Arc<dyn Transport>) -> Arc<dyn Transport>,
) -> anyhow::Result<Prepared> {
    let digests = LocalDigests::read_only(&crate::kubernetes::inputs::digests_file(&view.file("downloads")));
    let reached = reach_and_check(&inv, &view, connect, &wrap, None, &digests).await?;
    let pki = pki::preview(&view.file("pki"), &inv, time::OffsetDateTime::now_utc(), renew)
        .context("failed to read the cluster's certificates")?;
    let backup_key = match &inv.backup.remote {
        Some(_) => Some(crate::backup_remote::preview_key(&view, &inv.name)?),
        None => None,
    };
    let binaries = binaries::ensure_read_only(
        &inv.etcd.source,
        &view.file("downloads"),
        &["etcd", "etcdctl"],
        &["etcdutl"],
        &digests,
    )
    .await
    .context("failed to prepare the etcd binaries")?;
    let scratch = tempfile::tempdir()?;
    let binary_version = binaries
        .as_ref()
        .and_then(|b| binaries::reported_version(b, "etcd", scratch.path(), &digests));
    let kubernetes = crate::kubernetes::inputs::preview(&inv, &view, &digests).await?;
    let dns = read_dns(&inv, &reached.transports, &view.file("pki")).await;
    build_plan(
        inv,
        view,
        reached,
        Materials {
            pki,
            backup_key,
            binaries,
            binary_version,
            kubernetes,
            preview: true,
            dns,
        },
    )
}

/// The hosts reached, their facts, and the host keys checked (read only so far).
struct Reached {
    transports: Transports,
    facts: BTreeMap<String, HostFacts>,
    known: Option<Arc<crate::ssh::KnownHosts>>,
    /// The backup remote's known_hosts lines (as the run knows them).
    remote_known_hosts: String,
    identity_warnings: Vec<String>,
}

/// What the state directory gives a plan (written by `up`, read or made in memory by `plan`).
struct Materials {
    pki: Pki,
    backup_key: Option<crate::backup_remote::PushKey>,
    binaries: Option<LocalBinaries>,
    binary_version: Option<String>,
    kubernetes: Option<crate::kubernetes::KubernetesInputs>,
    /// `plan` and the dry runs: the PKI's changes were made in memory, not written.
    preview: bool,
    /// The cluster DNS objects, read through the API (with `kubernetes.dns` only).
    dns: Option<crate::kubernetes::dns::DnsFacts>,
}

/// Connects (host keys checked against the state, nothing recorded), passes the gate, gathers
/// facts (one round trip per host) and checks the cluster identity: hosts that belong to a
/// cluster whose CAs the state does not hold are refused (exit 2) before anything is written.
async fn reach_and_check(
    inv: &Inventory,
    view: &StateView,
    connect: &ConnectSettings,
    wrap: &(impl Fn(Arc<dyn Transport>) -> Arc<dyn Transport> + ?Sized),
    gate: Option<&mut dyn Gate>,
    digests: &LocalDigests,
) -> anyhow::Result<Reached> {
    crate::kubernetes::inputs::refuse_bad_bundle(inv, digests)?;
    // A typo in a timeout variable stops `up` and `plan` here, before any host is reached, not
    // after the gathering, in the middle of planning.
    crate::phases::start_nodes::node_wait_from_env()?;
    let mut hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    // Hosts without roles (a replaced member's old host) are asked too, best effort: only for a
    // leftover etcd unit to disable (phases/retire_etcd.rs). One that does not answer (powered
    // off, confirmed dead) is left out with a warning, never a reason to stop.
    let spare: Vec<&Host> = inv.hosts.iter().filter(|h| h.roles.is_empty()).collect();
    // One connect for all (the sessions share the known_hosts file).
    let mut all: Vec<Host> = hosts.iter().chain(spare.iter()).map(|h| (*h).clone()).collect();
    if let Some(remote) = &inv.backup.remote {
        all.push(remote.host());
    }
    let all_refs: Vec<&Host> = all.iter().collect();
    let (conns, known) = crate::exec::connect::connect_keeping_keys(view, &all_refs, connect).await;
    let mut reached = crate::exec::connect::Reach::sort(&all_refs, conns);
    for h in &spare {
        if let Some(why) = reached.unreachable.remove(&h.name) {
            tracing::warn!(
                "{}: not reached ({why}); a host without roles is only checked for a leftover etcd unit",
                h.name
            );
        } else if reached.transports.contains_key(&h.name) {
            hosts.push(h);
        }
    }
    if let Some(remote) = &inv.backup.remote {
        if let Some(why) = reached.unreachable.get(crate::inventory::REMOTE_HOST_NAME) {
            anyhow::bail!(
                "cannot reach backup.remote {} ({why}): fix spec.backup.remote or the remote host",
                remote.describe()
            );
        }
    }
    let transports: Transports = reached.require_all()?;
    let transports: Transports = transports.into_iter().map(|(name, t)| (name, wrap(t))).collect();
    if let Some(gate) = gate {
        gate.hosts_reached(&transports).await?;
    }
    let versions = crate::kubernetes::inputs::known_versions(inv, digests);
    let facts = gather_facts_knowing(inv, &hosts, &transports, connect.concurrency, &versions).await?;
    let expected = crate::identity::Expected::from_pki_dir(&view.file("pki"))?.with_cluster_id(
        view.read(crate::hwm::FILE)
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_str::<crate::hwm::Hwm>(&t).ok())
            .map(|h| h.cluster_id),
    );
    // An etcd on a host without the etcd role says nothing about which cluster this is: it is
    // an old member (a zombie), which the fence_old_members phase fences for good.
    let member_facts: BTreeMap<String, HostFacts> = facts
        .iter()
        .map(|(h, f)| {
            let mut f = f.clone();
            if !inv.host(h).is_some_and(|x| x.has(Role::Etcd)) {
                f.members = None;
            }
            (h.clone(), f)
        })
        .collect();
    let findings = crate::identity::check(&expected, &member_facts);
    if !findings.is_ok() {
        return Err(crate::exit::refuse(
            crate::exit::REFUSED,
            crate::identity::refusal(&findings, &expected, &view.path, &inv.source),
        ));
    }
    let remote_known_hosts = match (&inv.backup.remote, &known) {
        (Some(remote), Some(k)) => crate::backup_remote::known_hosts_lines_of(k, remote),
        _ => String::new(),
    };
    Ok(Reached {
        transports,
        facts,
        known,
        remote_known_hosts,
        identity_warnings: findings.warnings,
    })
}

/// Builds the plan from the hosts' facts and the state's materials. Reads only.
fn build_plan(inv: Inventory, state: StateView, reached: Reached, m: Materials) -> anyhow::Result<Prepared> {
    for warning in &reached.identity_warnings {
        tracing::warn!("{warning}");
    }
    for change in m.pki.report.iter().filter(|c| c.is_change()) {
        if m.preview {
            tracing::info!("pki (preview, made in memory only): {change}");
        } else {
            tracing::info!("pki: {change}");
        }
    }
    for warning in &m.pki.warnings {
        tracing::warn!("pki: {warning}");
    }
    let Reached {
        transports,
        facts,
        known,
        remote_known_hosts,
        ..
    } = reached;
    let backup_remote = m.backup_key.map(|key| crate::backup_remote::HostFiles {
        key,
        known_hosts: remote_known_hosts,
    });
    let mut view = match EtcdView::from_facts(&inv, &facts) {
        Err(e) if e.is_refusal() => return Err(crate::exit::refuse(crate::exit::REFUSED, e.to_string())),
        other => other?,
    };
    view.token = state
        .read(crate::etcd::TOKEN_FILE)
        .ok()
        .flatten()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    view.fence_due = crate::old_members::record::load(&state, &inv)
        .hosts
        .into_iter()
        .filter(|(_, r)| r.state == crate::old_members::HostState::AwaitingFence)
        .map(|(h, _)| h)
        .collect();
    // The version the uploaded etcd will run, compared with etcd.version before any restart.
    view.binary_version = m.binary_version.as_deref().and_then(crate::etcd::upgrade::parse);
    let (pki, binaries, kubernetes) = (m.pki, m.binaries, m.kubernetes);
    let ctx = Ctx::new(&inv, &pki, &facts)
        .with_etcd(&view)
        .with_binaries(binaries.as_ref())
        .with_kubernetes(kubernetes.as_ref())
        .with_backup_remote(backup_remote.as_ref())
        .with_dns(m.dns.as_ref());
    let mut plan = match phases::build(&phases(), &ctx) {
        Err(e) if e.is_refusal() => {
            return Err(anyhow::Error::new(crate::exit::Refusal {
                code: crate::exit::REFUSED,
                message: e.to_string(),
            }))
        }
        other => other?,
    };
    if !plan.is_empty() {
        plan.push(verify_phase(&inv));
    }
    if let (Some(dns), Some(images)) = (
        inv.kubernetes.as_ref().and_then(|k| k.dns.as_ref()),
        kubernetes.as_ref().and_then(|k| k.images.as_ref()),
    ) {
        if !images.shipped.iter().any(|i| i.reference == dns.image) {
            tracing::warn!(
                "kubernetes.dns.image {} is not in kubernetes.images.dir's {}: the kubelets will pull it \
                 from its registry (add its OCI archive to the directory for a cluster without one)",
                dns.image,
                crate::images::MANIFEST
            );
        }
    }
    let unrecorded_host_keys = known.map(|k| k.unrecorded()).unwrap_or_default();
    for h in inv.node_hosts() {
        if let Some(crate::facts::NodeApi::Unknown(why)) =
            facts.get(&h.name).and_then(|f| f.node.as_ref()).map(|n| &n.api)
        {
            tracing::warn!(
                "{}: the API did not say what Node {} holds ({why}); its pod network is planned from the routes in place, run `hactl up` again once the apiservers answer",
                h.name,
                h.name
            );
        }
    }
    let pending_nodes = inv
        .node_hosts()
        .iter()
        .filter(|h| facts.get(&h.name).is_none_or(crate::phases::start_nodes::pending))
        .map(|h| h.name.clone())
        .collect();
    Ok(Prepared {
        inv,
        state,
        pki,
        transports,
        facts,
        view,
        binaries,
        kubernetes,
        backup_remote,
        plan,
        unrecorded_host_keys,
        pending_nodes,
    })
}

/// The cluster DNS objects as the API holds them, read with the admin certificate through the
/// first control-plane apiserver that answers (GETs only); `None` without `kubernetes.dns`.
/// When no apiserver answers (a first bring-up) or the admin certificate is not there yet, the
/// facts are unknown and the phase plans every object (server-side apply is idempotent).
async fn read_dns(
    inv: &Inventory,
    transports: &Transports,
    pki_dir: &std::path::Path,
) -> Option<crate::kubernetes::dns::DnsFacts> {
    use crate::kubernetes::dns::DnsFacts;
    let spec = inv.kubernetes.as_ref()?.dns.as_ref()?;
    let facts = match crate::kubernetes::rbac::first_ready(inv, transports, pki_dir).await {
        Err(why) => DnsFacts::Unknown(why),
        Ok((host, api)) => match crate::kubernetes::dns::read(&api, spec).await {
            Ok(read) => DnsFacts::Read(read),
            Err(e) => DnsFacts::Unknown(format!("{host}: {e}")),
        },
    };
    if let DnsFacts::Unknown(why) = &facts {
        tracing::info!(
            "cluster DNS: the API did not say which objects exist ({why}); all of them are planned"
        );
    }
    Some(facts)
}

/// Writes the admin kubeconfig (the VIP, `system:masters`) to `<state dir>/admin.kubeconfig`, 0600.
pub fn write_admin_kubeconfig(
    inv: &Inventory,
    state: &StateDir,
    pki: &Pki,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    if inv.kubernetes.is_none() {
        return Ok(None);
    }
    let text = crate::kubernetes::files::admin_kubeconfig(inv, pki)?;
    let path = state
        .write_secret(ADMIN_KUBECONFIG, text.as_bytes())
        .context("failed to write the admin kubeconfig")?;
    Ok(Some(path))
}

/// The admin kubeconfig, relative to the state directory.
pub const ADMIN_KUBECONFIG: &str = "admin.kubeconfig";

/// The last phase of a run that changed something: the cluster is healthy with one leader.
fn verify_phase(inv: &Inventory) -> PlannedPhase {
    let first = inv.with_role(Role::Etcd)[0];
    PlannedPhase {
        title: "Verify etcd".to_string(),
        parallelism: Parallelism::All,
        disruptive: false,
        hosts: vec![HostSteps {
            host: first.name.clone(),
            sudo: first.ssh.sudo,
            steps: vec![Step::Wait(crate::etcd::probe::cluster_has_one_leader(
                Duration::from_secs(60),
            ))],
        }],
    }
}

/// Gathers facts from every host in one round trip each.
pub async fn gather_facts(
    inv: &Inventory,
    hosts: &[&Host],
    transports: &Transports,
    concurrency: usize,
) -> anyhow::Result<BTreeMap<String, HostFacts>> {
    gather_facts_knowing(inv, hosts, transports, concurrency, &[]).await
}

/// [`gather_facts`], with the versions of binaries the operator machine knows by digest
/// ([`crate::facts::Query::known_versions`]).
async fn gather_facts_knowing(
    inv: &Inventory,
    hosts: &[&Host],
    transports: &Transports,
    concurrency: usize,
    known_versions: &[(String, String)],
) -> anyhow::Result<BTreeMap<String, HostFacts>> {
    let results: Vec<(String, anyhow::Result<HostFacts>)> = futures::stream::iter(hosts.iter().map(|h| {
        let t = transports[&h.name].clone();
        let mut query = crate::phases::query_for(inv, h);
        query.known_versions = known_versions.to_vec();
        async move {
            let r = facts::gather(t.as_ref(), &query)
                .await
                .map_err(anyhow::Error::from);
            (h.name.clone(), r)
        }
    }))
    .buffered(concurrency.max(1))
    .collect()
    .await;
    let mut facts = BTreeMap::new();
    let mut failures = Vec::new();
    for (name, r) in results {
        match r {
            Ok(f) => {
                facts.insert(name, f);
            }
            Err(e) => failures.push(format!("{name}: {e:#}")),
        }
    }
    if !failures.is_empty() {
        bail!(
            "failed to read the state of every host, so nothing was changed:\n{}",
            failures.join("\n")
        );
    }
    Ok(facts)
}

/// Plans and runs `up` for an inventory loaded by a caller that holds the state's `up` lock
/// (`up` itself, and each roll of `certs rotate-ca`); `renew` as for [`prepare`]. Prints the
/// summaries, asks before a disruptive plan unless `opts.yes`, stops between steps on Ctrl-C.
///
/// Two rounds when Nodes register during the first: their pod network (CNI configuration,
/// routes) and the control-plane Nodes' labels need the pod CIDRs the controller-manager gives
/// them at registration, so once the first plan ran, the facts are read again and what they now
/// allow is planned and run (nothing else is left by then). `hactl plan` says so.
pub async fn apply(
    inv: Inventory,
    state: StateView,
    opts: &Options,
    renew: &[String],
    gate: &mut dyn Gate,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    let prepared = prepare(inv, state, &opts.connect, renew, gate).await?;
    let state = StateDir::open(&prepared.state.path)?;
    if let Some(path) = write_admin_kubeconfig(&prepared.inv, &state, &prepared.pki)? {
        tracing::info!("admin kubeconfig: {}", path.display());
    }
    if let Some(remote) = &prepared.inv.backup.remote {
        authorize_backup_remote(&prepared, remote).await?;
    }
    if prepared.plan.is_empty() {
        // Nothing to roll; the binding is checked anyway (someone may have deleted it).
        if let Err(e) = ensure_rbac(&prepared).await {
            tracing::warn!("{e:#}");
        }
        member_history::record(&prepared, &state, false).await;
        println!("no changes");
        return Ok(crate::exit::OK);
    }
    // On a running cluster the binding goes in before the roll hands the apiservers a kubelet
    // client certificate without system:masters; on a fresh one no apiserver answers yet.
    if let Err(e) = ensure_rbac(&prepared).await {
        tracing::debug!("before the run: {e:#}");
    }
    eprint!("{}", versions_summary(&prepared));
    eprint!("{}", plan_summary(&prepared.plan));
    if prepared.plan.is_disruptive() && !opts.yes {
        confirm("this plan restarts running etcd members or control-plane components one at a time")?;
    }
    exec::run::stop_between_steps_on_ctrl_c();
    let mut report = run_prepared(&prepared).await?;
    member_history::record(&prepared, &state, true).await;
    ensure_rbac(&prepared).await.context(
        "hactl up changed the hosts but could not create the kubelet client's \
         ClusterRoleBinding; run `hactl up` again once an apiserver answers",
    )?;
    if !prepared.pending_nodes.is_empty() {
        // Second round: the Nodes registered during the first have their pod CIDRs now. The
        // lock is held and the identity was checked in the first round: no gate.
        eprintln!(
            "up: the Nodes of {} registered; planning their pod network from the pod CIDRs they got",
            prepared.pending_nodes.join(", ")
        );
        let Prepared { inv, state: view, .. } = prepared;
        let again = prepare(inv, view, &opts.connect, &[], &mut NoGate).await?;
        if !again.plan.is_empty() {
            eprint!("{}", plan_summary(&again.plan));
            let more = match run_prepared(&again).await {
                Ok(more) => more,
                // The first round changed the hosts: a failure now is after changes (4), even
                // where the second round itself changed nothing before it failed.
                Err(e) if crate::exit::exit_code_of(&e) == crate::exit::FAILED && !report.no_changes() => {
                    return Err(crate::exit::refuse(
                        crate::exit::FAILED_AFTER_CHANGES,
                        format!("{e:#} (its first round had changed the hosts)"),
                    ))
                }
                Err(e) => return Err(e),
            };
            report.commands_run += more.commands_run;
            report.files_written += more.files_written;
            report.files_unchanged += more.files_unchanged;
            report.changes_tried += more.changes_tried;
        }
        if !again.pending_nodes.is_empty() {
            return Err(crate::exit::refuse(
                crate::exit::FAILED_AFTER_CHANGES,
                format!(
                    "hactl up changed the hosts but the Nodes of {} have no pod CIDR yet (their \
                     kubelets registered, the controller-manager allocated none): check `hactl \
                     status` and the controller-manager's log, then run `hactl up` again",
                    again.pending_nodes.join(", ")
                ),
            ));
        }
    }
    println!(
        "up: done in {:.1}s: {} commands run, {} files written, {} unchanged",
        started.elapsed().as_secs_f64(),
        report.commands_run,
        report.files_written,
        report.files_unchanged
    );
    Ok(crate::exit::OK)
}

/// Runs a prepared plan live, its API requests ([`crate::plan::Step::Api`]) sent with the admin
/// credential through the first control-plane apiserver that answers.
async fn run_prepared(p: &Prepared) -> anyhow::Result<exec::Report> {
    let api: exec::run::Api = Some(Arc::new(AdminApi {
        inv: p.inv.clone(),
        transports: p.transports.clone(),
        pki_dir: p.state.path.join("pki"),
        client: tokio::sync::OnceCell::new(),
    }));
    match exec::run::run_with_api(&p.plan, Mode::Live, &p.transports, api).await {
        Ok(report) => Ok(report),
        Err(failed) => {
            eprint!("{}", failed.details());
            Err(stopped(failed))
        }
    }
}

/// The error of a live run that stopped at a failed step: exit 4 (`FAILED_AFTER_CHANGES`) once
/// a command ran or a file was written, or the failed step itself was one that changes (it may
/// have run in part): the hosts are part-way, and running `up` again continues, since every step
/// checks what is there. Exit 1 only when the run failed in a read-only step (a check, a wait)
/// before anything changed, as every day-two operation does (`operations::manager::exit_code`).
fn stopped(failed: exec::run::PhaseFailed) -> anyhow::Error {
    if failed.report.no_changes() {
        return anyhow::Error::new(failed).context(
            "hactl up stopped before changing anything (a check failed); fix the cause and run `hactl up` again",
        );
    }
    let part_way = if failed.report.commands_run == 0 && failed.report.files_written == 0 {
        "; the failed step may have changed something before it failed"
    } else {
        ""
    };
    crate::exit::refuse(
        crate::exit::FAILED_AFTER_CHANGES,
        format!(
            "{failed}: hactl up stopped after changing the hosts ({} commands run, {} files written{part_way}); \
             nothing after the failed step ran; fix the cause and run `hactl up` again to continue \
             (every step checks what is there)",
            failed.report.commands_run, failed.report.files_written
        ),
    )
}

/// The plan's API requests, sent with the admin certificate through the first control-plane
/// apiserver that answers `/readyz` (reached when the first request comes).
struct AdminApi {
    inv: Inventory,
    transports: Transports,
    pki_dir: std::path::PathBuf,
    client: tokio::sync::OnceCell<crate::kubernetes::api::ApiClient>,
}

#[async_trait::async_trait]
impl crate::plan::ApiSender for AdminApi {
    async fn send(&self, request: &crate::plan::ApiRequest) -> anyhow::Result<()> {
        let api = self
            .client
            .get_or_try_init(|| async {
                crate::kubernetes::rbac::first_ready(&self.inv, &self.transports, &self.pki_dir)
                    .await
                    .map(|(_, api)| api)
                    .map_err(|e| anyhow::anyhow!("no apiserver answered /readyz: {e}"))
            })
            .await?;
        let method = reqwest::Method::from_bytes(request.method.as_bytes())?;
        let (code, body) = api
            .request(
                method,
                &request.path,
                &request.content_type,
                request.body.as_ref(),
            )
            .await?;
        if !(200..300).contains(&code) {
            return Err(crate::kubernetes::api::status_error(request.to_string(), code, &body).into());
        }
        Ok(())
    }
}

/// Creates the ClusterRoleBinding of the apiserver's kubelet client when it is missing
/// ([`crate::kubernetes::rbac`]). Nothing to do without a `kubernetes` section.
async fn ensure_rbac(p: &Prepared) -> anyhow::Result<()> {
    use crate::kubernetes::rbac;
    if p.inv.kubernetes.is_none() {
        return Ok(());
    }
    let (host, ensured) =
        rbac::ensure_through_first_ready(&p.inv, &p.transports, &p.state.path.join("pki")).await?;
    if ensured == rbac::Ensured::Created {
        tracing::info!(
            "{host}: created ClusterRoleBinding {} (group {} -> ClusterRole {})",
            rbac::KUBELET_CLIENT_BINDING,
            rbac::KUBELET_CLIENT_GROUP,
            rbac::KUBELET_API_ROLE
        );
    }
    Ok(())
}

/// `spec.backup.remote`: the push key authorized on the remote (as its user) and the directory
/// there; says so when it changed anything.
async fn authorize_backup_remote(
    p: &Prepared,
    remote: &crate::inventory::BackupRemote,
) -> anyhow::Result<()> {
    let (Some(t), Some(files)) = (
        p.transports.get(crate::inventory::REMOTE_HOST_NAME),
        p.backup_remote.as_ref(),
    ) else {
        return Ok(());
    };
    let out = t
        .run(&crate::backup_remote::authorize_command(
            remote,
            &files.key.public_line,
        ))
        .await
        .with_context(|| format!("failed to authorize the push key on {}", remote.describe()))?;
    if !out.success() {
        bail!(
            "failed to authorize the push key on {}: {}",
            remote.describe(),
            out.stderr_str().trim()
        );
    }
    if out.stdout_str().contains("changed") {
        println!(
            "backup remote {}: push key authorized, directory ready",
            remote.describe()
        );
    }
    Ok(())
}

/// The etcd version installed on each etcd host before this run (`-` where none is), and the
/// version each running member reports beside the declared one.
pub fn versions_summary(p: &Prepared) -> String {
    let mut by_version: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for h in p.inv.with_role(Role::Etcd) {
        let v = p
            .facts
            .get(&h.name)
            .and_then(|f| f.etcd_version.as_deref())
            .map(|v| v.trim_start_matches("etcd Version: ").to_string())
            .unwrap_or_else(|| "-".into());
        by_version.entry(v).or_default().push(&h.name);
    }
    let parts: Vec<String> = by_version
        .iter()
        .map(|(v, hosts)| format!("{v} on {}", hosts.join(", ")))
        .collect();
    let mut running: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for h in p.inv.with_role(Role::Etcd) {
        if let Some(s) = p.facts.get(&h.name).and_then(|f| f.etcd_status.as_ref()) {
            running.entry(s.version.clone()).or_default().push(&h.name);
        }
    }
    let running: Vec<String> = running
        .iter()
        .map(|(v, hosts)| format!("{v} on {}", hosts.join(", ")))
        .collect();
    let target = p
        .inv
        .etcd
        .version
        .as_ref()
        .map(|v| format!(" (etcd.version {v})"))
        .unwrap_or_default();
    let mut out = format!("installed etcd: {}\n", parts.join("; "));
    if !running.is_empty() {
        out.push_str(&format!("running etcd: {}{target}\n", running.join("; ")));
    }
    out
}

/// One line per phase: its title and the hosts it touches.
pub fn plan_summary(plan: &Plan) -> String {
    let mut out = String::from("plan:\n");
    for p in &plan.phases {
        let hosts: Vec<&str> = p.hosts.iter().map(|h| h.host.as_str()).collect();
        let mut seen = Vec::new();
        for h in hosts {
            if !seen.contains(&h) {
                seen.push(h);
            }
        }
        out.push_str(&format!("  {} ({})\n", p.title, seen.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::run::{PhaseFailed, Report};

    fn failed(report: Report) -> PhaseFailed {
        PhaseFailed {
            phase: "Start etcd".into(),
            hosts: vec![("cp2".into(), anyhow::anyhow!("etcd did not start"))],
            report,
        }
    }

    #[test]
    fn a_run_that_stopped_after_changes_exits_4_and_one_that_changed_nothing_exits_1() {
        let changed = stopped(failed(Report {
            commands_run: 3,
            files_written: 2,
            changes_tried: 2,
            ..Report::default()
        }));
        assert_eq!(
            crate::exit::exit_code_of(&changed),
            crate::exit::FAILED_AFTER_CHANGES
        );
        let text = format!("{changed:#}");
        assert!(text.contains("phase \"Start etcd\" failed on cp2"), "{text}");
        assert!(text.contains("3 commands run, 2 files written"), "{text}");
        assert!(text.contains("run `hactl up` again"), "{text}");

        let untouched = stopped(failed(Report {
            files_unchanged: 4,
            waits: 1,
            ..Report::default()
        }));
        assert_eq!(crate::exit::exit_code_of(&untouched), crate::exit::FAILED);
        assert!(format!("{untouched:#}").contains("stopped before changing anything"));

        // The first changing step failed: it may have run in part, so the hosts may have changed.
        let first = stopped(failed(Report {
            files_unchanged: 4,
            changes_tried: 1,
            ..Report::default()
        }));
        assert_eq!(
            crate::exit::exit_code_of(&first),
            crate::exit::FAILED_AFTER_CHANGES
        );
        assert!(format!("{first:#}").contains("the failed step may have changed something"));
    }
}
