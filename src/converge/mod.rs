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
use crate::phases::{self, configure_etcd, install_etcd, join_etcd, roll_etcd, schedule_backups, start_etcd};
use crate::phases::{
    configure_kubernetes, install_kubernetes, roll_apiservers, roll_controllers, start_kubernetes,
};
use crate::phases::{configure_load_balancer, install_load_balancer};
use crate::phases::{Ctx, EtcdView, Phase};
use crate::pki::{self, Pki};
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, Step};
use crate::state::StateDir;

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
        // Hosts left without the etcd role (a member replaced elsewhere) start no etcd at boot.
        Box::new(crate::phases::retire_etcd::RetireEtcd),
        // Load balancers (before the Kubernetes roll, which drains their backends).
        Box::new(install_load_balancer::InstallLoadBalancer),
        Box::new(configure_load_balancer::ConfigureLoadBalancer),
        // The Kubernetes control plane (control-plane hosts, when the inventory has a kubernetes section).
        Box::new(install_kubernetes::InstallKubernetes),
        Box::new(configure_kubernetes::ConfigureKubernetes),
        Box::new(start_kubernetes::StartKubernetes),
        Box::new(roll_apiservers::RollApiservers),
        Box::new(roll_controllers::RollControllers),
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
    pub state: StateDir,
    pub pki: Pki,
    pub transports: Transports,
    pub facts: BTreeMap<String, HostFacts>,
    pub view: EtcdView,
    pub binaries: Option<LocalBinaries>,
    pub kubernetes: Option<crate::kubernetes::KubernetesInputs>,
    /// `spec.backup.remote`'s push key and the remote's host key, once the remote was reached.
    pub backup_remote: Option<crate::backup_remote::HostFiles>,
    pub plan: Plan,
}

/// Connects to every host, gathers facts and builds the plan, re-issuing the leaves named in
/// `renew` first (`hactl certs renew`: the plan then uploads them and restarts what reads them,
/// as for any changed certificate). Changes nothing on hosts.
pub async fn prepare(
    inv: Inventory,
    state: StateDir,
    connect: &ConnectSettings,
    renew: &[String],
) -> anyhow::Result<Prepared> {
    prepare_with(inv, state, connect, renew, |t| t).await
}

