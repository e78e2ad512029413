//! `hactl recover`: the flags become [`crate::operations::recover::Options`]; the operation
//! manager runs it (R0 decides, the steps restore, the report says what happened).

use crate::cli::RecoverArgs;
use crate::operations::manager::{self, Context};
use crate::operations::recover::{Options, Recover};

/// `hactl recover`.
pub async fn run(args: &RecoverArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_for(&args.inventory, args.run.dry_run)?;
    let mut op = Recover::new(Options {
        from_snapshot: args.from_snapshot.clone(),
        from_member: args.from_member.clone(),
        auto: args.auto,
        mode: args.mode.into(),
        confirm_dead: args.dead.confirm_dead.clone(),
        force_destructive: args.force_destructive,
        accept_revision_rewind: args.accept_revision_rewind,
        accept_data_loss_window: args.accept_data_loss_window,
        skip_hash_check: args.skip_hash_check,
        resume: args.resume.clone(),
        members: args.members.clone(),
        bump_revision: args.bump_revision.0,
    });
    let connect = args.connect.settings();
    let ctx = Context::new(&inv, &state, &connect);
    manager::run(&mut op, &ctx, &(&args.run).into()).await
}
