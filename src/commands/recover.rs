//! `hactl recover`: the recipe. R0 (read-only: assess, gate, decide) here; the steps from
//! `recover::steps`; the journaled runner executes them. See `src/recover/mod.rs`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{anyhow, Context as _};
use futures::StreamExt;

use crate::cli::{RecoverArgs, RecoverMode};
use crate::exec::journaled::{self, RunOptions};
use crate::exec::Transports;
use crate::exit::refuse;
use crate::hwm::{self, Hwm};
use crate::inventory::{Host, Inventory, Role};
use crate::operations::journal::{Journal, StepState};
use crate::recover::assess::{self, HostAssessment};
use crate::recover::{self as rec, Bump, Decisions, Gate, Source};
use crate::state::StateDir;

/// `hactl recover`.
pub async fn run(args: &RecoverArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    let _lock = if args.dry_run {
        None
    } else {
        Some(
            state
                .lock(crate::lock::LOCAL_LOCK)
                .context("cannot recover while another hactl run changes the cluster")?,
        )
    };
    if !state.file("pki/etcd/ca.key").exists() {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "the state directory {} has no etcd CA: a recover needs the cluster's PKI (restore it from a backup bundle first)",
                state.path.display()
            ),
        ));
    }
    let pki = crate::pki::ensure(&state.file("pki"), &inv, time::OffsetDateTime::now_utc())
        .context("failed to load the cluster's certificates")?;
    let tls = crate::etcd::client::client_tls(&state.file("pki"))?;
    let (decisions, transports) = match &args.resume {
        Some(run) => resume_decisions(args, &inv, &state, run).await?,
        None => decide(args, &inv, &state).await?,
    };
    // R2.3: the members' certificates carry their addresses and come from the etcd CA (else they
    // are re-issued from the CA in the state directory), checked before anything changes.
    let pki = match rec::certs::ensure_member_certs(
        &state.file("pki"),
        &inv,
        &decisions.targets,
        &decisions.run,
        pki,
    ) {
        Ok((pki, reissued)) => {
            for line in reissued {
                eprintln!("{line}");
            }
            pki
        }
        Err(m) => return Err(refuse(crate::exit::REFUSED, m)),
    };
    let owner = crate::lock::Owner::new("recover", &decisions.run);
    let inputs = rec::steps::Inputs {
        inv: &inv,
        pki: &pki,
        state: &state,
        tls: &tls,
        owner,
        steal_lock: args.steal_lock.clone(),
    };
    let steps = rec::steps::build(&decisions, &inputs);
    let summary = plan_header(&decisions, &inv);
    if args.dry_run {
        print!("{summary}");
        for s in &steps {
            let sudo = s
                .host
                .as_deref()
                .and_then(|h| inv.host(h))
                .is_some_and(|h| h.ssh.sudo);
            print!("{}", s.render(sudo));
        }
        return Ok(crate::exit::OK);
    }
    let mut journal = if args.resume.is_some() {
        Journal::open(&state, &decisions.run)?
    } else {
        eprint!("{summary}");
        for s in &steps {
            eprintln!(
                "  [{}] {}{}",
                s.id,
                s.title,
                s.host.as_ref().map(|h| format!(" (on {h})")).unwrap_or_default()
            );
        }
        confirm(args, &inv)?;
        let j = Journal::create(&state, &decisions.run)?;
        let json = serde_json::to_string_pretty(&decisions)?;
        state.write_file(
            Path::new("runs").join(&decisions.run).join("recover.json"),
            format!("{json}\n").as_bytes(),
            0o600,
        )?;
        let sha = hex::encode(sha2::Digest::finalize(sha2::Digest::chain_update(
            <sha2::Sha256 as sha2::Digest>::new(),
            json.as_bytes(),
        )));
        for (step, out) in [
            (
                "R0.1",
                serde_json::json!({ "targets": decisions.targets, "confirmed_dead": decisions.confirmed_dead }),
            ),
            (
                "R0.3",
                serde_json::json!({ "gate": "no quorum, none restorable", "force_destructive": args.force_destructive }),
            ),
            ("R0.5", serde_json::to_value(decisions.bump)?),
            (
                "R0.6",
                serde_json::json!({ "expected_cluster_id": decisions.expected_cluster_id, "token": decisions.token }),
            ),
        ] {
            let e = j.append(step, StepState::Done, None, &sha, out)?;
            crate::operations::journal::mirror(&transports, &decisions.targets, &e).await;
        }
        j
    };
    eprintln!(
        "recover: run {} (journal {})",
        decisions.run,
        journal
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    crate::exec::run::stop_between_steps_on_ctrl_c();
    let mirror_hosts: Vec<String> = transports.keys().cloned().collect();
    let started = std::time::Instant::now();
    match journaled::run(&steps, &transports, &mut journal, &RunOptions { mirror_hosts }).await {
        Ok(outcome) => {
            println!(
                "recover: run {} done in {:.1}s ({} steps done, {} already done)",
                decisions.run,
                started.elapsed().as_secs_f64(),
                outcome.done.len(),
                outcome.skipped.len()
            );
            print!("{}", finish_report(&decisions, &inv, &state));
            Ok(crate::exit::OK)
        }
        Err(failed) => {
            let resume = format!(
                "hactl recover -i {} --resume {}",
                args.inventory.inventory.display(),
                decisions.run
            );
            let inner_refusal = failed
                .source
                .chain()
                .find_map(|e| e.downcast_ref::<crate::exit::Refusal>())
                .map(|r| r.code);
            let code = match inner_refusal {
                Some(c) => c,
                None if failed.changed => crate::exit::FAILED_AFTER_CHANGES,
                None => crate::exit::REFUSED,
            };
            let what = if failed.changed {
                format!("changes were made; fix the cause and run `{resume}`")
            } else {
                "nothing was changed".to_string()
            };
            let detail = format!("{:#}", anyhow::Error::new(failed));
            Err(refuse(code, format!("recover stopped ({what}): {detail}")))
        }
    }
}

