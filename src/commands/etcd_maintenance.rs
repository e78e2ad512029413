//! `hactl etcd maintenance --compact --defrag --disarm`: the NOSPACE runbook (docs/recovery.md, "When a member is unhealthy": NOSPACE):
//! compact to the current revision, defragment each member one at a time (defrag blocks the
//! member it runs on), then disarm the alarms.
//!
//! Invariant: no membership change; members are defragmented one after the other.

use std::time::Duration;

use anyhow::bail;

use crate::cli::EtcdMaintenanceArgs;
use crate::etcd;
use crate::exec::Mode;
use crate::exit;
use crate::inventory::Role;
use crate::operations;
use crate::plan::{RemoteCommand, Step};

pub async fn run(args: &EtcdMaintenanceArgs) -> anyhow::Result<i32> {
    if !(args.compact || args.defrag || args.disarm) {
        bail!("say what to do: --compact, --defrag, --disarm (the NOSPACE runbook is all three)");
    }
    let (inv, state) = super::load(&args.inventory)?;
    let hosts = inv.with_role(Role::Etcd);
    let reach = operations::reach::reach(&inv, (&state).into(), &hosts, &args.connect.settings()).await;
    // Compaction and defragmentation change the cluster: the one lock, like every such command.
    let run = operations::journal::new_run_id("etcd-maintenance");
    let lock = operations::lock::ClusterLock::acquire(
        &state,
        &reach.transports,
        &operations::lock::cluster_hosts(&inv),
        operations::lock::Owner::new("etcd maintenance", &run),
        None,
    )
    .await
    .map_err(|e| anyhow::Error::new(e.refusal()))?;
    let obs = reach.observe(&inv, &[]).await?;
    let observer = inv.host(&obs.observer).expect("observer from inventory");
    let ctl = etcd::ETCDCTL_WRAPPER;
    let mut steps = Vec::new();
    if args.compact {
        steps.push(Step::Run(RemoteCommand::script(format!(
            "rev=$({ctl} endpoint status -w json | grep -o '\"revision\":[0-9]*' | head -n1 | cut -d: -f2) && [ -n \"$rev\" ] && {ctl} compact \"$rev\" --physical"
        ))));
    }
    if args.defrag {
        for m in obs.voters() {
            for url in &m.client_urls {
                steps.push(Step::Run(
                    RemoteCommand::new([
                        ctl.to_string(),
                        format!("--endpoints={url}"),
                        "--command-timeout=120s".into(),
                        "defrag".into(),
                    ])
                    .with_timeout(Duration::from_secs(150)),
                ));
            }
        }
    }
    if args.disarm {
        steps.push(Step::Run(RemoteCommand::new([ctl, "alarm", "disarm"])));
    }
    steps.push(Step::Wait(etcd::probe::cluster_healthy(
        "after maintenance",
        Duration::from_secs(60),
    )));
    let done = operations::run_on(Mode::Live, &reach.transports, "etcd maintenance", observer, steps).await;
    lock.release().await;
    done?;
    println!("etcd maintenance: done on {} member(s)", obs.voters().count());
    Ok(exit::OK)
}
