//! maintenance's journaled steps, built from what was read before the run (pure: no I/O; a dry
//! run prints them, and the runner sends exactly that).
//!
//! Step ids ([`M`]) are the journal's step names: `stage-<Stage>`, `cordon`, `drain`,
//! `lease-read`, `stop-<unit>`, `lease-handover`, `vip-move`, `lb-drain`, `move-leader`,
//! `stop-etcd`, `others-healthy`; for complete `cancel`, `start-etcd`, `start-<unit>`, `lb-ready`,
//! `vip-restore`, `uncordon`, `stage-Complete`.
//!
//! Invariant: every unit start stops is fenced ([`crate::fence`]: a drop-in under
//! `/etc`, so a reboot during maintenance does not start it), and complete lifts the fence right
//! before it starts the unit. A stop step's postcondition is "fenced and inactive", a start
//! step's "unfenced and active", so a second run of either does nothing twice.

use std::sync::Arc;
use std::time::Duration;

use super::acts::{self, Live};
use crate::etcd::{self, probe, UNIT};
use crate::fence;
use crate::inventory::Host;
use crate::kubernetes::probe as kube_probe;
use crate::kubernetes::{Component, MANIFEST_DIR};
use crate::load_balancer::KEEPALIVED_UNIT;
use crate::operations::maintenance_record::{MaintenanceRecord, Stage};
use crate::operations::node::CORDON_MARK;
use crate::operations::runner::{JournaledStep, StepCode, StepId};
use crate::plan::{Check, RemoteCommand};

crate::step_codes! {
    /// maintenance's steps; `stage`, `stop` and `start` name what they act on
    /// (`stage-Drain`, `stop-etcd`, `start-kube-apiserver.service`).
    pub enum M {
        Stage = "stage",
        Cordon = "cordon",
        Drain = "drain",
        LeaseRead = "lease-read",
        Stop = "stop",
        LeaseHandover = "lease-handover",
        VipMove = "vip-move",
        LbDrain = "lb-drain",
        MoveLeader = "move-leader",
        OthersHealthy = "others-healthy",
        Cancel = "cancel",
        Start = "start",
        LbReady = "lb-ready",
        VipRestore = "vip-restore",
        Uncordon = "uncordon",
    }
}

/// The id of the step that stops (`M::Stop`) or starts (`M::Start`) `unit`: `stop-etcd` for
/// etcd, else `stop-<unit>`.
fn unit_step(code: M, unit: &str) -> StepId {
    code.with(if unit == UNIT { "etcd" } else { unit })
}

/// Marks in the record's `stopped` list: the host's HAProxy servers are in MAINT, and
/// keepalived was stopped on it (so complete undoes exactly what start did).
pub const DRAIN_MARK: &str = "haproxy-backends";
pub const VIP_MARK: &str = "keepalived.service";

/// The Kubernetes units start stops, in stop order (scheduler first).
pub const KUBE_STOP_ORDER: [&str; 2] = ["kube-scheduler.service", "kube-controller-manager.service"];
const APISERVER: &str = "kube-apiserver.service";

/// What start's steps follow from, read before anything changed.
#[derive(Debug, Clone, Default)]
pub struct StartFacts {
    pub host: String,
    pub since: String,
    pub reason: String,
    /// `None`: cordon; `Some(why)`: nothing to cordon (no Node, no kubernetes section, or cordoned
    /// by someone else).
    pub cordon_skip: Option<String>,
    /// `None`: drain; `Some(why)`: nothing to drain.
    pub drain_skip: Option<String>,
    /// The Kubernetes API answered (the Lease handover is awaited through it).
    pub kube: bool,
    /// Kubernetes control-plane units active on the host.
    pub kube_active: Vec<String>,
    /// The host is a load balancer too, reachable: keepalived stops so the VIP moves.
    pub moves_vip: bool,
    /// The inventory has load balancers.
    pub balancers: bool,
    /// The host is an etcd member.
    pub etcd: bool,
    /// Its etcd runs now.
    pub etcd_active: bool,
    /// The member host that checks the rest of the cluster after etcd stopped, and the client
    /// URLs of the members that were healthy (and not in maintenance) before.
    pub observer: Option<(String, String)>,
}

