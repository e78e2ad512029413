//! Servers a cut `up` left out of a load balancer's backend, returned. A roll or a mode switch
//! takes a host's server out of HAProxy before it restarts anything there and notes it on each
//! load balancer ([`crate::load_balancer::HELD_DIR`]); a run stopped before the host came back
//! (a failed wait, a Ctrl-C, a lost connection) leaves the server in maintenance and the note
//! behind. This phase, after the rolls, waits until the server's host answers again (its
//! apiserver's `/readyz`, or its etcd member healthy: HAProxy takes a server leaving maintenance
//! as UP at once, without a check), then makes it ready on every load balancer and drops the
//! notes. A note whose server HAProxy no longer keeps out (a reload forgot the state, someone
//! readied it) is only dropped.
//!
//! Invariant: only servers `up` noted are returned; one an operator or `hactl maintenance` took
//! out has no note and stays out. A host that does not answer stops the run with its server
//! still out, so no client is sent to it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::load_balancer::{ready_backend_steps_by, release, Backend, Holder};
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::load_balancer as lb;
use crate::plan::{HostSteps, Parallelism, PlannedPhase, Step};

pub struct ReturnHeldServers;

/// How long the server's host may take to answer before the run stops with it still out.
const HOST_ANSWERS: Duration = Duration::from_secs(120);
/// How long each load balancer may take to see the readied server UP.
const BALANCER_UP: Duration = Duration::from_secs(60);

/// The backend named `name`, with the role its servers' hosts have.
fn backend(name: &str) -> Option<(Backend, Role)> {
    match name {
        lb::KUBERNETES_BACKEND => Some((Backend::KubernetesApi, Role::ControlPlane)),
        lb::ETCD_BACKEND => Some((Backend::EtcdClient, Role::Etcd)),
        _ => None,
    }
}

