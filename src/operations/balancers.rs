//! The load-balancer side of replace and maintenance: take a control-plane host's servers out
//! of every HAProxy (`etcd-client`, and `kubernetes-api` when a kubernetes section exists)
//! before its etcd or apiserver stops, move the VIP off it when it is a load balancer itself,
//! and put the servers back (or, when the membership changed host names, re-render haproxy.cfg)
//! once the member is a healthy voter again.
//!
//! Invariant: every step is idempotent (`state maint` twice is one drain; a configure plan from
//! fresh facts is empty when nothing changed), so a resumed run repeats them safely. An
//! unreachable load balancer is reported and skipped: its health checks take the stopped
//! server out within `fall × inter` anyway.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Journal, StepState};
use crate::exec::connect::ConnectSettings;
use crate::exec::{self, Mode, Transports};
use crate::inventory::{Host, Inventory, Role};
use crate::load_balancer as lb;
use crate::phases::configure_load_balancer::ConfigureLoadBalancer;
use crate::phases::load_balancer::{drain_backend_steps, ready_backend_steps, servers_known_steps, Backend};
use crate::phases::{Ctx, Phase};
use crate::pki::Pki;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, RemoteCommand, Step};
use crate::state::StateDir;

/// Connections to the load-balancer hosts.
pub struct Balancers {
    pub transports: Transports,
    pub unreachable: BTreeMap<String, String>,
}

impl Balancers {
    pub async fn connect(inv: &Inventory, state: &StateDir, settings: &ConnectSettings) -> Balancers {
        let hosts = inv.with_role(Role::LoadBalancer);
        let reach = crate::exec::connect::reach(state, &hosts, settings).await;
        Balancers {
            transports: reach.transports,
            unreachable: reach.unreachable.into_iter().map(|(h, e)| (h, e.text)).collect(),
        }
    }

    /// The backends `server` is in: etcd clients always, the API only with Kubernetes.
    pub fn backends(inv: &Inventory) -> Vec<Backend> {
        let mut v = vec![Backend::EtcdClient];
        if inv.kubernetes.is_some() {
            v.push(Backend::KubernetesApi);
        }
        v
    }

    fn reachable(&self, hosts: Vec<HostSteps>) -> Vec<HostSteps> {
        hosts
            .into_iter()
            .filter(|h| self.transports.contains_key(&h.host))
            .collect()
    }

    async fn run(&self, mode: Mode, title: String, hosts: Vec<HostSteps>) -> anyhow::Result<()> {
        if hosts.is_empty() {
            return Ok(());
        }
        let mut plan = Plan::default();
        plan.push(PlannedPhase {
            title,
            parallelism: Parallelism::All,
            disruptive: false,
            hosts,
        });
        exec::run(&plan, mode, &self.transports).await.map_err(|failed| {
            let details = failed.details();
            anyhow::Error::new(failed).context(details.trim_end().to_string())
        })?;
        Ok(())
    }

