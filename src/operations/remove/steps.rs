//! The steps of `hactl remove`, as data for the journaled runner ([`crate::operations::runner`]): each with a
//! postcondition read from the hosts, so `--resume` (or a second run) skips what is done, and
//! `--dry-run` prints the exact commands.
//!
//! Order (docs/recovery.md, "Remove (RM1–RM11)"): the target leaves load balancing first (its
//! keepalived and HAProxy fenced, its servers in MAINT on every load balancer), then the
//! Kubernetes units on it stop, the remaining apiservers get the new `--etcd-servers` one at a
//! time, leadership moves off it, etcd is fenced, `member remove` (R-remove checked again right
//! before), etcd stopped, its data dir renamed aside, haproxy.cfg re-rendered without it, and the
//! cluster verified.
//!
//! Invariant: pure. Remote steps are built here; operator-side steps are the acts of `acts.rs`.

use std::sync::Arc;
use std::time::Duration;

use super::acts::{CheckRemove, Inputs, ReconfigureBalancers, RollApiserver};
use super::decide::Decisions;
use crate::etcd::{self, hex_id, probe};
use crate::fence;
use crate::inventory::Role;
use crate::load_balancer as lb;
use crate::operations::runner::{JournaledStep, StepCode};
use crate::plan::{Check, RemoteCommand};

crate::step_codes! {
    /// The steps of a removal, in order (docs/recovery.md, "Remove (RM1–RM11)").
    pub enum Rm {
        /// The target's keepalived and HAProxy fenced and stopped (the VIP moves to a peer).
        LeaveBalancing = "RM1",
        /// Its servers in MAINT on every load balancer.
        Drain = "RM2",
        /// Its Kubernetes units fenced and stopped.
        StopKubernetes = "RM3",
        /// Each remaining apiserver rolled onto the remaining members.
        RollApiserver = "RM4",
        /// Leadership moved off it.
        MoveLeader = "RM5",
        /// Its etcd fenced and disabled, with the backup timer.
        FenceEtcd = "RM6",
        /// `member remove`, R-remove checked again right before.
        RemoveMember = "RM7",
        /// Its etcd stopped.
        StopEtcd = "RM8",
        /// Its data dir renamed aside.
        MoveAside = "RM9",
        /// haproxy.cfg re-rendered without it.
        Reconfigure = "RM10",
        /// One leader, every member healthy.
        Verify = "RM11",
    }
}

/// Units that serve traffic on a host that leaves load balancing.
const BALANCER_UNITS: [&str; 2] = [lb::KEEPALIVED_UNIT, lb::HAPROXY_UNIT];

fn sh(script: &str, name: &str, args: &[&str]) -> RemoteCommand {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        name.to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    RemoteCommand::new(argv)
}

fn read_only(cmd: RemoteCommand) -> RemoteCommand {
    RemoteCommand {
        read_only: true,
        ..cmd
    }
}

/// Why a fence of `hactl remove` is there (the drop-in's comment lines).
fn why(run: &str) -> [String; 2] {
    [
        format!("Written by hactl remove {run}: the etcd member of this host left the cluster; the unit must not start here again."),
        "Lifted by deleting this file and systemctl daemon-reload (the unit is disabled too).".to_string(),
    ]
}

/// Fences (the one fence, [`crate::fence`], which survives reboots) each present
/// unit of `$@`, disables it, then stops it. A unit the host does not have is skipped.
fn fence_units(run: &str, units: &[&str]) -> RemoteCommand {
    let why = why(run);
    let why: Vec<&str> = why.iter().map(String::as_str).collect();
    sh(
        &format!(
            r#"fenced=
for u in "$@"; do
  systemctl cat "$u" >/dev/null 2>&1 || continue
  {write}
  fenced="$fenced $u"
done
[ -n "$fenced" ] || exit 0
systemctl daemon-reload
systemctl disable --quiet $fenced 2>/dev/null || true
systemctl stop $fenced"#,
            write = fence::write("$u", &why)
        ),
        "hactl-remove-fence",
        units,
    )
}

/// Every present unit of `$@` is fenced and not running (a script body).
fn units_fenced_script() -> String {
    format!(
        r#"for u in "$@"; do
  systemctl cat "$u" >/dev/null 2>&1 || continue
  {fenced} || exit 1
  case "$(systemctl is-active "$u")" in active|activating|deactivating|reloading) exit 1 ;; esac
done"#,
        fenced = fence::is_fenced("$u")
    )
}

