//! `hactl status`: gathers the cluster's status ([`crate::converge::status`]), records the
//! high-water mark, prints the table or the JSON document.
//!
//! Invariant: exit code 0 when healthy; 7 when an etcd that is not of the cluster runs on an
//! inventory host or dials the members (a zombie), or an old member attested dead answers
//! unfenced; else 5 (degraded) when the status lists a problem.

use crate::cli::{OutputFormat, StatusArgs};
use crate::converge::status;

pub async fn run(args: &StatusArgs) -> anyhow::Result<i32> {
    let (inv, view) = super::load_read_only(&args.inventory)?;
    let status = status::gather(&inv, &view, &args.connect.settings()).await?;
    // The one write of a read-only command: the revision high-water mark, raised only, and
    // only in a state directory that exists (docs/reference/files-on-hosts.md).
    if let Some(state) = crate::state::StateDir::open_existing(&view.path)? {
        status::record_hwm(&state, &status);
    }
    match args.output {
        OutputFormat::Json => crate::output::print_document(status::JSON_KIND, &status)?,
        OutputFormat::Table => print!("{}", status::table(&status)),
    }
    Ok(status.exit_code())
}
