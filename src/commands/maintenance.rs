//! `hactl maintenance plan|start|complete HOST` (the stages are [`crate::maintenance`]).

use crate::cli::MaintenanceCommand;
use crate::maintenance;

/// `hactl maintenance`.
pub async fn run(cmd: &MaintenanceCommand) -> anyhow::Result<i32> {
    match cmd {
        MaintenanceCommand::Plan(a) => {
            let (inv, state) = super::load(&a.inventory)?;
            maintenance::plan(inv, state, a).await
        }
        MaintenanceCommand::Start(a) => {
            let (inv, state) = super::load(&a.inventory)?;
            // Confirmed like `reset` and `recover`: `--yes` skips it; no terminal and no `--yes`
            // refuses, naming the flag.
            maintenance::start(inv, state, a, &crate::output::confirm).await
        }
        MaintenanceCommand::Complete(a) => {
            let (inv, state) = super::load(&a.inventory)?;
            maintenance::complete(inv, state, a).await
        }
    }
}
