//! Install the load balancers: HAProxy, keepalived and curl from the distribution's packages
//! (with service starts blocked, so neither starts on Debian's defaults), and the sysctl that
//! lets HAProxy bind the VIP on a host that does not hold it.

use super::load_balancer::sysctl_file;
use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::load_balancer as lb;
use crate::plan::{RemoteCommand, Step};

pub struct InstallLoadBalancer;

/// The binaries a load-balancer host needs (curl speaks to HAProxy's admin socket), each from the
/// Debian package of the same name.
pub const BINARIES: [&str; 3] = ["haproxy", "keepalived", "curl"];

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
            steps.push(Step::Run(super::apt_install(&BINARIES)));
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
