//! Start (or restart) the node components on every control-plane and worker host, in the order
//! they need each other: the kernel settings, containerd (restarted only when its configuration,
//! unit or binaries changed), the images it must hold (uploaded, imported and checked against
//! their digests only when containerd does not show them already), the kubelet and kube-proxy
//! (restarted when a file they read changed), the pod network's routes (reloaded when they
//! differ from what the Nodes' pod CIDRs ask). Then it waits: for the kubelet's health after a
//! start, for the Node's registration and pod CIDR when the facts did not show them (the pod
//! network is then planned by a second round of `up`, [`crate::converge::apply`]), and for the
//! Node to be Ready once its pod network is written.
//!
//! In static-pod mode the control-plane hosts' first part (up to the kubelet) ran before the
//! control plane, in `start_kubelets`; here they get the rest.
//!
//! All hosts at once when each component only starts (a new cluster, a new node): nothing serves
//! yet. When the plan restarts a running kubelet, kube-proxy or containerd (a new bundle, a
//! renewed certificate, a rotated CA), the phase rolls instead, one host at a time: a restart
//! leaves the running pods alone, but a bad binary or configuration then fails on the first node
//! (its kubelet, and a restarted kube-proxy, must answer their health endpoints again, and a
//! Node that was Ready must be Ready again with a heartbeat from the restarted kubelet, before
//! the next node restarts) rather than on every node at once. A restarted kubelet can still
//! report NotReady for up to one status period (kubernetes#93747), which can evict pods that
//! tolerate `not-ready` for less; the roll keeps that to one Node at a time
//! (docs/development/known-gaps.md).

use std::time::Duration;

use super::configure_nodes::files;
use super::{differs, Ctx, Phase, PlanError};
use crate::facts::HostFacts;
use crate::inventory::{Host, Inventory};
use crate::kubernetes::node::{self, NodeComponent};
use crate::kubernetes::KubernetesPlanError;
use crate::plan::{Check, Parallelism, PlannedPhase, RemoteCommand, Step, Upload};

pub struct StartNodes;

/// The environment variable that bounds how long `up` waits for a Node to register, to be Ready,
/// or to be Ready again after its kubelet restarted (docs/reference/environment.md).
pub const NODE_WAIT_VAR: &str = "HACTL_NODE_READY_TIMEOUT_SECS";
/// The default of [`NODE_WAIT_VAR`]: a kubelet on a loaded 2-core machine registers and reports
/// within a minute; three leave room for a slow image import before it.
pub const NODE_WAIT_DEFAULT_SECS: u64 = 180;
/// The longest [`NODE_WAIT_VAR`] accepted (a day): longer is a typo, not a slow node.
const NODE_WAIT_MAX_SECS: u64 = 86_400;

/// How long to wait for a Node: [`NODE_WAIT_VAR`] when set (unset or empty: the default), a
/// refusal naming the variable when it is not a whole number of seconds from 1 to a day.
pub fn node_wait_timeout(value: Option<&str>) -> Result<Duration, PlanError> {
    Ok(crate::duration::env_seconds(
        NODE_WAIT_VAR,
        value,
        NODE_WAIT_DEFAULT_SECS,
        NODE_WAIT_MAX_SECS,
    )?)
}

/// [`NODE_WAIT_VAR`] of this process's environment, as [`node_wait_timeout`] reads it.
pub fn node_wait_from_env() -> Result<Duration, PlanError> {
    Ok(crate::duration::env_seconds_from_env(
        NODE_WAIT_VAR,
        NODE_WAIT_DEFAULT_SECS,
        NODE_WAIT_MAX_SECS,
    )?)
}