/// What complete's steps follow from.
#[derive(Debug, Clone)]
pub struct CompleteFacts {
    pub record: MaintenanceRecord,
    pub etcd: bool,
    /// Its etcd runs now.
    pub etcd_active: bool,
    pub balancers: bool,
    pub now: String,
}

fn why(host: &str) -> [String; 2] {
    [
        format!("Written by hactl maintenance: {host} is out of service."),
        format!("`hactl maintenance complete {host}` lifts it."),
    ]
}

/// `sh -c` with a read-only script.
fn probe_script(script: String) -> RemoteCommand {
    RemoteCommand {
        read_only: true,
        ..RemoteCommand::script(script)
    }
}

/// Stops `unit` on `host` behind a fence.
pub fn stop_fenced(host: &str, unit: &str) -> JournaledStep {
    let w = why(host);
    let why: Vec<&str> = w.iter().map(String::as_str).collect();
    let stopped = if unit == UNIT {
        format!("! systemctl is-active --quiet {unit} && ! pgrep -x etcd >/dev/null")
    } else {
        format!("! systemctl is-active --quiet {unit}")
    };
    JournaledStep::new(
        unit_step(M::Stop, unit),
        format!("stop and fence {unit}"),
        Some(host),
    )
    .done_when(probe_script(format!("{} && {stopped}", fence::is_fenced(unit))))
    .run(RemoteCommand::script(fence::fence_and_stop(&[unit], &why)))
    .verify(Check::command(
        format!("{unit} on {host} is stopped"),
        probe_script(stopped),
        Duration::from_secs(60),
    ))
}

/// Lifts the fence of `unit` on `host` and starts it.
pub fn start_unfenced(host: &str, unit: &str) -> JournaledStep {
    JournaledStep::new(
        unit_step(M::Start, unit),
        format!("lift the fence of {unit} and start it"),
        Some(host),
    )
    .done_when(probe_script(format!(
        "{} && systemctl is-active --quiet {unit}",
        fence::is_unfenced(unit)
    )))
    .run(RemoteCommand::script(fence::lift_all(&[unit])))
    // etcd's start returns when it is ready, which needs quorum: not waited for here, the
    // step's verification waits for its health.
    .run(if unit == UNIT {
        RemoteCommand::new(["systemctl", "start", "--no-block", unit])
    } else {
        RemoteCommand::new(["systemctl", "start", unit])
    })
}

/// Systemd mode: [`start_unfenced`] for a control-plane unit, verified by the component's health
/// endpoint on `host` (the apiserver's `/readyz`). A started unit is not a serving apiserver:
/// HAProxy takes a server leaving MAINT as UP at once, without waiting for a check, so putting
/// the host back behind the VIP before `/readyz` answers sent requests to an apiserver still
/// starting, and the check that then marked it down cut them (seen as one `SSL_ERROR_SYSCALL`
/// through the VIP per `maintenance complete`).
fn start_unit_healthy(host: &Host, unit: &str) -> JournaledStep {
    let step = start_unfenced(&host.name, unit);
    match component_of(unit) {
        Some(component) => step.verify(Check::command(
            format!(
                "{} on {} answers {}",
                component.binary(),
                host.name,
                kube_probe::endpoint(component)
            ),
            kube_probe::healthy(component, host),
            Duration::from_secs(180),
        )),
        None => step,
    }
}

/// Static-pod mode: where `maintenance start` keeps a host's control-plane manifests while it
/// is out (outside the kubelet's directory, never deleted); `complete` moves them back.
pub const MANIFESTS_ASIDE: &str = "/etc/kubernetes/manifests.hactl/maintenance";

/// The component a control-plane unit name stands for (static-pod mode keeps the unit names
/// in the record, so the stage's marks and order are the same in both modes).
fn component_of(unit: &str) -> Option<Component> {
    Component::ALL.into_iter().find(|c| c.unit() == unit)
}

