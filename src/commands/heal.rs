//! `hactl heal [--once | --watch] [--dry-run]`: one heal round, or one every `--interval`
//! seconds (the rounds are [`crate::operations::heal`]).

use std::time::Duration;

use crate::cli::HealArgs;
use crate::operations::heal::{self, Options};
use crate::operations::manager::Context;

/// `hactl heal`.
pub async fn run(args: &HealArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_for(&args.inventory, args.dry_run)?;
    let connect = args.connect.settings();
    let ctx = Context {
        dry_run: args.dry_run,
        ..Context::new(&inv, &state, &connect)
    };
    let opts = Options {
        dry_run: args.dry_run,
    };
    if !args.watch {
        return heal::round(&ctx, &opts).await;
    }
    eprintln!(
        "heal --watch: every {}s; unhealthyTimeout={}s retryPeriod={}s maxUnhealthy={} maxRetry={}",
        args.interval,
        inv.heal.unhealthy_timeout.as_secs(),
        inv.heal.retry_period.as_secs(),
        inv.heal.max_unhealthy,
        inv.heal.max_retry
    );
    loop {
        if let Err(e) = heal::round(&ctx, &opts).await {
            println!("{} heal: round failed: {e:#}", crate::clock::now_rfc3339());
        }
        // A Ctrl-C stops the operation under way between its steps, and the watch with it.
        if crate::exec::run::interrupted() {
            return Ok(super::exit::FAILED);
        }
        tokio::time::sleep(Duration::from_secs(args.interval)).await;
    }
}