impl Phase for ReturnHeldServers {
    fn title(&self) -> &'static str {
        "Return servers a cut run left out of the load balancers"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::LoadBalancer)
    }
    /// One server at a time: its host's wait, then every load balancer.
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn steps(&self, _host: &Host, _ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        Ok(vec![])
    }
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        // (backend, server) → the load balancers holding a note, and whether any keeps it out.
        let mut held: BTreeMap<(String, String), (Vec<&Host>, bool)> = BTreeMap::new();
        for balancer in self.hosts(ctx.inv) {
            for h in &ctx.facts(balancer).held_servers {
                let entry = held.entry((h.backend.clone(), h.server.clone())).or_default();
                entry.0.push(balancer);
                entry.1 |= h.out();
            }
        }
        let mut hosts = Vec::new();
        for ((name, server), (balancers, out)) in held {
            let serving = backend(&name).and_then(|(b, role)| {
                let host = ctx.inv.host(&server).filter(|h| h.has(role))?;
                Some((b, host))
            });
            match (out, serving) {
                (true, Some((b, host))) => {
                    let answers = match b {
                        Backend::KubernetesApi => crate::kubernetes::probe::wait_healthy(
                            crate::kubernetes::Component::ApiServer,
                            host,
                            HOST_ANSWERS,
                        ),
                        Backend::EtcdClient => crate::etcd::probe::member_healthy(&host.name, HOST_ANSWERS),
                    };
                    hosts.push(HostSteps {
                        host: host.name.clone(),
                        sudo: host.ssh.sudo,
                        steps: vec![Step::Wait(answers)],
                    });
                    hosts.extend(ready_backend_steps_by(
                        ctx.inv,
                        b,
                        &server,
                        BALANCER_UP,
                        Holder::Up,
                    ));
                }
                // Not kept out any more, or a backend, host or role this inventory no longer has
                // (its server leaves haproxy.cfg with it, earlier in this run): the notes only.
                _ => hosts.extend(balancers.into_iter().map(|balancer| HostSteps {
                    host: balancer.name.clone(),
                    sudo: balancer.ssh.sudo,
                    steps: vec![Step::Run(release(&name, &server))],
                })),
            }
        }
        Ok(vec![PlannedPhase {
            title: self.title().to_string(),
            parallelism: self.parallelism(),
            disruptive: false,
            hosts,
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{HeldServer, HostFacts};

    fn inventory(dir: &std::path::Path) -> Inventory {
        crate::phases::test_inventory::stacked(dir, "held", 2, &[])
    }

    fn held(backend: &str, server: &str, status: &str) -> HeldServer {
        HeldServer {
            backend: backend.into(),
            server: server.into(),
            since: "2026-11-26T10:00:00Z".into(),
            status: status.into(),
        }
    }

    /// The plan for these notes on the load balancers, one line per step: `host: step`.
    fn plan(notes: &[(&str, Vec<HeldServer>)]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path());
        let pki = crate::pki::ensure(&dir.path().join("pki"), &inv, time::OffsetDateTime::now_utc()).unwrap();
        let facts: BTreeMap<String, HostFacts> = notes
            .iter()
            .map(|(h, held)| {
                (
                    h.to_string(),
                    HostFacts {
                        held_servers: held.clone(),
                        ..HostFacts::default()
                    },
                )
            })
            .collect();
        let ctx = Ctx::new(&inv, &pki, &facts);
        let phases = ReturnHeldServers.plan(&ctx).unwrap();
        assert_eq!(phases.len(), 1);
        assert_eq!(phases[0].parallelism, Parallelism::OneAtATime);
        phases[0]
            .hosts
            .iter()
            .flat_map(|h| {
                h.steps.iter().map(move |s| {
                    let s = match s {
                        Step::Run(c) => format!("run {}", c.argv.join(" ")),
                        Step::Wait(c) => format!("wait {}", c.description),
                        other => format!("{other:?}"),
                    };
                    format!("{}: {s}", h.host)
                })
            })
            .collect()
    }

    #[test]
    fn nothing_is_planned_without_a_note() {
        assert!(plan(&[("lb1", vec![]), ("lb2", vec![])]).is_empty());
    }

    #[test]
    fn a_server_kept_out_waits_for_its_host_then_every_balancer_readies_it_and_drops_the_note() {
        let lines = plan(&[
            ("lb1", vec![held("kubernetes-api", "cp2", "MAINT")]),
            ("lb2", vec![held("kubernetes-api", "cp2", "MAINT")]),
        ]);
        assert_eq!(lines.len(), 7, "{lines:#?}");
        assert!(
            lines[0].starts_with("cp2: wait") && lines[0].contains("kube-apiserver on cp2"),
            "{lines:#?}"
        );
        for (i, lb) in [(1, "lb1"), (4, "lb2")] {
            assert_eq!(
                lines[i],
                format!("{lb}: run /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 ready")
            );
            assert!(
                lines[i + 1].contains("HAProxy shows kubernetes-api/cp2 UP"),
                "{lines:#?}"
            );
            assert_eq!(
                lines[i + 2],
                format!("{lb}: run rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp2")
            );
        }
    }

    #[test]
    fn an_etcd_server_kept_out_on_one_balancer_waits_for_its_member() {
        let lines = plan(&[
            ("lb1", vec![held("etcd-client", "cp3", "DRAIN")]),
            ("lb2", vec![held("etcd-client", "cp3", "UP")]),
        ]);
        assert!(
            lines[0].starts_with("cp3: wait") && lines[0].contains("etcd member cp3 is healthy"),
            "{lines:#?}"
        );
        // Readied on both: `ready` of a server that is UP changes nothing.
        assert_eq!(lines.len(), 7, "{lines:#?}");
    }

    #[test]
    fn a_note_whose_server_is_back_or_gone_is_only_dropped() {
        let lines = plan(&[
            (
                "lb1",
                vec![
                    held("kubernetes-api", "cp1", "UP"),
                    held("kubernetes-api", "cp9", "MAINT"),
                    held("kubernetes-api", "lb2", "MAINT"),
                    held("other", "cp2", "MAINT"),
                ],
            ),
            ("lb2", vec![held("kubernetes-api", "cp1", "")]),
        ]);
        assert_eq!(
            lines,
            [
                "lb1: run rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp1",
                "lb2: run rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp1",
                "lb1: run rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp9",
                "lb1: run rm -f /var/lib/hactl/held-by-up/kubernetes-api,lb2",
                "lb1: run rm -f /var/lib/hactl/held-by-up/other,cp2",
            ]
        );
    }
}
