//! Restart running apiservers whose binary, unit, manifest, certificates or configuration changed,
//! one host at a time. For each: HAProxy on every load balancer puts the host's backend in
//! maintenance (no new connections go there), the apiserver restarts (systemd) or the kubelet
//! replaces its pod (static pod: the new manifest is written here), `/readyz` must answer, and
//! the backend is made ready again before the next host. A host that does not come back stops the
//! rollout with its backend still in maintenance, so clients are never sent to it.
//!
//! The HAProxy steps come from the load-balancer layer ([`super::load_balancer::drain_backend_steps`]
//! and [`super::load_balancer::ready_backend_steps`]), which also waits for HAProxy to agree.

use std::time::Duration;

use super::configure_kubernetes::uploads;
use super::install_kubernetes::control_plane_hosts;
use super::load_balancer::{drain_backend_steps_by, ready_backend_steps_by, Backend, Holder};
use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, KubernetesMode};
use crate::kubernetes::{files, probe, Component};
use crate::plan::{Check, HostSteps, Parallelism, PlannedPhase, RemoteCommand, Step, Upload};

pub struct RollApiservers;

/// Whether a running component on `host` must restart: its binary, its unit or manifest, or a file
/// it reads differs from what the facts report. Returns the new manifest in static-pod mode.
pub fn restart_needed(
    component: Component,
    host: &Host,
    ctx: &Ctx<'_>,
) -> Result<Option<Option<Upload>>, PlanError> {
    let Some(kube) = &ctx.inv.kubernetes else {
        return Ok(None);
    };
    let f = ctx.facts(host);
    let (host_files, runners) = uploads(host, ctx)?;
    let runner = runners
        .into_iter()
        .find(|u| u.path == component.unit_path() || u.path == component.manifest_path())
        .expect("one runner per component");
    match kube.mode {
        KubernetesMode::Systemd => {
            let active = unit_active(f, component);
            let binary_changed = ctx
                .kubernetes
                .iter()
                .flat_map(|k| &k.binaries)
                .any(|b| b.path == component.binary_path() && differs(f, b));
            let reads_changed = host_files
                .iter()
                .any(|u| files::reads(component).contains(&u.path.as_str()) && differs(f, u));
            // Written after the unit started (a run uploaded them and stopped before this
            // restart): the process still runs what was there before.
            let (binary, unit) = (component.binary_path(), component.unit_path());
            let read_at_start = files::reads(component)
                .iter()
                .copied()
                .chain([binary.as_str(), unit.as_str()]);
            let stale = !f.written_after_start(&component.unit(), read_at_start).is_empty();
            Ok((active && (binary_changed || reads_changed || stale || differs(f, &runner))).then_some(None))
        }
        // The manifest carries a hash of what the component reads, so it alone decides.
        KubernetesMode::StaticPod => {
            Ok((f.files.contains_key(&runner.path) && differs(f, &runner)).then_some(Some(runner)))
        }
    }
}

/// The components that elect a leader through a Lease.
pub const CONTROLLERS: [Component; 2] = [Component::ControllerManager, Component::Scheduler];

/// Whether `component`'s unit is active on the host of `f` (systemd mode).
fn unit_active(f: &crate::facts::HostFacts, component: Component) -> bool {
    f.units
        .get(&component.unit())
        .is_some_and(|u| u.active == "active")
}

/// The Lease gate read on `host`: both [`CONTROLLERS`]' Leases freshly renewed, so someone
/// leads again before a roll moves on.
pub fn lease_gate(host: &Host) -> [Step; 2] {
    CONTROLLERS.map(|c| Step::Wait(probe::wait_lease_fresh(c, host, Duration::from_secs(90))))
}

/// Whether `host` runs both a controller-manager and a scheduler (their units active, or in
/// static-pod mode their manifests written): then a leader among them follows this host's
/// apiserver.
fn controllers_run(host: &Host, ctx: &Ctx<'_>) -> bool {
    let Some(kube) = &ctx.inv.kubernetes else {
        return false;
    };
    let f = ctx.facts(host);
    CONTROLLERS.iter().all(|c| match kube.mode {
        KubernetesMode::Systemd => unit_active(f, *c),
        KubernetesMode::StaticPod => f.files.contains_key(&c.manifest_path()),
    })
}

/// Where a static pod's manifest goes while the kubelet stops its pod, before the new one is
/// written: the previous manifest stays there (never deleted), one per component.
pub const PREVIOUS_MANIFESTS: &str = "/etc/kubernetes/manifests.hactl-previous";

/// Moves the manifest at `path` into [`PREVIOUS_MANIFESTS`] (kept, never deleted), so the
/// kubelet stops its pod; nothing when it is not there.
pub fn manifest_aside(path: &str) -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        "mkdir -p \"$2\" && if [ -e \"$1\" ]; then mv -f \"$1\" \"$2/\"; fi",
        "hactl-manifest-aside",
        path,
        PREVIOUS_MANIFESTS,
    ])
}

