//! Configure the load balancers: HAProxy (validated with `haproxy -c` before it is started or
//! reloaded; a reload, never a restart, when its files change) and keepalived (reloaded when its
//! files change). Then, if anything changed, etcd must answer through the VIP (asked from the
//! first etcd host, which holds a client certificate; the load balancers hold none).
//!
//! One host at a time: the hosts behind the VIP are never reloaded together.

use std::time::Duration;

use super::load_balancer::{haproxy_answers, haproxy_cli, haproxy_files, keepalived_files, vip_serves_etcd};
use super::{differs, uploads_needed, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::load_balancer as lb;
use crate::plan::{HostSteps, Parallelism, PlannedPhase, RemoteCommand, Step};

pub struct ConfigureLoadBalancer;

/// enable / start / reload of one unit, from its facts and whether its files changed.
fn unit_steps(ctx: &Ctx<'_>, host: &Host, unit: &str, changed: bool, steps: &mut Vec<Step>) -> bool {
    let state = ctx.facts(host).units.get(unit).cloned().unwrap_or_default();
    if state.enabled != "enabled" {
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "enable", unit])));
    }
    if state.active != "active" {
        steps.push(Step::Run(super::start_unit(unit)));
        true
    } else if changed {
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "reload", unit])));
        true
    } else {
        false
    }
}

impl Phase for ConfigureLoadBalancer {
    fn title(&self) -> &'static str {
        "Configure load balancers"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::LoadBalancer)
    }
    /// One at a time: each reload is checked before the next host's, so a bad config never
    /// reaches every load balancer.
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let f = ctx.facts(host);
        let haproxy = haproxy_files(host, ctx)?;
        let keepalived = keepalived_files(host, ctx)?;
        let haproxy_changed = haproxy.iter().any(|u| differs(f, u));
        let keepalived_changed = keepalived.iter().any(|u| differs(f, u));
        // The distribution's haproxy.cfg (or an operator's keepalived.conf) is kept once.
        let mut steps: Vec<Step> = haproxy
            .iter()
            .chain(&keepalived)
            .filter_map(|u| super::keep_original(f, u))
            .collect();
        steps.extend(uploads_needed(f, haproxy));
        steps.extend(uploads_needed(f, vec![haproxy_cli()?]));
        steps.extend(uploads_needed(f, keepalived));

        let haproxy_active = f
            .units
            .get(lb::HAPROXY_UNIT)
            .is_some_and(|u| u.active == "active");
        if haproxy_changed || !haproxy_active {
            steps.push(Step::Run(RemoteCommand::new([
                "haproxy",
                "-c",
                "-q",
                "-f",
                lb::HAPROXY_CFG,
            ])));
        }
        if unit_steps(ctx, host, lb::HAPROXY_UNIT, haproxy_changed, &mut steps) {
            steps.push(Step::Wait(haproxy_answers(&host.name, Duration::from_secs(15))));
        }
        if f.files.contains_key(lb::ETCD_HEALTHCHECK_PEM) {
            // An earlier hactl gave HAProxy an etcd client certificate for its checks (one that
            // could read and write every key). The config just loaded no longer names it.
            steps.push(Step::Run(RemoteCommand::new([
                "rm",
                "-f",
                lb::ETCD_HEALTHCHECK_PEM,
            ])));
        }
        unit_steps(ctx, host, lb::KEEPALIVED_UNIT, keepalived_changed, &mut steps);
        Ok(steps)
    }
    /// The configure phase, then (only when it changes something) a check that etcd answers
    /// through the VIP.
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        let configure = super::per_host(self, ctx)?;
        let changed = configure.hosts.iter().any(|h| !h.steps.is_empty());
        // Asked from the first etcd host: it holds a client certificate, the balancers none.
        let first = ctx
            .inv
            .with_role(Role::Etcd)
            .first()
            .map(|h| (h.name.clone(), h.ssh.sudo));
        let mut phases = vec![configure];
        if let (true, Some((host, sudo)), Some(check)) =
            (changed, first, vip_serves_etcd(ctx.inv, Duration::from_secs(30)))
        {
            phases.push(PlannedPhase {
                title: "Verify the VIP".to_string(),
                parallelism: Parallelism::All,
                disruptive: false,
                hosts: vec![HostSteps {
                    host,
                    sudo,
                    steps: vec![Step::Wait(check)],
                }],
            });
        }
        Ok(phases)
    }
}
