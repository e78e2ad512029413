//! `hactl certs check`, `hactl certs renew` and `hactl certs rotate-ca`: wiring only; the report
//! is `crate::certs`, the renewal is `pki::ensure_renewing` followed by `up`'s own plan (a
//! re-issued certificate makes `up` upload it and restart what reads it, one host at a time),
//! the rotation is `crate::operations::rotate_ca`'s journaled steps with `up`'s plan as each roll.

use anyhow::Context as _;
use futures::StreamExt;

use std::sync::Arc;

use crate::cli::{CaName, CertsCheckArgs, CertsRenewArgs, CertsRotateCaArgs, OutputFormat, UpArgs};
use crate::inventory::Host;

/// One host's certificate files (path, PEM), or why they could not be read.
type HostRead = Result<Vec<(String, String)>, String>;

/// `hactl certs check`: one read-only round trip per host.
pub async fn check(args: &CertsCheckArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load_read_only(&args.inventory)?;
    let pki_dir = state.path.join("pki");
    let local = crate::certs::read_state(&pki_dir);
    if local.is_empty() {
        anyhow::bail!(
            "no certificates in {}: run `hactl up` first (or point --state-dir at the cluster's state)",
            pki_dir.display()
        );
    }
    let hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    let conns = crate::exec::connect::connect(&state, &hosts, &args.connect.settings()).await;
    let results: Vec<(String, HostRead)> = futures::stream::iter(hosts.iter().map(|h| {
        let conn = conns.get(&h.name).cloned();
        let paths = crate::certs::host_paths(&crate::phases::query_for(&inv, h).files);
        async move {
            let r = match conn {
                Some(Ok(t)) => match t.run(&crate::certs::probe_command(&paths)).await {
                    Ok(out) if out.success() => Ok(crate::certs::parse_probe(&out.stdout_str())),
                    Ok(out) => Err(format!(
                        "the certificate probe failed: {}",
                        out.stderr_str().trim()
                    )),
                    Err(e) => Err(format!("{:#}", anyhow::Error::from(e))),
                },
                Some(Err(e)) => Err(e.to_string()),
                None => Err("not connected".into()),
            };
            (h.name.clone(), r)
        }
    }))
    .buffered(args.connect.concurrency.max(1))
    .collect()
    .await;
    let mut read = Vec::new();
    let mut unreachable = Vec::new();
    for (host, r) in results {
        match r {
            Ok(files) => read.push((host, files)),
            Err(e) => unreachable.push(format!("{host}: {e}")),
        }
    }
    let rows = crate::certs::report(&local, &read, time::OffsetDateTime::now_utc());
    let mut problems = crate::certs::problems(&rows, inv.pki.renew_before_days);
    problems.extend(unreachable.iter().map(|u| format!("not checked: {u}")));
    match args.output {
        OutputFormat::Json => {
            crate::output::print_document(crate::certs::JSON_KIND, &crate::certs::json(&rows, &problems))?
        }
        OutputFormat::Table => {
            print!("{}", crate::certs::table(&rows));
            for p in &problems {
                eprintln!("warning: {p}");
            }
        }
    }
    Ok(if problems.is_empty() {
        super::exit::OK
    } else {
        super::exit::DEGRADED
    })
}

/// `hactl certs renew`: re-issue the named leaves (or all) and roll them out with `up`'s plan.
pub async fn renew(args: &CertsRenewArgs) -> anyhow::Result<i32> {
    let inv = super::load_inventory(&args.inventory)?;
    let known = crate::pki::leaf_names(&inv);
    let names: Vec<String> = if args.all {
        known.clone()
    } else {
        args.names.clone()
    };
    if names.is_empty() {
        return Err(anyhow::Error::new(super::Refusal {
            code: super::exit::REFUSED,
            message: format!(
                "name the certificates to renew, or pass --all; known certificates: {}",
                known.join(", ")
            ),
        }));
    }
    let unknown = crate::certs::unknown_names(&names, &known);
    if !unknown.is_empty() {
        return Err(anyhow::Error::new(super::Refusal {
            code: super::exit::REFUSED,
            message: format!(
                "no certificate named {} in this inventory (CAs are rotated, not renewed); known certificates: {}",
                unknown.join(", "),
                known.join(", ")
            ),
        }));
    }
    if args.dry_run {
        return renew_dry_run(args, &names).await;
    }
    let up = UpArgs {
        inventory: args.inventory.clone(),
        connect: args.connect.clone(),
        yes: args.yes,
    };
    super::up::up_renewing(&up, &names)
        .await
        .context("hactl certs renew stopped; the re-issued certificates are in the state directory, so `hactl up` finishes rolling them out")
}

