//! `hactl lab`: bring up, inspect, enter, break and remove a lab of real Linux hosts on this
//! machine (systemd-nspawn containers on a private bridge). See `crate::lab`.
//!
//! Invariant: this file only parses arguments and prints; the lab itself is `crate::lab`, which
//! blocks, so it runs on tokio's blocking pool.

use crate::lab::{self, LabUpOptions};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

use crate::cli::LabCommand;

/// Runs a lab subcommand. Returns `Some(inventory)` when `lab up --apply` asks the caller to go on
/// and bring the cluster up with that inventory; `None` otherwise.
pub async fn run(cmd: LabCommand) -> Result<Option<PathBuf>> {
    tokio::task::spawn_blocking(move || run_blocking(cmd))
        .await
        .context("the lab task panicked")?
}

fn run_blocking(cmd: LabCommand) -> Result<Option<PathBuf>> {
    lab::require_root()?;
    match cmd {
        LabCommand::Up(args) => {
            let mut opts = LabUpOptions::new(&args.name);
            opts.control_planes = args.control_planes;
            opts.load_balancers = args.load_balancers;
            opts.spares = args.spares;
            opts.workers = args.workers;
            opts.suite = args.suite;
            opts.in_memory |= args.in_memory;
            if let Some(out) = args.out {
                opts.out = out;
            }
            if args.workers > 0 && args.no_kubernetes {
                bail!(
                    "--workers {} with --no-kubernetes: an inventory with workers needs its kubernetes \
                     section; drop --no-kubernetes, or --workers",
                    args.workers
                );
            }
            // The binaries first: a build that fails leaves no lab behind.
            let kube_dir = if args.no_kubernetes {
                None
            } else {
                eprintln!(
                    "lab: Kubernetes {} binaries from {} (built on first use; --no-kubernetes leaves Kubernetes out)",
                    args.kubernetes_version,
                    lab::kubernetes::cache_dir(&args.kubernetes_version).display()
                );
                Some(
                    lab::kubernetes::ensure_binaries(&args.kubernetes_version)
                        .context("failed to prepare the Kubernetes binaries for the lab")?,
                )
            };
            let lab = lab::up(&opts).with_context(|| format!("failed to bring up lab {}", args.name))?;
            if let Some(dir) = &kube_dir {
                lab::kubernetes::add_to_inventory(&lab.inventory_path, &args.kubernetes_version, dir)
                    .context("failed to add the kubernetes section to the lab inventory")?;
            }
            for h in &lab.hosts {
                println!("{}\t{}\t{}", h.name, h.ip, h.machine);
            }
            println!("inventory\t{}", lab.inventory_path.display());
            Ok(args.apply.then_some(lab.inventory_path))
        }
        LabCommand::Down { name, all } => {
            let names: Vec<String> = if all {
                lab::status()?.into_iter().map(|s| s.lab.name).collect()
            } else {
                vec![name]
            };
            for name in names {
                let started = std::time::Instant::now();
                lab::down(&name).with_context(|| format!("failed to remove lab {name}"))?;
                eprintln!("lab {name}: removed in {:.1} s", started.elapsed().as_secs_f64());
            }
            Ok(None)
        }
        LabCommand::Status => {
            let labs = lab::status().context("failed to read the labs")?;
            if labs.is_empty() {
                println!("no labs under {}", lab::lab_root().display());
            }
            for s in labs {
                println!(
                    "{}\t{}\tbridge {}\tsubnet {}\tvip {}\tinventory {}",
                    s.lab.name,
                    s.lab.suite,
                    s.lab.bridge,
                    s.lab.subnet,
                    s.lab.vip,
                    s.lab.inventory_path.display()
                );
                for (h, state) in s.lab.hosts.iter().zip(&s.hosts) {
                    println!("  {}\t{}\t{}\t{}", h.name, h.ip, h.machine, state);
                }
            }
            Ok(None)
        }
        LabCommand::Ssh { name, host, command } => {
            let lab = lab::Lab::load(&lab::lab_root(), &name)?;
            let mut cmd = lab.command(&host, &command)?;
            let status = cmd
                .status()
                .with_context(|| format!("failed to enter {host} of lab {name}"))?;
            if !status.success() {
                bail!("{host}: `{}` exited with {status}", command.join(" "));
            }
            Ok(None)
        }
        LabCommand::KubeBinaries { kubernetes_version } => {
            let dir = lab::kubernetes::ensure_binaries(&kubernetes_version)
                .context("failed to build the Kubernetes binaries")?;
            println!("{}", dir.display());
            Ok(None)
        }
        LabCommand::Image { suite } => {
            let dir = lab::base_image(&suite)
                .with_context(|| format!("failed to build the base image for {suite}"))?;
            println!("{}", dir.display());
            Ok(None)
        }
        LabCommand::Fault { name, host, fault } => {
            lab::fault(&name, &host, fault)
                .with_context(|| format!("failed to apply {fault} to {host} of lab {name}"))?;
            Ok(None)
        }
    }
}

/// After `lab up --apply` with Kubernetes: asks the apiservers behind the VIP for `/readyz` with
/// kubectl and the admin kubeconfig, printing the command line a user would type and its answer
/// (retried for up to a minute while the apiservers finish starting).
pub async fn readyz_through_vip(inv: &crate::inventory::Inventory) -> Result<()> {
    let Some(kube) = &inv.kubernetes else {
        return Ok(());
    };
    let kubectl = match &kube.source {
        crate::inventory::BinarySource::Bundle { dir } if dir.join("kubectl").is_file() => {
            dir.join("kubectl").display().to_string()
        }
        _ => "kubectl".to_string(),
    };
    let kubeconfig = inv.state_dir.join(crate::converge::ADMIN_KUBECONFIG);
    let argv = [
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "get".into(),
        "--raw".into(),
        "/readyz".into(),
    ];
    println!("\n$ {kubectl} {}", argv.join(" "));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = tokio::process::Command::new(&kubectl)
            .args(&argv)
            .output()
            .await
            .with_context(|| format!("failed to run {kubectl}"))?;
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && answer == "ok" {
            println!("{answer}");
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "`{kubectl} {}` did not answer ok through the VIP within 60 s: {}{}",
                argv.join(" "),
                answer,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}
