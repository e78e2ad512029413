//! `hactl adopt`: wiring only; the operation is `crate::operations::adopt`, run by the
//! operation manager, with `up`'s plan as each roll of its CA rotation (as `certs rotate-ca`).
//!
//! Invariant: the state directory is opened without being created (`StateDir::open_or_later`):
//! a refusal or a dry run leaves no directory behind; the first write of a confirmed run
//! creates it 0700.

use std::sync::Arc;

use anyhow::Context as _;

use crate::cli::{AdoptArgs, UpArgs};

/// `hactl adopt`.
pub async fn run(args: &AdoptArgs) -> anyhow::Result<i32> {
    use crate::operations::adopt::{Adopt, Options};
    use crate::operations::manager::{self, Context};
    let inv = super::load_inventory(&args.inventory)?;
    let state = crate::state::StateDir::open_or_later(&inv.state_dir)
        .with_context(|| format!("cannot use the state directory of cluster {}", inv.name))?;
    let up = UpArgs {
        inventory: args.inventory.clone(),
        connect: args.connect.clone(),
        yes: true,
    };
    let mut op = Adopt::new(Options {
        roll: Arc::new(super::certs::Roll { args: up }),
    });
    let connect = args.connect.settings();
    let ctx = Context::new(&inv, &state, &connect);
    manager::run(&mut op, &ctx, &(&args.run).into()).await
}