/// Confirmation: a typed cluster name for `--force-destructive` (stdin may be a pipe), else
/// `--yes` or a y/N on a terminal.
fn confirm(args: &RecoverArgs, inv: &Inventory) -> anyhow::Result<()> {
    if args.force_destructive {
        eprint!(
            "--force-destructive: this rolls cluster {} back although its quorum could be restored. Type the cluster name to proceed: ",
            inv.name
        );
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if answer.trim() != inv.name {
            return Err(refuse(
                crate::exit::REFUSED,
                "the name did not match: nothing was changed",
            ));
        }
        return Ok(());
    }
    if args.yes {
        return Ok(());
    }
    super::up::confirm("recover stops etcd (and the Kubernetes control plane) on every reachable host")
}

/// Connects to the etcd hosts; returns the reachable ones and the errors of the others.
async fn connect_all(
    inv: &Inventory,
    state: &StateDir,
    args: &RecoverArgs,
) -> (Transports, BTreeMap<String, String>) {
    let hosts: Vec<&Host> = inv.with_role(Role::Etcd);
    let reach = crate::exec::connect::reach(state, &hosts, &args.connect).await;
    (reach.transports, reach.unreachable)
}

async fn resume_decisions(
    args: &RecoverArgs,
    inv: &Inventory,
    state: &StateDir,
    run: &str,
) -> anyhow::Result<(Decisions, Transports)> {
    let path = state.file(Path::new("runs").join(run).join("recover.json"));
    let text = fs_err::read_to_string(&path).map_err(|e| {
        refuse(
            crate::exit::REFUSED,
            format!("cannot resume run {run}: {e} (a run that stopped before its plan was confirmed changed nothing: start a new one)"),
        )
    })?;
    let d: Decisions =
        serde_json::from_str(&text).with_context(|| format!("{} is not a recover plan", path.display()))?;
    if d.cluster != inv.name {
        return Err(refuse(
            crate::exit::REFUSED,
            format!("run {run} belongs to cluster {}", d.cluster),
        ));
    }
    let (transports, down) = connect_all(inv, state, args).await;
    let missing: Vec<String> = down
        .iter()
        .filter(|(h, _)| !d.confirmed_dead.contains(h))
        .map(|(h, e)| format!("{h}: {e}"))
        .collect();
    if !missing.is_empty() {
        return Err(refuse(
            crate::exit::NEEDS_INPUT,
            format!("cannot reach hosts run {run} acts on:\n{}", missing.join("\n")),
        ));
    }
    Ok((d, transports))
}

