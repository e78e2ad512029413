//! `hactl remove NAME`: the flags become [`crate::operations::remove::Options`] (an etcd member)
//! or [`crate::operations::remove_node::Options`] (a worker: the state directory issued it a
//! kubelet certificate and never an etcd one); the operation manager runs it.

use crate::cli::RemoveArgs;
use crate::operations::manager::{self, Context};
use crate::operations::remove::{Options, Remove};
use crate::operations::remove_node;

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
    let connect = args.connect.settings();
    let ctx = Context::new(&inv, &state, &connect);
    if remove_node::applies(&state, &args.member, args.resume.as_deref()) {
        // A node host that held no etcd member (a worker).
        let mut op = remove_node::RemoveNode::new(remove_node::Options {
            node: args.member.clone(),
            confirm_dead: !args.dead.confirm_dead.is_empty(),
            resume: args.resume.clone(),
        });
        return manager::run(&mut op, &ctx, &(&args.run).into()).await;
    }
    let mut op = Remove::new(Options {
        member: args.member.clone(),
        confirm_dead: !args.dead.confirm_dead.is_empty(),
        resume: args.resume.clone(),
    });
    manager::run(&mut op, &ctx, &(&args.run).into()).await
}
