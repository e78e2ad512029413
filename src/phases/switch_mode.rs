//! Switch a control-plane host whose control plane runs in the other mode than the inventory's
//! `kubernetes.mode` (systemd units, or static pods under the kubelet), one host at a time with
//! the API up: HAProxy on every load balancer puts the host's `kubernetes-api` backend in
//! maintenance, the old runners stop, the new ones start and answer their health endpoints,
//! both Leases are freshly renewed, and the backend is made ready again before the next host.
//!
//! - systemd → static-pod: the three units are disabled and stopped (their files stay, disabled:
//!   nothing is deleted), then each manifest is written and the kubelet starts its pod. The
//!   kubelet, the control-plane images and the files the components read are in place before
//!   (the phases before this one: `start_kubelets` runs them in static-pod mode).
//! - static-pod → systemd: each manifest is moved aside ([`manifest_aside`], never deleted)
//!   and the kubelet's pod is waited for to be gone, then each unit (written by
//!   `configure_kubernetes`, its binary by `install_kubernetes`) is enabled and started.
//!
//! A host that does not come back stops the switch with its backend still in maintenance, so
//! clients are never sent to it; the next `up` finds the host half-switched (some runners of
//! each mode, or none) and carries on from what its facts show. The other phases leave a host
//! that runs the other mode to this one ([`other_mode`]): `start_kubernetes` starts nothing on
//! it and the rolls find nothing of the new mode running there to restart.

use std::time::Duration;

use super::configure_kubernetes::uploads;
use super::install_kubernetes::control_plane_hosts;
use super::roll_apiservers::{behind_drained_apiserver, lease_gate, manifest_aside};
use super::start_kubernetes::{mode_name, other_mode};
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, KubernetesMode};
use crate::kubernetes::{probe, Component};
use crate::plan::{Check, Parallelism, PlannedPhase, RemoteCommand, Step};

pub struct SwitchMode;

/// The steps on `host` that take its control plane from the other mode (what its facts show) to
/// `wanted`, the inventory's: the old runners stopped, the new ones started and waited for.
fn switch_steps(host: &Host, ctx: &Ctx<'_>, wanted: KubernetesMode) -> Result<Vec<Step>, PlanError> {
    let f = ctx.facts(host);
    let mut steps = Vec::new();
    match wanted {
        KubernetesMode::StaticPod => {
            // Units that still run or start at boot: disabled and stopped together (systemctl
            // waits for each stop).
            let units: Vec<String> = Component::ALL
                .iter()
                .map(|c| c.unit())
                .filter(|u| {
                    f.units
                        .get(u)
                        .is_some_and(|s| s.active == "active" || s.enabled == "enabled")
                })
                .collect();
            if !units.is_empty() {
                let mut cmd = vec![
                    "systemctl".to_string(),
                    "disable".to_string(),
                    "--now".to_string(),
                ];
                cmd.extend(units);
                steps.push(Step::Run(RemoteCommand::new(cmd)));
            }
            let (_, manifests) = uploads(host, ctx)?;
            for (component, manifest) in Component::ALL.into_iter().zip(manifests) {
                let path = manifest.path.clone();
                steps.push(Step::Upload(manifest));
                steps.push(Step::Wait(
                    Check::command(
                        format!(
                            "the kubelet on {} started {} and it answers {}",
                            host.name,
                            component.binary(),
                            probe::endpoint(component)
                        ),
                        probe::healthy(component, host),
                        Duration::from_secs(300),
                    )
                    .diagnose_with(probe::static_pod_diagnosis(component, &path)),
                ));
            }
        }
        KubernetesMode::Systemd => {
            for component in Component::ALL {
                let path = component.manifest_path();
                if !f.files.contains_key(&path) {
                    continue;
                }
                steps.push(Step::Run(manifest_aside(&path)));
                steps.push(Step::Wait(Check::command(
                    format!("the kubelet on {} stopped {}", host.name, component.binary()),
                    probe::stopped(component),
                    Duration::from_secs(120),
                )));
            }
            for component in Component::ALL {
                steps.push(Step::Run(RemoteCommand::new([
                    "systemctl".to_string(),
                    "enable".to_string(),
                    component.unit(),
                ])));
                steps.push(Step::Run(super::start_unit(&component.unit())));
                steps.push(Step::Wait(probe::wait_healthy(
                    component,
                    host,
                    Duration::from_secs(180),
                )));
            }
        }
    }
    Ok(steps)
}

