//! Phases: each turns the inventory and the gathered facts into steps for its hosts.
//!
//! Invariants: nothing here opens a connection or touches a file (what a phase needs to know
//! about a host comes from `Facts`); an upload or command is planned only when the facts show it
//! is needed, so a converged cluster plans nothing and `hactl plan` prints `no changes`.

pub mod configure_etcd;
pub mod configure_kubernetes;
pub mod configure_load_balancer;
pub mod configure_nodes;
pub mod deploy_dns;
pub mod etcd_files;
pub mod fence_old_members;
pub mod install_etcd;
pub mod install_kubernetes;
pub mod install_load_balancer;
pub mod install_nodes;
pub mod join_etcd;
pub mod label_nodes;
pub mod load_balancer;
pub mod query;
pub mod replace_control_plane;
pub mod retire_etcd;
pub mod return_held_servers;
pub mod roll_apiservers;
pub mod roll_controllers;
pub mod roll_etcd;
pub mod schedule_backups;
pub mod start_etcd;
pub mod start_kubelets;
pub mod start_kubernetes;
pub mod start_nodes;
pub mod switch_mode;
#[cfg(test)]
pub(crate) mod test_inventory;

pub use query::{member_query_for, query_for};

use std::collections::{BTreeMap, BTreeSet};

use crate::binaries::LocalBinaries;
use crate::etcd::MemberList;
use crate::facts::HostFacts;
use crate::inventory::{Host, Inventory, Role};
use crate::pki::Pki;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, RemoteCommand, Step, Upload};

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
    /// The push key and the remote's host key for `spec.backup.remote`, once `up`/`plan` reached
    /// the remote (None otherwise).
    pub backup_remote: Option<&'a crate::backup_remote::HostFiles>,
    /// The cluster DNS objects as the API holds them (`kubernetes.dns`; None: not read).
    pub dns: Option<&'a crate::kubernetes::dns::DnsFacts>,
}

impl<'a> Ctx<'a> {
    /// A context that knows the inventory, the PKI and the facts, and nothing else: no etcd view
    /// (no member, nothing running), no binaries, no Kubernetes inputs, no VRRP password. A
    /// bring-up adds what it gathered with the `with_*` methods; a day-two operation that plans
    /// a few phases for its hosts adds only what those phases read.
    pub fn new(inv: &'a Inventory, pki: &'a Pki, facts: &'a BTreeMap<String, HostFacts>) -> Self {
        static NO_VIEW: std::sync::OnceLock<EtcdView> = std::sync::OnceLock::new();
        Ctx {
            inv,
            pki,
            facts,
            etcd: NO_VIEW.get_or_init(EtcdView::default),
            binaries: None,
            kubernetes: None,
            backup_remote: None,
            dns: None,
        }
    }

    /// [`Ctx::new`] without facts (nothing known about any host).
    pub fn without_facts(inv: &'a Inventory, pki: &'a Pki) -> Self {
        static NO_FACTS: BTreeMap<String, HostFacts> = BTreeMap::new();
        Ctx::new(inv, pki, &NO_FACTS)
    }

    pub fn with_etcd(self, etcd: &'a EtcdView) -> Self {
        Ctx { etcd, ..self }
    }

    pub fn with_binaries(self, binaries: Option<&'a LocalBinaries>) -> Self {
        Ctx { binaries, ..self }
    }

    pub fn with_kubernetes(self, kubernetes: Option<&'a crate::kubernetes::KubernetesInputs>) -> Self {
        Ctx { kubernetes, ..self }
    }

    pub fn with_backup_remote(self, backup_remote: Option<&'a crate::backup_remote::HostFiles>) -> Self {
        Ctx {
            backup_remote,
            ..self
        }
    }

