//! Restart running controller-managers and schedulers whose binary, unit, manifest, kubeconfig or
//! certificates changed, one host at a time, each waiting for `/healthz` before the next. Leader
//! election moves the Lease to another host while one restarts.

use super::install_kubernetes::control_plane_hosts;
use super::roll_apiservers::{restart_needed, restart_steps};
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory};
use crate::kubernetes::Component;
use crate::plan::{Parallelism, Step};

pub struct RollControllers;

impl Phase for RollControllers {
    fn title(&self) -> &'static str {
        "Restart changed controller-managers and schedulers"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        control_plane_hosts(inv)
    }
    /// One at a time, so a leader is always available to take the Lease over.
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn disruptive(&self) -> bool {
        true
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let mut steps = Vec::new();
        for component in [Component::ControllerManager, Component::Scheduler] {
            if let Some(manifest) = restart_needed(component, host, ctx)? {
                steps.extend(restart_steps(component, host, manifest));
            }
        }
        Ok(steps)
    }
}
