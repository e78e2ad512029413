//! `hactl remove MEMBER`: the flags become [`crate::operations::remove::Options`]; the operation
//! manager runs it.

use crate::cli::RemoveArgs;
use crate::operations::manager::{self, Context};
use crate::operations::remove::{Options, Remove};

/// `hactl remove`.
pub async fn run(args: &RemoveArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_for(&args.inventory, args.run.dry_run)?;
    if let Some(other) = args.dead.confirm_dead.iter().find(|h| **h != args.member) {
        return Err(super::exit::refuse(
            super::exit::REFUSED,
            format!(
                "--confirm-dead {other}: remove attests only the member it removes; write --confirm-dead {}",
                args.member
            ),
        ));
    }
    let mut op = Remove::new(Options {
        member: args.member.clone(),
        confirm_dead: !args.dead.confirm_dead.is_empty(),
        resume: args.resume.clone(),
    });
    let connect = args.connect.settings();
    let ctx = Context::new(&inv, &state, &connect);
    manager::run(&mut op, &ctx, &(&args.run).into()).await
}
