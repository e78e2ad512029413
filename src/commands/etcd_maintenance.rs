//! `hactl etcd maintenance --compact --defrag --disarm`: the NOSPACE runbook (docs/recovery.md, "When a member is unhealthy": NOSPACE):
//! compact to the current revision, defragment each member one at a time (defrag blocks the
//! member it runs on), then disarm the alarms.
//!
//! Invariant: no membership change; members are defragmented one after the other; a host of
//! another cluster is refused first; a live run that compacts or defragments asks (`--yes`), and
//! `--dry-run` prints the steps without the lock.

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
    let settings = args.connect.settings();
    let reach = operations::reach::reach(&inv, (&state).into(), &hosts, &settings).await;
    reach.refuse_changed_host_keys()?;
    // Whose cluster: hosts whose trust files hold no CA this state directory knows are refused
    // before anything else, as by every operation.
    let ctx = operations::manager::Context::new(&inv, &state, &settings);
    operations::manager::check_identity(&ctx, &reach.transports).await?;
    if args.dry_run {
        let obs = reach.observe(&inv, &[]).await?;
        let observer = inv.host(&obs.observer).expect("observer from inventory");
        operations::run_on(
            Mode::DryRun,
            &reach.transports,
            "etcd maintenance",
            observer,
            steps(args, &obs),
        )
        .await?;
        return Ok(exit::OK);
    }
    if (args.compact || args.defrag) && !args.yes {
        crate::output::confirm(&confirmation(args))?;
    }
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
    let done = operations::run_on(
        Mode::Live,
        &reach.transports,
        "etcd maintenance",
        observer,
        steps(args, &obs),
    )
    .await;
    lock.release().await;
    done?;
    println!("etcd maintenance: done on {} member(s)", obs.voters().count());
    Ok(exit::OK)
}

/// What the operator is asked before a live run that compacts or defragments.
fn confirmation(args: &EtcdMaintenanceArgs) -> String {
    let mut what = vec![];
    if args.compact {
        what.push("compacts etcd to its current revision (older revisions are gone for good)");
    }
    if args.defrag {
        what.push("defragments each member, one at a time (each stops answering while it runs)");
    }
    format!("this {}", what.join(" and "))
}

/// The steps, run from the observer: compaction, each voter's defragmentation, the disarm, then
/// a wait for a healthy cluster.
fn steps(args: &EtcdMaintenanceArgs, obs: &etcd::health::Observation) -> Vec<Step> {
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
    steps
}
