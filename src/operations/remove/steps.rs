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

/// `awk` over `hactl-haproxy show stat` (with `m`: the member, `k`: the names to keep, space
/// separated with a space on each side): one line `BACKEND SERVER STATUS` per server RM2 puts in
/// MAINT. Those are the member's server in each backend, and every apiserver the inventory no
/// longer lists as a control plane (the other hosts leaving in the same edit: their apiservers
/// still name the member in `--etcd-servers`, and a request of theirs in flight to it when it
/// leaves fails). Those others are drained only while a kept apiserver is in the backend, so
/// names that match nothing never drain it empty. Fail-open twins follow their server
/// (`hactl-haproxy state` sets both), so they are not listed.
fn drain_targets_awk() -> String {
    format!(
        r#"awk -F, -v m="$m" -v k="$k" -v e={etcd} -v a={api} -v t={twin} '
($1 == e || $1 == a) && $2 != "BACKEND" && $2 != "FRONTEND" {{
  if (length($2) > length(t) && substr($2, length($2) - length(t) + 1) == t) next
  if ($2 == m) {{ print $1, $2, $18; next }}
  if ($1 != a) next
  if (index(k, " " $2 " ")) kept = 1; else others[++n] = $1 " " $2 " " $18
}}
END {{ if (kept) for (i = 1; i <= n; i++) print others[i] }}'"#,
        etcd = lb::ETCD_BACKEND,
        api = lb::KUBERNETES_BACKEND,
        twin = lb::FAILOPEN_SUFFIX,
    )
}

/// The shell prologue of the RM2 scripts: `$1` is the member, the rest the names to keep;
/// `targets` prints [`drain_targets_awk`]'s lines for this HAProxy.
fn drain_prologue() -> String {
    format!(
        r#"m=$1; shift; k=" $* "
targets() {{ {cli} "show stat" | {awk}; }}"#,
        cli = lb::HAPROXY_CLI,
        awk = drain_targets_awk()
    )
}

/// The arguments of the RM2 scripts: the member, then the inventory's control-plane hosts.
fn drain_args<'a>(member: &'a str, keep: &'a [String]) -> Vec<&'a str> {
    std::iter::once(member)
        .chain(keep.iter().map(String::as_str))
        .collect()
}

/// Read-only: exit 1 while a server RM2 drains ([`drain_targets_awk`]) is not in MAINT.
fn servers_drained(member: &str, keep: &[String]) -> RemoteCommand {
    read_only(sh(
        &format!(
            r#"{prologue}
out=$(targets) || exit 1
! printf '%s\n' "$out" | awk '$3 != "" && $3 !~ /^MAINT/ {{ f = 1 }} END {{ exit !f }}'"#,
            prologue = drain_prologue()
        ),
        "hactl-remove-drained",
        &drain_args(member, keep),
    ))
}

