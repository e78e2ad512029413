//! `up`'s part of the member history ([`crate::old_members::record`]): after a run, the hosts
//! that hold the cluster's members (with their member IDs), and the old members the
//! `fence_old_members` phase fenced for good.
//!
//! Invariant: a failure to write the record is a warning, never a failed `up` (the cluster is
//! what it is; the next `up` records it again).

use crate::inventory::Role;
use crate::old_members::record::{self, Seen};
use crate::phases::fence_old_members;
use crate::plan::RemoteCommand;

use super::Prepared;
use crate::state::StateDir;

/// Records the membership after `up`: read again from a running member when the plan ran
/// (`applied`), else as the facts showed it.
pub async fn record(p: &Prepared, state: &StateDir, applied: bool) {
    let mut list = p.view.members.clone();
    if applied {
        for h in p.inv.with_role(Role::Etcd) {
            let Some(t) = p.transports.get(&h.name) else {
                continue;
            };
            let cmd =
                RemoteCommand::read_only([crate::etcd::ETCDCTL_WRAPPER, "member", "list", "-w", "json"]);
            if let Ok(out) = t.run(&cmd).await {
                if let Ok(l) = serde_json::from_str::<crate::etcd::MemberList>(&out.stdout_str()) {
                    list = Some(l);
                    break;
                }
            }
        }
    }
    let fenced: Vec<String> = if applied {
        p.plan
            .phases
            .iter()
            .filter(|ph| ph.title == fence_old_members::TITLE)
            .flat_map(|ph| ph.hosts.iter())
            .filter(|h| !h.steps.is_empty())
            .map(|h| h.host.clone())
            .collect()
    } else {
        Vec::new()
    };
    let Some(list) = list else {
        if fenced.is_empty() {
            return;
        }
        return write(p, state, None, &[], &fenced);
    };
    let seen: Vec<Seen> = p
        .inv
        .with_role(Role::Etcd)
        .iter()
        .filter_map(|h| {
            let m = list.by_peer_url(&crate::etcd::peer_url(&p.inv, h))?;
            Some(Seen {
                host: h.name.clone(),
                address: h.address.to_string(),
                member_id: crate::etcd::hex_id(m.id),
            })
        })
        .collect();
    write(p, state, Some(list.header.cluster_id), &seen, &fenced)
}

fn write(p: &Prepared, state: &StateDir, cluster_id: Option<u64>, seen: &[Seen], fenced: &[String]) {
    let at = crate::clock::now_rfc3339();
    let cid = cluster_id.map(|c| format!("{c:x}")).unwrap_or_default();
    let result = record::update(state, &p.inv, |h| {
        if !seen.is_empty() {
            h.record_members(&cid, seen, "up", &at);
        }
        for f in fenced {
            let stamp = p
                .facts
                .get(f)
                .map(|x| format!("up-{}", x.time_ns / 1_000_000_000))
                .unwrap_or_default();
            let address = p.inv.host(f).map(|x| x.address.to_string()).unwrap_or_default();
            let aside = crate::old_members::retire::aside(&p.inv.etcd.data_dir, &stamp);
            h.mark_fenced(f, &address, "up", &at, &aside);
        }
    });
    if let Err(e) = result {
        tracing::warn!("could not record the member history: {e}");
    }
}