/// Static-pod mode: moves `unit`'s manifest to [`MANIFESTS_ASIDE`] so the kubelet stops the pod
/// (the kubelet restarts a killed pod, and there is no unit to fence: the manifest's absence is
/// the fence), and waits until its process is gone.
pub fn stop_static_pod(host: &str, unit: &str) -> JournaledStep {
    let Some(component) = component_of(unit) else {
        return stop_fenced(host, unit);
    };
    let c = component.binary();
    JournaledStep::new(
        unit_step(M::Stop, unit),
        format!("move the {c} manifest to {MANIFESTS_ASIDE}/ (its kubelet stops the pod)"),
        Some(host),
    )
    .done_when(probe_script(crate::kubernetes::static_pods_gone(&[component])))
    .run(RemoteCommand::script(format!(
        "if [ -e {MANIFEST_DIR}/{c}.yaml ]; then mkdir -p {MANIFESTS_ASIDE} && mv -f {MANIFEST_DIR}/{c}.yaml {MANIFESTS_ASIDE}/{c}.yaml; fi"
    )))
    .verify(Check::command(
        format!("the kubelet on {host} stopped the {c} pod"),
        probe_script(crate::kubernetes::static_pods_gone(&[component])),
        Duration::from_secs(120),
    ))
}

/// Static-pod mode: moves `unit`'s manifest back into the kubelet's directory and waits for the
/// component's health endpoint on `host`.
pub fn start_static_pod(host: &Host, unit: &str) -> JournaledStep {
    let Some(component) = component_of(unit) else {
        return start_unfenced(&host.name, unit);
    };
    let c = component.binary();
    let healthy = kube_probe::healthy(component, host);
    // Done: the manifest is back and the component answers (the health probe as its argv).
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("[ -e {MANIFEST_DIR}/{c}.yaml ] && \"$@\" >/dev/null"),
        "hactl-static-pod-healthy".to_string(),
    ];
    argv.extend(healthy.argv.iter().cloned());
    let done = RemoteCommand::read_only(argv);
    JournaledStep::new(
        unit_step(M::Start, unit),
        format!("move the {c} manifest back from {MANIFESTS_ASIDE}/ (its kubelet starts the pod)"),
        Some(&host.name),
    )
    .done_when(done)
    .run(RemoteCommand::script(format!(
        "if [ -e {MANIFESTS_ASIDE}/{c}.yaml ]; then mkdir -p {MANIFEST_DIR} && mv -f {MANIFESTS_ASIDE}/{c}.yaml {MANIFEST_DIR}/{c}.yaml; fi; \
         [ -e {MANIFEST_DIR}/{c}.yaml ] || {{ echo 'no {c} manifest in {MANIFEST_DIR} or {MANIFESTS_ASIDE}: run `hactl up` to write it' >&2; exit 1; }}"
    )))
    .verify(Check::command(
        format!("{c} on {} answers {}", host.name, kube_probe::endpoint(component)),
        healthy,
        Duration::from_secs(180),
    ))
}

/// Whether the inventory runs the control plane as static pods.
fn static_pod(inv: &crate::inventory::Inventory) -> bool {
    inv.kubernetes
        .as_ref()
        .is_some_and(|k| k.mode == crate::inventory::KubernetesMode::StaticPod)
}

fn record(base: &StartFacts, stage: Stage, stopped: &[String]) -> MaintenanceRecord {
    MaintenanceRecord {
        host: base.host.clone(),
        stage,
        since: base.since.clone(),
        reason: base.reason.clone(),
        stopped: stopped.to_vec(),
    }
}

