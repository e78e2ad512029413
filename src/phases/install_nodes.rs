//! Install the node components on every control-plane and worker host: containerd, runc and the
//! CNI reference plugins (the distribution's packages, or a release's or bundle's binaries
//! uploaded from the operator machine, as etcd's `source` works), iptables and conntrack for
//! kube-proxy, curl for the probes, and the kubelet and kube-proxy binaries of the same bundle or
//! release as the control plane.

use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{BinarySource, Host, Inventory};
use crate::kubernetes::node::{NODE_PACKAGES, PROXY_PACKAGES};
use crate::kubernetes::KubernetesPlanError;
use crate::plan::Step;

pub struct InstallNodes;

/// The packages a node host lacks, from what its facts show (a binary on PATH or a file).
pub fn missing_packages<'a>(f: &crate::facts::HostFacts, containerd: &BinarySource) -> Vec<&'a str> {
    let known = |by: &str| {
        if by.starts_with('/') {
            f.files.contains_key(by)
        } else {
            f.binaries.contains_key(by)
        }
    };
    let from_packages = matches!(containerd, BinarySource::Package);
    NODE_PACKAGES
        .iter()
        .filter(|_| from_packages)
        .chain(PROXY_PACKAGES.iter())
        .filter(|(_, by)| !known(by))
        .map(|(package, _)| *package)
        .collect()
}

impl Phase for InstallNodes {
    fn title(&self) -> &'static str {
        "Install the node components"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.node_hosts()
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(kube) = &ctx.inv.kubernetes else {
            return Ok(vec![]);
        };
        let inputs = ctx.kubernetes.ok_or(KubernetesPlanError::MissingInputs)?;
        let f = ctx.facts(host);
        let packages = super::with_curl(f, missing_packages(f, &kube.containerd));
        // A control-plane host that is also an etcd host got curl from the etcd install, and
        // one that is not from the control-plane install: ask apt only for what is left.
        let packages: Vec<&str> = packages
            .into_iter()
            .filter(|p| *p != "curl" || !host.has(crate::inventory::Role::ControlPlane))
            .collect();
        let mut steps = Vec::new();
        if !packages.is_empty() {
            steps.push(Step::Run(super::apt_install(&packages)));
        }
        steps.extend(
            inputs
                .containerd_binaries
                .iter()
                .chain(&inputs.node_binaries)
                .filter(|u| differs(f, u))
                .cloned()
                .map(Step::Upload),
        );
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_missing_packages_are_installed_and_containerds_only_from_packages() {
        let mut f = crate::facts::HostFacts::default();
        let pkg = BinarySource::Package;
        assert_eq!(
            missing_packages(&f, &pkg),
            [
                "containerd",
                "runc",
                "containernetworking-plugins",
                "iptables",
                "conntrack"
            ]
        );
        let bundle = BinarySource::Bundle { dir: "/b".into() };
        assert_eq!(missing_packages(&f, &bundle), ["iptables", "conntrack"]);
        for b in ["containerd", "runc", "iptables", "conntrack"] {
            f.binaries.insert(b.into(), format!("/usr/bin/{b}"));
        }
        assert_eq!(missing_packages(&f, &pkg), ["containernetworking-plugins"]);
        f.files.insert("/usr/lib/cni/bridge".into(), Default::default());
        assert!(missing_packages(&f, &pkg).is_empty());
    }
}