/// R0: read-only assessment, gates and decisions.
async fn decide(
    args: &RecoverArgs,
    inv: &Inventory,
    state: &StateDir,
) -> anyhow::Result<(Decisions, Transports)> {
    let (transports, down) = connect_all(inv, state, args).await;
    let run = crate::operations::journal::new_run_id("");
    // R0.1/R0.2: what each reachable host holds.
    let probe = assess::probe_command(&inv.etcd.data_dir, crate::etcd::METRICS_PORT);
    let assessed: Vec<anyhow::Result<HostAssessment>> =
        futures::stream::iter(transports.iter().map(|(h, t)| {
            let probe = probe.clone();
            async move {
                let out = t
                    .run(&probe)
                    .await
                    .with_context(|| format!("{h}: assessment failed"))?;
                if !out.success() {
                    return Err(anyhow!("{h}: assessment failed: {}", out.stderr_str().trim()));
                }
                Ok(assess::parse(h, &out.stdout_str()))
            }
        }))
        .buffered(args.connect.concurrency.max(1))
        .collect()
        .await;
    let mut hosts: Vec<HostAssessment> = Vec::new();
    for a in assessed {
        hosts.push(a?);
    }
    let order: Vec<String> = inv.with_role(Role::Etcd).iter().map(|h| h.name.clone()).collect();
    hosts.sort_by_key(|a| order.iter().position(|n| *n == a.host));
    eprintln!("assessment:");
    for a in &hosts {
        eprintln!("  {}", a.describe());
    }
    for (h, e) in &down {
        eprintln!("  {h}: unreachable: {e}");
    }
    // R0.3: quorum.
    let views: Vec<rec::MemberView> = hosts.iter().map(|a| a.view()).collect();
    match rec::quorum_gate(order.len(), &views) {
        Gate::Proceed => {}
        Gate::QuorumPresent { healthy, quorum } => {
            return Err(refuse(
                crate::exit::REFUSED,
                format!(
                    "quorum present: {healthy} members are healthy with a leader (quorum {quorum}); nothing was changed. \
                     Recover is for a lost quorum: replace failed members with `hactl replace <member>`"
                ),
            ))
        }
        Gate::QuorumRestorable { intact, quorum } if !args.force_destructive => {
            return Err(refuse(
                crate::exit::REFUSED,
                format!(
                    "quorum restorable: {} hold intact data ({} ≥ quorum {quorum}); nothing was changed. Start the stopped \
                     members instead (`hactl up` starts members whose data is intact). To roll the cluster back to an \
                     older state anyway, pass --force-destructive (you will be asked to type the cluster name)",
                    intact.join(", "),
                    intact.len()
                ),
            ))
        }
        Gate::QuorumRestorable { .. } => eprintln!("--force-destructive: proceeding although quorum could be restored"),
    }
    // Unreachable hosts must be attested dead before anything is stopped.
    let unattested: Vec<&String> = down.keys().filter(|h| !args.confirm_dead.contains(h)).collect();
    if !unattested.is_empty() {
        let names: Vec<&str> = unattested.iter().map(|s| s.as_str()).collect();
        return Err(refuse(
            crate::exit::NEEDS_INPUT,
            format!(
                "cannot reach {}: nothing was changed. An unreachable member could come back as a zombie serving the old \
                 data. Power it off (or make sure it is), then run again with --confirm-dead {}",
                names.join(", "),
                names.join(",")
            ),
        ));
    }
    for h in &args.confirm_dead {
        if transports.contains_key(h) {
            eprintln!(
                "warning: {h} was attested dead but answers; it is fenced and rejoined like the others"
            );
        }
    }
    let confirmed_dead: Vec<String> = down.keys().cloned().collect();
    let mut targets: Vec<String> = order
        .iter()
        .filter(|h| transports.contains_key(*h))
        .cloned()
        .collect();
    if !args.members.is_empty() {
        targets = member_targets(args, inv, &transports)?;
    }
    if targets.is_empty() {
        return Err(refuse(crate::exit::REFUSED, "no etcd host is reachable"));
    }
    // R0.4: the source.
    let source = if let Some(path) = &args.from_snapshot {
        file_source(path, args.skip_hash_check)?
    } else if let Some(m) = &args.from_member {
        let Some(a) = hosts.iter().find(|a| &a.host == m) else {
            return Err(refuse(
                crate::exit::REFUSED,
                format!("{m} is not a reachable etcd host"),
            ));
        };
        if !a.data_intact {
            return Err(refuse(
                crate::exit::REFUSED,
                format!("{m} holds no intact data ({}/member/wal and member/snap/db): choose another survivor or a snapshot", inv.etcd.data_dir),
            ));
        }
        Source::Member { host: m.clone() }
    } else {
        auto_source(inv, state, &transports, &hosts, &targets).await?
    };
    let seed = match &source {
        Source::Member { host } => host.clone(),
        Source::File { .. } => targets[0].clone(),
    };
    if !targets.contains(&seed) {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "the source is member {seed}'s data, but --members leaves {seed} out (members: {}): nothing was changed. \
                 Add {seed} to --members, or recover from a snapshot file",
                targets.join(", ")
            ),
        ));
    }
    let seed_a = hosts
        .iter()
        .find(|a| a.host == seed)
        .ok_or_else(|| anyhow!("seed {seed} was not assessed"))?;
    // Restore tools: the same minor everywhere.
    let minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    let minors: std::collections::BTreeSet<String> = hosts.iter().map(|a| minor(&a.etcd_version)).collect();
    if minors.len() > 1 {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "the hosts run different etcd minors ({}): a restore must use the cluster's own minor",
                minors.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    // R0.5: high-water mark and bump.
    let mut mark = hwm::read(state);
    for a in &hosts {
        mark = hwm::max(mark, a.hwm.clone());
        if let Some(s) = &a.status {
            mark = hwm::max(
                mark,
                Some(Hwm::now(
                    s.header.revision,
                    &format!("{:x}", s.header.cluster_id),
                    &format!("survivor@{}", a.host),
                )),
            );
        }
    }
    let snap_rev = match &source {
        Source::File { revision, .. } => *revision,
        Source::Member { host } => hosts
            .iter()
            .find(|a| &a.host == host)
            .and_then(|a| a.status.as_ref().map(|s| s.header.revision)),
    };
    // R0.4c: refuse a source older than the operator accepted, naming the estimated loss.
    let source_age = match &source {
        Source::File { time: Some(t), .. } => {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .ok()
                .map(|t| {
                    (time::OffsetDateTime::now_utc() - t)
                        .max(time::Duration::ZERO)
                        .unsigned_abs()
                })
        }
        _ => None,
    };
    let estimate = rec::LossEstimate {
        revisions: mark.as_ref().zip(snap_rev).map(|(m, r)| (m.revision - r).max(0)),
        hwm: mark.as_ref().map(|m| (m.revision, m.time.clone())),
        source_revision: snap_rev,
        source_age,
        source: match &source {
            Source::File { path, .. } => path.clone(),
            Source::Member { host } => format!("(member {host})"),
        },
    };
    rec::data_loss_gate(&estimate, args.accept_data_loss_window)
        .map_err(|m| refuse(crate::exit::NEEDS_INPUT, m))?;
    let bump = rec::choose_bump_requested(
        args.bump_revision.0,
        seed_a.tool_bumps,
        mark.as_ref().map(|m| m.revision),
        snap_rev,
        args.accept_revision_rewind,
    )
    .map_err(|m| refuse(crate::exit::REFUSED, m))?;
    let token = rec::token(&inv.name, &run);
    let url = |h: &str| crate::etcd::peer_url(inv, inv.host(h).expect("inventory host"));
    let initial: Vec<(String, String)> = match args.mode {
        RecoverMode::Seed => vec![(seed.clone(), url(&seed))],
        RecoverMode::All => targets.iter().map(|h| (h.clone(), url(h))).collect(),
    };
    let expected = format!("{:x}", rec::cluster_id(&initial, &token));
    let min_revision = match bump {
        Bump::Restore { by } => snap_rev.unwrap_or(0) + by as i64,
        Bump::Emulated { target } => target,
        Bump::None => 0,
    };
    let d = Decisions {
        run,
        cluster: inv.name.clone(),
        mode: args.mode,
        source,
        seed,
        targets,
        confirmed_dead,
        data_dirs: hosts
            .iter()
            .filter(|a| a.data_exists)
            .map(|a| a.host.clone())
            .collect(),
        kube_units: hosts
            .iter()
            .map(|a| (a.host.clone(), a.kube_units.clone()))
            .collect(),
        kubelets: hosts
            .iter()
            .filter(|a| a.kubelet)
            .map(|a| a.host.clone())
            .collect(),
        token,
        bump,
        hwm: mark,
        expected_cluster_id: expected,
        min_revision,
        tool: seed_a.tool.clone(),
        etcd_version: seed_a.etcd_version.clone(),
        kube_manifests: rec::static_pod_manifests(
            inv,
            &hosts.iter().map(|a| a.host.clone()).collect::<Vec<_>>(),
        ),
    };
    Ok((d, transports))
}

