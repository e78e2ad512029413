//! Install the load balancers: HAProxy, keepalived and curl from the distribution's packages
//! (with service starts blocked, so neither starts on Debian's defaults), and the sysctl that
//! lets HAProxy bind the VIP on a host that does not hold it.

use super::load_balancer::sysctl_file;
use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::load_balancer as lb;
use crate::plan::{RemoteCommand, Step};

pub struct InstallLoadBalancer;

/// The binaries a load-balancer host needs (curl speaks to HAProxy's admin socket).
pub const BINARIES: [&str; 3] = ["haproxy", "keepalived", "curl"];

/// apt-get with service starts blocked (policy-rc.d), like the etcd install.
pub const APT_INSTALL: &str = "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy keepalived curl; rc=$?; rm -f /usr/sbin/policy-rc.d; exit $rc";

impl Phase for InstallLoadBalancer {
    fn title(&self) -> &'static str {
        "Install load balancers"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::LoadBalancer)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let f = ctx.facts(host);
        let mut steps = Vec::new();
        if BINARIES.iter().any(|b| !f.binaries.contains_key(*b)) {
            steps.push(Step::Run(
                RemoteCommand::script(APT_INSTALL).with_timeout(std::time::Duration::from_secs(600)),
            ));
        }
        let sysctl = sysctl_file()?;
        if differs(f, &sysctl) {
            steps.push(Step::Upload(sysctl));
            steps.push(Step::Run(RemoteCommand::new([
                "sysctl",
                "-q",
                "-p",
                lb::SYSCTL_CONF,
            ])));
        }
        Ok(steps)
    }
}