/// [`prepare`], with every host's transport passed through `wrap` first (tests wrap it in a
/// transport that fails on any mutation, to prove that planning changes nothing).
pub async fn prepare_with(
    inv: Inventory,
    state: StateDir,
    connect: &ConnectSettings,
    renew: &[String],
    wrap: impl Fn(Arc<dyn Transport>) -> Arc<dyn Transport>,
) -> anyhow::Result<Prepared> {
    crate::kubernetes::inputs::refuse_bad_bundle(&inv)?;
    let pki = pki::ensure_renewing(
        &state.path.join("pki"),
        &inv,
        time::OffsetDateTime::now_utc(),
        renew,
    )
    .context("failed to prepare the cluster's certificates")?;
    for change in pki.report.iter().filter(|c| c.is_change()) {
        tracing::info!("pki: {change}");
    }
    for warning in &pki.warnings {
        tracing::warn!("pki: {warning}");
    }
    let mut hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    // Hosts without roles (a replaced member's old host) are asked too, best effort: only for a
    // leftover etcd unit to disable (phases/retire_etcd.rs). One that does not answer (powered
    // off, confirmed dead) is left out with a warning, never a reason to stop.
    let spare: Vec<&Host> = inv.hosts.iter().filter(|h| h.roles.is_empty()).collect();
    // One connect for all (the sessions share the known_hosts file).
    let all: Vec<&Host> = hosts.iter().chain(spare.iter()).copied().collect();
    let mut reached = crate::exec::connect::reach(&state, &all, connect).await;
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
    let transports: Transports = reached.require_all()?;
    let mut transports: Transports = transports.into_iter().map(|(name, t)| (name, wrap(t))).collect();
    let mut backup_remote = None;
    if let Some(remote) = &inv.backup.remote {
        // spec.backup.remote: the push key, and the remote's host key pinned by reaching it.
        let key = crate::backup_remote::ensure_key(&state, &inv.name)?;
        let t = crate::exec::connect::reach(&state, &[&remote.host()], connect)
            .await
            .require_all()
            .with_context(|| {
                format!(
                    "cannot reach backup.remote {}: fix spec.backup.remote or the remote host",
                    remote.describe()
                )
            })?;
        for (name, t) in t {
            transports.insert(name, wrap(t));
        }
        backup_remote = Some(crate::backup_remote::HostFiles {
            key,
            known_hosts: crate::backup_remote::known_hosts_lines(&state, remote),
        });
    }
    let facts = gather_facts(&inv, &hosts, &transports, connect.concurrency).await?;
    let mut view = match EtcdView::from_facts(&inv, &facts) {
        Err(e) if e.is_refusal() => return Err(crate::exit::refuse(crate::exit::REFUSED, e.to_string())),
        other => other?,
    };
    view.token = fs_err::read_to_string(state.file(crate::etcd::TOKEN_FILE))
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let binaries = binaries::ensure(
        &inv.etcd.source,
        &state.path.join("downloads"),
        &["etcd", "etcdctl"],
        &["etcdutl"],
    )
    .await
    .context("failed to prepare the etcd binaries")?;
    // The version the uploaded etcd will run, compared with etcd.version before any restart.
    view.binary_version = binaries
        .as_ref()
        .and_then(|b| binaries::reported_version(b, "etcd", &state.path.join("downloads").join("run")))
        .and_then(|v| crate::etcd::upgrade::parse(&v));
    let kubernetes = crate::kubernetes::inputs::prepare(&inv, &state).await?;
    let vrrp_password = if inv.with_role(Role::LoadBalancer).is_empty() {
        None
    } else {
        Some(crate::load_balancer::vrrp_password(&state).context("failed to prepare the VRRP password")?)
    };
    let ctx = Ctx::new(&inv, &pki, &facts)
        .with_etcd(&view)
        .with_binaries(binaries.as_ref())
        .with_kubernetes(kubernetes.as_ref())
        .with_vrrp_password(vrrp_password.as_deref())
        .with_backup_remote(backup_remote.as_ref());
    let mut plan = match phases::build(&phases(), &ctx) {
        Err(e) if e.is_refusal() => {
            return Err(anyhow::Error::new(crate::exit::Refusal {
                code: crate::exit::REFUSED,
                message: e.to_string(),
            }))
        }
        other => other?,
    };
    // Raise the revision high-water mark from what the members answered. etcd 3.5 leaves the
    // revision out of a member list's header, so each member's own `endpoint status` counts
    // too: a revision a member has applied was committed by a quorum.
    if let Some(rev) = facts
        .values()
        .flat_map(|f| {
            let listed = f.members.as_ref().map(|m| m.header.revision);
            let own = f.etcd_status.as_ref().map(|s| s.header.revision);
            listed.into_iter().chain(own)
        })
        .max()
    {
        if rev > 0 {
            let cluster_id = view
                .members
                .as_ref()
                .map(|m| format!("{:x}", m.header.cluster_id))
                .unwrap_or_default();
            if let Err(e) = crate::hwm::record(&state, crate::hwm::Hwm::now(rev, &cluster_id, "up")) {
                tracing::warn!("could not record the high-water mark: {e}");
            }
        }
    }
    if !plan.is_empty() {
        plan.push(verify_phase(&inv));
    }
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
    })
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
    let results: Vec<(String, anyhow::Result<HostFacts>)> = futures::stream::iter(hosts.iter().map(|h| {
        let t = transports[&h.name].clone();
        let query = crate::phases::query_for(inv, h);
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
pub async fn apply(inv: Inventory, state: StateDir, opts: &Options, renew: &[String]) -> anyhow::Result<i32> {
    let started = Instant::now();
    let prepared = prepare(inv, state, &opts.connect, renew).await?;
    if let Some(path) = write_admin_kubeconfig(&prepared.inv, &prepared.state, &prepared.pki)? {
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
    match exec::run(&prepared.plan, Mode::Live, &prepared.transports).await {
        Ok(report) => {
            ensure_rbac(&prepared).await.context(
                "hactl up changed the hosts but could not create the kubelet client's \
                 ClusterRoleBinding; run `hactl up` again once an apiserver answers",
            )?;
            println!(
                "up: done in {:.1}s: {} commands run, {} files written, {} unchanged",
                started.elapsed().as_secs_f64(),
                report.commands_run,
                report.files_written,
                report.files_unchanged
            );
            Ok(crate::exit::OK)
        }
        Err(failed) => {
            eprint!("{}", failed.details());
            Err(anyhow::Error::new(failed).context("hactl up stopped; nothing after the failed step ran; fix the cause and run `hactl up` again to continue"))
        }
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
