//! Reset's plan: what undoes `up` on the hosts, on every role: the Kubernetes control plane,
//! then etcd, then the load balancers (`hactl reset` runs it).
//!
//! Invariant: data dirs are moved aside (`<dir>.hactl-reset-<UTC time>`), never deleted, and
//! only under the data-directory rule ([`crate::etcd::data_dir`]), checked on every etcd host
//! before anything changes; so are the directories that hold snapshots on etcd hosts (the
//! scheduled backups, a recover's staged snapshot, scratch copies); secrets hactl placed (keys,
//! the backup push key, the encryption config, the VRRP password in `keepalived.conf`) are
//! removed, and so is the push key's line in the backup remote's authorized_keys; a config hactl
//! took over is given back from its `.hactl-orig`; distribution packages stay installed (other
//! software may use them).

use std::collections::BTreeMap;

use anyhow::Context as _;

use crate::etcd;
use crate::exec::connect::ConnectSettings;
use crate::exec::{self, Mode, Transports};
use crate::facts::HostFacts;
use crate::inventory::{Host, Inventory, Role};
use crate::phases::etcd_files::managed_paths;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, RemoteCommand, Step};

/// `rm -f --` of the `paths` the facts show present, or nothing.
fn remove_present(facts: &HostFacts, paths: impl IntoIterator<Item = String>) -> Option<Step> {
    let present: Vec<String> = paths
        .into_iter()
        .filter(|p| facts.files.contains_key(p))
        .collect();
    (!present.is_empty()).then(|| {
        let mut argv = vec!["rm".to_string(), "-f".to_string(), "--".to_string()];
        argv.extend(present);
        Step::Run(RemoteCommand::new(argv))
    })
}

/// `systemctl disable --now` of those `(unit, file)` pairs whose file (the unit file hactl
/// wrote, or the config that makes the service hactl's) the facts show, or whose unit runs, and
/// their fences lifted; or nothing.
fn stop_units(facts: &HostFacts, units: &[(String, Option<String>)]) -> Option<Step> {
    let known: Vec<&str> = units
        .iter()
        .filter(|(unit, file)| {
            file.as_ref().is_some_and(|f| facts.files.contains_key(f))
                || facts.units.get(unit).is_some_and(|u| u.active == "active")
        })
        .map(|(unit, _)| unit.as_str())
        .collect();
    (!known.is_empty()).then(|| {
        // A fence an interrupted recover, replace or maintenance left goes too: reset gives the
        // host back, and the data it guarded is moved aside.
        let script = format!(
            "systemctl disable --now \"$@\"\n{}",
            crate::fence::lift_all(&known)
        );
        let mut argv = vec!["sh", "-c", &script, "hactl-stop"];
        argv.extend(known.iter().copied());
        Step::Run(RemoteCommand::new(argv))
    })
}

/// A config hactl took over (one of [`crate::phases::KEPT_CONFIGS`]) and wrote: given back from
/// its `.hactl-orig` when one was kept, removed otherwise. One the operator wrote since (no
/// hactl header) is left alone.
fn give_back(facts: &HostFacts, path: &str) -> Option<Step> {
    (facts.files.contains_key(path) && !facts.foreign.contains(path))
        .then(|| Step::Run(give_back_command(path)))
}

/// Puts `path` back from its `.hactl-orig`, or removes it when hactl kept none.
pub fn give_back_command(path: &str) -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        r#"if [ -e "$1.hactl-orig" ]; then mv -f -- "$1.hactl-orig" "$1"; else rm -f -- "$1"; fi"#,
        "hactl-give-back",
        path,
    ])
}

/// The directories on an etcd host that may hold snapshots: the scheduled backups
/// (`spec.backup.dir`), a recover's work dirs (its staged snapshot) and the scratch directory
/// (copies `etcd snapshot verify` and `recover --auto` read). `reset` moves each aside when it
/// holds anything, so a cluster built there next neither finds them nor prunes them (the backup
/// timer keeps the newest `retention` files of a cluster's name).
pub fn snapshot_dirs(inv: &Inventory) -> Vec<String> {
    vec![
        inv.backup.dir.clone(),
        crate::etcd::RECOVER_WORK_DIR.to_string(),
        crate::snapshot::HOST_SCRATCH.to_string(),
    ]
}

/// Read-only: which of `dirs` exist as directories (not symlinks) holding anything, one
/// `dir <path>` line each.
pub fn snapshot_dirs_command(dirs: &[String]) -> RemoteCommand {
    const SCRIPT: &str = r#"for d in "$@"; do
  if [ -d "$d" ] && [ ! -L "$d" ] && [ -n "$(ls -A "$d" 2>/dev/null)" ]; then echo "dir $d"; fi
done"#;
    let mut argv = vec!["sh", "-c", SCRIPT, "hactl-reset-snapshot-dirs"];
    argv.extend(dirs.iter().map(String::as_str));
    RemoteCommand::read_only(argv)
}

