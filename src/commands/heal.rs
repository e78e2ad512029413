//! `hactl heal [--once | --watch] [--dry-run]`: one heal round, or one every `--interval`
//! seconds (the rounds are [`crate::heal`]).

use std::time::Duration;

use crate::cli::HealArgs;
use crate::heal;

/// `hactl heal`.
pub async fn run(args: &HealArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    if !args.watch {
        return heal::round(&inv, &state, args).await;
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
        if let Err(e) = heal::round(&inv, &state, args).await {
            println!("{} heal: round failed: {e:#}", crate::clock::now_rfc3339());
        }
        tokio::time::sleep(Duration::from_secs(args.interval)).await;
    }
}
