//! Configure the load balancers: HAProxy (validated with `haproxy -c` before it is started or
//! reloaded; a reload, never a restart, when its files change) and keepalived (reloaded when its
//! files change). Then, if anything changed, etcd must answer through the VIP (asked from the
//! first etcd host, which holds a client certificate; the load balancers hold none).
//!
//! One host at a time: the hosts behind the VIP are never reloaded together. On load balancers
//! where nothing runs yet (a new cluster: no HAProxy and no keepalived active on any of them)
//! nothing serves through the VIP, so HAProxy is configured and started on all of them at once;
//! keepalived then starts one host at a time, highest priority first, and the first host holds
//! the VIP before the next one starts, so the first election goes to the highest priority as it
//! did when each host came up after the one before (docs/reference/load-balancers.md).

use std::time::Duration;

use super::load_balancer::{
    haproxy_answers, haproxy_cli, haproxy_files, journal_tail, keepalived_files, vip_serves_etcd,
};
use super::{differs, uploads_needed, Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::load_balancer as lb;
use crate::plan::{Check, HostSteps, Parallelism, PlannedPhase, RemoteCommand, Step};

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
        let (mut steps, keepalived_changed) = haproxy_steps(host, ctx)?;
        unit_steps(ctx, host, lb::KEEPALIVED_UNIT, keepalived_changed, &mut steps);
        Ok(steps)
    }
    /// The configure phase, then (only when it changes something) a check that etcd answers
    /// through the VIP. On new load balancers ([`nothing_runs`]) the configure phase runs on
    /// every host at once without keepalived's start, and a phase of its own starts keepalived
    /// one host at a time, the first host ([`lb::priority`] 0, the highest) waiting until it
    /// holds the VIP.
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        let hosts = self.hosts(ctx.inv);
        let mut phases = if nothing_runs(ctx, &hosts) && hosts.len() > 1 {
            let mut configure = Vec::new();
            let mut keepalived = Vec::new();
            for (i, host) in hosts.iter().enumerate() {
                // keepalived is enabled with the rest (enabling starts nothing); only its start
                // waits for the hosts before it.
                let (mut steps, _) = haproxy_steps(host, ctx)?;
                let unit = ctx.facts(host).units.get(lb::KEEPALIVED_UNIT);
                if unit.map(|u| u.enabled.as_str()) != Some("enabled") {
                    steps.push(Step::Run(RemoteCommand::new([
                        "systemctl",
                        "enable",
                        lb::KEEPALIVED_UNIT,
                    ])));
                }
                configure.push(HostSteps {
                    host: host.name.clone(),
                    sudo: host.ssh.sudo,
                    steps,
                });
                let mut steps = vec![Step::Run(super::start_unit(lb::KEEPALIVED_UNIT))];
                if i == 0 {
                    if let Some(check) = holds_vip(ctx.inv, host, Duration::from_secs(30)) {
                        steps.push(Step::Wait(check));
                    }
                }
                keepalived.push(HostSteps {
                    host: host.name.clone(),
                    sudo: host.ssh.sudo,
                    steps,
                });
            }
            vec![
                PlannedPhase {
                    title: self.title().to_string(),
                    parallelism: Parallelism::All,
                    disruptive: false,
                    hosts: configure,
                },
                PlannedPhase {
                    title: "Start keepalived, highest priority first".to_string(),
                    parallelism: Parallelism::OneAtATime,
                    disruptive: false,
                    hosts: keepalived,
                },
            ]
        } else {
            vec![super::per_host(self, ctx)?]
        };
        let changed = phases.iter().flat_map(|p| &p.hosts).any(|h| !h.steps.is_empty());
        // Asked from the first etcd host: it holds a client certificate, the balancers none.
        let first = ctx
            .inv
            .with_role(Role::Etcd)
            .first()
            .map(|h| (h.name.clone(), h.ssh.sudo));
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

/// Whether nothing runs on the load balancers yet: every one of them was asked (its facts are
/// known) and none has HAProxy or keepalived active. Then nothing serves through the VIP, and
/// configuring them all at once risks no client.
fn nothing_runs(ctx: &Ctx<'_>, hosts: &[&Host]) -> bool {
    hosts.iter().all(|h| {
        ctx.facts.get(&h.name).is_some_and(|f| {
            [lb::HAPROXY_UNIT, lb::KEEPALIVED_UNIT]
                .iter()
                .all(|unit| f.units.get(*unit).is_none_or(|u| u.active != "active"))
        })
    })
}

/// Waits until `host` holds the VIP (keepalived there won the election).
fn holds_vip(inv: &Inventory, host: &Host, timeout: Duration) -> Option<Check> {
    let vip = inv.vip.as_ref()?;
    Some(
        Check::command(
            format!("{} holds the VIP {}", host.name, vip.address),
            RemoteCommand::read_only([
                "sh".to_string(),
                "-c".to_string(),
                "ip -o addr show | grep -qF \" $1/\"".to_string(),
                "hactl-holds-vip".to_string(),
                vip.address.to_string(),
            ]),
            timeout,
        )
        .diagnose_with(journal_tail(lb::KEEPALIVED_UNIT)),
    )
}

/// Everything but keepalived's unit: the files (HAProxy's and keepalived's), then HAProxy checked,
/// enabled, started or reloaded, and answering. With the steps, whether keepalived's files
/// change (its reload is the caller's).
fn haproxy_steps(host: &Host, ctx: &Ctx<'_>) -> Result<(Vec<Step>, bool), PlanError> {
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
    Ok((steps, keepalived_changed))
}