/// Moves a directory of snapshots aside to `<dir>.hactl-reset-<stamp>` (never onto or into an
/// existing path); nothing when it is gone already.
pub fn move_snapshots_aside(dir: &str, stamp: &str) -> RemoteCommand {
    const SCRIPT: &str = r#"set -eu
if [ ! -d "$1" ] || [ -L "$1" ]; then exit 0; fi
mv -T --no-clobber -- "$1" "$2"
[ ! -e "$1" ] || { echo "cannot move $1 aside: $2 is in the way" >&2; exit 1; }"#;
    let aside = format!("{dir}.hactl-reset-{stamp}");
    RemoteCommand::new(["sh", "-c", SCRIPT, "hactl-reset-snapshots", dir, &aside])
}

/// The steps that undo `up` on one etcd host, from what its facts show is there (and
/// `snapshot_dirs`, the directories of [`snapshot_dirs`] that hold something there).
pub fn reset_steps(inv: &Inventory, facts: &HostFacts, snapshot_dirs: &[String], stamp: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    // Scheduled backups first, so no snapshot starts while etcd stops; the snapshots are moved
    // aside below, with the data dir.
    if facts.files.contains_key(crate::backup::TIMER_PATH)
        || facts
            .units
            .get(crate::backup::TIMER)
            .is_some_and(|u| u.active == "active")
    {
        steps.push(Step::Run(RemoteCommand::new([
            "systemctl",
            "disable",
            "--now",
            crate::backup::TIMER,
        ])));
    }
    steps.extend(stop_units(
        facts,
        &[(etcd::UNIT.to_string(), Some(etcd::UNIT_PATH.to_string()))],
    ));
    if facts.data_dir.is_some() {
        steps.push(Step::Run(move_aside(&inv.etcd.data_dir, stamp)));
    }
    // Snapshots are data: moved aside like the data dir, never deleted.
    for dir in snapshot_dirs {
        steps.push(Step::Run(move_snapshots_aside(dir, stamp)));
    }
    // hactl's unit goes back to the one it replaced, if it kept one.
    steps.extend(give_back(facts, etcd::UNIT_PATH));
    steps.extend(remove_present(
        facts,
        managed_paths(&inv.etcd.source)
            .into_iter()
            .filter(|p| p != etcd::UNIT_PATH)
            .chain(crate::backup::managed_paths()),
    ));
    if facts.files.contains_key(etcd::UNIT_PATH) || facts.files.contains_key(crate::backup::TIMER_PATH) {
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
    }
    steps
}

