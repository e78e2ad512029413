//! `hactl check`: runs the preflight ([`crate::converge::check`]) on every host and prints its
//! rows.
//!
//! Invariant: a failed check makes the exit code non-zero: 3 when the only failures are hosts
//! whose SSH host key changed (the operator's word is needed), else 1.

use crate::cli::{CheckArgs, OutputFormat};
use crate::converge::check::{self, Verdict};
use crate::inventory::Host;

/// Runs the preflight; returns the exit code (0 when every check passed).
pub async fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_read_only(&args.inventory)?;
    let hosts: Vec<&Host> = inv.hosts.iter().collect();
    let checked = check::check_hosts(&inv, &state, &hosts, &args.connect.settings()).await;
    let rows = &checked.rows;
    match args.output {
        OutputFormat::Table => print!("{}", check::table(rows)),
        OutputFormat::Json => crate::output::print_document(check::JSON_KIND, &check::json(rows))?,
    }
    let failed = rows.iter().filter(|r| r.verdict == Verdict::Fail).count();
    let code = checked.exit_code();
    if code == crate::exit::NEEDS_INPUT {
        let hosts: Vec<&str> = checked.host_key_changed.iter().map(String::as_str).collect();
        eprintln!(
            "check: the host key of {} changed; if re-installed, check the key and run again with {}",
            hosts.join(", "),
            hosts
                .iter()
                .map(|h| format!("--accept-new-host-key {h}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    } else if failed > 0 {
        eprintln!("check: {failed} check(s) failed");
    } else {
        eprintln!("check: all hosts ready");
    }
    Ok(code)
}