/// `steps` on `host` with its apiserver out of the load balancers' rotation meanwhile: every LB
/// drains it and puts it in maintenance first, and makes it ready again (waiting up to 60 s for
/// its check) after. A host that does not come back leaves its server in maintenance, noted as
/// `up`'s ([`Holder::Up`]): `status` reports it and the next `up` returns it once the host's
/// apiserver answers.
pub fn behind_drained_apiserver(inv: &Inventory, host: &Host, steps: Vec<Step>) -> Vec<HostSteps> {
    let mut hosts = drain_backend_steps_by(inv, Backend::KubernetesApi, &host.name, Holder::Up);
    hosts.push(HostSteps {
        host: host.name.clone(),
        sudo: host.ssh.sudo,
        steps,
    });
    hosts.extend(ready_backend_steps_by(
        inv,
        Backend::KubernetesApi,
        &host.name,
        Duration::from_secs(60),
        Holder::Up,
    ));
    hosts
}

/// The steps on `host` that restart `component` (or replace its pod) and wait for it.
///
/// Static-pod mode stops the old pod before it writes the new manifest, then waits for the
/// component to answer: with no process left in between, whatever answers is the new pod. (Two
/// things go wrong otherwise. A kubelet of these releases, given a changed manifest, can start
/// the new pod while the old one still shuts down within its 30 s grace period; both use the
/// host's network, so the new process may find its port taken, exit and be retried with a
/// doubling back-off. And telling the new process from the old one by its start time against the
/// manifest's mtime failed: both are whole seconds, /proc's start time is cut twice, up to 2 s
/// early, and the kubelet starts the pod well within a second of the write; a replace in CI
/// waited 300 s for a new apiserver that had been answering all along.) Stopping first is what
/// `systemctl restart` does in systemd mode. A run cut between the two leaves no manifest; the
/// next `up` writes it (the start phase) and starts the pod.
pub fn restart_steps(component: Component, host: &Host, manifest: Option<Upload>) -> Vec<Step> {
    match manifest {
        None => vec![
            Step::Run(RemoteCommand::new([
                "systemctl".to_string(),
                "restart".to_string(),
                component.unit(),
            ])),
            Step::Wait(probe::wait_healthy(component, host, Duration::from_secs(120))),
        ],
        Some(manifest) => {
            let path = manifest.path.clone();
            let binary = component.binary();
            vec![
                Step::Run(manifest_aside(&path)),
                Step::Wait(Check::command(
                    format!("the kubelet on {} stopped {binary}", host.name),
                    probe::stopped(component),
                    Duration::from_secs(120),
                )),
                Step::Upload(manifest),
                Step::Wait(
                    Check::command(
                        format!(
                            "the kubelet on {} started {binary} again and it answers {}",
                            host.name,
                            probe::endpoint(component)
                        ),
                        probe::healthy(component, host),
                        Duration::from_secs(300),
                    )
                    .diagnose_with(probe::static_pod_diagnosis(component, &path)),
                ),
            ]
        }
    }
}

impl Phase for RollApiservers {
    fn title(&self) -> &'static str {
        "Restart changed apiservers"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        control_plane_hosts(inv)
    }
    /// One at a time: each restart takes an apiserver out of the load balancers' rotation.
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn disruptive(&self) -> bool {
        true
    }
    /// After the restart, when the host runs a controller-manager and a scheduler, a Lease gate
    /// (both Leases freshly renewed): they talk to this host's apiserver, so a leader among them
    /// loses its Lease when the restart outlasts its renew deadline (10 s), and nobody leads
    /// until the Lease expires. The roll (and the command) does not move on, or end, while
    /// nobody leads.
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(manifest) = restart_needed(Component::ApiServer, host, ctx)? else {
            return Ok(vec![]);
        };
        let mut steps = restart_steps(Component::ApiServer, host, manifest);
        if controllers_run(host, ctx) {
            steps.extend(lease_gate(host));
        }
        Ok(steps)
    }
    /// Steps run on the load balancers around each host's restart, so the plan lists, in order:
    /// every LB (maint), the host (restart, wait), every LB (ready), then the next host.
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        let mut hosts = Vec::new();
        for host in self.hosts(ctx.inv) {
            let steps = self.steps(host, ctx)?;
            if !steps.is_empty() {
                hosts.extend(behind_drained_apiserver(ctx.inv, host, steps));
            }
        }
        Ok(vec![PlannedPhase {
            title: self.title().to_string(),
            parallelism: self.parallelism(),
            disruptive: self.disruptive(),
            hosts,
        }])
    }
}