fn file_source(path: &Path, skip_hash_check: bool) -> anyhow::Result<Source> {
    let path = std::path::absolute(path)?;
    let check =
        crate::snapshot::check_file(&path).with_context(|| format!("cannot read {}", path.display()))?;
    crate::etcd::snapshot::refuse_bad_hash(&path, &check, skip_hash_check)?;
    let sidecar: Option<crate::snapshot::Sidecar> =
        fs_err::read_to_string(crate::etcd::snapshot::sidecar_path(&path))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
    if let Some(s) = &sidecar {
        if s.sha256 != check.sha256 {
            return Err(refuse(
                crate::exit::REFUSED,
                format!(
                    "{}: sha256 {} differs from its sidecar's {}",
                    path.display(),
                    check.sha256,
                    s.sha256
                ),
            ));
        }
    }
    if check.hash == crate::snapshot::HashState::Missing {
        eprintln!(
            "warning: {} has no appended sha256 (raw db copy): restoring with --skip-hash-check",
            path.display()
        );
    }
    Ok(Source::File {
        path: path.display().to_string(),
        sha256: check.sha256,
        size: check.size,
        skip_hash_check: check.hash == crate::snapshot::HashState::Missing,
        revision: sidecar.as_ref().map(|s| s.revision),
        time: sidecar.map(|s| s.time),
    })
}

