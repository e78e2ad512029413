//! What the operations share about old members ([`crate::old_members`]): the journaled step that
//! fences one for good ([`fence_step`]: recover's R1.5 and heal's H2) and the act that records
//! the fence in the member history ([`RecordFenced`]).
//!
//! Invariant: the step's postcondition reads the host ([`retire::done_command`]), so a re-run or a
//! resume skips a host that is already fenced; the record is written only after the fence.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::exec::Transports;
use crate::inventory::Inventory;
use crate::old_members::{record, retire};
use crate::operations::runner::{JournaledStep, LocalAct, StepId};
use crate::plan::{Check, RemoteCommand};
use crate::state::StateDir;

/// The step that fences the old member on `host` for good (units the inventory no longer gives
/// it, data dir aside to [`retire::aside`]), then records it in the member history as fenced by
/// `by` (`recover <run>`, `heal <run>`).
#[allow(clippy::too_many_arguments)]
pub fn fence_step(
    id: StepId,
    inv: &Inventory,
    state: &StateDir,
    host: &str,
    run: &str,
    by: &str,
    why: &str,
    guard: retire::Guard,
) -> JournaledStep {
    let dd = &inv.etcd.data_dir;
    let roles = inv.host(host).map(|h| h.roles.clone()).unwrap_or_default();
    let units = retire::units_for(&roles);
    let aside = retire::aside(dd, run);
    JournaledStep::new(
        id,
        format!(
            "fence the old member on {host} for good: stop, disable and fence {} (those installed), stop any etcd on its old data, move {dd} to {aside}",
            units.join(" ")
        ),
        Some(host),
    )
    .done_when(retire::done_command(dd, guard, &units))
    .run(retire::command(why, run, dd, guard, &units))
    .verify(Check::command(
        format!("{host}: no etcd of another cluster runs on hactl's data; unless its member is kept, its old units fenced and disabled and no member data left"),
        retire::done_command(dd, guard, &units),
        Duration::from_secs(60),
    ))
    .local(Arc::new(RecordFenced {
        inv: inv.clone(),
        state: state.clone(),
        host: host.to_string(),
        by: by.to_string(),
        aside,
    }))
}

/// Records `host` as fenced for good in the member history (with its aside data dir, when the
/// fence moved one there).
pub struct RecordFenced {
    pub inv: Inventory,
    pub state: StateDir,
    pub host: String,
    pub by: String,
    /// Where the fence moves the data dir.
    pub aside: String,
}

#[async_trait]
impl LocalAct for RecordFenced {
    fn describe(&self) -> String {
        format!(
            "record {} as fenced for good in {}",
            self.host,
            self.state.file(record::FILE).display()
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let moved = match transports.get(&self.host) {
            Some(t) => t
                .run(&RemoteCommand::read_only(["test", "-e", &self.aside]))
                .await
                .is_ok_and(|o| o.success()),
            None => false,
        };
        let aside = if moved { self.aside.as_str() } else { "" };
        let address = self
            .inv
            .host(&self.host)
            .map(|h| h.address.to_string())
            .unwrap_or_default();
        let at = crate::clock::now_rfc3339();
        record::update(&self.state, &self.inv, |h| {
            h.mark_fenced(&self.host, &address, &self.by, &at, aside)
        })?;
        Ok(serde_json::json!({ "host": self.host, "dataAside": aside }))
    }
}

/// After a membership change (replace, remove): the member history from the member list an etcd
/// host of the inventory reports now (its members become the current membership), then the
/// member that left: fenced for good on its host (`fenced`: host and where its data went), or
/// attested dead (`attested`: fenced the moment it answers again). A failure is a warning: the
/// run itself is done.
pub async fn record_change(
    inv: &Inventory,
    state: &StateDir,
    transports: &Transports,
    by: &str,
    fenced: Option<(&str, &str)>,
    attested: Option<&str>,
) {
    let cmd = RemoteCommand::read_only([crate::etcd::ETCDCTL_WRAPPER, "member", "list", "-w", "json"]);
    let mut list: Option<crate::etcd::MemberList> = None;
    for h in inv.with_role(crate::inventory::Role::Etcd) {
        let Some(t) = transports.get(&h.name) else {
            continue;
        };
        if let Ok(out) = t.run(&cmd).await {
            if let Ok(l) = serde_json::from_str(&out.stdout_str()) {
                list = Some(l);
                break;
            }
        }
    }
    let at = crate::clock::now_rfc3339();
    let address = |h: &str| inv.host(h).map(|x| x.address.to_string()).unwrap_or_default();
    let result = record::update(state, inv, |hist| {
        if let Some(l) = &list {
            let seen: Vec<record::Seen> = inv
                .with_role(crate::inventory::Role::Etcd)
                .iter()
                .filter_map(|h| {
                    let m = l.by_peer_url(&crate::etcd::peer_url(inv, h))?;
                    Some(record::Seen {
                        host: h.name.clone(),
                        address: h.address.to_string(),
                        member_id: crate::etcd::hex_id(m.id),
                    })
                })
                .collect();
            hist.record_members(&format!("{:x}", l.header.cluster_id), &seen, by, &at);
        }
        if let Some((h, aside)) = fenced {
            hist.mark_fenced(h, &address(h), by, &at, aside);
        }
        if let Some(h) = attested {
            hist.mark_awaiting_fence(h, &address(h), by, &at);
        }
    });
    if let Err(e) = result {
        tracing::warn!("could not record the member history: {e}");
    }
}
