//! Old members and zombies: the hosts that held an etcd member of this cluster (the member
//! history, `record.rs`), what is on them now (`probe.rs`), what that means (`decide.rs`: a
//! zombie, a fence that is due, a peer of another cluster dialling the members, what a recover
//! must fence or have attested) and the fence for good (`retire.rs`).
//!
//! Why it exists: a recover makes a new cluster (a new token, so a new cluster ID), which keeps
//! an old member's raft traffic out of it, but not an old member that comes back with its old
//! data: restarted on its preserved data dir, or powered on after the cluster was restored onto
//! other hosts, it serves the old data to any client that reaches it, and a quorum of them forms
//! the old cluster again, writes and all. So every host that ever held a member is accounted
//! for: fenced for good when it answers, attested dead (`--confirm-dead`) when it does not, and
//! fenced the moment it answers again; `status` reports any etcd that is not of the current
//! cluster (exit 7) with the command that fences it.
//!
//! Sits among the components (below bring-up) because `up` (its old-member phase and the
//! history it records), `status`, `heal` and `recover` all use it.
//!
//! Invariant: the probes only read; the fence re-checks its target on the host right before it
//! acts and moves data aside, never deletes it; reading the history never writes it.

pub mod decide;
pub mod probe;
pub mod record;
pub mod retire;

use std::collections::BTreeMap;

use futures::StreamExt;

use crate::exec::connect::{ConnectSettings, Connection, HostKeys};
use crate::exec::Transports;
use crate::inventory::{Inventory, Role};
use crate::state::StateView;

pub use decide::{classify, Current, Finding, HostInput, Kind};
pub use record::{History, HostState};

/// What [`gather`] found.
#[derive(Default)]
pub struct Gathered {
    pub findings: Vec<Finding>,
    /// What each host that answered showed.
    pub seen: BTreeMap<String, probe::HostSeen>,
    /// The hosts that answered.
    pub transports: Transports,
    pub history: History,
}

/// Probes every inventory host (read-only, one round trip each; the etcd hosts' logs too) and
/// classifies what it saw against `current`. Connections in `open` are used as they are (an
/// error there counts as no answer); the other hosts are connected here with `keys`.
pub async fn gather(
    inv: &Inventory,
    state: &StateView,
    keys: HostKeys<'_>,
    connect: &ConnectSettings,
    open: &BTreeMap<String, Connection>,
    current: &Current,
) -> Gathered {
    let history = record::load(state, inv);
    let missing: Vec<&crate::inventory::Host> =
        inv.hosts.iter().filter(|h| !open.contains_key(&h.name)).collect();
    let mut conns: BTreeMap<String, Connection> = open.clone();
    if !missing.is_empty() {
        conns.extend(crate::exec::connect::connect(keys, &missing, connect).await);
    }
    let asks = inv.hosts.iter().filter_map(|h| {
        let t = conns.get(&h.name)?.as_ref().ok()?.clone();
        let window = h.has(Role::Etcd).then_some(probe::LOG_WINDOW_SECS);
        let cmd = probe::command(&inv.etcd.data_dir, crate::etcd::METRICS_PORT, window);
        Some(async move {
            let out = t.run(&cmd).await;
            (h.name.clone(), t, out)
        })
    });
    let answers: Vec<_> = futures::stream::iter(asks)
        .buffer_unordered(connect.concurrency.max(1))
        .collect()
        .await;
    let mut g = Gathered {
        history,
        ..Gathered::default()
    };
    for (name, t, out) in answers {
        match out {
            Ok(o) if o.success() => {
                g.seen.insert(name.clone(), probe::parse(&name, &o.stdout_str()));
                g.transports.insert(name, t);
            }
            Ok(o) => tracing::debug!("{name}: old-member probe failed: {}", o.stderr_str().trim()),
            Err(e) => tracing::debug!("{name}: old-member probe failed: {e}"),
        }
    }
    let inputs: Vec<HostInput<'_>> = inv
        .hosts
        .iter()
        .map(|h| HostInput {
            name: &h.name,
            etcd_role: h.has(Role::Etcd),
            peer_url: crate::etcd::peer_url(inv, h),
            data_dir: &inv.etcd.data_dir,
            seen: g.seen.get(&h.name),
        })
        .collect();
    g.findings = classify(current, &g.history, &inputs);
    g
}

/// The text `status` prints under its table for the findings that are notes (not problems).
pub fn notes(findings: &[Finding]) -> String {
    findings
        .iter()
        .filter(|f| !f.problem)
        .map(|f| format!("note: {}\n", f.problem_line()))
        .collect()
}