/// Whether `host`'s Node has no pod CIDR the facts know of (not registered yet, or no
/// credentials to ask with): the pod network cannot be planned for it in this round.
pub fn pending(facts: &HostFacts) -> bool {
    use crate::facts::NodeApi;
    match facts.node.as_ref().map(|n| &n.api) {
        None | Some(NodeApi::NotAsked) | Some(NodeApi::Absent) => true,
        Some(NodeApi::Registered(n)) => n.pod_cidr.is_none(),
        // The API did not answer: nothing is known, and nothing is changed.
        Some(NodeApi::Unknown(_)) => false,
    }
}

/// The read-only `sh -c script` that asks about `host`'s Node with the kubelet's credentials (as
/// the facts probe asks): the script gets the CA, client certificate, key, apiserver and Node
/// name as `$1`-`$5`, and `extra` as `$6`.
fn node_command(inv: &Inventory, host: &Host, script: &str, extra: &str) -> RemoteCommand {
    let q = node::node_query(inv, host);
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        "hactl-node".to_string(),
        q.ca,
        q.cert,
        q.key,
        q.server,
        q.name,
        extra.to_string(),
    ])
    .with_timeout(Duration::from_secs(10))
}

/// The read-only command that succeeds when `host`'s Node answers with `pattern` in its JSON.
fn node_has(inv: &Inventory, host: &Host, pattern: &str) -> RemoteCommand {
    node_command(
        inv,
        host,
        "curl -fsS --max-time 5 --cacert \"$1\" --cert \"$2\" --key \"$3\" \"$4/api/v1/nodes/$5\" | tr -d ' \\n' | grep -qF \"$6\"",
        pattern,
    )
}

/// How many distinct messages a node component's journal shows when a wait for it runs out.
const JOURNAL_MESSAGES: usize = 25;

/// An awk program over klog lines (the kubelet's and kube-proxy's: `E1128 11:15:25.321066    4011
/// kubelet.go:2243] message`): each distinct message without its time and thread, after the
/// line number it was last seen at and a tab, and with how often it came when more than once.
/// Sorted by that number and cut to the last ones, it shows what the component kept saying: a
/// kubelet that cannot reach the apiservers logs `node "cp1" not found` ten times a second,
/// which would fill a plain tail of its journal and hide the line that says why.
const DISTINCT_MESSAGES: &str = r#"{ m = $0; sub(/^[IWEF][0-9][0-9][0-9][0-9] [0-9:.]+ +[0-9]+ /, "", m); last[m] = NR; n[m]++ } END { for (m in last) print last[m] "\t" (n[m] > 1 ? n[m] " times: " : "") m }"#;

/// The last distinct messages of a node component's journal (see [`DISTINCT_MESSAGES`]), for
/// a wait on it that ran out.
fn journal(unit: &str) -> RemoteCommand {
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "journalctl -u \"$1\" -n 2000 --no-pager -o cat | awk '{DISTINCT_MESSAGES}' | sort -n | tail -n {JOURNAL_MESSAGES} | cut -f 2-"
        ),
        "hactl-journal".to_string(),
        unit.to_string(),
    ])
}

/// Waits until the Node of `host` is registered and has its pod CIDR.
pub fn wait_registered(inv: &Inventory, host: &Host, timeout: Duration) -> Check {
    Check::command(
        format!(
            "the kubelet on {} registered Node {} and it has a pod CIDR",
            host.name, host.name
        ),
        node_has(inv, host, "\"podCIDR\":"),
        timeout,
    )
    .diagnose_with(journal(node::KUBELET_UNIT))
}

/// Waits until the Node of `host` is Ready.
pub fn wait_ready(inv: &Inventory, host: &Host, timeout: Duration) -> Check {
    Check::command(
        format!("Node {} is Ready", host.name),
        node_has(inv, host, "\"type\":\"Ready\",\"status\":\"True\""),
        timeout,
    )
    .diagnose_with(journal(node::KUBELET_UNIT))
}