/// Moves the data dir aside under the data-directory rule: a directory holding files but no
/// etcd `member/` is refused (exit 2) and stays.
pub fn move_aside(data_dir: &str, stamp: &str) -> RemoteCommand {
    let script =
        crate::etcd::data_dir::guarded("move $1 aside", "hactl reset", r#"mv --no-clobber -- "$1" "$2""#);
    let aside = format!("{data_dir}.hactl-reset-{stamp}");
    RemoteCommand::new(["sh", "-c", &script, "hactl-reset-data-dir", data_dir, &aside])
}

/// Read-only: the data-directory rule for `data_dir`, before anything changes.
pub fn check_data_dir(data_dir: &str) -> RemoteCommand {
    let script = crate::etcd::data_dir::guarded("move $1 aside", "hactl reset", "true");
    RemoteCommand::read_only(["sh", "-c", &script, "hactl-check-data-dir", data_dir])
}

/// The steps that undo `up`'s Kubernetes layer on one control-plane host: the units stopped and
/// disabled (or the static-pod manifests removed, so the kubelet stops the pods), then every
/// file hactl placed: keys (the Kubernetes CA key, `sa.key`), the encryption config,
/// kubeconfigs, units and binaries. The audit log stays.
pub fn kubernetes_steps(inv: &Inventory, host: &Host, facts: &HostFacts) -> Vec<Step> {
    let Some(spec) = crate::kubernetes::spec_for(inv, host) else {
        return vec![];
    };
    let mut steps = Vec::new();
    let units: Vec<(String, Option<String>)> = crate::kubernetes::Component::ALL
        .iter()
        .map(|c| (c.unit(), Some(c.unit_path())))
        .collect();
    steps.extend(stop_units(facts, &units));
    let paths: Vec<String> = crate::kubernetes::managed_paths(spec)
        .into_iter()
        .filter(|p| p != crate::kubernetes::files::AUDIT_LOG)
        .collect();
    let had_units = units
        .iter()
        .any(|(_, f)| f.as_ref().is_some_and(|f| facts.files.contains_key(f)));
    steps.extend(remove_present(facts, paths));
    if had_units {
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
    }
    steps
}

/// Stops what runs pods, before containerd stops: the kubelet and kube-proxy are stopped by
/// [`stop_units`] first; then every task in containerd's `k8s.io` namespace is killed and deleted
/// (their shims outlive containerd otherwise), kube-proxy's iptables rules are removed
/// (`kube-proxy --cleanup`) and so are the kubelet's (the `KUBE-*` chains and the jumps to them
/// in every table), the pods' volume mounts under the kubelet's directory are unmounted,
/// and the pods' bridge is deleted.
pub const STOP_PODS: &str = r#"if command -v ctr >/dev/null 2>&1 && systemctl is-active -q containerd.service; then
  for t in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
  i=0
  while ctr -n k8s.io tasks ls 2>/dev/null | awk 'NR > 1 && $3 == "RUNNING"' | grep -q . && [ $i -lt 50 ]; do
    sleep 0.2; i=$((i + 1))
  done
  for t in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true; done
  for c in $(ctr -n k8s.io containers ls -q 2>/dev/null); do ctr -n k8s.io containers rm "$c" >/dev/null 2>&1 || true; done
fi
[ ! -x "$1" ] || "$1" --cleanup >/dev/null 2>&1 || true
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  for t in filter nat mangle; do
    "$ipt" -w -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | sed 's/^-A/-D/' | while read -r r; do eval "$ipt -w -t $t $r" || true; done
    chains=$("$ipt" -w -t "$t" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}')
    for c in $chains; do "$ipt" -w -t "$t" -F "$c" || true; done
    for c in $chains; do "$ipt" -w -t "$t" -X "$c" || true; done
  done
done
grep -o " $2/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
! ip link show "$3" >/dev/null 2>&1 || ip link delete "$3""#;

/// Moves each of the node components' data dirs that exists (the kubelet's, containerd's, the
/// CNI state and configuration) to `<dir>.<suffix>` and names it on stdout; never deletes one.
/// Arguments: the suffix (`hactl-reset-<time>`, `hactl-removed-<run>`), then the dirs.
pub const MOVE_NODE_DATA: &str = r#"suffix=$1; shift
for d in "$@"; do
  [ -e "$d" ] || continue
  mv --no-clobber -- "$d" "$d.$suffix"
  echo "moved aside: $d -> $d.$suffix"
done"#;

/// [`MOVE_NODE_DATA`] of every node data dir ([`crate::kubernetes::node::DATA_DIRS`]).
pub fn move_node_data(suffix: &str) -> RemoteCommand {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        MOVE_NODE_DATA.to_string(),
        "hactl-move-node-data".to_string(),
        suffix.to_string(),
    ];
    argv.extend(crate::kubernetes::node::DATA_DIRS.iter().map(|d| d.to_string()));
    RemoteCommand::new(argv)
}

/// Stops the kubelet and kube-proxy, the pods ([`STOP_PODS`]), containerd and the pod network
/// (whose unit removes the routes as it stops). Idempotent.
pub fn stop_node_components() -> RemoteCommand {
    use crate::kubernetes::node;
    let script = format!(
        "systemctl disable --now {kubelet} {proxy} 2>/dev/null || true\n{stop}\nsystemctl disable --now {containerd} {network} 2>/dev/null || true",
        kubelet = node::KUBELET_UNIT,
        proxy = node::KUBE_PROXY_UNIT,
        stop = STOP_PODS,
        containerd = node::CONTAINERD_UNIT,
        network = node::POD_NETWORK_UNIT,
    );
    RemoteCommand::new([
        "sh",
        "-c",
        &script,
        "hactl-stop-node",
        node::KUBE_PROXY_BIN,
        "/var/lib/kubelet",
        node::CNI_BRIDGE,
    ])
}

/// The steps that undo `up`'s node components on one control-plane or worker host: the kubelet
/// and kube-proxy stopped and disabled, every pod's container killed, kube-proxy's rules and the
/// pods' bridge removed, containerd stopped and disabled, the pod routes removed (the unit's stop
/// does it), the data dirs moved aside ([`MOVE_NODE_DATA`]), then every file hactl placed (keys,
/// kubeconfigs, units, binaries, the image archives; containerd's configuration given back from
/// its `.hactl-orig`). The packages stay installed.
pub fn node_steps(inv: &Inventory, host: &Host, facts: &HostFacts, stamp: &str) -> Vec<Step> {
    use crate::kubernetes::node;
    let Some(kube) = inv.kubernetes.as_ref().filter(|_| host.is_node()) else {
        return vec![];
    };
    let paths = node::managed_paths(kube);
    let ours = paths
        .iter()
        .any(|p| facts.files.contains_key(p) && p != crate::kubernetes::files::CA_CRT);
    let running = [node::KUBELET_UNIT, node::KUBE_PROXY_UNIT]
        .iter()
        .any(|u| facts.units.get(*u).is_some_and(|s| s.active == "active"));
    if !ours && !running {
        return vec![];
    }
    let mut steps = vec![Step::Run(stop_node_components())];
    steps.push(Step::Run(move_node_data(&format!("hactl-reset-{stamp}"))));
    steps.extend(give_back(facts, node::CONTAINERD_CONFIG));
    // The trust file stays where the control plane reads it too (its own reset removes it).
    let keep = |p: &String| {
        p == node::CONTAINERD_CONFIG
            || p == node::CNI_CONFLIST
            || (host.has(Role::ControlPlane) && p == crate::kubernetes::files::CA_CRT)
            || p.starts_with("/usr/lib/cni/")
    };
    steps.extend(remove_present(facts, paths.into_iter().filter(|p| !keep(p))));
    steps.push(Step::Run(remove_image_archives()));
    steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
    steps
}

