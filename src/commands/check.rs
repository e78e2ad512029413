//! `hactl check`: runs the preflight ([`crate::converge::check`]) on every host and prints its
//! rows.
//!
//! Invariant: a failed check makes the exit code non-zero.

use crate::cli::{CheckArgs, OutputFormat};
use crate::converge::check::{self, Verdict};
use crate::inventory::Host;

/// Runs the preflight; returns the exit code (0 when every check passed).
pub async fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_read_only(&args.inventory)?;
    let hosts: Vec<&Host> = inv.hosts.iter().collect();
    let rows = check::check_hosts(&inv, &state, &hosts, &args.connect.settings()).await;
    match args.output {
        OutputFormat::Table => print!("{}", check::table(&rows)),
        OutputFormat::Json => crate::output::print_document(check::JSON_KIND, &check::json(&rows))?,
    }
    let failed = rows.iter().filter(|r| r.verdict == Verdict::Fail).count();
    if failed > 0 {
        eprintln!("check: {failed} check(s) failed");
        Ok(1)
    } else {
        eprintln!("check: all hosts ready");
        Ok(0)
    }
}
