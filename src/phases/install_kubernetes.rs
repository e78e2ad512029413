//! Install the Kubernetes control-plane binaries (systemd mode): release or bundle binaries,
//! uploaded from the operator machine to /usr/local/bin, and curl for the readiness probes (both
//! modes). Static-pod mode runs images and installs no binaries here.
//!
//! Before anything is planned, the version skew rules ([`crate::kubernetes::skew`]) are checked
//! against what the hosts report, and `source: package` is refused (no distribution carries the
//! server binaries).

use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, KubernetesMode, Role};
use crate::kubernetes::skew::{self, Installed};
use crate::kubernetes::{Component, KubernetesPlanError};
use crate::plan::{PlannedPhase, Step};

pub struct InstallKubernetes;

/// Control-plane hosts when the inventory has a kubernetes section, else none.
pub fn control_plane_hosts(inv: &Inventory) -> Vec<&Host> {
    if inv.kubernetes.is_some() {
        inv.with_role(Role::ControlPlane)
    } else {
        vec![]
    }
}

/// Refuses what cannot be installed: a package source in systemd mode, or a rollout that breaks
/// the version skew rules given what the hosts report.
pub fn refuse(ctx: &Ctx<'_>) -> Result<(), KubernetesPlanError> {
    let Some(kube) = &ctx.inv.kubernetes else {
        return Ok(());
    };
    if crate::inventory::validate::kubernetes_source_refusal(&kube.mode, &kube.source).is_some() {
        return Err(KubernetesPlanError::PackageSource);
    }
    let mut installed = Vec::new();
    for host in ctx.inv.with_role(Role::ControlPlane) {
        for component in Component::ALL {
            if let Some(version) = ctx
                .facts(host)
                .kube_versions
                .get(component.binary())
                .and_then(|text| skew::parse_kubernetes_version(text))
            {
                installed.push(Installed {
                    host: host.name.clone(),
                    component,
                    version,
                });
            }
        }
    }
    // The etcd each apiserver will talk to: the inventory's version once the etcd phases ran,
    // else what the host runs now. (A package install of unknown version is not checked.)
    let mut etcd = Vec::new();
    for host in ctx.inv.with_role(Role::Etcd) {
        let reported = ctx
            .facts(host)
            .etcd_version
            .as_deref()
            .and_then(skew::parse_etcd_version);
        if let Some(v) = ctx.inv.etcd.version.clone().or(reported) {
            etcd.push((host.name.clone(), v));
        }
    }
    let violations = skew::violations(&kube.version, &installed, &etcd);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(KubernetesPlanError::Skew(violations))
    }
}

impl Phase for InstallKubernetes {
    fn title(&self) -> &'static str {
        "Install Kubernetes control-plane binaries"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        control_plane_hosts(inv)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        let f = ctx.facts(host);
        // The readiness probes run curl on the host, in either mode (an etcd host got it from
        // the etcd install already).
        let mut steps: Vec<Step> = match super::with_curl(f, vec![]) {
            packages if packages.is_empty() || host.has(Role::Etcd) => vec![],
            packages => vec![Step::Run(super::apt_install(&packages))],
        };
        if kube.mode != KubernetesMode::Systemd {
            return Ok(steps);
        }
        let inputs = ctx.kubernetes.ok_or(KubernetesPlanError::MissingInputs)?;
        steps.extend(
            inputs
                .binaries
                .iter()
                .filter(|u| differs(f, u))
                .cloned()
                .map(Step::Upload),
        );
        Ok(steps)
    }
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        refuse(ctx)?;
        Ok(vec![super::per_host(self, ctx)?])
    }
}