/// `--members`: checked against the inventory (every problem at once), and every member must be
/// reachable (it is restored or joined).
fn member_targets(
    args: &RecoverArgs,
    inv: &Inventory,
    transports: &crate::exec::Transports,
) -> anyhow::Result<Vec<String>> {
    let etcd_hosts: Vec<(String, std::net::IpAddr)> = inv
        .with_role(Role::Etcd)
        .iter()
        .map(|h| (h.name.clone(), h.address))
        .collect();
    let targets = rec::validate_members(&etcd_hosts, &args.members).map_err(|problems| {
        refuse(
            crate::exit::REFUSED,
            format!("nothing was changed:\n  {}", problems.join("\n  ")),
        )
    })?;
    let unreachable: Vec<&String> = targets.iter().filter(|h| !transports.contains_key(*h)).collect();
    if !unreachable.is_empty() {
        let names: Vec<&str> = unreachable.iter().map(|s| s.as_str()).collect();
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "--members names {}, which cannot be reached: nothing was changed. A member must be reachable to be \
                 restored or joined: bring it back, or leave it out of --members",
                names.join(", ")
            ),
        ));
    }
    Ok(targets)
}

/// `--auto` (R0.4c): the highest revision among the survivors' data dirs, the verified scheduled
/// backups on reachable hosts and the snapshot files in `<state>/backups`; prints every
/// candidate and the estimated loss of the choice; a host backup is fetched into
/// `<state>/backups/fetched/<host>/` and used as a snapshot file.
async fn auto_source(
    inv: &Inventory,
    state: &StateDir,
    transports: &crate::exec::Transports,
    hosts: &[HostAssessment],
    targets: &[String],
) -> anyhow::Result<Source> {
    let mut candidates: Vec<rec::AutoCandidate> = Vec::new();
    // Survivors: a running member reports its revision; a stopped one's db is read on a copy.
    // (Only the new members: a survivor's data is restored on its own host, the seed.)
    for a in hosts
        .iter()
        .filter(|a| a.data_intact && targets.contains(&a.host))
    {
        let (revision, raft_index) = match &a.status {
            Some(s) => (Some(s.header.revision), s.raft_index),
            None => {
                let t = &transports[&a.host];
                let out = t.run(&assess::db_revision_command(&inv.etcd.data_dir)).await;
                let rev = match out {
                    Ok(o) if o.success() => assess::parse_db_revision(&o.stdout_str()),
                    Ok(o) => {
                        eprintln!(
                            "{}: cannot read the revision of its db: {}",
                            a.host,
                            o.stderr_str().trim()
                        );
                        None
                    }
                    Err(e) => {
                        eprintln!("{}: cannot read the revision of its db: {e}", a.host);
                        None
                    }
                };
                (rev, 0)
            }
        };
        candidates.push(rec::AutoCandidate {
            source: rec::AutoSource::Survivor { host: a.host.clone() },
            revision,
            raft_index,
            age: None,
        });
    }
    // Scheduled backups on the reachable hosts (only verified ones: latest.json says ok).
    let read = crate::backup::read_command(&inv.backup.dir);
    for h in inv.with_role(Role::Etcd) {
        let Some(t) = transports.get(&h.name) else {
            continue;
        };
        let out = match t.run(&read).await {
            Ok(o) if o.success() => o,
            Ok(o) => {
                eprintln!("{}: cannot read its backups: {}", h.name, o.stderr_str().trim());
                continue;
            }
            Err(e) => {
                eprintln!("{}: cannot read its backups: {e}", h.name);
                continue;
            }
        };
        if let Some((now, l)) = crate::backup::parse_latest(&out.stdout_str()) {
            candidates.push(rec::AutoCandidate {
                source: rec::AutoSource::HostBackup {
                    host: h.name.clone(),
                    file: l.file.clone(),
                    sha256: l.sha256.clone(),
                },
                revision: Some(l.revision),
                raft_index: 0,
                age: Some(std::time::Duration::from_secs((now - l.time).max(0) as u64)),
            });
        }
    }
    // Snapshot files of this cluster in the state directory.
    candidates.extend(local_candidates(state, &inv.name));
    eprintln!("--auto: candidates (the highest revision wins):");
    for c in &candidates {
        eprintln!("  {}", c.describe());
    }
    let Some(best) = rec::pick_auto(&candidates) else {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "no source: no reachable member holds intact data, no reachable host has a verified backup in {} \
                 and {} holds no snapshot with a sidecar; nothing was changed. Pass --from-snapshot FILE",
                inv.backup.dir,
                state.file("backups").display()
            ),
        ));
    };
    let c = &candidates[best];
    let source = match &c.source {
        rec::AutoSource::Survivor { host } => Source::Member { host: host.clone() },
        rec::AutoSource::LocalFile { path } => file_source(path, false)?,
        rec::AutoSource::HostBackup { host, file, sha256 } => {
            let local = fetch_host_backup(state, transports, host, file, sha256).await?;
            eprintln!("--auto: fetched {host}:{file} to {}", local.display());
            match file_source(&local, false)? {
                Source::File {
                    path,
                    sha256,
                    size,
                    skip_hash_check,
                    revision,
                    time,
                } => Source::File {
                    path,
                    sha256,
                    size,
                    skip_hash_check,
                    revision: revision.or(c.revision),
                    time: time.or_else(|| {
                        c.age.map(|a| {
                            crate::operations::journal::timestamp(time::OffsetDateTime::now_utc() - a)
                        })
                    }),
                },
                other => other,
            }
        }
    };
    // The loss against the high-water mark known so far (the same sources R0.5 reads).
    let mut mark = hwm::read(state);
    for a in hosts {
        mark = hwm::max(mark, a.hwm.clone());
        if let Some(s) = &a.status {
            mark = hwm::max(
                mark,
                Some(Hwm::now(s.header.revision, "", &format!("survivor@{}", a.host))),
            );
        }
    }
    let est = rec::LossEstimate {
        revisions: mark
            .as_ref()
            .zip(c.revision)
            .map(|(m, r)| (m.revision - r).max(0)),
        hwm: mark.as_ref().map(|m| (m.revision, m.time.clone())),
        source_revision: c.revision,
        source_age: c.age,
        source: String::new(),
    };
    eprintln!("--auto: chose {}; {}", c.describe(), rec::describe_loss(&est));
    Ok(source)
}