/// Removes the image archives hactl uploaded to a node (copies of the operator's; containerd's
/// own store is data, moved aside with it).
pub fn remove_image_archives() -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        r#"[ ! -d "$1" ] || find "$1" -maxdepth 1 -type f -name '*.tar' -exec rm -f -- {} +"#,
        "hactl-remove-images",
        crate::kubernetes::node::IMAGE_DIR,
    ])
}

/// The steps that undo `up` on one load balancer: keepalived stopped first (the VIP leaves),
/// then HAProxy; `haproxy.cfg` and `keepalived.conf` (which holds the VRRP password) given back
/// or removed; hactl's scripts, sysctl file and the CA copy (and an old health-check key)
/// removed, and the notes of servers a cut `up` left out. The packages stay installed, disabled.
pub fn load_balancer_steps(inv: &Inventory, facts: &HostFacts) -> Vec<Step> {
    let lb = crate::load_balancer::KEEPALIVED_UNIT;
    let mut steps = Vec::new();
    let configs = [
        (
            lb.to_string(),
            Some(crate::load_balancer::KEEPALIVED_CONF.to_string()),
        ),
        (
            crate::load_balancer::HAPROXY_UNIT.to_string(),
            Some(crate::load_balancer::HAPROXY_CFG.to_string()),
        ),
    ];
    // Only what hactl configured: a config the operator wrote means the service is theirs.
    let ours: Vec<(String, Option<String>)> = configs
        .into_iter()
        .filter(|(_, f)| f.as_ref().is_some_and(|f| !facts.foreign.contains(f)))
        .collect();
    steps.extend(stop_units(facts, &ours));
    steps.extend(give_back(facts, crate::load_balancer::KEEPALIVED_CONF));
    steps.extend(give_back(facts, crate::load_balancer::HAPROXY_CFG));
    steps.extend(remove_present(
        facts,
        crate::phases::load_balancer::managed_paths(inv)
            .into_iter()
            .filter(|p| !crate::phases::KEPT_CONFIGS.contains(&p.as_str())),
    ));
    steps.extend(
        facts
            .held_servers
            .iter()
            .map(|h| Step::Run(crate::phases::load_balancer::release(&h.backend, &h.server))),
    );
    steps
}

fn phase(title: &str, hosts: Vec<HostSteps>) -> PlannedPhase {
    PlannedPhase {
        title: title.into(),
        parallelism: Parallelism::All,
        disruptive: true,
        hosts,
    }
}

fn host_steps(
    inv: &Inventory,
    role: Role,
    facts: &BTreeMap<String, HostFacts>,
    steps: impl Fn(&Host, &HostFacts) -> Vec<Step>,
) -> Vec<HostSteps> {
    inv.with_role(role)
        .into_iter()
        .map(|h| HostSteps {
            host: h.name.clone(),
            sudo: h.ssh.sudo,
            steps: facts.get(&h.name).map(|f| steps(h, f)).unwrap_or_default(),
        })
        .collect()
}

/// The title of reset's first phase.
pub const NODE_PHASE: &str = "Stop and remove the node components";
/// The titles of the phases after it, in order.
pub const CONTROL_PLANE_PHASE: &str = "Stop and remove the Kubernetes control plane";
pub const ETCD_PHASE: &str = "Stop and remove etcd";
pub const LOAD_BALANCER_PHASE: &str = "Stop and remove the load balancers";
pub const REVOKE_PHASE: &str = "Revoke the backup push key on the remote";

/// What reset reads besides the facts, before anything changes.
#[derive(Debug, Clone, Default)]
pub struct Leftovers {
    /// Per etcd host, the directories of [`snapshot_dirs`] that hold something.
    pub snapshot_dirs: BTreeMap<String, Vec<String>>,
    /// The push key's public line, when the backup remote answered and still authorizes it.
    pub authorized_on_remote: Option<String>,
    /// Why the backup remote could not be asked, when `spec.backup.remote` is set and a push
    /// key was made.
    pub remote_unreached: Option<String>,
}