/// Puts every server of [`drain_targets_awk`] in MAINT on this HAProxy: all drained first, their
/// open sessions left to end (up to 10 s, in all), then MAINT, since going straight to MAINT
/// cuts them ([`crate::phases::load_balancer::drain_backend_steps`] says why).
fn drain_servers(member: &str, keep: &[String]) -> RemoteCommand {
    sh(
        &format!(
            r#"{prologue}
out=$(targets)
[ -n "$out" ] || exit 0
printf '%s\n' "$out" | while read -r b s st; do {cli} state "$b" "$s" drain || exit 1; done || exit 1
end=$(( $(date +%s) + {secs} ))
printf '%s\n' "$out" | while read -r b s st; do
  left=$(( end - $(date +%s) )); [ "$left" -gt 0 ] || left=1
  {cli} idle "$b" "$s" "$left"
done
printf '%s\n' "$out" | while read -r b s st; do {cli} state "$b" "$s" maint || exit 1; echo "$b/$s: MAINT"; done"#,
            prologue = drain_prologue(),
            cli = lb::HAPROXY_CLI,
            secs = crate::phases::load_balancer::DRAIN_SESSIONS.as_secs()
        ),
        "hactl-remove-drain",
        &drain_args(member, keep),
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
    // RM2: its servers in MAINT on every load balancer, before anything on it stops, with the
    // apiservers of other hosts leaving the control plane in the same edit.
    let keep: Vec<String> = crate::phases::install_kubernetes::control_plane_hosts(inv)
        .iter()
        .map(|h| h.name.clone())
        .collect();
    for lbh in inv.with_role(Role::LoadBalancer) {
        steps.push(
            JournaledStep::new(
                Rm::Drain.at(&lbh.name),
                format!(
                    "put {} in MAINT in every HAProxy backend that has it, and apiservers the inventory no longer lists",
                    d.member
                ),
                Some(&lbh.name),
            )
            .done_when(servers_drained(&d.member, &keep))
            .run(drain_servers(&d.member, &keep))
            .verify(Check::command(
                format!(
                    "HAProxy on {} shows {} and the apiservers the inventory no longer lists in MAINT (or not at all)",
                    lbh.name, d.member
                ),
                servers_drained(&d.member, &keep),
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
            servers_drained("cp4", &["cp1".to_string()]),
            drain_servers("cp4", &["cp1".to_string()]),
            member_gone("abc"),
            not_leader("https://10.0.0.14:2379"),
            etcd_stopped(),
            sh(MANIFESTS_OUT, "x", &["/d", "kube-apiserver"]),
        ] {
            parses(&cmd);
        }
    }

    /// `show stat` CSV rows: backend, server, status in column 18 (HAProxy's layout).
    fn stat(rows: &[(&str, &str, &str)]) -> String {
        rows.iter()
            .map(|(b, s, st)| format!("{b},{s}{}{st},\n", ",".repeat(16)))
            .collect()
    }

    /// What RM2 drains, by [`drain_targets_awk`] under the real `awk`, on `csv`, keeping `keep`.
    fn targets(csv: &str, member: &str, keep: &[&str]) -> Vec<String> {
        let script = format!("m=$1; shift; k=\" $* \"\n{}", drain_targets_awk());
        let args: Vec<&str> = std::iter::once(member).chain(keep.iter().copied()).collect();
        let (ok, out) = crate::local_command::sh_with_input(&script, &args, csv.as_bytes());
        assert!(ok, "{out}");
        out.lines().map(str::to_string).collect()
    }

    #[test]
    fn the_drain_takes_the_member_and_the_apiservers_of_other_leaving_hosts_only() {
        let (e, a) = (lb::ETCD_BACKEND, lb::KUBERNETES_BACKEND);
        let csv = stat(&[
            ("stats", "FRONTEND", "OPEN"),
            (e, "cp1", "UP"),
            (e, "cp4", "UP"),
            (e, "cp5", "UP"),
            (e, "BACKEND", "UP"),
            (a, "cp1", "UP"),
            (a, "cp1_failopen", "UP"),
            (a, "cp4", "UP 1/2"),
            (a, "cp4_failopen", "UP"),
            (a, "cp5", "MAINT (via x)"),
            (a, "cp5_failopen", "MAINT"),
            (a, "BACKEND", "UP"),
        ]);
        // cp5 leaves in the same edit: its apiserver is drained, its etcd member is not (it
        // is still a member, and its own removal takes it out).
        assert_eq!(
            targets(&csv, "cp4", &["cp1", "cp2", "cp3"]),
            [
                format!("{e} cp4 UP"),
                format!("{a} cp4 UP 1/2"),
                format!("{a} cp5 MAINT (via x)")
            ]
        );
        // Names that keep nothing in the backend never drain it empty: only the member goes.
        assert_eq!(
            targets(&csv, "cp4", &["node9"]),
            [format!("{e} cp4 UP"), format!("{a} cp4 UP 1/2")]
        );
        // A member without servers (already re-rendered away), and nothing else leaving.
        let after = stat(&[(e, "cp1", "UP"), (a, "cp1", "UP"), (a, "cp1_failopen", "UP")]);
        assert!(targets(&after, "cp4", &["cp1"]).is_empty());
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