/// Waits until the Node of `host` is Ready again after its kubelet restarted: its `Ready`
/// condition `True` with a heartbeat no older than the kubelet's start, so neither the Ready of
/// before the restart nor the NotReady a kubelet may post at its start (kubernetes#93747) counts.
/// Both times are the host's own clock (the kubelet stamps the heartbeat); systemd prints its
/// timestamp in UTC here so that `date -d` reads it whatever the host's zone.
pub fn wait_ready_since_restart(inv: &Inventory, host: &Host, timeout: Duration) -> Check {
    Check::command(
        format!(
            "Node {} is Ready again, reported by its restarted kubelet",
            host.name
        ),
        node_command(inv, host, READY_SINCE_RESTART, node::KUBELET_UNIT),
        timeout,
    )
    .diagnose_with(journal(node::KUBELET_UNIT))
}

/// [`wait_ready_since_restart`]'s script: `$1`-`$3` the CA, client certificate and key, `$4` the
/// apiserver, `$5` the Node, `$6` the kubelet's unit. Succeeds when the Node's `Ready` is `True`
/// with a heartbeat at or after the unit's start (whole seconds, both).
const READY_SINCE_RESTART: &str = "since=$(TZ=UTC systemctl show -p ActiveEnterTimestamp --value \"$6\") && since=$(TZ=UTC date -d \"$since\" +%s) && beat=$(curl -fsS --max-time 5 --cacert \"$1\" --cert \"$2\" --key \"$3\" \"$4/api/v1/nodes/$5\" | tr -d ' \\n' | sed -n 's/.*\"type\":\"Ready\",\"status\":\"True\",\"lastHeartbeatTime\":\"\\([^\"]*\\)\".*/\\1/p') && [ -n \"$beat\" ] && [ \"$(date -d \"$beat\" +%s)\" -ge \"$since\" ]";

/// Waits until `what` on the host answers its local health endpoint `url`; a timeout shows
/// `unit`'s journal.
fn wait_healthz(what: &str, url: &str, unit: &str) -> Check {
    Check::command(
        format!("{what} answers {url}"),
        RemoteCommand::read_only(["curl", "-fsS", "--max-time", "5", url])
            .with_timeout(Duration::from_secs(10)),
        Duration::from_secs(120),
    )
    .diagnose_with(journal(unit))
}

/// Waits until the kubelet on the host answers its health endpoint.
fn wait_kubelet(host: &Host) -> Check {
    wait_healthz(
        &format!("the kubelet on {}", host.name),
        node::KUBELET_HEALTHZ,
        node::KUBELET_UNIT,
    )
}

/// Waits until kube-proxy on the host answers its health endpoint (after a restart in a roll:
/// the next node waits for it).
fn wait_kube_proxy(host: &Host) -> Check {
    wait_healthz(
        &format!("kube-proxy on {}", host.name),
        node::KUBE_PROXY_HEALTHZ,
        node::KUBE_PROXY_UNIT,
    )
}

/// How `component` must be brought up on a host: nothing, a start (with its enable), or a
/// restart because a file it reads changed (or was written after it started: a run uploaded it
/// and stopped before the restart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bring {
    Nothing,
    Start,
    Restart,
}

pub fn bring(
    component: NodeComponent,
    f: &HostFacts,
    containerd: &crate::inventory::BinarySource,
    uploads: &[&Upload],
) -> Bring {
    let reads = component.reads(containerd);
    let active = f
        .units
        .get(component.unit())
        .is_some_and(|u| u.active == "active");
    if !active {
        return Bring::Start;
    }
    let changed = uploads.iter().any(|u| reads.contains(&u.path) && differs(f, u));
    let stale = !f
        .written_after_start(component.unit(), reads.iter().map(String::as_str))
        .is_empty();
    if changed || stale {
        Bring::Restart
    } else {
        Bring::Nothing
    }
}

/// The steps that enable and start, or restart, `unit`.
fn bring_steps(unit: &str, how: Bring, f: &HostFacts) -> Vec<Step> {
    let mut steps = Vec::new();
    if f.units.get(unit).map(|u| u.enabled.as_str()) != Some("enabled") {
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "enable", unit])));
    }
    match how {
        Bring::Nothing => {}
        Bring::Start => steps.push(Step::Run(super::start_unit(unit))),
        Bring::Restart => steps.push(Step::Run(RemoteCommand::new(["systemctl", "restart", unit]))),
    }
    steps
}