/// `maintenance start`: Cordon, Drain, StopControlPlane.
pub fn start(f: &StartFacts, live: &Arc<Live>) -> Vec<JournaledStep> {
    let host = f.host.as_str();
    let stop_kube = |unit: &str| {
        if static_pod(&live.inv) {
            stop_static_pod(host, unit)
        } else {
            stop_fenced(host, unit)
        }
    };
    let mut steps = Vec::new();
    let mut marks: Vec<String> = Vec::new();
    if f.cordon_skip.is_none() {
        marks.push(CORDON_MARK.into());
    }
    let stage = |stage: Stage, marks: &[String]| {
        JournaledStep::new(
            M::Stage.with(&stage.to_string()),
            format!("enter stage {stage}"),
            None,
        )
        .local(Arc::new(acts::EnterStage {
            live: live.clone(),
            record: record(f, stage, marks),
        }))
    };
    steps.push(stage(Stage::Cordon, &marks));
    steps.push(match &f.cordon_skip {
        None => JournaledStep::new(M::Cordon, format!("cordon Node {host}"), None).local(Arc::new(
            acts::Schedulable {
                live: live.clone(),
                unschedulable: true,
            },
        )),
        Some(why) => skip(M::Cordon, &format!("cordon Node {host}"), why),
    });
    steps.push(stage(Stage::Drain, &marks));
    steps.push(match &f.drain_skip {
        None => JournaledStep::new(M::Drain, format!("drain Node {host}"), None)
            .local(Arc::new(acts::Drain { live: live.clone() })),
        Some(why) => skip(M::Drain, &format!("drain Node {host}"), why),
    });
    // Everything StopControlPlane stops is marked before the first stop, so a complete after a
    // crash anywhere in the stage brings all of it back (starting a running unit is a no-op).
    for u in KUBE_STOP_ORDER {
        if f.kube_active.iter().any(|a| a == u) {
            marks.push(u.into());
        }
    }
    if f.moves_vip {
        marks.push(VIP_MARK.into());
    }
    marks.push(DRAIN_MARK.into());
    if f.kube_active.iter().any(|a| a == APISERVER) {
        marks.push(APISERVER.into());
    }
    if f.etcd {
        marks.push(UNIT.into());
    }
    steps.push(stage(Stage::StopControlPlane, &marks));
    if f.kube {
        steps.push(
            JournaledStep::new(M::LeaseRead, "read the Leases before the controllers stop", None)
                .no_cluster_change()
                .local(Arc::new(acts::ReadLeases { live: live.clone() })),
        );
    }
    for u in KUBE_STOP_ORDER {
        if f.kube_active.iter().any(|a| a == u) {
            steps.push(stop_kube(u));
        }
    }
    if f.kube {
        steps.push(
            JournaledStep::new(M::LeaseHandover, "the Leases move to another host", None)
                .local(Arc::new(acts::LeaseHandover { live: live.clone() })),
        );
    }
    // HAProxy next: no new client reaches this host's apiserver or etcd through the VIP, and the
    // VIP leaves it if it is a load balancer itself, before either stops.
    if f.moves_vip {
        steps.push(
            JournaledStep::new(M::VipMove, "stop keepalived: the VIP moves to a peer", Some(host))
                .done_when(probe_script(format!(
                    "! systemctl is-active --quiet {KEEPALIVED_UNIT}"
                )))
                .run(RemoteCommand::new(["systemctl", "stop", KEEPALIVED_UNIT])),
        );
    }
    steps.push(if f.balancers {
        JournaledStep::new(M::LbDrain, format!("take {host} out of the load balancers"), None).local(
            Arc::new(acts::Backends {
                live: live.clone(),
                ready: false,
            }),
        )
    } else {
        skip(
            M::LbDrain,
            "take the host out of the load balancers",
            "no load balancer in the inventory",
        )
    });
    if f.kube_active.iter().any(|a| a == APISERVER) {
        steps.push(stop_kube(APISERVER));
    }
    if f.etcd {
        if f.etcd_active {
            steps.push(
                JournaledStep::new(
                    M::MoveLeader,
                    "R-maint again; move etcd leadership off the host",
                    None,
                )
                .local(Arc::new(acts::GateAndMoveLeader { live: live.clone() })),
            );
        }
        steps.push(stop_fenced(host, UNIT));
        if let Some((observer, endpoints)) = f.observer.as_ref().filter(|(_, e)| !e.is_empty()) {
            steps.push(
                JournaledStep::new(
                    M::OthersHealthy,
                    "the rest of the cluster is healthy",
                    Some(observer),
                )
                .no_cluster_change()
                .verify(Check::command(
                    format!("the members that were healthy still are ({endpoints})"),
                    RemoteCommand::read_only([
                        etcd::ETCDCTL_WRAPPER.to_string(),
                        format!("--endpoints={endpoints}"),
                        "endpoint".into(),
                        "health".into(),
                    ]),
                    Duration::from_secs(30),
                )),
            );
        }
    }
    steps
}