    pub fn with_dns(self, dns: Option<&'a crate::kubernetes::dns::DnsFacts>) -> Self {
        Ctx { dns, ..self }
    }

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
    #[error("etcd member {name} ({id}, {peer_url}) is in the cluster but not an etcd host of the inventory: run `hactl remove {name}` to remove it quorum-safely (keep its host in hosts with `roles: []` so hactl can fence it, or add --confirm-dead when the machine is gone), or give the host back its etcd role")]
    MemberNotInInventory {
        name: String,
        id: String,
        peer_url: String,
    },
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
    #[error(transparent)]
    Dns(#[from] crate::kubernetes::dns::DnsRefusal),
    /// Boxed: the refusal carries versions and names, and every phase returns this error.
    #[error(transparent)]
    EtcdUpgrade(Box<crate::etcd::upgrade::UpgradeRefusal>),
    #[error(transparent)]
    BadEnvironment(#[from] crate::duration::EnvSecondsError),
}

impl From<crate::etcd::upgrade::UpgradeRefusal> for PlanError {
    fn from(r: crate::etcd::upgrade::UpgradeRefusal) -> Self {
        PlanError::EtcdUpgrade(Box::new(r))
    }
}

impl PlanError {
    /// A safety rule refused the plan (exit 2), as opposed to a plan that could not be built.
    pub fn is_refusal(&self) -> bool {
        match self {
            PlanError::Kubernetes(e) => e.is_refusal(),
            PlanError::EtcdUpgrade(_) | PlanError::MemberNotInInventory { .. } | PlanError::Dns(_) => true,
            _ => false,
        }
    }
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
    /// What the etcd binary from a bundle or release reports (`etcd --version`, run on the
    /// operator machine); `None` for packages or when it cannot run there.
    pub binary_version: Option<semver::Version>,
    /// Hosts the member history says were attested dead: fenced the moment they answer
    /// (`fence_old_members`).
    pub fence_due: BTreeSet<String>,
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
        if let Some(list) = &view.members {
            if let Some(m) = members_not_in_inventory(inv, list).into_iter().next() {
                return Err(PlanError::MemberNotInInventory {
                    name: if m.name.is_empty() {
                        crate::etcd::hex_id(m.id)
                    } else {
                        m.name.clone()
                    },
                    id: crate::etcd::hex_id(m.id),
                    peer_url: m.peer_urls.join(","),
                });
            }
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

/// Voting members whose peer URLs match no etcd host of the inventory: removed from the
/// inventory, so `up` refuses and names `hactl remove` (learners are a join's business).
pub fn members_not_in_inventory<'a>(
    inv: &Inventory,
    list: &'a crate::etcd::MemberList,
) -> Vec<&'a crate::etcd::Member> {
    let urls: Vec<String> = inv
        .with_role(Role::Etcd)
        .into_iter()
        .map(|h| crate::etcd::peer_url(inv, h))
        .collect();
    list.members
        .iter()
        .filter(|m| !m.is_learner && !m.peer_urls.iter().any(|u| urls.contains(u)))
        .collect()
}

/// Where Debian's invoke-rc.d asks whether a package may start its service.
pub const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// apt-get install with service starts blocked, so a package's own unit never starts with the
/// distribution's defaults. Arguments: the policy-rc.d path, then the packages.
///
/// An existing policy-rc.d is the host's (it may block or allow more than hactl would): it is
/// left alone and never removed. hactl's own (created with `set -C`, so never through a symlink
/// or over a file, and marked) is removed afterwards, also when an earlier run crashed before.
///
/// Without the packages' recommendations (`--no-install-recommends`): nothing hactl runs needs
/// one, and they cost time and surface. On bookworm, keepalived's alone (through GLib and
/// net-snmp) pulled in ten more packages, ipvsadm, ICU, libxml2, shared-mime-info (whose
/// trigger parses every MIME type) and xdg-user-dirs among them: on the Vagrant lab's emulated
/// VMs, installing HAProxy and keepalived took 67 s without them, 102-105 s with them. runc
/// recommends criu, iptables nftables (its CLI; iptables itself talks to the kernel through
/// libnftnl).
pub const APT_INSTALL: &str = r#"p=$1; shift
mark='# hactl: blocks service starts during apt-get install'
if grep -qxF "$mark" "$p" 2>/dev/null; then
  mine=yes
elif (set -C; printf '#!/bin/sh\n%s\nexit 101\n' "$mark" > "$p") 2>/dev/null; then
  chmod 755 "$p"; mine=yes
else
  echo "hactl: $p exists and is not hactl's: left as it is (it decides whether the packages' services start now)" >&2
  mine=
fi
# Waits for apt's lock (a fresh VM may be running apt itself); fetches the package lists first
# when the host has none yet (a cloud image ships without them).
i() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$@"; }
i "$@" || { apt-get -o DPkg::Lock::Timeout=300 update -q && i "$@"; }; rc=$?
[ -z "$mine" ] || rm -f "$p"
exit $rc"#;

/// [`APT_INSTALL`] for `packages`.
pub fn apt_install(packages: &[&str]) -> RemoteCommand {
    let mut argv = vec!["sh", "-c", APT_INSTALL, "hactl-apt-install", POLICY_RC_D];
    argv.extend_from_slice(packages);
    RemoteCommand::new(argv).with_timeout(std::time::Duration::from_secs(900))
}

/// Configs another party may have written before hactl took them over.
pub const KEPT_CONFIGS: &[&str] = &[
    crate::load_balancer::HAPROXY_CFG,
    crate::load_balancer::KEEPALIVED_CONF,
    crate::etcd::UNIT_PATH,
    crate::kubernetes::node::CONTAINERD_CONFIG,
];

/// Keeps the first version of a config hactl is about to overwrite as `<file>.hactl-orig`: only
/// when facts show the file exists without hactl's header (the distribution's or the operator's)
/// and the upload would change it. Never overwrites an earlier `.hactl-orig`.
pub fn keep_original(f: &HostFacts, upload: &Upload) -> Option<Step> {
    let kept = KEPT_CONFIGS.contains(&upload.path.as_str());
    (kept && f.foreign.contains(&upload.path) && differs(f, upload)).then(|| {
        Step::Run(RemoteCommand::new([
            "sh",
            "-c",
            r#"[ -e "$1.hactl-orig" ] || [ -L "$1.hactl-orig" ] || cp -p "$1" "$1.hactl-orig""#,
            "hactl-keep-original",
            upload.path.as_str(),
        ]))
    })
}

/// What starts a unit: `systemctl start`, and once more 5 s after a failed start, after
/// `systemctl reset-failed` (a unit with `Restart=always`, HAProxy's among them, may have used up
/// its start limit meanwhile, and systemd would refuse the second start for that alone). A start
/// that fails twice prints the unit's last journal lines before failing, so the error names the
/// cause.
///
/// Why once more: a start can fail for want of a resource for a moment (systemd's "failed because
/// of unavailable resources", seen once while a CI run had several labs booting, at the first
/// start of a controller-manager whose configuration was fine; and once HAProxy could not bind
/// its admin socket because `/run/haproxy` did not exist yet, cause not found), and `hactl up`
/// should not stop on that; a wrong flag or a missing file fails the second start as it failed
/// the first. Used by
/// `up`'s first start of the Kubernetes units, HAProxy and keepalived.
pub fn start_unit(unit: &str) -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        "systemctl start \"$1\" || { echo \"hactl: $1 did not start; trying once more in 5 s\" >&2; sleep 5; \
systemctl reset-failed \"$1\"; systemctl start \"$1\" || { journalctl -u \"$1\" -n 25 --no-pager -o cat >&2; exit 1; }; }",
        "hactl-start",
        unit,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs [`APT_INSTALL`] locally with `policy` as the policy-rc.d path and a fake `apt-get`
    /// that records what policy-rc.d held while it ran. Returns (exit code, what apt-get saw).
    fn run_apt(dir: &std::path::Path, policy: &std::path::Path) -> (i32, String) {
        let bin = dir.join("bin");
        fs_err::create_dir_all(&bin).unwrap();
        let seen = dir.join("seen");
        let fake = format!(
            "#!/bin/sh\nif [ -e '{p}' ]; then cat '{p}' > '{s}'; else echo none > '{s}'; fi\necho \"$*\" > '{a}'\n",
            p = policy.display(),
            s = seen.display(),
            a = dir.join("args").display()
        );
        fs_err::write(bin.join("apt-get"), fake).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs_err::set_permissions(bin.join("apt-get"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let out = std::process::Command::new("sh")
            .args(["-c", APT_INSTALL, "hactl-apt-install"])
            .arg(policy)
            .arg("etcd-server")
            .env("PATH", path)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            fs_err::read_to_string(&seen).unwrap_or_default(),
        )
    }

    #[test]
    fn service_starts_are_blocked_during_install_and_a_hosts_own_policy_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let policy = tmp.path().join("policy-rc.d");

        // None there: hactl's blocks starts while apt-get runs, and is gone afterwards.
        let (code, seen) = run_apt(tmp.path(), &policy);
        assert_eq!(code, 0);
        // The packages only, without what they recommend.
        let args = fs_err::read_to_string(tmp.path().join("args")).unwrap();
        assert_eq!(
            args.trim(),
            "-o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends etcd-server"
        );
        assert!(seen.contains("exit 101"), "{seen}");
        assert!(!policy.exists());

        // The host's own: apt-get runs under it, and it stays exactly as it was.
        fs_err::write(&policy, "#!/bin/sh\n# site policy\nexit 0\n").unwrap();
        let (code, seen) = run_apt(tmp.path(), &policy);
        assert_eq!(code, 0);
        assert_eq!(seen, "#!/bin/sh\n# site policy\nexit 0\n");
        assert_eq!(fs_err::read_to_string(&policy).unwrap(), seen);

        // hactl's own, left by a run that crashed: recognised and removed afterwards.
        fs_err::remove_file(&policy).unwrap();
        let _ = run_apt(tmp.path(), &policy);
        let leftover = fs_err::read_to_string(tmp.path().join("seen")).unwrap();
        fs_err::write(&policy, &leftover).unwrap();
        let (code, _) = run_apt(tmp.path(), &policy);
        assert_eq!(code, 0);
        assert!(!policy.exists(), "a crashed run's policy-rc.d was left behind");

        // A symlink there is never written through.
        let target = tmp.path().join("target");
        fs_err::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, &policy).unwrap();
        let _ = run_apt(tmp.path(), &policy);
        assert_eq!(fs_err::read_to_string(&target).unwrap(), "keep");
        assert!(policy.is_symlink());
    }