    fn unreachable_note(&self) -> String {
        if self.unreachable.is_empty() {
            String::new()
        } else {
            format!(
                "; skipped unreachable {}",
                self.unreachable.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        }
    }

    /// Stops keepalived on `host` when it is a load balancer (its VRRP peers take the VIP within
    /// the master-down interval), so clients through the VIP never land on a host that is about
    /// to lose its etcd or apiserver. Restarted by [`Balancers::restore_vip`].
    pub async fn move_vip_off(
        &self,
        mode: Mode,
        journal: &Journal,
        step: &str,
        host: &Host,
    ) -> anyhow::Result<bool> {
        if !host.has(Role::LoadBalancer) || !self.transports.contains_key(&host.name) {
            return Ok(false);
        }
        journal.record(
            step,
            StepState::Started,
            &host.name,
            "stopping keepalived: the VIP moves to a peer if held here",
        )?;
        self.run(
            mode,
            format!("move the VIP off {}", host.name),
            vec![HostSteps {
                host: host.name.clone(),
                sudo: host.ssh.sudo,
                steps: vec![Step::Run(RemoteCommand::new([
                    "systemctl",
                    "stop",
                    lb::KEEPALIVED_UNIT,
                ]))],
            }],
        )
        .await?;
        journal.record(step, StepState::Done, &host.name, "keepalived stopped")?;
        Ok(true)
    }

    /// Starts keepalived on `host` again (a no-op when it runs).
    pub async fn restore_vip(
        &self,
        mode: Mode,
        journal: &Journal,
        step: &str,
        host: &Host,
    ) -> anyhow::Result<()> {
        if !host.has(Role::LoadBalancer) || !self.transports.contains_key(&host.name) {
            return Ok(());
        }
        self.run(
            mode,
            format!("start keepalived on {}", host.name),
            vec![HostSteps {
                host: host.name.clone(),
                sudo: host.ssh.sudo,
                steps: vec![Step::Run(RemoteCommand::new([
                    "systemctl",
                    "start",
                    lb::KEEPALIVED_UNIT,
                ]))],
            }],
        )
        .await?;
        journal.record(step, StepState::Done, &host.name, "keepalived started")
    }

    /// Puts `server` in MAINT in every backend on every reachable load balancer and waits until
    /// each HAProxy shows it.
    pub async fn drain(
        &self,
        mode: Mode,
        inv: &Inventory,
        journal: &Journal,
        step: &str,
        server: &str,
    ) -> anyhow::Result<()> {
        let backends = Self::backends(inv);
        self.each_backend(
            mode,
            inv,
            journal,
            (step, server),
            &backends,
            |b| drain_backend_steps(inv, b, server),
            |b| format!("take {server} out of {} on the load balancers", b.name()),
            "in MAINT in",
        )
        .await
    }

    /// Takes `server` out of MAINT in every backend and waits until each HAProxy's health check
    /// passes.
    pub async fn ready(
        &self,
        mode: Mode,
        inv: &Inventory,
        journal: &Journal,
        step: &str,
        server: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        self.ready_backends(mode, inv, journal, step, server, &Self::backends(inv), timeout)
            .await
    }

    /// [`Balancers::ready`] for the given backends only: a server whose apiserver does not run
    /// must not be waited for in `kubernetes-api` (its check never passes).
    #[allow(clippy::too_many_arguments)]
    pub async fn ready_backends(
        &self,
        mode: Mode,
        inv: &Inventory,
        journal: &Journal,
        step: &str,
        server: &str,
        backends: &[Backend],
        timeout: Duration,
    ) -> anyhow::Result<()> {
        self.each_backend(
            mode,
            inv,
            journal,
            (step, server),
            backends,
            |b| ready_backend_steps(inv, b, server, timeout),
            |b| format!("put {server} back in {} on the load balancers", b.name()),
            "UP behind the VIP in",
        )
        .await
    }

    /// Runs `steps` of each backend in turn on the reachable load balancers, then journals
    /// `<server> <done> <backends>`; skipped when the inventory has no load balancer.
    #[allow(clippy::too_many_arguments)]
    async fn each_backend(
        &self,
        mode: Mode,
        inv: &Inventory,
        journal: &Journal,
        (step, server): (&str, &str),
        backends: &[Backend],
        steps: impl Fn(Backend) -> Vec<HostSteps>,
        title: impl Fn(Backend) -> String,
        done: &str,
    ) -> anyhow::Result<()> {
        if inv.with_role(Role::LoadBalancer).is_empty() {
            return journal.record(
                step,
                StepState::Skipped,
                server,
                "no load balancer in the inventory",
            );
        }
        for &backend in backends {
            let hosts = self.reachable(steps(backend));
            self.run(mode, title(backend), hosts).await?;
        }
        journal.record(
            step,
            StepState::Done,
            server,
            &format!(
                "{server} {done} {}{}",
                backends.iter().map(|b| b.name()).collect::<Vec<_>>().join(", "),
                self.unreachable_note()
            ),
        )
    }

    /// Re-renders HAProxy's config from `inv` (the configure phase of `hactl up`, planned from
    /// fresh facts), so the backend lists follow a membership whose host names changed. A
    /// converged load balancer plans nothing. Returns the number of steps run.
    pub async fn reconfigure(&self, mode: Mode, inv: &Inventory, pki: &Pki) -> anyhow::Result<usize> {
        let mut facts = BTreeMap::new();
        for h in inv.with_role(Role::LoadBalancer) {
            if let Some(t) = self.transports.get(&h.name) {
                let q = crate::phases::query_for(inv, h);
                let f = crate::facts::gather(t.as_ref(), &q)
                    .await
                    .map_err(anyhow::Error::from)?;
                facts.insert(h.name.clone(), f);
            }
        }
        let ctx = Ctx::new(inv, pki, &facts);
        let mut plan = Plan::default();
        let mut n = 0;
        for mut phase in ConfigureLoadBalancer.plan(&ctx)? {
            phase.hosts.retain(|h| self.transports.contains_key(&h.host));
            n += phase.hosts.iter().map(|h| h.steps.len()).sum::<usize>();
            plan.push(phase);
        }
        if n == 0 {
            return Ok(0);
        }
        // Then until every HAProxy's new worker lists the servers of the new config, so the next
        // `set server … state ready` does not meet the old worker's "No such server".
        for backend in Self::backends(inv) {
            let role = match backend {
                Backend::EtcdClient => Role::Etcd,
                Backend::KubernetesApi => Role::ControlPlane,
            };
            let servers: Vec<String> = inv.with_role(role).iter().map(|h| h.name.clone()).collect();
            let hosts = self.reachable(servers_known_steps(
                inv,
                backend,
                &servers,
                Duration::from_secs(30),
            ));
            plan.push(PlannedPhase {
                title: format!("Wait until HAProxy lists the servers of {}", backend.name()),
                parallelism: Parallelism::All,
                disruptive: false,
                hosts,
            });
        }
        exec::run(&plan, mode, &self.transports).await.map_err(|failed| {
            let details = failed.details();
            anyhow::Error::new(failed).context(details.trim_end().to_string())
        })?;
        Ok(n)
    }
}
