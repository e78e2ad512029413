//! Restart running controller-managers and schedulers whose binary, unit, manifest, kubeconfig or
//! certificates changed, one host at a time, each waiting for `/healthz` before the next. Leader
//! election moves the Lease to another host while one restarts; a Lease gate after each host
//! (both Leases freshly renewed) keeps the roll from moving on while nobody leads.

use super::install_kubernetes::control_plane_hosts;
use super::roll_apiservers::{lease_gate, restart_needed, restart_steps, CONTROLLERS};
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory};
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
    /// A Lease gate after the restarts: both Leases are freshly renewed (someone leads again)
    /// before the next host restarts. (No gate before the first host: a change that repairs
    /// controllers that lead nowhere must not wait for a leader.)
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let mut restarts = Vec::new();
        for component in CONTROLLERS {
            if let Some(manifest) = restart_needed(component, host, ctx)? {
                restarts.extend(restart_steps(component, host, manifest));
            }
        }
        if restarts.is_empty() {
            return Ok(restarts);
        }
        restarts.extend(lease_gate(host));
        Ok(restarts)
    }
}