/// Every role, in order: the node components (their pods stop while the API still answers),
/// the Kubernetes control plane (it writes to etcd), etcd, then the load balancers (the VIP stays
/// until nothing behind it serves); last, the push key's authorization on the backup remote.
pub fn plan(
    inv: &Inventory,
    facts: &BTreeMap<String, HostFacts>,
    leftovers: &Leftovers,
    stamp: &str,
) -> Plan {
    let mut plan = Plan::default();
    plan.push(phase(
        NODE_PHASE,
        inv.node_hosts()
            .into_iter()
            .map(|h| HostSteps {
                host: h.name.clone(),
                sudo: h.ssh.sudo,
                steps: facts
                    .get(&h.name)
                    .map(|f| node_steps(inv, h, f, stamp))
                    .unwrap_or_default(),
            })
            .collect(),
    ));
    plan.push(phase(
        CONTROL_PLANE_PHASE,
        host_steps(inv, Role::ControlPlane, facts, |h, f| kubernetes_steps(inv, h, f)),
    ));
    plan.push(phase(
        ETCD_PHASE,
        host_steps(inv, Role::Etcd, facts, |h, f| {
            let dirs = leftovers
                .snapshot_dirs
                .get(&h.name)
                .map(Vec::as_slice)
                .unwrap_or_default();
            reset_steps(inv, f, dirs, stamp)
        }),
    ));
    plan.push(phase(
        LOAD_BALANCER_PHASE,
        host_steps(inv, Role::LoadBalancer, facts, |_, f| load_balancer_steps(inv, f)),
    ));
    if let Some(line) = &leftovers.authorized_on_remote {
        plan.push(phase(
            REVOKE_PHASE,
            vec![HostSteps {
                host: crate::inventory::REMOTE_HOST_NAME.into(),
                sudo: false,
                steps: vec![Step::Run(crate::backup_remote::revoke_command(line))],
            }],
        ));
    }
    plan
}

/// Read-only, run before anything changes: the data-directory rule on every etcd host that has
/// a data dir.
pub fn check_plan(inv: &Inventory, facts: &BTreeMap<String, HostFacts>) -> Plan {
    let mut plan = Plan::default();
    plan.push(PlannedPhase {
        title: "Check the data dirs".into(),
        parallelism: Parallelism::All,
        disruptive: false,
        hosts: host_steps(inv, Role::Etcd, facts, |_, f| {
            if f.data_dir.is_some() {
                vec![Step::Run(check_data_dir(&inv.etcd.data_dir))]
            } else {
                vec![]
            }
        }),
    });
    plan
}

/// What `reset` runs, built from the hosts' facts.
pub struct Prepared {
    pub transports: Transports,
    /// The UTC time that names the moved-aside data dirs (`<dir>.hactl-reset-<stamp>`).
    pub stamp: String,
    /// Every role undone, in order ([`plan`]).
    pub plan: Plan,
    /// The data-directory rule, read-only ([`check_plan`]).
    pub check: Plan,
    /// What the plan was built from besides the facts.
    pub leftovers: Leftovers,
    /// The etcd hosts where the backup push key is (the plan removes it).
    pub push_key_hosts: Vec<String>,
}

/// The sessions reset runs on, and what the backup remote said.
pub struct Reached {
    /// Every host with a role, and the backup remote when the plan will need it.
    pub transports: Transports,
    /// What the backup remote said of the push key ([`Leftovers::authorized_on_remote`],
    /// [`Leftovers::remote_unreached`]).
    pub remote: Leftovers,
}

/// Connects to every host with a role (all must answer) and asks the backup remote whether it
/// still authorizes the push key. Changes nothing.
pub async fn reach(
    inv: &Inventory,
    keys: crate::exec::connect::HostKeys<'_>,
    connect: &ConnectSettings,
) -> anyhow::Result<Reached> {
    let hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    let mut transports = crate::exec::connect::reach(keys, &hosts, connect)
        .await
        .require_all()?;
    let remote = remote_leftovers(inv, keys, &mut transports, connect).await?;
    Ok(Reached { transports, remote })
}

/// Gathers the facts of the hosts `reached` and builds reset's plan and its data-directory
/// check. Changes nothing.
pub async fn prepare(
    inv: &Inventory,
    reached: &Reached,
    connect: &ConnectSettings,
) -> anyhow::Result<Prepared> {
    let hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    let transports = reached.transports.clone();
    let facts = super::gather_facts(inv, &hosts, &transports, connect.concurrency).await?;
    let leftovers = Leftovers {
        snapshot_dirs: snapshot_leftovers(inv, &transports).await?,
        ..reached.remote.clone()
    };
    let push_key_hosts = inv
        .with_role(Role::Etcd)
        .into_iter()
        .filter(|h| {
            facts
                .get(&h.name)
                .is_some_and(|f| f.files.contains_key(crate::backup_remote::HOST_KEY))
        })
        .map(|h| h.name.clone())
        .collect();
    let stamp = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .context("failed to format the time")?;
    Ok(Prepared {
        plan: plan(inv, &facts, &leftovers, &stamp),
        check: check_plan(inv, &facts),
        transports,
        stamp,
        leftovers,
        push_key_hosts,
    })
}