/// Whether `phase` restarts a node component that is running on one of its hosts: then it rolls,
/// one host at a time (see the module's comment).
fn restarts_running_components(phase: &PlannedPhase) -> bool {
    let units = [node::CONTAINERD_UNIT, node::KUBELET_UNIT, node::KUBE_PROXY_UNIT];
    phase.hosts.iter().flat_map(|h| &h.steps).any(|step| match step {
        Step::Run(c) => {
            c.argv.len() == 3
                && c.argv[0] == "systemctl"
                && c.argv[1] == "restart"
                && units.contains(&c.argv[2].as_str())
        }
        _ => false,
    })
}

/// [`super::per_host`], rolled one host at a time when it restarts running node components.
pub fn plan_rolling<P: Phase + ?Sized>(phase: &P, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
    let mut planned = super::per_host(phase, ctx)?;
    if restarts_running_components(&planned) {
        planned.parallelism = Parallelism::OneAtATime;
    }
    Ok(vec![planned])
}

/// Applies the kernel settings now (systemd applies them at boot): the modules where the host
/// can load them (a container cannot, and needs them loaded by its machine), then the sysctls.
fn apply_kernel_settings() -> RemoteCommand {
    let script = "if command -v modprobe >/dev/null 2>&1; then
  while read -r m; do case $m in ''|'#'*) ;; *) modprobe \"$m\" 2>/dev/null || true ;; esac; done < \"$1\"
fi
sysctl -q -p \"$2\"";
    RemoteCommand::new([
        "sh",
        "-c",
        script,
        "hactl-node-kernel",
        node::NODE_MODULES,
        node::NODE_SYSCTL,
    ])
}

/// Whether `host`'s kubelet runs control-plane components (static-pod mode, control-plane host):
/// `start_kubelets` starts it, before the control plane.
pub fn runs_control_plane(inv: &Inventory, host: &Host) -> bool {
    host.has(crate::inventory::Role::ControlPlane)
        && inv
            .kubernetes
            .as_ref()
            .is_some_and(|k| k.mode == crate::inventory::KubernetesMode::StaticPod)
}

/// Whether a kubelet brought as `kubelet` is waited for until its Node is Ready again: a restart
/// of one whose Node the facts showed Ready (see [`kubelet_steps`]).
fn waits_until_ready_again(kubelet: Bring, f: &HostFacts) -> bool {
    let was_ready = f
        .node
        .as_ref()
        .and_then(|n| n.api.registered())
        .is_some_and(|n| n.ready);
    kubelet == Bring::Restart && was_ready
}