    #[test]
    fn a_foreign_config_is_kept_once_before_the_first_overwrite() {
        let up = Upload::new(
            crate::load_balancer::HAPROXY_CFG,
            0o644,
            "root",
            "root",
            b"new".to_vec(),
        );
        let mut f = HostFacts::default();
        f.files.insert(
            up.path.clone(),
            crate::facts::FileState {
                sha256: "0".repeat(64),
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
                mtime: 0,
            },
        );
        // hactl's own file (no `foreign` mark): nothing kept.
        assert!(keep_original(&f, &up).is_none());
        f.foreign.insert(up.path.clone());
        let Some(Step::Run(cmd)) = keep_original(&f, &up) else {
            panic!("no keep step for a foreign haproxy.cfg");
        };
        assert_eq!(
            cmd.argv.last().map(String::as_str),
            Some(crate::load_balancer::HAPROXY_CFG)
        );

        // Run it for real: the first copy is kept, a second run does not overwrite it.
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("haproxy.cfg");
        fs_err::write(&file, "distribution's").unwrap();
        let run = |file: &std::path::Path| {
            let mut argv = cmd.argv.clone();
            *argv.last_mut().unwrap() = file.display().to_string();
            assert!(std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .status()
                .unwrap()
                .success());
        };
        run(&file);
        fs_err::write(&file, "hactl's").unwrap();
        run(&file);
        let orig = tmp.path().join("haproxy.cfg.hactl-orig");
        assert_eq!(fs_err::read_to_string(orig).unwrap(), "distribution's");

        // Only the configs listed, and only when the upload changes the file.
        let key = Upload::new(
            "/etc/hactl/pki/etcd/server.key",
            0o600,
            "etcd",
            "etcd",
            b"k".to_vec(),
        );
        f.foreign.insert(key.path.clone());
        assert!(keep_original(&f, &key).is_none());
    }
}
