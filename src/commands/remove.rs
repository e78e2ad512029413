//! `hactl remove MEMBER`: the recipe lives in [`crate::remove`]; this loads the inventory once.

use crate::cli::RemoveArgs;

/// `hactl remove`.
pub async fn run(args: &RemoveArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    crate::remove::run(&inv, &state, args).await
}
