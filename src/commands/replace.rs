//! `hactl replace MEMBER (--reuse-host | --host NEW) [--planned]`: the flags become
//! [`crate::operations::replace::Options`]; the operation manager runs it.

use crate::cli::ReplaceArgs;
use crate::operations::manager::{self, Context};
use crate::operations::replace::{Options, Replace};

/// `hactl replace`.
pub async fn run(args: &ReplaceArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_for(&args.inventory, args.run.dry_run)?;
    let mut op = Replace::new(Options {
        member: args.member.clone(),
        reuse_host: args.reuse_host,
        host: args.host.clone(),
        planned: args.planned,
        resume: args.resume.clone(),
        cleanup_learner: args.cleanup_learner.clone(),
        confirm_dead: args.dead.confirm_dead.clone(),
    });
    let connect = args.connect.settings();
    let ctx = Context::new(&inv, &state, &connect);
    manager::run(&mut op, &ctx, &(&args.run).into()).await
}
