//! Phases: each turns the inventory and the gathered facts into steps for its hosts.
//!
//! Invariants: nothing here opens a connection or touches a file (what a phase needs to know
//! about a host comes from `Facts`); an upload or command is planned only when the facts show it
//! is needed, so a converged cluster plans nothing and `hactl plan` prints `no changes`.

pub mod configure_etcd;
pub mod configure_kubernetes;
pub mod configure_load_balancer;
pub mod etcd_files;
pub mod install_etcd;
pub mod install_kubernetes;
pub mod install_load_balancer;
pub mod join_etcd;
pub mod load_balancer;
pub mod query;
pub mod replace_control_plane;
pub mod roll_apiservers;
pub mod roll_controllers;
pub mod roll_etcd;
pub mod schedule_backups;
pub mod start_etcd;
pub mod start_kubernetes;

pub use query::{member_query_for, query_for};

use std::collections::{BTreeMap, BTreeSet};

use crate::binaries::LocalBinaries;
use crate::etcd::MemberList;
use crate::facts::HostFacts;
use crate::inventory::{Host, Inventory, Role};
use crate::pki::Pki;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, Step, Upload};

/// Everything phases read.
pub struct Ctx<'a> {
    pub inv: &'a Inventory,
    pub pki: &'a Pki,
    pub facts: &'a BTreeMap<String, HostFacts>,
    pub etcd: &'a EtcdView,
    /// Release or bundle binaries, read on the operator machine (None for packages).
    pub binaries: Option<&'a LocalBinaries>,
    /// Kubernetes binaries and the encryption key (None without a kubernetes section).
    pub kubernetes: Option<&'a crate::kubernetes::KubernetesInputs>,
    /// keepalived's VRRP password, from the state directory (None when there is no load balancer).
    pub vrrp_password: Option<&'a str>,
}

impl Ctx<'_> {
    pub fn facts(&self, host: &Host) -> &HostFacts {
        static EMPTY: std::sync::OnceLock<HostFacts> = std::sync::OnceLock::new();
        self.facts
            .get(&host.name)
            .unwrap_or_else(|| EMPTY.get_or_init(HostFacts::default))
    }
}

/// A phase that cannot be planned from what the hosts reported.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("etcd member {host} is in the cluster but its data dir {data_dir} holds no data: run `hactl replace {host} --reuse-host` to re-add it")]
    MemberLostData { host: String, data_dir: String },
    #[error("no etcd member is running, so new members ({hosts}) cannot be joined: start the existing members first (`hactl up` starts stopped members whose data is intact) and run again")]
    NoRunningMember { hosts: String },
    #[error("etcd hosts disagree about the cluster: {0}; run `hactl status` and resolve it before changing membership")]
    SplitView(String),
    #[error(transparent)]
    Render(#[from] crate::render::RenderError),
    #[error(transparent)]
    Kubernetes(#[from] crate::kubernetes::KubernetesPlanError),
    #[error("{host} has no interface with address {address}, so keepalived cannot be told where to hold the VIP: set hosts[].interface for {host} in the inventory")]
    NoInterface { host: String, address: String },
    #[error("no VRRP password was loaded for the load balancers (a bug in hactl)")]
    NoVrrpPassword,
}

/// One group of steps in a bring-up.
pub trait Phase {
    fn title(&self) -> &'static str;
    /// The hosts this phase acts on, in inventory order.
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host>;
    fn parallelism(&self) -> Parallelism {
        Parallelism::All
    }
    /// Whether its steps restart or stop something that serves.
    fn disruptive(&self) -> bool {
        false
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError>;
    /// The planned phase; phases whose steps run on other hosts than their subject override it.
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        Ok(vec![per_host(self, ctx)?])
    }
}

/// The usual shape of a phase: its own steps on each of its hosts, in inventory order.
/// Phases that override [`Phase::plan`] to add steps around it start from this.
pub fn per_host<P: Phase + ?Sized>(phase: &P, ctx: &Ctx<'_>) -> Result<PlannedPhase, PlanError> {
    let mut hosts = Vec::new();
    for host in phase.hosts(ctx.inv) {
        hosts.push(HostSteps {
            host: host.name.clone(),
            sudo: host.ssh.sudo,
            steps: phase.steps(host, ctx)?,
        });
    }
    Ok(PlannedPhase {
        title: phase.title().to_string(),
        parallelism: phase.parallelism(),
        disruptive: phase.disruptive(),
        hosts,
    })
}

/// Builds the plan of `phases` in order; empty phases are dropped.
pub fn build(phases: &[Box<dyn Phase>], ctx: &Ctx<'_>) -> Result<Plan, PlanError> {
    let mut plan = Plan::default();
    for phase in phases {
        for planned in phase.plan(ctx)? {
            plan.push(planned);
        }
    }
    Ok(plan)
}

/// The Debian packages hactl installs, with apt-get, as one step: service starts blocked
/// (policy-rc.d) so no package starts a daemon on Debian's defaults, apt's lock waited for (a
/// fresh VM may be running apt itself), and the package lists fetched first when the host has
/// none yet (a cloud image ships without them). Fixed text for fixed packages, so a dry-run
/// prints what a run sends.
pub fn apt_install(packages: &[&str]) -> crate::plan::RemoteCommand {
    let install = format!(
        "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q {}",
        packages.join(" ")
    );
    crate::plan::RemoteCommand::script(format!(
        "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
&& {{ {install} || {{ apt-get -o DPkg::Lock::Timeout=300 update -q && {install}; }}; }}; rc=$?; rm -f /usr/sbin/policy-rc.d; exit $rc"
    ))
    .with_timeout(std::time::Duration::from_secs(900))
}

/// `curl`, which hactl's health probes run on every host it manages (etcd's metrics and health
/// endpoints, the apiservers' /readyz, HAProxy's admin socket): in `packages` when the host lacks it.
pub fn with_curl<'a>(facts: &HostFacts, mut packages: Vec<&'a str>) -> Vec<&'a str> {
    if !facts.binaries.contains_key("curl") {
        packages.push("curl");
    }
    packages
}

