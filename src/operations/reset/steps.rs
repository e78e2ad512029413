//! The steps of a reset (pure: data, so `--dry-run` prints them): reset's plan
//! ([`crate::converge::reset::plan`], one phase per role) as journaled steps, one per phase and
//! host, the hosts of a phase side by side and the phases one after another.

use crate::converge::reset::{
    CONTROL_PLANE_PHASE, ETCD_PHASE, LOAD_BALANCER_PHASE, NODE_PHASE, REVOKE_PHASE,
};
use crate::operations::runner::{JournaledStep, StepCode};
use crate::plan::{Parallelism, Plan, Step};

crate::step_codes! {
    /// The steps of a reset, one per role in the order they are undone (docs/how-to/reset.md),
    /// each once per host (`RS3@cp1`).
    pub enum Rs {
        /// The node components stopped and removed (their pods stop while the API answers).
        Nodes = "RS1",
        /// The Kubernetes control plane stopped and removed (it writes to etcd).
        ControlPlane = "RS2",
        /// etcd stopped and removed, its data dir and snapshots moved aside.
        Etcd = "RS3",
        /// keepalived and HAProxy stopped and removed (the VIP leaves last).
        LoadBalancers = "RS4",
        /// The backup push key's line removed from the backup remote.
        RevokePushKey = "RS5",
    }
}

/// The step code of reset's phase `title`.
pub fn code_of(title: &str) -> Option<Rs> {
    Some(match title {
        NODE_PHASE => Rs::Nodes,
        CONTROL_PLANE_PHASE => Rs::ControlPlane,
        ETCD_PHASE => Rs::Etcd,
        LOAD_BALANCER_PHASE => Rs::LoadBalancers,
        REVOKE_PHASE => Rs::RevokePushKey,
        _ => return None,
    })
}

/// `plan` as journaled steps: one per phase and host with something to do, its plan steps as
/// the acts; the hosts of a phase that runs on all at once are one group (one lane per host).
pub fn steps(plan: &Plan) -> anyhow::Result<Vec<JournaledStep>> {
    let mut out = Vec::new();
    for phase in &plan.phases {
        let code = code_of(&phase.title)
            .ok_or_else(|| anyhow::anyhow!("reset's plan has a phase of no step: {}", phase.title))?;
        for hs in phase.hosts.iter().filter(|h| !h.steps.is_empty()) {
            let mut step = JournaledStep::new(code.at(&hs.host), phase.title.clone(), Some(&hs.host));
            for s in &hs.steps {
                if let Step::Api(r) = s {
                    // The runner sends API requests only as operator-side acts.
                    anyhow::bail!(
                        "reset's plan sends an API request on {}: {r} (a bug in hactl)",
                        hs.host
                    );
                }
                step = step.step(s.clone());
            }
            if phase.parallelism == Parallelism::All {
                step = step.group(code.code(), hs.host.clone());
            }
            out.push(step);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{HostSteps, PlannedPhase, RemoteCommand};

    fn phase(title: &str, parallelism: Parallelism, hosts: &[(&str, &[&str])]) -> PlannedPhase {
        PlannedPhase {
            title: title.into(),
            parallelism,
            disruptive: true,
            hosts: hosts
                .iter()
                .map(|(h, cmds)| HostSteps {
                    host: h.to_string(),
                    sudo: false,
                    steps: cmds
                        .iter()
                        .map(|c| Step::Run(RemoteCommand::new(["sh", "-c", c])))
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn every_phase_of_resets_plan_has_its_code_and_an_unknown_phase_or_an_api_request_is_an_error() {
        for (title, code) in [
            (NODE_PHASE, "RS1"),
            (CONTROL_PLANE_PHASE, "RS2"),
            (ETCD_PHASE, "RS3"),
            (LOAD_BALANCER_PHASE, "RS4"),
            (REVOKE_PHASE, "RS5"),
        ] {
            assert_eq!(code_of(title).map(|c| c.code()), Some(code), "{title}");
        }
        let mut plan = Plan::default();
        plan.push(phase("Install etcd", Parallelism::All, &[("cp1", &["true"])]));
        let Err(e) = steps(&plan) else {
            panic!("a phase of no step was taken")
        };
        let e = e.to_string();
        assert!(e.contains("Install etcd"), "{e}");
        // An API request cannot be a remote act: refused while planning, before any change.
        let mut plan = Plan::default();
        let mut p = phase(NODE_PHASE, Parallelism::All, &[("w1", &["true"])]);
        p.hosts[0].steps.push(Step::Api(crate::plan::ApiRequest {
            method: "DELETE".into(),
            path: "/api/v1/nodes/w1".into(),
            content_type: String::new(),
            body: None,
        }));
        plan.push(p);
        let Err(e) = steps(&plan) else {
            panic!("an API request was taken as a remote act")
        };
        assert!(e.to_string().contains("DELETE /api/v1/nodes/w1"), "{e}");
    }

    #[test]
    fn one_step_per_phase_and_host_with_work_in_order_grouped_by_phase() {
        let mut plan = Plan::default();
        plan.push(phase(
            ETCD_PHASE,
            Parallelism::All,
            &[("cp1", &["stop", "move"]), ("cp2", &[]), ("cp3", &["stop"])],
        ));
        plan.push(phase(
            LOAD_BALANCER_PHASE,
            Parallelism::OneAtATime,
            &[("lb1", &["stop"])],
        ));
        let steps = steps(&plan).unwrap();
        let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["RS3@cp1", "RS3@cp3", "RS4@lb1"]);
        assert_eq!(steps[0].act.len(), 2);
        assert_eq!(steps[0].host.as_deref(), Some("cp1"));
        assert_eq!(steps[0].title, ETCD_PHASE);
        assert_eq!(steps[0].group, Some(("RS3".into(), "cp1".into())));
        assert_eq!(steps[1].group, Some(("RS3".into(), "cp3".into())));
        assert_eq!(
            steps[2].group, None,
            "a one-at-a-time phase runs no host beside another"
        );
        let text = steps[0].render(false);
        assert!(text.contains("run: sh -c stop"), "{text}");
        assert!(text.contains("run: sh -c move"), "{text}");
    }
}