/// Snapshot files in `<state>/backups` with a sidecar of this cluster.
fn local_candidates(state: &StateDir, cluster: &str) -> Vec<rec::AutoCandidate> {
    let Ok(entries) = fs_err::read_dir(state.file("backups")) else {
        return Vec::new();
    };
    let now = time::OffsetDateTime::now_utc();
    let mut out = Vec::new();
    let mut paths: Vec<std::path::PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.extension().and_then(|x| x.to_str()) != Some("db") {
            continue;
        }
        let Some(s) = fs_err::read_to_string(crate::etcd::snapshot::sidecar_path(&p))
            .ok()
            .and_then(|t| serde_json::from_str::<crate::snapshot::Sidecar>(&t).ok())
        else {
            continue;
        };
        if s.cluster != cluster {
            continue;
        }
        let age = time::OffsetDateTime::parse(&s.time, &time::format_description::well_known::Rfc3339)
            .ok()
            .map(|t| (now - t).max(time::Duration::ZERO).unsigned_abs());
        out.push(rec::AutoCandidate {
            source: rec::AutoSource::LocalFile { path: p },
            revision: Some(s.revision),
            raft_index: 0,
            age,
        });
    }
    out
}

/// Copies a host's scheduled backup to `<state>/backups/fetched/<host>/<name>` (kept when it is
/// already there with the same sha256) and checks it against the sha256 its `latest.json` names.
async fn fetch_host_backup(
    state: &StateDir,
    transports: &crate::exec::Transports,
    host: &str,
    file: &str,
    sha256: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let name = Path::new(file)
        .file_name()
        .ok_or_else(|| anyhow!("{host}: latest.json names no file ({file:?})"))?;
    let dir = state.file(Path::new("backups").join("fetched").join(host));
    let local = dir.join(name);
    if local.exists() && crate::snapshot::check_file(&local).is_ok_and(|c| c.sha256 == sha256) {
        return Ok(local);
    }
    let t = &transports[host];
    let out = t
        .run(
            &crate::plan::RemoteCommand::read_only(["cat", file])
                .with_timeout(std::time::Duration::from_secs(900)),
        )
        .await
        .with_context(|| format!("{host}: cannot read {file}"))?;
    if !out.success() {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "{host}: cannot read its backup {file}: {}: nothing was changed; pass --from-snapshot FILE",
                out.stderr_str().trim()
            ),
        ));
    }
    fs_err::create_dir_all(&dir)?;
    crate::snapshot::write_atomically(&local, &out.stdout)?;
    let got = crate::snapshot::check_file(&local)?;
    if got.sha256 != sha256 {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "{host}:{file} arrived with sha256 {} but its latest.json names {sha256}: nothing was changed. \
                 Check the file on {host}, or pass another source with --from-snapshot",
                got.sha256
            ),
        ));
    }
    Ok(local)
}