/// The first part of a node's start: the kernel settings, containerd, the images it must hold,
/// and the kubelet, waited for when it was (re)started. Nothing here needs an apiserver: in
/// static-pod mode it runs before the control plane, on the hosts whose kubelets run it.
pub fn kubelet_steps(host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
    let Some(kube) = &ctx.inv.kubernetes else {
        return Ok(vec![]);
    };
    let inputs = ctx.kubernetes.ok_or(KubernetesPlanError::MissingInputs)?;
    let images = node::node_images(ctx.inv, inputs)?;
    let f = ctx.facts(host);
    let files = files(host, ctx)?;
    let uploads: Vec<&Upload> = files
        .all()
        .chain(&inputs.node_binaries)
        .chain(&inputs.containerd_binaries)
        .collect();
    let mut steps = Vec::new();

    if files.kernel.iter().any(|u| differs(f, u)) {
        steps.push(Step::Run(apply_kernel_settings()));
    }
    let containerd = bring(NodeComponent::Containerd, f, &kube.containerd, &uploads);
    steps.extend(bring_steps(node::CONTAINERD_UNIT, containerd, f));
    let snapshotter = node::snapshotter(f);
    for image in images.for_host(host) {
        // A restart with a new snapshotter needs the images unpacked for it: imported again.
        let snapshotter_changed =
            containerd == Bring::Restart && files.containerd.iter().any(|u| differs(f, u));
        if !node::image_present(f, image) || snapshotter_changed {
            steps.push(Step::Upload(image.archive.clone()));
            steps.push(Step::Run(node::import_image(image, snapshotter)));
        }
    }
    let mut kubelet = bring(NodeComponent::Kubelet, f, &kube.containerd, &uploads);
    // A running kubelet whose Node is gone (deleted through the API) registers it again
    // only when it starts.
    let absent = matches!(
        f.node.as_ref().map(|n| &n.api),
        Some(crate::facts::NodeApi::Absent)
    );
    if absent && kubelet == Bring::Nothing {
        kubelet = Bring::Restart;
    }
    steps.extend(bring_steps(node::KUBELET_UNIT, kubelet, f));
    if kubelet != Bring::Nothing {
        steps.push(Step::Wait(wait_kubelet(host)));
    }
    // A restart in a roll: the next host restarts once this Node is Ready again in the API, so
    // a kubelet that answers its health endpoint but cannot report to the apiservers (a bad
    // client certificate, say) stops the roll on its first host, and a kubelet's NotReady at
    // its start touches one Node at a time. Only for a Node that was Ready before: one that was
    // not is no worse for the restart, and `up` does not wait on what it did not break.
    if waits_until_ready_again(kubelet, f) {
        steps.push(Step::Wait(wait_ready_since_restart(
            ctx.inv,
            host,
            node_wait_from_env()?,
        )));
    }
    Ok(steps)
}