/// Reads (only) which snapshot directories hold something on each etcd host.
async fn snapshot_leftovers(
    inv: &Inventory,
    transports: &Transports,
) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut out = BTreeMap::new();
    let probe = snapshot_dirs_command(&snapshot_dirs(inv));
    for h in inv.with_role(Role::Etcd) {
        let Some(t) = transports.get(&h.name) else {
            continue;
        };
        let got = t
            .run(&probe)
            .await
            .with_context(|| format!("{}: cannot list its snapshot directories", h.name))?;
        if !got.success() {
            anyhow::bail!(
                "{}: cannot list its snapshot directories: {}",
                h.name,
                got.stderr_str().trim()
            );
        }
        let dirs: Vec<String> = got
            .stdout_str()
            .lines()
            .filter_map(|l| l.strip_prefix("dir "))
            .map(String::from)
            .collect();
        if !dirs.is_empty() {
            out.insert(h.name.clone(), dirs);
        }
    }
    Ok(out)
}

/// Reads (only) whether the backup remote still authorizes the push key; the remote's session
/// joins `transports` when the plan will need it. A remote that does not answer is noted, not an
/// error: reset gives the hosts back without it and says what is left.
async fn remote_leftovers(
    inv: &Inventory,
    keys: crate::exec::connect::HostKeys<'_>,
    transports: &mut Transports,
    connect: &ConnectSettings,
) -> anyhow::Result<Leftovers> {
    let mut out = Leftovers::default();
    let Some(remote) = &inv.backup.remote else {
        return Ok(out);
    };
    let key_file = match keys {
        crate::exec::connect::HostKeys::Pin(s) | crate::exec::connect::HostKeys::Check(s) => {
            s.file(crate::backup_remote::STATE_KEY)
        }
        crate::exec::connect::HostKeys::ReadOnly(v) => v.file(crate::backup_remote::STATE_KEY),
    };
    let Some(line) = crate::backup_remote::existing_public_line(&key_file, &inv.name)? else {
        return Ok(out);
    };
    let host = remote.host();
    let conns = crate::exec::connect::connect(keys, &[&host], connect).await;
    let t = match conns.get(crate::inventory::REMOTE_HOST_NAME) {
        Some(Ok(t)) => t.clone(),
        Some(Err(e)) => {
            out.remote_unreached = Some(format!("cannot reach {}: {e}", remote.describe()));
            return Ok(out);
        }
        None => {
            out.remote_unreached = Some(format!("cannot reach {}", remote.describe()));
            return Ok(out);
        }
    };
    match t.run(&crate::backup_remote::authorized_command(&line)).await {
        Ok(o) if o.success() => {
            if o.stdout_str().contains("authorized") {
                out.authorized_on_remote = Some(line);
                transports.insert(crate::inventory::REMOTE_HOST_NAME.into(), t);
            }
        }
        Ok(o) => {
            out.remote_unreached = Some(format!(
                "cannot read the authorized keys on {}: {}",
                remote.describe(),
                o.stderr_str().trim()
            ))
        }
        Err(e) => {
            out.remote_unreached = Some(format!(
                "cannot read the authorized keys on {}: {e}",
                remote.describe()
            ))
        }
    }
    Ok(out)
}