/// Read-only: every present unit of `units` is fenced and not running.
fn units_fenced(units: &[&str]) -> RemoteCommand {
    read_only(sh(&units_fenced_script(), "hactl-remove-fenced", units))
}

/// Static-pod mode: the control-plane manifests moved out of the kubelet's directory.
const MANIFESTS_OUT: &str = r#"dest=$1; shift
for c in "$@"; do
  if [ -e "/etc/kubernetes/manifests/$c.yaml" ]; then mkdir -p "$dest" && mv -f "/etc/kubernetes/manifests/$c.yaml" "$dest/$c.yaml"; fi
done"#;

/// `awk` over `hactl-haproxy show stat`: exit 1 when `server` is in some backend and not MAINT.
fn servers_drained(server: &str) -> RemoteCommand {
    read_only(sh(
        &format!(
            r#"{cli} "show stat" | awk -F, -v s="$1" '$2 == s && $18 !~ /^MAINT/ {{ bad = 1 }} END {{ exit bad }}'"#,
            cli = lb::HAPROXY_CLI
        ),
        "hactl-remove-drained",
        &[server],
    ))
}

/// Puts `server` in MAINT in every backend of this HAProxy that has it: drained first and its
/// open sessions left to end (up to 10 s), since going straight to MAINT cuts them
/// ([`crate::phases::load_balancer::drain_backend_steps`] says why).
fn drain_servers(server: &str) -> RemoteCommand {
    sh(
        &format!(
            r#"for b in {etcd} {api}; do
  {cli} "show stat" | awk -F, -v b="$b" -v s="$1" '$1 == b && $2 == s {{ f = 1 }} END {{ exit !f }}' || continue
  {cli} state "$b" "$1" drain
  {cli} idle "$b" "$1" {secs}
  {cli} state "$b" "$1" maint
done"#,
            etcd = lb::ETCD_BACKEND,
            api = lb::KUBERNETES_BACKEND,
            cli = lb::HAPROXY_CLI,
            secs = crate::phases::load_balancer::DRAIN_SESSIONS.as_secs()
        ),
        "hactl-remove-drain",
        &[server],
    )
}

/// Read-only: the member with ID `$1` is not in the member list.
fn member_gone(id: &str) -> RemoteCommand {
    read_only(sh(
        &format!(
            r#"out=$({ctl} member list) || exit 1
! printf '%s\n' "$out" | awk -F', ' -v id="$1" '$1 == id {{ f = 1 }} END {{ exit !f }}'"#,
            ctl = etcd::ETCDCTL_WRAPPER
        ),
        "hactl-remove-gone",
        &[id],
    ))
}

/// Read-only: the member at `$1` (client URL) does not lead (or does not answer, being stopped).
fn not_leader(client_url: &str) -> RemoteCommand {
    read_only(sh(
        &format!(
            r#"s=$({ctl} --endpoints="$1" --command-timeout=3s endpoint status -w json 2>/dev/null) || exit 0
m=$(printf '%s' "$s" | grep -o '"member_id":[0-9]*' | head -n1 | cut -d: -f2)
l=$(printf '%s' "$s" | grep -o '"leader":[0-9]*' | head -n1 | cut -d: -f2)
[ "$m" != "$l" ]"#,
            ctl = etcd::ETCDCTL_WRAPPER
        ),
        "hactl-remove-not-leader",
        &[client_url],
    ))
}

/// Read-only: etcd does not run on the host.
fn etcd_stopped() -> RemoteCommand {
    RemoteCommand::read_only([
        "sh",
        "-c",
        &format!(
            "! systemctl is-active --quiet {} && ! pgrep -x etcd >/dev/null",
            etcd::UNIT
        ),
    ])
}

