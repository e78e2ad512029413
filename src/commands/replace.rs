//! `hactl replace MEMBER (--reuse-host | --host NEW) [--planned]` (the steps are
//! [`crate::replace`]).

use crate::cli::ReplaceArgs;

/// `hactl replace`.
pub async fn run(args: &ReplaceArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    crate::replace::run_with_confirm(&inv, &state, args, &crate::output::confirm).await
}