/// True when the host's copy of `upload.path` differs in content, mode or owner.
pub fn differs(facts: &HostFacts, upload: &Upload) -> bool {
    match facts.files.get(&upload.path) {
        Some(f) => {
            f.sha256 != upload.sha256
                || f.mode != upload.mode
                || f.owner != upload.owner
                || f.group != upload.group
        }
        None => true,
    }
}

/// The steps that bring `uploads` up to date on a host.
pub fn uploads_needed(facts: &HostFacts, uploads: Vec<Upload>) -> Vec<Step> {
    uploads
        .into_iter()
        .filter(|u| differs(facts, u))
        .map(Step::Upload)
        .collect()
}

/// What the facts say about the etcd cluster as a whole.
#[derive(Debug, Clone, Default)]
pub struct EtcdView {
    /// Hosts whose data dir holds a member.
    pub has_data: BTreeSet<String>,
    /// Hosts whose etcd unit is active.
    pub running: BTreeSet<String>,
    /// The member list seen by the first running member (inventory order).
    pub members: Option<MemberList>,
    /// The host that saw `members`: it runs membership commands.
    pub seed: Option<String>,
    /// Inventory etcd hosts to add as learners, in inventory order.
    pub joiners: Vec<String>,
    /// The current lineage's token when a recover changed it (`<state>/etcd-token`).
    pub token: Option<String>,
}

impl EtcdView {
    /// No etcd host holds data: the whole cluster bootstraps.
    pub fn is_fresh(&self) -> bool {
        self.has_data.is_empty()
    }

    pub fn from_facts(inv: &Inventory, facts: &BTreeMap<String, HostFacts>) -> Result<EtcdView, PlanError> {
        let mut view = EtcdView::default();
        let etcd_hosts = inv.with_role(Role::Etcd);
        for host in &etcd_hosts {
            let Some(f) = facts.get(&host.name) else { continue };
            if f.data_dir_has_member {
                view.has_data.insert(host.name.clone());
            }
            if f.units
                .get(crate::etcd::UNIT)
                .is_some_and(|u| u.active == "active")
            {
                view.running.insert(host.name.clone());
            }
            if view.members.is_none() {
                if let Some(m) = &f.members {
                    view.members = Some(m.clone());
                    view.seed = Some(host.name.clone());
                }
            }
        }
        // Every running member must report the same cluster.
        let ids: BTreeSet<u64> = etcd_hosts
            .iter()
            .filter_map(|h| facts.get(&h.name)?.members.as_ref().map(|m| m.header.cluster_id))
            .collect();
        if ids.len() > 1 {
            let ids: Vec<String> = ids.iter().map(|i| format!("{i:x}")).collect();
            return Err(PlanError::SplitView(format!(
                "members report cluster IDs {}",
                ids.join(", ")
            )));
        }
        if view.is_fresh() {
            return Ok(view);
        }
        let mut waiting = Vec::new();
        for host in &etcd_hosts {
            if view.has_data.contains(&host.name) {
                continue;
            }
            let url = crate::etcd::peer_url(inv, host);
            match &view.members {
                None => waiting.push(host.name.clone()),
                Some(list) => match list.by_peer_url(&url) {
                    // An unstarted learner is a join this tool began: finish it.
                    None => view.joiners.push(host.name.clone()),
                    Some(m) if m.is_learner && !m.is_started() => view.joiners.push(host.name.clone()),
                    Some(_) => {
                        return Err(PlanError::MemberLostData {
                            host: host.name.clone(),
                            data_dir: inv.etcd.data_dir.clone(),
                        })
                    }
                },
            }
        }
        if !waiting.is_empty() {
            return Err(PlanError::NoRunningMember {
                hosts: waiting.join(", "),
            });
        }
        Ok(view)
    }
}