impl Phase for SwitchMode {
    fn title(&self) -> &'static str {
        "Switch the Kubernetes control plane's mode"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        control_plane_hosts(inv)
    }
    /// One at a time: each switch takes a host's apiserver out of the load balancers' rotation.
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn disruptive(&self) -> bool {
        true
    }
    /// A host whose control plane runs in the other mode: its switch, then the Lease gate (the
    /// host's controller-manager and scheduler were stopped and started, and a leader among
    /// them lost its Lease); nothing on any other host.
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        if other_mode(kube.mode, ctx.facts(host)).is_none() {
            return Ok(vec![]);
        }
        let mut steps = switch_steps(host, ctx, kube.mode)?;
        steps.extend(lease_gate(host));
        Ok(steps)
    }
    /// As the apiserver roll: every LB (maint), the host (switch, wait), every LB (ready), then
    /// the next host. The phase's title names the way.
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        let mut hosts = Vec::new();
        for host in self.hosts(ctx.inv) {
            let steps = self.steps(host, ctx)?;
            if !steps.is_empty() {
                hosts.extend(behind_drained_apiserver(ctx.inv, host, steps));
            }
        }
        let from = match kube.mode {
            KubernetesMode::StaticPod => KubernetesMode::Systemd,
            KubernetesMode::Systemd => KubernetesMode::StaticPod,
        };
        Ok(vec![PlannedPhase {
            title: format!(
                "Switch the control plane from {} to {}, one host at a time",
                mode_name(from),
                mode_name(kube.mode)
            ),
            parallelism: self.parallelism(),
            disruptive: self.disruptive(),
            hosts,
        }])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::facts::{FileState, HostFacts, UnitState};
    use crate::kubernetes::{node, secrets::EncryptionKey, KubernetesInputs};

    fn inventory(dir: &std::path::Path, mode: &str) -> Inventory {
        let mode = format!("mode: {mode}");
        let mut inv =
            crate::phases::test_inventory::stacked(dir, "switch", 1, &[&mode, "cgroupDriver: cgroupfs"]);
        // The images come from the stand-ins of `inputs`, whatever the inventory names.
        inv.kubernetes.as_mut().unwrap().images = crate::inventory::ImageSource::Dir("/images".into());
        inv
    }

    fn inputs() -> KubernetesInputs {
        let images = node::NodeImages {
            pause: "hactl.local/pause:3.4".into(),
            control_plane: Component::ALL
                .iter()
                .map(|c| {
                    (
                        c.binary().to_string(),
                        format!("hactl.local/{}:v1.20.2", c.binary()),
                    )
                })
                .collect(),
            shipped: vec![],
        };
        KubernetesInputs::new(None, EncryptionKey::from_bytes([7; 32])).with_node(None, Some(images))
    }

    fn active() -> UnitState {
        UnitState {
            active: "active".into(),
            enabled: "enabled".into(),
            ..UnitState::default()
        }
    }

    /// The phase's plan as `host: step` lines (commands by their argv, uploads by path, waits by
    /// what they wait for).
    fn lines(inv: &Inventory, facts: &BTreeMap<String, HostFacts>) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::ensure(&dir.path().join("pki"), inv, time::OffsetDateTime::now_utc()).unwrap();
        let inputs = inputs();
        let ctx = Ctx::new(inv, &pki, facts).with_kubernetes(Some(&inputs));
        let phases = SwitchMode.plan(&ctx).unwrap();
        let mut out = Vec::new();
        for phase in &phases {
            for hs in &phase.hosts {
                for step in &hs.steps {
                    let s = match step {
                        Step::Run(c) => c.argv.join(" "),
                        Step::Upload(u) => format!("upload {}", u.path),
                        Step::Wait(c) => format!("wait {}", c.description),
                        other => format!("{other:?}"),
                    };
                    out.push(format!("{}: {s}", hs.host));
                }
            }
        }
        out
    }

    fn position(lines: &[String], prefix: &str) -> usize {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{}", lines.join("\n")))
    }

    #[test]
    fn systemd_hosts_switch_to_static_pods_one_at_a_time_behind_a_drained_backend() {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path(), "static-pod");
        let mut facts: BTreeMap<String, HostFacts> = ["cp1", "cp2", "cp3", "lb1"]
            .iter()
            .map(|h| (h.to_string(), HostFacts::default()))
            .collect();
        // cp1 and cp3 run the three units; cp2 switched already (its manifests written, units
        // disabled).
        for h in ["cp1", "cp3"] {
            for c in Component::ALL {
                facts.get_mut(h).unwrap().units.insert(c.unit(), active());
            }
        }
        for c in Component::ALL {
            facts
                .get_mut("cp2")
                .unwrap()
                .files
                .insert(c.manifest_path(), FileState::default());
        }
        let l = lines(&inv, &facts);
        assert!(
            !l.iter().any(|s| s.starts_with("cp2:")),
            "cp2 switched already:\n{}",
            l.join("\n")
        );
        // cp1: drained, units stopped, manifests written and waited for, Leases, ready; then cp3.
        let drain1 = position(
            &l,
            "lb1: /usr/local/sbin/hactl-haproxy state kubernetes-api cp1 drain",
        );
        let stop1 = position(
            &l,
            "cp1: systemctl disable --now kube-apiserver.service kube-controller-manager.service kube-scheduler.service",
        );
        let write1 = position(&l, "cp1: upload /etc/kubernetes/manifests/kube-apiserver.yaml");
        let ready1 = position(
            &l,
            "lb1: /usr/local/sbin/hactl-haproxy state kubernetes-api cp1 ready",
        );
        let drain3 = position(
            &l,
            "lb1: /usr/local/sbin/hactl-haproxy state kubernetes-api cp3 drain",
        );
        assert!(
            drain1 < stop1 && stop1 < write1 && write1 < ready1 && ready1 < drain3,
            "{}",
            l.join("\n")
        );
        let cp1: Vec<&String> = l.iter().filter(|s| s.starts_with("cp1:")).collect();
        assert_eq!(
            cp1.iter()
                .filter(|s| s.contains("upload /etc/kubernetes/manifests/"))
                .count(),
            3
        );
        assert!(
            cp1.last().unwrap().contains("Lease"),
            "the Lease gate ends cp1's steps: {cp1:?}"
        );
    }

    #[test]
    fn static_pod_hosts_switch_to_units_with_their_manifests_moved_aside_not_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path(), "systemd");
        let mut facts: BTreeMap<String, HostFacts> = ["cp1", "cp2", "cp3", "lb1"]
            .iter()
            .map(|h| (h.to_string(), HostFacts::default()))
            .collect();
        for c in Component::ALL {
            facts
                .get_mut("cp2")
                .unwrap()
                .files
                .insert(c.manifest_path(), FileState::default());
        }
        let l = lines(&inv, &facts);
        assert!(
            !l.iter().any(|s| s.starts_with("cp1:") || s.starts_with("cp3:")),
            "only cp2 runs static pods:\n{}",
            l.join("\n")
        );
        let aside = position(&l, "cp2: sh -c mkdir -p");
        let stopped = position(&l, "cp2: wait the kubelet on cp2 stopped kube-apiserver");
        let enable = position(&l, "cp2: systemctl enable kube-apiserver.service");
        let ready = position(
            &l,
            "lb1: /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 ready",
        );
        assert!(
            aside < stopped && stopped < enable && enable < ready,
            "{}",
            l.join("\n")
        );
        assert!(
            l.iter()
                .filter(|s| s.contains("rm "))
                .all(|s| s.ends_with(": rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp2")),
            "nothing is deleted but the load balancers' note of the drain:\n{}",
            l.join("\n")
        );
        assert!(
            l[aside].ends_with(super::super::roll_apiservers::PREVIOUS_MANIFESTS),
            "{}",
            l[aside]
        );
    }

    #[test]
    fn a_cluster_in_one_mode_plans_no_switch() {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path(), "systemd");
        let mut facts: BTreeMap<String, HostFacts> = ["cp1", "cp2", "cp3", "lb1"]
            .iter()
            .map(|h| (h.to_string(), HostFacts::default()))
            .collect();
        for h in ["cp1", "cp2", "cp3"] {
            for c in Component::ALL {
                facts.get_mut(h).unwrap().units.insert(c.unit(), active());
            }
        }
        assert_eq!(lines(&inv, &facts), Vec::<String>::new());
    }
}