/// Every step of a removal, in order.
pub fn build(d: &Decisions, inputs: &Arc<Inputs>) -> Vec<JournaledStep> {
    let inv = &inputs.inv;
    let run = d.run.as_str();
    let mut steps = Vec::new();
    let target = d.host.as_deref();
    // RM1: the target leaves load balancing: its own keepalived (so a VIP it holds moves to a
    // peer) and HAProxy, which the inventory no longer lists on it.
    if let Some(h) = target {
        steps.push(
            JournaledStep::new(
                Rm::LeaveBalancing.at(h),
                "fence and stop keepalived and HAProxy where present (the VIP moves to a peer)",
                Some(h),
            )
            .done_when(units_fenced(&BALANCER_UNITS))
            .run(fence_units(run, &BALANCER_UNITS)),
        );
    }
    // RM2: its servers in MAINT on every load balancer, before anything on it stops.
    for lbh in inv.with_role(Role::LoadBalancer) {
        steps.push(
            JournaledStep::new(
                Rm::Drain.at(&lbh.name),
                format!("put {} in MAINT in every HAProxy backend that has it", d.member),
                Some(&lbh.name),
            )
            .done_when(servers_drained(&d.member))
            .run(drain_servers(&d.member))
            .verify(Check::command(
                format!(
                    "HAProxy on {} shows {} in MAINT (or not at all)",
                    lbh.name, d.member
                ),
                servers_drained(&d.member),
                Duration::from_secs(10),
            )),
        );
    }
    // RM3: the Kubernetes control plane on the target stops for good.
    if let (Some(h), true) = (target, inv.kubernetes.is_some()) {
        let units = crate::phases::query::KUBE_UNITS;
        let components = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];
        let aside = format!("/etc/kubernetes/manifests.hactl-removed-{run}");
        let mut args = vec![aside.as_str()];
        args.extend_from_slice(&components);
        let done = read_only(sh(
            &format!(
                "{}\n{}",
                units_fenced_script(),
                r#"for c in kube-apiserver kube-controller-manager kube-scheduler; do [ ! -e "/etc/kubernetes/manifests/$c.yaml" ] || exit 1; done"#
            ),
            "hactl-remove-kube-stopped",
            &units,
        ));
        steps.push(
            JournaledStep::new(
                Rm::StopKubernetes.at(h),
                "fence and stop the Kubernetes units (static-pod manifests moved aside)",
                Some(h),
            )
            .done_when(done)
            .run(fence_units(run, &units))
            .run(sh(MANIFESTS_OUT, "hactl-remove-manifests", &args)),
        );
    }
    // RM4: every remaining apiserver gets `--etcd-servers` without the member, one at a time
    // behind its drained backend.
    if inv.kubernetes.is_some() {
        for cp in crate::phases::install_kubernetes::control_plane_hosts(inv) {
            let act = Arc::new(RollApiserver {
                inputs: inputs.clone(),
                host: cp.name.clone(),
            });
            steps.push(
                JournaledStep::new(
                    Rm::RollApiserver.at(&cp.name),
                    "roll the apiserver onto the remaining members (--etcd-servers)",
                    None,
                )
                .done_when_local(act.clone())
                .local(act),
            );
        }
    }
    let observer = d.observer.as_str();
    // RM5: leadership moves off the member while it is alive.
    if d.target_healthy {
        steps.push(
            JournaledStep::new(
                Rm::MoveLeader.at(observer),
                format!("move leadership from {} to {observer}", d.member),
                Some(observer),
            )
            .done_when(not_leader(&d.client_url))
            .run(RemoteCommand::new([
                etcd::ETCDCTL_WRAPPER.to_string(),
                format!("--endpoints={}", d.client_url),
                "move-leader".to_string(),
                hex_id(d.observer_id),
            ])),
        );
    }
    // RM6: etcd fenced on the target before it leaves (a removed member exits; the fence keeps
    // systemd from starting it again on its old data).
    if let Some(h) = target {
        let why = why(run);
        let why: Vec<&str> = why.iter().map(String::as_str).collect();
        steps.push(
            JournaledStep::new(Rm::FenceEtcd.at(h), "fence etcd and disable it and the backup timer", Some(h))
                .done_when(read_only(sh(&fence::is_fenced(etcd::UNIT), "hactl-remove-etcd-fenced", &[])))
                .run(sh(
                    &format!(
                        "{write}\nsystemctl daemon-reload\nsystemctl disable --quiet {unit} 2>/dev/null || true\nsystemctl disable --now --quiet {timer} 2>/dev/null || true",
                        write = fence::write(etcd::UNIT, &why),
                        unit = etcd::UNIT,
                        timer = crate::backup::TIMER,
                    ),
                    "hactl-remove-fence-etcd",
                    &[],
                )),
        );
    }
    // RM7: `member remove`, R-remove evaluated again right before; the command itself re-checks
    // that the ID is still the member at its peer URL.
    steps.push(
        JournaledStep::new(
            Rm::RemoveMember.at(observer),
            format!("member remove {} ({})", d.member, hex_id(d.member_id)),
            Some(observer),
        )
        .done_when(member_gone(&hex_id(d.member_id)))
        .local(Arc::new(CheckRemove {
            inputs: inputs.clone(),
            member: d.member.clone(),
        }))
        .step(crate::operations::replace::remove_step(d.member_id, &d.peer_url))
        .verify(probe::cluster_healthy(
            "after the removal",
            Duration::from_secs(60),
        )),
    );
    if let Some(h) = target {
        // RM8: etcd stopped there (a removed member usually exits by itself).
        steps.push(
            JournaledStep::new(Rm::StopEtcd.at(h), "stop etcd", Some(h))
                .done_when(etcd_stopped())
                .run(RemoteCommand::new(["systemctl", "stop", etcd::UNIT]))
                .verify(Check::command(
                    format!("{h}: no etcd process"),
                    etcd_stopped(),
                    Duration::from_secs(60),
                )),
        );
        // RM9: its data dir renamed aside, never deleted.
        let dd = inv.etcd.data_dir.as_str();
        let aside = d.aside(dd);
        steps.push(
            JournaledStep::new(
                Rm::MoveAside.at(h),
                format!("move {dd} aside to {aside}"),
                Some(h),
            )
            .done_when(RemoteCommand::read_only([
                "sh",
                "-c",
                "[ -e \"$2\" ] || [ ! -e \"$1\" ]",
                "hactl-remove-aside-done",
                dd,
                &aside,
            ]))
            .precheck(RemoteCommand::read_only([
                "sh",
                "-c",
                "! pgrep -x etcd >/dev/null || { echo \"etcd runs: $1 stays\" >&2; exit 1; }",
                "hactl-remove-aside-check",
                dd,
            ]))
            .run(RemoteCommand::new(["mv", "-T", "--", dd, &aside])),
        );
    }
    // RM10: haproxy.cfg re-rendered from the inventory, which no longer lists the member.
    if !inv.with_role(Role::LoadBalancer).is_empty() {
        let act = Arc::new(ReconfigureBalancers {
            inputs: inputs.clone(),
        });
        steps.push(
            JournaledStep::new(
                Rm::Reconfigure,
                "re-render haproxy.cfg on the load balancers without the member",
                None,
            )
            .done_when_local(act.clone())
            .local(act),
        );
    }
    // RM11: the cluster answers with one leader.
    steps.push(
        JournaledStep::new(
            Rm::Verify.at(observer),
            "verify: every member healthy, one leader",
            Some(observer),
        )
        .no_cluster_change()
        .step(crate::plan::Step::Wait(probe::cluster_has_one_leader(
            Duration::from_secs(60),
        ))),
    );
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sh -n`: the script of `cmd` (`sh -c SCRIPT ...`) parses.
    fn parses(cmd: &RemoteCommand) {
        assert_eq!(cmd.argv[..2], ["sh", "-c"], "{:?}", cmd.argv);
        let out = std::process::Command::new("sh")
            .args(["-n", "-c", &cmd.argv[2]])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            cmd.argv[2],
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn every_script_parses() {
        for cmd in [
            fence_units("remove-1", &BALANCER_UNITS),
            read_only(sh(&fence::is_fenced(etcd::UNIT), "x", &[])),
            units_fenced(&BALANCER_UNITS),
            servers_drained("cp4"),
            drain_servers("cp4"),
            member_gone("abc"),
            not_leader("https://10.0.0.14:2379"),
            etcd_stopped(),
            sh(MANIFESTS_OUT, "x", &["/d", "kube-apiserver"]),
        ] {
            parses(&cmd);
        }
    }

    /// The fence and the drain run for real in a local shell where they can: `fence_units` on a
    /// host without the units does nothing and succeeds.
    #[test]
    fn the_fence_skips_units_the_host_does_not_have() {
        let cmd = fence_units("remove-1", &["hactl-no-such-unit.service"]);
        let out = std::process::Command::new(&cmd.argv[0])
            .args(&cmd.argv[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
