//! `hactl up` and `hactl plan`: one code path ([`crate::converge`]). Facts are gathered
//! read-only and the plan is built from [`crate::converge::phases`]; `up` executes it under the
//! state's `up` lock and `plan` prints it.

use crate::cli::{OutputFormat, PlanArgs, UpArgs};
use crate::exec::{self, Mode};
use crate::inventory::Inventory;
use crate::state::StateDir;

/// `hactl plan`: prints what `up` would do.
pub async fn plan(args: &PlanArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.up.inventory)?;
    let prepared = crate::converge::prepare(inv, state, &args.up.connect.settings(), &[]).await?;
    match args.output {
        OutputFormat::Table => {
            exec::run(&prepared.plan, Mode::DryRun, &prepared.transports).await?;
        }
        OutputFormat::Json => {
            println!("{}", serde_json::to_string_pretty(&prepared.plan.to_json())?);
        }
    }
    Ok(crate::exit::OK)
}

/// `hactl up`: converges the hosts on the inventory.
pub async fn up(args: &UpArgs) -> anyhow::Result<i32> {
    up_renewing(args, &[]).await
}

/// [`up`], re-issuing the leaves named in `renew` first (`hactl certs renew`).
pub async fn up_renewing(args: &UpArgs, renew: &[String]) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    let _lock = crate::operations::lock::take(&state, &inv, &args.connect.settings(), "up").await?;
    converge(inv, state, args, renew).await
}

/// [`crate::converge::apply`] for an inventory loaded by a caller that holds the state's `up`
/// lock (`up` itself, and each roll of `certs rotate-ca`).
pub async fn converge(
    inv: Inventory,
    state: StateDir,
    args: &UpArgs,
    renew: &[String],
) -> anyhow::Result<i32> {
    crate::converge::apply(inv, state, &args.options(), renew).await
}
