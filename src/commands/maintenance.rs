//! `hactl maintenance plan|start|complete HOST`: the flags become
//! [`crate::operations::maintenance::Options`]; `plan` prints, the operation manager runs `start`
//! and `complete`.

use crate::cli::{MaintenanceArgs, MaintenanceCommand, OutputFormat};
use crate::operations::maintenance::{self, Complete, Options, Start};
use crate::operations::manager::{self, Context};

fn options(a: &MaintenanceArgs) -> Options {
    Options {
        host: a.host.clone(),
        max_unavailable: a.max_unavailable,
        reason: a.reason.clone(),
        drain_timeout: a.drain_timeout,
    }
}

/// `hactl maintenance`.
pub async fn run(cmd: &MaintenanceCommand) -> anyhow::Result<i32> {
    let target = match cmd {
        MaintenanceCommand::Plan(a) => &a.target,
        MaintenanceCommand::Start(a) | MaintenanceCommand::Complete(a) => &a.target,
    };
    // `maintenance plan` and every dry run write nothing (no state directory is created).
    let read_only = match cmd {
        MaintenanceCommand::Plan(_) => true,
        MaintenanceCommand::Start(a) | MaintenanceCommand::Complete(a) => a.run.dry_run,
    };
    let (inv, state) = super::load_for(&target.inventory, read_only)?;
    let connect = target.connect.settings();
    let ctx = Context {
        dry_run: read_only,
        ..Context::new(&inv, &state, &connect)
    };
    let opts = options(target);
    match cmd {
        MaintenanceCommand::Plan(a) => maintenance::plan(&ctx, &opts, a.output == OutputFormat::Json).await,
        MaintenanceCommand::Start(a) => manager::run(&mut Start::new(opts), &ctx, &(&a.run).into()).await,
        MaintenanceCommand::Complete(a) => {
            manager::run(&mut Complete::new(opts), &ctx, &(&a.run).into()).await
        }
    }
}
