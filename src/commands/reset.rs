//! `hactl reset`: the operation manager runs [`crate::operations::reset::Reset`] (the lock, the
//! identity check, reset's plan from the hosts' facts with the data-directory rule checked on
//! every etcd host, the typed cluster name, the steps); this file adds what is left on the
//! backup remote when it did not answer.
//!
//! Invariant: nothing changes on any host unless every host answered and the data-directory
//! rule held on every etcd host.

use crate::cli::ResetArgs;
use crate::operations::manager::{self, Context};
use crate::operations::reset::Reset;

pub async fn run(args: &ResetArgs) -> anyhow::Result<i32> {
    let dry_run = args.run.dry_run;
    let (inv, state) = super::load_for(&args.inventory, dry_run)?;
    let connect = args.connect.settings();
    let ctx = Context::new(&inv, &state, &connect);
    let mut op = Reset::new();
    let code = manager::run(&mut op, &ctx, &(&args.run).into()).await?;
    let Some(prepared) = op.prepared() else {
        return Ok(code);
    };
    // The hosts are given back even when the backup remote did not answer; what is left there
    // makes the run end in an error.
    let changed = !dry_run && !prepared.plan.phases.is_empty();
    Ok(remote_left(&inv, &prepared.leftovers, code, dry_run, changed))
}

/// With the backup remote unreachable, the push key may still be authorized there: says so,
/// with what to do, and gives 4 after changes, 1 with nothing else done, `code` on a dry run.
fn remote_left(
    inv: &crate::inventory::Inventory,
    leftovers: &crate::converge::reset::Leftovers,
    code: i32,
    dry_run: bool,
    changed: bool,
) -> i32 {
    let (Some(why), Some(remote)) = (&leftovers.remote_unreached, &inv.backup.remote) else {
        return code;
    };
    eprintln!(
        "error: the backup push key may still be authorized on {}: {why}. Run `hactl reset -i {}` again once it answers, \
         or remove the line ending in `hactl backup push {}` from {}'s ~/.ssh/authorized_keys there",
        remote.describe(),
        inv.source.display(),
        inv.name,
        remote.ssh.user
    );
    match (dry_run, changed) {
        (true, _) => code,
        (false, true) => crate::exit::FAILED_AFTER_CHANGES,
        (false, false) => crate::exit::FAILED,
    }
}