/// A step with nothing to do: journaled `skipped`, with the reason in the plan.
fn skip(id: M, title: &str, why: &str) -> JournaledStep {
    JournaledStep::new(id, title, None)
        .no_cluster_change()
        .done_when_local(Arc::new(acts::Nothing(why.to_string())))
}

/// Whether complete cancels: during Idle, Cordon or Drain nothing was stopped but the cordon.
pub fn cancels(r: &MaintenanceRecord) -> bool {
    r.stage.cancels() && r.stopped.iter().all(|x| x == CORDON_MARK)
}

/// `maintenance complete`: StopControlPlane backwards (etcd caught up first), then uncordon and
/// Complete. Gates on the returning member being healthy, which needs quorum (a linearizable
/// read through it), not on every member: another member may be down.
pub fn complete(f: &CompleteFacts, live: &Arc<Live>) -> Vec<JournaledStep> {
    let r = &f.record;
    let host = r.host.as_str();
    let was = |u: &str| r.stopped.iter().any(|x| x == u);
    let start_kube = |unit: &str| match live.inv.host(host) {
        Some(h) if static_pod(&live.inv) => start_static_pod(h, unit),
        Some(h) => start_unit_healthy(h, unit),
        None => start_unfenced(host, unit),
    };
    let mut steps = Vec::new();
    if cancels(r) {
        steps.push(
            JournaledStep::new(M::Cancel, "cancel: nothing was stopped", None).local(Arc::new(acts::Note(
                format!(
                    "cancelled during {}: nothing was stopped, straight to Complete",
                    r.stage
                ),
            ))),
        );
    } else {
        if f.etcd && (was(UNIT) || !f.etcd_active) {
            steps.push(
                start_unfenced(host, UNIT)
                    // A linearizable read through the member waits until it applied the
                    // leader's commit index: healthy here means caught up, and quorum is back.
                    .verify(probe::member_healthy(host, Duration::from_secs(120))),
            );
        }
        if was(APISERVER) {
            steps.push(start_kube(APISERVER));
        }
        if was(DRAIN_MARK) && f.balancers {
            steps.push(
                JournaledStep::new(M::LbReady, format!("put {host} back behind the VIP"), None).local(
                    Arc::new(acts::Backends {
                        live: live.clone(),
                        ready: true,
                    }),
                ),
            );
        }
        if was(VIP_MARK) {
            steps.push(
                JournaledStep::new(M::VipRestore, "start keepalived again", Some(host))
                    .done_when(probe_script(format!(
                        "systemctl is-active --quiet {KEEPALIVED_UNIT}"
                    )))
                    .run(RemoteCommand::new(["systemctl", "start", KEEPALIVED_UNIT])),
            );
        }
        for u in KUBE_STOP_ORDER.iter().rev() {
            if was(u) {
                steps.push(start_kube(u));
            }
        }
    }
    steps.push(if was(CORDON_MARK) {
        JournaledStep::new(M::Uncordon, format!("uncordon Node {host}"), None).local(Arc::new(
            acts::Schedulable {
                live: live.clone(),
                unschedulable: false,
            },
        ))
    } else {
        skip(
            M::Uncordon,
            &format!("uncordon Node {host}"),
            &format!("hactl did not cordon Node {host}: it stays as it was"),
        )
    });
    steps.push(
        JournaledStep::new(M::Stage.with("Complete"), "enter stage Complete", None).local(Arc::new(
            acts::EnterStage {
                live: live.clone(),
                record: MaintenanceRecord {
                    stage: Stage::Complete,
                    since: f.now.clone(),
                    stopped: vec![],
                    ..r.clone()
                },
            },
        )),
    );
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Transports;
    use crate::operations::balancers::Balancers;
    use crate::operations::Reach;
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};

    const INV: &str = concat!(
        "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: lab\nspec:\n  ssh:\n    agent: true\n",
        "  hosts:\n",
        "    - { name: cp1, address: 10.0.0.11, roles: [etcd, load-balancer] }\n",
        "    - { name: cp2, address: 10.0.0.12, roles: [etcd, load-balancer] }\n",
        "    - { name: cp3, address: 10.0.0.13, roles: [etcd] }\n",
        "  vip:\n    address: 10.0.0.100\n",
        "  stateDir: /tmp/hactl-maintenance-steps-test\n",
    );

    fn live() -> (tempfile::TempDir, Arc<Live>) {
        live_with(INV)
    }

    fn live_with(text: &str) -> (tempfile::TempDir, Arc<Live>) {
        let tmp = tempfile::tempdir().unwrap();
        let inv = crate::inventory::load_str(std::path::Path::new("lab.yaml"), text).unwrap();
        let state = crate::state::StateDir::open(&tmp.path().join("s")).unwrap();
        let live = Arc::new(Live {
            inv,
            state,
            host: "cp1".into(),
            connect: Default::default(),
            reach: Reach {
                transports: Transports::new(),
                facts: BTreeMap::new(),
                unreachable: BTreeMap::new(),
                key_changed: Default::default(),
            },
            kube: None,
            balancers: Balancers {
                transports: Transports::new(),
                unreachable: BTreeMap::new(),
            },
            max_unavailable: 1,
            drain_timeout: Duration::from_secs(60),
            leases: Mutex::new(vec![]),
            journal: OnceLock::new(),
        });
        (tmp, live)
    }

    fn facts() -> StartFacts {
        StartFacts {
            host: "cp1".into(),
            since: "t".into(),
            cordon_skip: Some("no kubernetes section in the inventory".into()),
            drain_skip: Some("no kubernetes section in the inventory".into()),
            moves_vip: true,
            balancers: true,
            etcd: true,
            etcd_active: true,
            observer: Some(("cp2".into(), "https://10.0.0.12:2379".into())),
            ..StartFacts::default()
        }
    }

    fn ids(steps: &[JournaledStep]) -> Vec<&str> {
        steps.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn static_pod_mode_moves_each_manifest_aside_and_back_in_the_same_order() {
        let text = INV
            .replace("roles: [etcd, load-balancer]", "roles: [etcd, control-plane, load-balancer]")
            .replace("roles: [etcd] }", "roles: [etcd, control-plane] }")
            + "  kubernetes:\n    version: 1.20.2\n    source: bundle\n    bundleDir: /\n    mode: static-pod\n";
        let (_t, live) = live_with(&text);
        let units: Vec<String> = KUBE_STOP_ORDER
            .iter()
            .map(|u| u.to_string())
            .chain([APISERVER.to_string()])
            .collect();
        let f = StartFacts {
            kube: true,
            kube_active: units.clone(),
            moves_vip: false,
            ..facts()
        };
        let steps = start(&f, &live);
        let order = ids(&steps);
        let at = |id: &str| order.iter().position(|x| *x == id).unwrap();
        assert!(at("stop-kube-scheduler.service") < at("lease-handover"));
        assert!(at("lb-drain") < at("stop-kube-apiserver.service"));
        for (unit, c) in [
            ("kube-scheduler.service", "kube-scheduler"),
            ("kube-controller-manager.service", "kube-controller-manager"),
            ("kube-apiserver.service", "kube-apiserver"),
        ] {
            let stop = steps
                .iter()
                .find(|s| s.id == format!("stop-{unit}"))
                .unwrap()
                .render(false);
            assert!(
                stop.contains(&format!(
                    "mv -f /etc/kubernetes/manifests/{c}.yaml /etc/kubernetes/manifests.hactl/maintenance/{c}.yaml"
                )),
                "{stop}"
            );
            // No unit to fence: the manifest's absence is what keeps the pod away.
            assert!(
                !stop.contains("hactl-fence.conf") && !stop.contains("systemctl stop"),
                "{stop}"
            );
            assert!(
                stop.contains("pgrep -f") && stop.contains(&format!("^(/usr/local/bin/)?({c})( |$)")),
                "{stop}"
            );
        }
        let record = MaintenanceRecord {
            host: "cp1".into(),
            stage: Stage::StopControlPlane,
            since: "t".into(),
            reason: String::new(),
            stopped: units.iter().cloned().chain([UNIT.to_string()]).collect(),
        };
        let steps = complete(
            &CompleteFacts {
                record,
                etcd: true,
                etcd_active: false,
                balancers: true,
                now: "t".into(),
            },
            &live,
        );
        let order = ids(&steps);
        let at = |id: &str| order.iter().position(|x| *x == id).unwrap();
        assert!(at("start-kube-apiserver.service") < at("start-kube-controller-manager.service"));
        assert!(at("start-kube-controller-manager.service") < at("start-kube-scheduler.service"));
        let back = steps
            .iter()
            .find(|s| s.id == "start-kube-apiserver.service")
            .unwrap()
            .render(false);
        assert!(
            back.contains("mv -f /etc/kubernetes/manifests.hactl/maintenance/kube-apiserver.yaml /etc/kubernetes/manifests/kube-apiserver.yaml"),
            "{back}"
        );
        assert!(back.contains("https://10.0.0.11:6443/readyz"), "{back}");
        assert!(!back.contains("systemctl start"), "{back}");
    }

    #[test]
    fn start_drains_the_balancers_before_etcd_stops_behind_a_fence() {
        let (_t, live) = live();
        let steps = start(&facts(), &live);
        assert_eq!(
            ids(&steps),
            [
                "stage-Cordon",
                "cordon",
                "stage-Drain",
                "drain",
                "stage-StopControlPlane",
                "vip-move",
                "lb-drain",
                "move-leader",
                "stop-etcd",
                "others-healthy"
            ]
        );
        let stop = steps.iter().find(|s| s.id == "stop-etcd").unwrap().render(false);
        // The fence is written under /etc (it survives a reboot) before the unit stops, and the
        // step is done only when the unit is fenced and stopped.
        assert!(
            stop.contains("/etc/systemd/system/etcd.service.d/hactl-fence.conf"),
            "{stop}"
        );
        assert!(
            stop.contains("systemctl daemon-reload && systemctl stop etcd.service"),
            "{stop}"
        );
        assert!(stop.contains("skip when: sh -c"), "{stop}");
        assert!(stop.contains("complete cp1"), "{stop}");
        // The record at StopControlPlane marks everything the stage stops, before the first stop.
        let rec = steps
            .iter()
            .find(|s| s.id == "stage-StopControlPlane")
            .unwrap()
            .render(false);
        assert!(
            rec.contains("marks: keepalived.service, haproxy-backends, etcd.service"),
            "{rec}"
        );
        // With Kubernetes units active: scheduler, controller-manager, Lease handover, then the
        // apiserver after the balancers, each fenced.
        let f = StartFacts {
            kube: true,
            kube_active: vec![
                "kube-apiserver.service".into(),
                "kube-controller-manager.service".into(),
                "kube-scheduler.service".into(),
            ],
            moves_vip: false,
            ..facts()
        };
        let steps = start(&f, &live);
        let order = ids(&steps);
        let at = |id: &str| order.iter().position(|x| *x == id).unwrap();
        assert!(at("lease-read") < at("stop-kube-scheduler.service"));
        assert!(at("stop-kube-scheduler.service") < at("stop-kube-controller-manager.service"));
        assert!(at("stop-kube-controller-manager.service") < at("lease-handover"));
        assert!(at("lease-handover") < at("lb-drain"));
        assert!(at("lb-drain") < at("stop-kube-apiserver.service"));
        assert!(at("stop-kube-apiserver.service") < at("stop-etcd"));
    }

    #[test]
    fn complete_lifts_each_fence_before_the_start_and_gates_on_the_member_only() {
        let (_t, live) = live();
        let f = CompleteFacts {
            record: MaintenanceRecord {
                host: "cp1".into(),
                stage: Stage::StopControlPlane,
                since: "t".into(),
                reason: String::new(),
                stopped: vec![VIP_MARK.into(), DRAIN_MARK.into(), UNIT.into()],
            },
            etcd: true,
            etcd_active: false,
            balancers: true,
            now: "t2".into(),
        };
        let steps = complete(&f, &live);
        assert_eq!(
            ids(&steps),
            [
                "start-etcd",
                "lb-ready",
                "vip-restore",
                "uncordon",
                "stage-Complete"
            ]
        );
        let start = steps[0].render(false);
        let lift = start.find("hactl-fence.conf").unwrap();
        let run = start.find("systemctl start --no-block etcd.service").unwrap();
        assert!(lift < run, "{start}");
        // The gate: this member healthy (a linearizable read through it), not `--cluster`.
        assert!(
            start.contains("verify: wait up to 120s: etcd member cp1 is healthy"),
            "{start}"
        );
        assert!(!start.contains("--cluster"), "{start}");
        // Not cordoned by hactl: uncordon is skipped with the reason.
        assert!(steps[3]
            .render(false)
            .contains("skip when: hactl did not cordon Node cp1"));
    }

    /// Systemd mode: the apiserver is back behind the VIP only once its `/readyz` answers (HAProxy
    /// takes a server leaving MAINT as UP at once), and each component's start waits for its
    /// health.
    #[test]
    fn systemd_complete_puts_the_host_back_behind_the_vip_only_once_its_apiserver_is_ready() {
        let text = INV
            .replace(
                "roles: [etcd, load-balancer]",
                "roles: [etcd, control-plane, load-balancer]",
            )
            .replace("roles: [etcd] }", "roles: [etcd, control-plane] }")
            + "  kubernetes:\n    version: 1.20.2\n    source: bundle\n    bundleDir: /\n";
        let (_t, live) = live_with(&text);
        let record = MaintenanceRecord {
            host: "cp1".into(),
            stage: Stage::StopControlPlane,
            since: "t".into(),
            reason: String::new(),
            stopped: KUBE_STOP_ORDER
                .iter()
                .map(|u| u.to_string())
                .chain([APISERVER.to_string(), DRAIN_MARK.to_string(), UNIT.to_string()])
                .collect(),
        };
        let steps = complete(
            &CompleteFacts {
                record,
                etcd: true,
                etcd_active: false,
                balancers: true,
                now: "t".into(),
            },
            &live,
        );
        let order = ids(&steps);
        let at = |id: &str| order.iter().position(|x| *x == id).unwrap();
        assert!(at("start-etcd") < at("start-kube-apiserver.service"));
        assert!(at("start-kube-apiserver.service") < at("lb-ready"));
        for (unit, endpoint) in [
            ("kube-apiserver.service", "https://10.0.0.11:6443/readyz"),
            (
                "kube-controller-manager.service",
                "https://127.0.0.1:10257/healthz",
            ),
            ("kube-scheduler.service", "https://127.0.0.1:10259/healthz"),
        ] {
            let start = steps
                .iter()
                .find(|s| s.id == format!("start-{unit}"))
                .unwrap()
                .render(false);
            assert!(start.contains(&format!("systemctl start {unit}")), "{start}");
            let verify = start.find("verify:").unwrap_or_else(|| panic!("{start}"));
            assert!(start[verify..].contains(endpoint), "{start}");
        }
    }

    #[test]
    fn complete_during_drain_cancels_and_starts_nothing() {
        let (_t, live) = live();
        let f = CompleteFacts {
            record: MaintenanceRecord {
                host: "cp1".into(),
                stage: Stage::Drain,
                since: "t".into(),
                reason: String::new(),
                stopped: vec![CORDON_MARK.into()],
            },
            etcd: true,
            etcd_active: true,
            balancers: true,
            now: "t2".into(),
        };
        let steps = complete(&f, &live);
        assert_eq!(ids(&steps), ["cancel", "uncordon", "stage-Complete"]);
    }

    #[test]
    fn a_step_as_json_carries_what_the_dry_run_prints() {
        let s = stop_fenced("cp1", UNIT);
        let v = s.to_json(true);
        assert_eq!(v["id"], "stop-etcd");
        assert_eq!(v["code"], "stop");
        assert_eq!(v["host"], "cp1");
        let run = v["acts"][0]["command"].as_str().unwrap();
        assert!(s.render(true).contains(run), "{run}");
        assert!(run.starts_with("sudo -n -- sh -c"), "{run}");
        assert!(v["skipWhen"]["command"]
            .as_str()
            .unwrap()
            .contains("hactl-fence.conf"));
        assert_eq!(
            stop_fenced("cp1", "kube-scheduler.service").id,
            "stop-kube-scheduler.service"
        );
    }
}