/// Runs the data-directory rule on every etcd host before anything changes anywhere (read-only,
/// so a dry run runs it too); a refusal (exit 2) naming the hosts where it failed.
pub async fn check_data_dirs(inv: &Inventory, prepared: &Prepared) -> anyhow::Result<()> {
    if let Err(failed) = exec::run(&prepared.check, Mode::Live, &prepared.transports).await {
        eprint!("{}", failed.details());
        let hosts: Vec<&str> = failed.hosts.iter().map(|(h, _)| h.as_str()).collect();
        return Err(crate::exit::refuse(
            crate::exit::REFUSED,
            format!(
                "reset refused by the data-directory rule on {}: {} holds what is not etcd's (above); nothing was changed on any host",
                hosts.join(", "),
                inv.etcd.data_dir
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::FileState;

    fn inventory() -> Inventory {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("inventories/example.yaml");
        crate::inventory::load(&path).unwrap()
    }

    /// Facts of a host where everything `up` placed for its roles is present.
    fn installed(inv: &Inventory, host: &str) -> HostFacts {
        let q = crate::phases::query_for(inv, inv.host(host).unwrap());
        let mut f = HostFacts {
            data_dir: inv.host(host).unwrap().has(Role::Etcd).then(FileState::default),
            ..Default::default()
        };
        for p in q.files {
            f.files.insert(p, FileState::default());
        }
        f
    }

    fn text(steps: &[Step]) -> String {
        steps
            .iter()
            .map(|s| match s {
                Step::Run(c) => format!("{}\n", c.line(false)),
                Step::Upload(u) => format!("{u}\n"),
                Step::Wait(c) => format!("{c}\n"),
                Step::Api(r) => format!("api {r}\n"),
            })
            .collect()
    }

    fn lines(plan: &Plan, phase: &str, host: &str) -> String {
        let p = plan
            .phases
            .iter()
            .find(|p| p.title == phase)
            .unwrap_or_else(|| panic!("no phase {phase}"));
        let h = p.hosts.iter().find(|h| h.host == host).unwrap();
        text(&h.steps)
    }

    #[test]
    fn reset_stops_and_removes_every_roles_files_and_secrets_in_order() {
        let inv = inventory();
        let facts: BTreeMap<String, HostFacts> = inv
            .hosts
            .iter()
            .map(|h| (h.name.clone(), installed(&inv, &h.name)))
            .collect();
        let plan = plan(&inv, &facts, &Leftovers::default(), "20261122T000000Z");
        let titles: Vec<&str> = plan.phases.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "Stop and remove the node components",
                "Stop and remove the Kubernetes control plane",
                "Stop and remove etcd",
                "Stop and remove the load balancers"
            ]
        );
        let kube = lines(&plan, titles[1], "cp1");
        assert!(kube.contains("systemctl disable --now"), "{kube}");
        assert!(
            kube.contains(
                "hactl-stop kube-apiserver.service kube-controller-manager.service kube-scheduler.service"
            ),
            "{kube}"
        );
        assert!(
            kube.contains("/etc/systemd/system/kube-apiserver.service.d/hactl-fence.conf"),
            "a fence left by an interrupted operation is lifted: {kube}"
        );
        for secret in [
            crate::kubernetes::files::CA_KEY,
            crate::kubernetes::files::SA_KEY,
            crate::kubernetes::files::ENCRYPTION_CONFIG,
            crate::kubernetes::files::ETCD_CLIENT_KEY,
        ] {
            assert!(kube.contains(secret), "{secret} stays: {kube}");
        }
        assert!(!kube.contains(crate::kubernetes::files::AUDIT_LOG), "{kube}");
        let etcd = lines(&plan, titles[2], "cp1");
        assert!(
            etcd.contains("hactl_data_dir_guard \"$1\" \"move $1 aside\""),
            "{etcd}"
        );
        assert!(
            etcd.contains("/var/lib/etcd.hactl-reset-20261122T000000Z"),
            "{etcd}"
        );
        assert!(etcd.contains("/etc/hactl/pki/etcd/server.key"), "{etcd}");
        assert!(!etcd.contains("rm -rf"), "{etcd}");
        let lb = lines(&plan, titles[3], "lb1");
        assert!(
            lb.contains("hactl-stop keepalived.service haproxy.service"),
            "keepalived first, so the VIP leaves before HAProxy stops: {lb}"
        );
        for path in [
            crate::load_balancer::KEEPALIVED_CONF,
            crate::load_balancer::HAPROXY_CFG,
            crate::load_balancer::ETCD_HEALTHCHECK_PEM,
            crate::load_balancer::HAPROXY_CLI,
        ] {
            assert!(lb.contains(path), "{path} stays: {lb}");
        }
        assert!(lb.contains(".hactl-orig"), "{lb}");
        // Nothing of another role's on a host without it.
        assert!(plan.phases[3].hosts.iter().all(|h| h.host.starts_with("lb")));
    }

    #[test]
    fn a_config_the_operator_wrote_and_an_empty_host_are_left_alone() {
        let inv = inventory();
        let mut f = installed(&inv, "lb1");
        f.foreign.insert(crate::load_balancer::HAPROXY_CFG.to_string());
        let steps = text(&load_balancer_steps(&inv, &f));
        assert!(!steps.contains(crate::load_balancer::HAPROXY_CFG), "{steps}");
        assert!(!steps.contains("haproxy.service"), "{steps}");
        assert!(steps.contains(crate::load_balancer::KEEPALIVED_CONF), "{steps}");
        let nothing = HostFacts::default();
        assert!(load_balancer_steps(&inv, &nothing).is_empty());
        assert!(kubernetes_steps(&inv, inv.host("cp1").unwrap(), &nothing).is_empty());
        assert!(reset_steps(&inv, &nothing, &[], "t").is_empty());
    }

    /// Issue 22: reset removes the backup push key (key material: removed, not moved) on the
    /// etcd hosts and its line on the backup remote, and moves every directory holding
    /// snapshots aside (never deletes one): the scheduled backups, a recover's staged snapshot,
    /// scratch copies. Only what is there is planned, so a second reset plans nothing.
    #[test]
    fn reset_removes_the_push_key_and_moves_snapshots_aside() {
        let inv = inventory();
        let facts: BTreeMap<String, HostFacts> = inv
            .hosts
            .iter()
            .map(|h| (h.name.clone(), installed(&inv, &h.name)))
            .collect();
        assert!(facts["cp1"].files.contains_key(crate::backup_remote::HOST_KEY));
        let dirs = snapshot_dirs(&inv);
        assert_eq!(
            dirs,
            [
                "/var/lib/etcd-backups",
                "/var/lib/etcd.hactl",
                "/var/lib/hactl/scratch"
            ]
        );
        let leftovers = Leftovers {
            snapshot_dirs: BTreeMap::from([("cp1".to_string(), dirs.clone())]),
            authorized_on_remote: Some("ssh-ed25519 AAAAkey hactl backup push example".into()),
            remote_unreached: None,
        };
        let plan = plan(&inv, &facts, &leftovers, "20261122T000000Z");
        let etcd = lines(&plan, "Stop and remove etcd", "cp1");
        assert!(
            etcd.lines()
                .any(|l| l.starts_with("rm -f -- ") && l.contains(crate::backup_remote::HOST_KEY)),
            "the push key is removed: {etcd}"
        );
        for d in &dirs {
            assert!(
                etcd.contains(&format!(
                    "hactl-reset-snapshots {d} {d}.hactl-reset-20261122T000000Z"
                )),
                "{d}: {etcd}"
            );
        }
        // The key goes; snapshots are never removed.
        assert!(!etcd.contains("rm -rf"), "{etcd}");
        let cp2 = lines(&plan, "Stop and remove etcd", "cp2");
        assert!(
            !cp2.contains("hactl-reset-snapshots"),
            "nothing there, nothing planned: {cp2}"
        );
        let revoke = lines(
            &plan,
            "Revoke the backup push key on the remote",
            crate::inventory::REMOTE_HOST_NAME,
        );
        assert!(revoke.contains("hactl-backup-remote-revoke AAAAkey"), "{revoke}");
        // Nothing left: nothing planned there.
        assert!(!super::plan(&inv, &facts, &Leftovers::default(), "t")
            .phases
            .iter()
            .any(|p| p.title.contains("Revoke")));
        let probe = snapshot_dirs_command(&dirs);
        assert!(probe.read_only);
        // The probe and the move, run here on a scratch tree: a directory holding files is
        // listed and moved aside whole; an empty one is not listed; a missing one is no error.
        let tmp = tempfile::tempdir().unwrap();
        let full = tmp.path().join("backups");
        let empty = tmp.path().join("empty");
        fs_err::create_dir_all(&full).unwrap();
        fs_err::create_dir_all(&empty).unwrap();
        fs_err::write(full.join("c-20261122T000000Z.db"), b"snapshot").unwrap();
        let missing = tmp.path().join("missing");
        let paths: Vec<String> = [&full, &empty, &missing]
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let run = |cmd: &RemoteCommand| {
            let out = std::process::Command::new(&cmd.argv[0])
                .args(&cmd.argv[1..])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert_eq!(run(&snapshot_dirs_command(&paths)), format!("dir {}\n", paths[0]));
        run(&move_snapshots_aside(&paths[0], "T1"));
        run(&move_snapshots_aside(&paths[2], "T1"));
        assert!(!full.exists());
        let aside = tmp.path().join("backups.hactl-reset-T1");
        assert_eq!(
            fs_err::read(aside.join("c-20261122T000000Z.db")).unwrap(),
            b"snapshot"
        );
        // Never onto (or into) what is in the way.
        fs_err::create_dir_all(&full).unwrap();
        fs_err::write(full.join("new.db"), b"new").unwrap();
        let cmd = move_snapshots_aside(&paths[0], "T1");
        let out = std::process::Command::new(&cmd.argv[0])
            .args(&cmd.argv[1..])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is in the way"),
            "{out:?}"
        );
        assert!(full.join("new.db").exists() && !aside.join("backups").exists());
    }

    #[test]
    fn the_data_dir_check_runs_only_where_a_data_dir_exists_and_only_reads() {
        let inv = inventory();
        let mut facts: BTreeMap<String, HostFacts> = BTreeMap::new();
        facts.insert("cp1".into(), installed(&inv, "cp1"));
        facts.insert("cp2".into(), HostFacts::default());
        let plan = check_plan(&inv, &facts);
        let hosts: Vec<&str> = plan.phases[0].hosts.iter().map(|h| h.host.as_str()).collect();
        assert_eq!(hosts, ["cp1"]);
        let Step::Run(cmd) = &plan.phases[0].hosts[0].steps[0] else {
            panic!()
        };
        assert!(cmd.read_only);
        assert!(cmd.line(false).contains("/var/lib/etcd"));
    }
}