impl Phase for StartNodes {
    fn title(&self) -> &'static str {
        "Start the node components"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.node_hosts()
    }
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        plan_rolling(self, ctx)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        let inputs = ctx.kubernetes.ok_or(KubernetesPlanError::MissingInputs)?;
        let f = ctx.facts(host);
        let files = files(host, ctx)?;
        let uploads: Vec<&Upload> = files
            .all()
            .chain(&inputs.node_binaries)
            .chain(&inputs.containerd_binaries)
            .collect();
        // The kubelets that run the control plane were started before it (`start_kubelets`).
        let mut steps = if runs_control_plane(ctx.inv, host) {
            Vec::new()
        } else {
            kubelet_steps(host, ctx)?
        };

        let proxy = bring(NodeComponent::KubeProxy, f, &kube.containerd, &uploads);
        steps.extend(bring_steps(node::KUBE_PROXY_UNIT, proxy, f));
        // A restart is part of a roll: the next node restarts once this kube-proxy serves again.
        // (A first start is not waited for: nothing was served through it yet.)
        if proxy == Bring::Restart {
            steps.push(Step::Wait(wait_kube_proxy(host)));
        }

        // The pod network, once this Node's pod CIDR is known (the files then exist).
        let network_changed = files.network.iter().chain(&files.scripts).any(|u| differs(f, u));
        if !files.network.is_empty() {
            let unit = f.units.get(node::POD_NETWORK_UNIT);
            let unit_written = files
                .units
                .iter()
                .any(|u| u.path == node::POD_NETWORK_UNIT_PATH && differs(f, u));
            let routes_differ = {
                let cidrs = node::pod_cidrs(ctx.inv, ctx.facts);
                !node::routes_match(f, &node::pod_routes(ctx.inv, host, &cidrs))
            };
            if unit.map(|u| u.enabled.as_str()) != Some("enabled") {
                steps.push(Step::Run(RemoteCommand::new([
                    "systemctl",
                    "enable",
                    node::POD_NETWORK_UNIT,
                ])));
            }
            if network_changed
                || unit_written
                || routes_differ
                || unit.map(|u| u.active.as_str()) != Some("active")
            {
                steps.push(Step::Run(RemoteCommand::new([
                    "systemctl",
                    "reload-or-restart",
                    node::POD_NETWORK_UNIT,
                ])));
            }
        }

        if pending(f) {
            steps.push(Step::Wait(wait_registered(ctx.inv, host, node_wait_from_env()?)));
        } else if network_changed && !files.network.is_empty() {
            steps.push(Step::Wait(wait_ready(ctx.inv, host, node_wait_from_env()?)));
        }
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{NodeApi, NodeFacts, RegisteredNode, UnitState};

    #[test]
    fn a_node_components_journal_shows_its_last_distinct_messages_with_their_counts() {
        let mut lines = vec![
            "I1128 11:15:20.000001    4011 server.go:416] Version: v1.20.2".to_string(),
            "E1128 11:15:20.500000    4011 kubelet_node_status.go:93] Unable to register node \"cp1\" with API server: Post \"https://10.0.0.1:6443/api/v1/nodes\": proxyconnect tcp: dial tcp 127.0.0.1:9: connect: connection refused".to_string(),
        ];
        for i in 0..40 {
            lines.push(format!(
                "E1128 11:15:{:02}.{i:06}    4011 kubelet.go:2243] node \"cp1\" not found",
                21 + i / 10
            ));
        }
        for i in 0..30 {
            lines.push(format!(
                "I1128 11:15:30.{i:06}    4011 other.go:{i}] distinct message {i}"
            ));
        }
        lines.push("E1128 11:15:31.000000    4011 kubelet.go:2243] node \"cp1\" not found".to_string());
        lines.push("a line not from klog".to_string());
        let input = lines.join("\n") + "\n";
        // The pipeline of `journal` after journalctl, run by the local awk, sort and cut.
        let script = format!("awk '{DISTINCT_MESSAGES}' | sort -n | tail -n {JOURNAL_MESSAGES} | cut -f 2-");
        let (ok, out) = crate::local_command::sh_with_input(&script, &[], input.as_bytes());
        assert!(ok, "{out}");
        let shown: Vec<String> = out.lines().map(str::to_string).collect();
        assert_eq!(shown.len(), JOURNAL_MESSAGES, "{shown:#?}");
        // The repeated line once, with its count, where it was last seen (before the last line).
        assert_eq!(
            shown[JOURNAL_MESSAGES - 2],
            "41 times: kubelet.go:2243] node \"cp1\" not found"
        );
        assert_eq!(shown[JOURNAL_MESSAGES - 1], "a line not from klog");
        assert_eq!(shown[0], "other.go:7] distinct message 7", "{shown:#?}");
        assert!(shown.iter().all(|l| !l.contains("11:15")), "{shown:#?}");
        // The journal command hands the unit to the script as an argument.
        let cmd = journal(node::KUBELET_UNIT);
        assert!(cmd.read_only);
        assert_eq!(cmd.argv.last().unwrap(), node::KUBELET_UNIT);
        assert!(
            cmd.argv[2].starts_with("journalctl -u \"$1\" -n 2000 "),
            "{:?}",
            cmd.argv
        );
        assert!(cmd.argv[2].ends_with(&script), "{:?}", cmd.argv);
    }

    #[test]
    fn the_node_wait_is_three_minutes_unless_the_environment_names_a_sane_number_of_seconds() {
        let default = Duration::from_secs(NODE_WAIT_DEFAULT_SECS);
        assert_eq!(node_wait_timeout(None).unwrap(), default);
        assert_eq!(node_wait_timeout(Some("")).unwrap(), default);
        assert_eq!(node_wait_timeout(Some(" 30 ")).unwrap(), Duration::from_secs(30));
        assert_eq!(
            node_wait_timeout(Some("86400")).unwrap(),
            Duration::from_secs(86_400)
        );
        for bad in ["0", "-5", "30s", "1.5", "86401", "ninety"] {
            let err = node_wait_timeout(Some(bad)).unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("{NODE_WAIT_VAR}={bad:?} is not")),
                "{text}"
            );
            assert!(
                text.contains("from 1 to 86400") && text.contains("default (180)"),
                "{text}"
            );
            assert!(!err.is_refusal(), "a typo is not a safety refusal: {text}");
        }
    }

    fn with_api(api: NodeApi) -> HostFacts {
        HostFacts {
            node: Some(NodeFacts {
                api,
                ..NodeFacts::default()
            }),
            ..HostFacts::default()
        }
    }

    #[test]
    fn a_node_is_pending_until_its_node_has_a_pod_cidr_and_an_unanswered_api_changes_nothing() {
        let registered = |cidr: Option<&str>| {
            NodeApi::Registered(RegisteredNode {
                pod_cidr: cidr.map(String::from),
                ..RegisteredNode::default()
            })
        };
        // (what the API said, pending)
        let table = [
            (NodeApi::NotAsked, true),
            (NodeApi::Absent, true),
            (registered(None), true),
            (registered(Some("10.244.0.0/24")), false),
            (NodeApi::Unknown("timeout".into()), false),
        ];
        for (api, want) in table {
            assert_eq!(pending(&with_api(api.clone())), want, "{api:?}");
        }
        assert!(pending(&HostFacts::default()), "no facts of a node: pending");
    }

    #[test]
    fn only_a_restarted_kubelet_whose_node_was_ready_is_waited_for_until_ready_again() {
        let registered = |ready| {
            NodeApi::Registered(RegisteredNode {
                ready,
                ..RegisteredNode::default()
            })
        };
        // (how the kubelet is brought, what the API said of its Node, waited for)
        let table = [
            (Bring::Restart, registered(true), true),
            (Bring::Restart, registered(false), false),
            (Bring::Restart, NodeApi::Absent, false),
            (Bring::Restart, NodeApi::Unknown("timeout".into()), false),
            (Bring::Start, registered(true), false),
            (Bring::Nothing, registered(true), false),
        ];
        for (how, api, want) in table {
            let f = with_api(api.clone());
            assert_eq!(waits_until_ready_again(how, &f), want, "{how:?} {api:?}");
        }
        assert!(!waits_until_ready_again(Bring::Restart, &HostFacts::default()));
    }

    /// Runs [`READY_SINCE_RESTART`] with a `systemctl` that says the kubelet started at
    /// 2026-11-27 15:05:22 UTC and a `curl` that answers `node` (the real `sh`, `tr`, `sed` and
    /// `date`).
    fn ready_since_restart(node: &str) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let fake = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        fake(
            "systemctl",
            "[ \"$TZ\" = UTC ] && echo 'Fri 2026-11-27 15:05:22 UTC'",
        );
        fake("curl", &format!("cat <<'EOF'\n{node}\nEOF"));
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap());
        std::process::Command::new("sh")
            .args(["-c", READY_SINCE_RESTART, "test", "ca", "crt", "key"])
            .args(["https://a:6443", "w1", node::KUBELET_UNIT])
            .env("PATH", path)
            .env("TZ", "Asia/Tokyo")
            .status()
            .unwrap()
            .success()
    }

    #[test]
    fn a_node_is_ready_again_only_with_a_ready_heartbeat_from_after_the_kubelets_start() {
        // As the apiserver writes a Node: indented, the conditions' fields in this order.
        let node = |ready: &str, beat: &str| {
            format!(
                r#"{{
  "kind": "Node",
  "status": {{
    "conditions": [
      {{
        "type": "MemoryPressure",
        "status": "False",
        "lastHeartbeatTime": "2026-11-27T15:09:00Z"
      }},
      {{
        "type": "Ready",
        "status": "{ready}",
        "lastHeartbeatTime": "{beat}",
        "lastTransitionTime": "2026-11-27T15:00:00Z",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status"
      }}
    ]
  }}
}}"#
            )
        };
        assert!(ready_since_restart(&node("True", "2026-11-27T15:05:32Z")));
        assert!(ready_since_restart(&node("True", "2026-11-27T15:05:22Z")));
        assert!(
            !ready_since_restart(&node("True", "2026-11-27T15:05:21Z")),
            "the Ready of before the restart"
        );
        assert!(
            !ready_since_restart(&node("False", "2026-11-27T15:05:32Z")),
            "the NotReady a starting kubelet posts"
        );
        assert!(!ready_since_restart("curl: (7) Failed to connect"));
    }

    #[test]
    fn the_phase_rolls_one_host_at_a_time_only_when_it_restarts_a_running_component() {
        let phase = |steps: Vec<Vec<Step>>| PlannedPhase {
            title: "Start the node components".into(),
            parallelism: Parallelism::All,
            disruptive: false,
            hosts: steps
                .into_iter()
                .enumerate()
                .map(|(i, steps)| crate::plan::HostSteps {
                    host: format!("n{i}"),
                    sudo: false,
                    steps,
                })
                .collect(),
        };
        let run = |argv: &[&str]| Step::Run(RemoteCommand::new(argv.iter().copied()));
        let start = run(&["systemctl", "start", "--no-block", node::KUBELET_UNIT]);
        let enable = run(&["systemctl", "enable", node::KUBELET_UNIT]);
        // (each host's steps, rolls)
        let table = [
            (
                vec![vec![enable.clone(), start.clone()], vec![start.clone()]],
                false,
            ),
            (vec![vec![], vec![]], false),
            (
                vec![
                    vec![start.clone()],
                    vec![run(&["systemctl", "restart", node::KUBELET_UNIT])],
                ],
                true,
            ),
            (
                vec![vec![run(&["systemctl", "restart", node::KUBE_PROXY_UNIT])]],
                true,
            ),
            (
                vec![vec![run(&["systemctl", "restart", node::CONTAINERD_UNIT])]],
                true,
            ),
            // The pod network's routes reload on every node at once: nothing serves through them
            // that a roll would protect.
            (
                vec![vec![run(&[
                    "systemctl",
                    "reload-or-restart",
                    node::POD_NETWORK_UNIT,
                ])]],
                false,
            ),
        ];
        for (steps, rolls) in table {
            let p = phase(steps);
            assert_eq!(restarts_running_components(&p), rolls, "{p:?}");
        }
    }

    #[test]
    fn a_component_restarts_when_a_file_it_reads_changed_and_starts_when_it_is_not_running() {
        let config = Upload::new(node::KUBELET_CONFIG, 0o644, "root", "root", b"new".to_vec());
        let other = Upload::new(node::CNI_CONFLIST, 0o644, "root", "root", b"x".to_vec());
        let pkg = crate::inventory::BinarySource::Package;
        let mut f = HostFacts::default();
        assert_eq!(bring(NodeComponent::Kubelet, &f, &pkg, &[&config]), Bring::Start);
        f.units.insert(
            node::KUBELET_UNIT.into(),
            UnitState {
                active: "active".into(),
                enabled: "enabled".into(),
                ..UnitState::default()
            },
        );
        assert_eq!(
            bring(NodeComponent::Kubelet, &f, &pkg, &[&config]),
            Bring::Restart
        );
        f.files.insert(
            config.path.clone(),
            crate::facts::FileState {
                sha256: config.sha256.clone(),
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
                mtime: 0,
            },
        );
        assert_eq!(
            bring(NodeComponent::Kubelet, &f, &pkg, &[&config]),
            Bring::Nothing
        );
        // containerd re-reads the CNI configuration itself; the kubelet does not read it.
        assert_eq!(bring(NodeComponent::Kubelet, &f, &pkg, &[&other]), Bring::Nothing);
        assert!(bring_steps(node::KUBELET_UNIT, Bring::Nothing, &f).is_empty());
    }
}