fn plan_header(d: &Decisions, inv: &Inventory) -> String {
    let source = match &d.source {
        Source::File {
            path,
            sha256,
            revision,
            ..
        } => format!(
            "snapshot {path} (sha256 {sha256}{})",
            revision.map(|r| format!(", revision {r}")).unwrap_or_default()
        ),
        Source::Member { host } => {
            format!("the data of surviving member {host} (a copy; the original is kept)")
        }
    };
    let bump = match d.bump {
        Bump::Restore { by } => format!("--bump-revision {by} --mark-compacted"),
        Bump::Emulated { target } => format!("emulated: writes up to revision {target}, then a compaction"),
        Bump::None => "none (--accept-revision-rewind)".into(),
    };
    let mut s = format!(
        "recover plan {run} for cluster {c}:\n  source: {source}\n  mode: {mode:?}, seed {seed}, new members {targets}\n  token: {token} → cluster ID {cid}\n  revision bump: {bump} (high-water mark {hwm}); etcd {v} via {tool}\n  data dirs moved aside to {dd}.hactl-pre-{run} on {dirs}\n",
        run = d.run,
        c = d.cluster,
        mode = d.mode,
        seed = d.seed,
        targets = d.targets.join(", "),
        token = d.token,
        cid = d.expected_cluster_id,
        hwm = d.hwm.as_ref().map(|h| h.revision.to_string()).unwrap_or_else(|| "unknown".into()),
        v = d.etcd_version,
        tool = d.tool,
        dd = inv.etcd.data_dir,
        dirs = if d.data_dirs.is_empty() { "none".into() } else { d.data_dirs.join(", ") },
    );
    if !d.confirmed_dead.is_empty() {
        s.push_str(&format!(
            "  left out (attested dead): {}\n",
            d.confirmed_dead.join(", ")
        ));
    }
    let left_out = left_out_by_members(d, inv);
    if !left_out.is_empty() {
        s.push_str(&format!(
            "  left out by --members: {} (fenced and data moved aside like the others, not rejoined)\n",
            left_out.join(", ")
        ));
    }
    s
}