/// `hactl certs renew --dry-run`: the certificates the renewal would re-issue (on stderr, with
/// their current expiry) and the plan `up` would run to roll them out, as `hactl plan` prints it,
/// from the state directory read only and the new leaves made in memory.
async fn renew_dry_run(args: &CertsRenewArgs, names: &[String]) -> anyhow::Result<i32> {
    let (inv, view) = super::load_read_only(&args.inventory)?;
    if !view.exists() {
        return Err(anyhow::Error::new(super::Refusal {
            code: super::exit::REFUSED,
            message: format!(
                "cluster {} has no state directory at {}, so it has no certificates to renew; \
                 `hactl plan` shows what `hactl up` would create",
                inv.name,
                view.path.display()
            ),
        }));
    }
    // The certificates as they are now, read as `certs check` reads them.
    let now = time::OffsetDateTime::now_utc();
    let current = crate::certs::report(&crate::certs::read_state(&view.file("pki")), &[], now);
    let prepared = crate::converge::preview(inv, view, &args.connect.settings(), names).await?;
    if args.output == crate::cli::OutputFormat::Table {
        let renewed = prepared.pki.expiry_report();
        eprintln!("would re-issue, from the same CA (a sound key is kept):");
        for name in names {
            let crt = format!("{name}.crt");
            let was = current
                .iter()
                .find(|r| r.file == *name)
                .map(|r| {
                    format!(
                        "{} ({} days left)",
                        r.not_after.get(..10).unwrap_or("-"),
                        r.days_left
                    )
                })
                .unwrap_or_else(|| "-".into());
            let will = renewed
                .iter()
                .find(|(n, _)| *n == crt)
                .map(|(_, t)| t.date().to_string())
                .unwrap_or_else(|| "-".into());
            eprintln!("  {crt}: expires {was} now, {will} once renewed");
        }
    }
    super::up::print_plan(&prepared, false, args.output).await?;
    if args.output == crate::cli::OutputFormat::Table {
        eprintln!("(dry run: nothing was changed; run without --dry-run to renew)");
    }
    Ok(super::exit::OK)
}

/// One roll of a CA rotation (`certs rotate-ca`, `adopt`): `up`'s plan, built from the state
/// directory as it is now and run.
pub(super) struct Roll {
    pub(super) args: UpArgs,
}

#[async_trait::async_trait]
impl crate::operations::runner::LocalAct for Roll {
    fn describe(&self) -> String {
        "`hactl up`'s plan, built afresh: upload the changed trust files and certificates, restart \
etcd members one at a time (leader last, each HAProxy backend drained, health gates before and \
after), then apiservers one at a time (drained, /readyz), then controllers (Lease gate); a \
converged cluster plans nothing"
            .into()
    }
    async fn act(&self, _: &crate::exec::Transports) -> anyhow::Result<serde_json::Value> {
        let started = std::time::Instant::now();
        let args = self.args.clone();
        // `up`'s future is not `Send` (it borrows across awaits in ways the trait's boxed future
        // cannot name), so it runs on a runtime of its own on a blocking thread.
        tokio::task::spawn_blocking(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let (inv, state) = super::load(&args.inventory)?;
                super::up::converge(inv, state, &args, &[]).await
            })
        })
        .await??;
        Ok(serde_json::json!({ "seconds": started.elapsed().as_secs_f64() }))
    }
}

/// `hactl certs rotate-ca`: the etcd, kubernetes and front-proxy CAs as an operation the
/// manager runs ([`crate::operations::rotate_ca`]); the two Kubernetes CAs refused without a
/// `kubernetes` section.
pub async fn rotate_ca(args: &CertsRotateCaArgs) -> anyhow::Result<i32> {
    use crate::operations::manager::{self, Context};
    use crate::operations::rotate_ca::{Options, RotateCa};
    let kind = match args.ca {
        CaName::Etcd => crate::pki::CaKind::Etcd,
        CaName::FrontProxy => crate::pki::CaKind::FrontProxy,
        CaName::Kubernetes => crate::pki::CaKind::Kubernetes,
    };
    // Refused before the state directory is opened (or created): nothing changes.
    let inv = super::load_inventory(&args.inventory)?;
    if let Some(message) = crate::operations::rotate_ca::refused(kind, &inv) {
        return Err(super::exit::refuse(super::exit::REFUSED, message));
    }
    let state = super::open_state_for(&inv, args.run.dry_run)?;
    let up = UpArgs {
        inventory: args.inventory.clone(),
        connect: args.connect.clone(),
        yes: true,
    };
    let mut op = RotateCa::new(Options {
        kind,
        stop_after: args.stop_after.clone(),
        roll: Arc::new(Roll { args: up }),
    });
    let connect = args.connect.settings();
    let ctx = Context::new(&inv, &state, &connect);
    manager::run(&mut op, &ctx, &(&args.run).into()).await
}
