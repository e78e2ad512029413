//! Join new etcd members one at a time, each as a learner (see docs/recovery.md, "Replace and heal"):
//! add it as a learner on a running member, start it with `existing` state, wait until it
//! serves, promote it once it is in sync, and wait for the whole cluster to be healthy.
//!
//! One at a time because etcd allows one learner, and because each join changes the quorum.
//! Adding a learner is quorum-neutral; the promotion is the step that changes the quorum.

use std::time::Duration;

use super::{Ctx, Phase, PlanError};
use crate::etcd::{self, probe, UNIT};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{Check, HostSteps, Parallelism, PlannedPhase, RemoteCommand, Step};

pub struct JoinEtcd;

/// How long a learner may take to catch up before the promotion gives up.
pub const PROMOTE_TIMEOUT_SECS: u64 = 600;

impl Phase for JoinEtcd {
    fn title(&self) -> &'static str {
        "Join etcd members as learners"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn steps(&self, _host: &Host, _ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        Ok(vec![]) // steps span two hosts: see plan()
    }
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        let inv = ctx.inv;
        let mut phases = Vec::new();
        for name in &ctx.etcd.joiners {
            let Some(seed_name) = ctx.etcd.seed.as_ref() else {
                return Err(PlanError::NoRunningMember {
                    hosts: ctx.etcd.joiners.join(", "),
                });
            };
            let joiner = inv.host(name).expect("joiners come from the inventory");
            let seed = inv.host(seed_name).expect("the seed comes from the inventory");
            let url = etcd::peer_url(inv, joiner);
            let on = |host: &Host, steps: Vec<Step>| HostSteps {
                host: host.name.clone(),
                sudo: host.ssh.sudo,
                steps,
            };
            let hosts = vec![
                on(
                    seed,
                    vec![
                        Step::Wait(probe::cluster_healthy(
                            &format!("before adding {name}"),
                            Duration::from_secs(30),
                        )),
                        Step::Run(RemoteCommand::new([
                            etcd::MEMBER_SCRIPT,
                            "add-learner",
                            name.as_str(),
                            url.as_str(),
                        ])),
                    ],
                ),
                on(joiner, {
                    let mut steps = Vec::new();
                    // A fence left by a recover, a replace or heal's fence of an old member:
                    // the data dir is empty (it is a joiner), so nothing old can start.
                    if ctx
                        .facts(joiner)
                        .files
                        .contains_key(&crate::fence::dropin_path(UNIT))
                    {
                        steps.push(Step::Run(RemoteCommand::script(crate::fence::lift_all(&[UNIT]))));
                    }
                    steps.extend([
                        Step::Run(RemoteCommand::new(["systemctl", "enable", UNIT])),
                        Step::Run(RemoteCommand::new(["systemctl", "start", "--no-block", UNIT])),
                        Step::Wait(
                            Check::command(
                                format!("learner {name} serves"),
                                RemoteCommand::read_only([etcd::ETCDCTL_WRAPPER, "endpoint", "status"]),
                                Duration::from_secs(120),
                            )
                            .diagnose_with(probe::journal_tail()),
                        ),
                    ]);
                    steps
                }),
                on(
                    seed,
                    vec![Step::Run(
                        RemoteCommand::new([
                            etcd::MEMBER_SCRIPT,
                            "promote",
                            url.as_str(),
                            &PROMOTE_TIMEOUT_SECS.to_string(),
                        ])
                        .with_timeout(Duration::from_secs(PROMOTE_TIMEOUT_SECS + 30)),
                    )],
                ),
                on(
                    joiner,
                    vec![Step::Wait(probe::member_healthy(name, Duration::from_secs(60)))],
                ),
                on(
                    seed,
                    vec![Step::Wait(probe::cluster_healthy(
                        &format!("after promoting {name}"),
                        Duration::from_secs(60),
                    ))],
                ),
            ];
            phases.push(PlannedPhase {
                title: format!("Join etcd member {name} as a learner, then promote it"),
                parallelism: Parallelism::OneAtATime,
                disruptive: false,
                hosts,
            });
        }
        Ok(phases)
    }
}