/// Reachable etcd hosts of the inventory that `--members` leaves out of the new cluster.
fn left_out_by_members(d: &Decisions, inv: &Inventory) -> Vec<String> {
    inv.with_role(Role::Etcd)
        .iter()
        .map(|h| h.name.clone())
        .filter(|h| !d.targets.contains(h) && !d.confirmed_dead.contains(h))
        .collect()
}

fn finish_report(d: &Decisions, inv: &Inventory, state: &StateDir) -> String {
    let mut s = format!(
        "cluster {} recovered: members {}, cluster ID {}, token {}\n",
        d.cluster,
        d.targets.join(", "),
        d.expected_cluster_id,
        d.token
    );
    for h in &d.data_dirs {
        s.push_str(&format!(
            "kept on {h}: {} (the old data dir; remove it yourself when no longer needed)\n",
            d.aside(&inv.etcd.data_dir)
        ));
    }
    s.push_str(&format!(
        "kept on {}: {} (the staged snapshot and markers of this run)\n",
        d.targets.join(", "),
        d.work_dir()
    ));
    let (snap_rev, snap_time) = match &d.source {
        Source::File { revision, time, .. } => (*revision, time.clone()),
        Source::Member { .. } => (None, None),
    };
    match (&d.hwm, snap_rev) {
        (Some(h), Some(r)) => s.push_str(&format!(
            "data-loss window: writes after revision {r}{} are lost (the highest revision seen was {} at {})\n",
            snap_time.map(|t| format!(" (snapshot taken {t})")).unwrap_or_default(),
            h.revision,
            h.time
        )),
        (Some(h), None) => s.push_str(&format!(
            "data-loss window: writes the survivor had not applied are lost; the highest revision seen was {} at {}\n",
            h.revision, h.time
        )),
        _ => s.push_str("data-loss window: unknown (no high-water mark was recorded)\n"),
    }
    if let Ok(b) = fs_err::read_to_string(state.file(Path::new("runs").join(&d.run).join("baseline.json"))) {
        s.push_str(&format!("baseline backup: {}", b));
    }
    if !d.confirmed_dead.is_empty() {
        s.push_str(&format!(
            "follow-up: {} stayed out; when back, move its data dir aside and run `hactl up` to join it as a learner\n",
            d.confirmed_dead.join(", ")
        ));
    }
    let left_out = left_out_by_members(d, inv);
    if !left_out.is_empty() {
        s.push_str(&format!(
            "follow-up: {} left out by --members stay fenced until reboot, their data dirs moved aside: remove their etcd role from the inventory (or run `hactl up` to join them as learners)\n",
            left_out.join(", ")
        ));
    }
    if d.targets.len().is_multiple_of(2) {
        s.push_str("warning: the cluster now has an even number of members: add one (`hactl up`) to tolerate a failure\n");
    }
    s
}
