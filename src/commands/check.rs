//! `hactl check`: read-only preflight of every host, one row per host and check.
//!
//! Invariant: sends only the read-only facts probe; a failed check makes the exit code non-zero.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde::Serialize;

use crate::cli::{CheckArgs, OutputFormat};
use crate::facts::{self, HostFacts};
use crate::inventory::{BinarySource, Host, Inventory, Role};

/// Largest clock difference between a host and the operator machine that passes.
pub const MAX_CLOCK_SKEW_NS: i128 = 1_000_000_000;
/// Smallest free space for an etcd host's data-dir filesystem.
pub const MIN_ETCD_FREE_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// HAProxy's stats port on load balancers.
pub const HAPROXY_STATS_PORT: u16 = crate::load_balancer::STATS_PORT;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
    Skip,
}

/// One row of the check table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckRow {
    pub host: String,
    pub check: &'static str,
    pub verdict: Verdict,
    pub detail: String,
}

pub use crate::phases::query::owned_units;

/// Ports hactl will listen on, on `host`, with the process allowed to hold each.
pub fn ports_for(inv: &Inventory, host: &Host) -> Vec<(u16, &'static str)> {
    let mut ports = Vec::new();
    if host.has(Role::Etcd) {
        ports.push((inv.etcd.client_port, "etcd"));
        ports.push((inv.etcd.peer_port, "etcd"));
        // The metrics listener: loopback always, the host address when balancers check it.
        ports.push((crate::etcd::METRICS_PORT, "etcd"));
    }
    if host.has(Role::ControlPlane) && inv.kubernetes.is_some() {
        ports.push((6443, "kube-apiserver"));
    }
    if host.has(Role::LoadBalancer) {
        if !host.has(Role::ControlPlane) && inv.kubernetes.is_some() {
            ports.push((6443, "haproxy"));
        }
        if !host.has(Role::Etcd) {
            ports.push((inv.etcd.client_port, "haproxy"));
        }
        ports.push((HAPROXY_STATS_PORT, "haproxy"));
    }
    ports
}

/// Turns one host's facts (or its connection error) into rows. Pure, so it is unit-tested.
pub fn evaluate(
    inv: &Inventory,
    host: &Host,
    facts: Result<&HostFacts, &str>,
    local_time_ns: i128,
) -> Vec<CheckRow> {
    let row = |check: &'static str, verdict: Verdict, detail: String| CheckRow {
        host: host.name.clone(),
        check,
        verdict,
        detail,
    };
    let f = match facts {
        Err(reason) => {
            let mut rows = vec![row("ssh", Verdict::Fail, reason.to_string())];
            for check in ["sudo", "os", "clock", "ports", "disk", "binaries"] {
                rows.push(row(check, Verdict::Skip, "host not reachable".into()));
            }
            return rows;
        }
        Ok(f) => f,
    };
    let mut rows = vec![row(
        "ssh",
        Verdict::Pass,
        format!(
            "{}@{}:{} (host key verified)",
            host.ssh.user, host.ssh.address, host.ssh.port
        ),
    )];
    rows.push(if f.privileged {
        row(
            "sudo",
            Verdict::Pass,
            if host.ssh.sudo {
                "sudo -n works".into()
            } else {
                "root".into()
            },
        )
    } else {
        row(
            "sudo",
            Verdict::Fail,
            format!(
                "{} is not root and sudo was not used: set ssh.sudo: true",
                host.ssh.user
            ),
        )
    });
    let supported_os = matches!(f.os_id.as_str(), "debian" | "ubuntu");
    rows.push(match (supported_os, f.init.as_str()) {
        (true, "systemd") => row(
            "os",
            Verdict::Pass,
            format!("{} {}, systemd", f.os_id, f.os_version),
        ),
        (_, init) if init != "systemd" => row(
            "os",
            Verdict::Fail,
            format!("init is {init:?}, not systemd: hactl installs systemd units"),
        ),
        _ => row(
            "os",
            Verdict::Warn,
            format!(
                "{} {} is untested (Debian and Ubuntu are); systemd present",
                f.os_id, f.os_version
            ),
        ),
    });
    let skew = f.time_ns - local_time_ns;
    let skew_ms = skew as f64 / 1e6;
    rows.push(if skew.abs() < MAX_CLOCK_SKEW_NS {
        row("clock", Verdict::Pass, format!("skew {skew_ms:+.0} ms"))
    } else {
        row(
            "clock",
            Verdict::Fail,
            format!("skew {skew_ms:+.0} ms exceeds 1 s: etcd and TLS need synchronised clocks; enable NTP (systemd-timesyncd or chrony)"),
        )
    });
    // A port is fine when free, or when every process on it is one of hactl's own services
    // (on a stacked host HAProxy holds VIP:2379 while etcd holds <address>:2379).
    const HACTL_SERVICES: [&str; 4] = ["etcd", "haproxy", "keepalived", "kube-apiserver"];
    let mut busy = Vec::new();
    let mut held = Vec::new();
    for (port, owner) in ports_for(inv, host) {
        let Some(holders) = f.listeners.get(&port) else {
            continue;
        };
        let foreign: Vec<&str> = holders
            .iter()
            .map(String::as_str)
            .filter(|p| !HACTL_SERVICES.contains(p))
            .collect();
        let names = holders.iter().map(String::as_str).collect::<Vec<_>>().join("+");
        if foreign.is_empty() {
            held.push(format!("{port} by {names}"));
        } else {
            busy.push(format!(
                "{port} held by {} (hactl needs it for {owner})",
                foreign.join("+")
            ));
        }
    }
    let wanted: BTreeSet<u16> = ports_for(inv, host).iter().map(|(p, _)| *p).collect();
    let list = wanted
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    rows.push(if !busy.is_empty() {
        row(
            "ports",
            Verdict::Fail,
            format!("{}: stop that service or move it", busy.join("; ")),
        )
    } else if held.is_empty() {
        row("ports", Verdict::Pass, format!("{list} free"))
    } else {
        row(
            "ports",
            Verdict::Pass,
            format!("{list} free or held by hactl's units ({})", held.join(", ")),
        )
    });
    rows.push(if !host.has(Role::Etcd) {
        row("disk", Verdict::Skip, "no etcd role".into())
    } else {
        match f.data_dir_free_bytes {
            Some(free) if free >= MIN_ETCD_FREE_BYTES => row(
                "disk",
                Verdict::Pass,
                format!("{} free for {}", human_bytes(free), inv.etcd.data_dir),
            ),
            Some(free) => row(
                "disk",
                Verdict::Fail,
                format!(
                    "{} free for {}; etcd needs at least {}: free space or move etcd.dataDir",
                    human_bytes(free),
                    inv.etcd.data_dir,
                    human_bytes(MIN_ETCD_FREE_BYTES)
                ),
            ),
            None => row(
                "disk",
                Verdict::Fail,
                format!("could not read free space for {}", inv.etcd.data_dir),
            ),
        }
    });
    rows.push(binaries_row(inv, host, f));
    rows
}

fn binaries_row(inv: &Inventory, host: &Host, f: &HostFacts) -> CheckRow {
    let mut missing = Vec::new();
    let mut present = Vec::new();
    for b in &crate::phases::query::required_binaries(host) {
        match f.binaries.get(b) {
            Some(_) => present.push(b.clone()),
            None => missing.push(b.clone()),
        }
    }
    let make = |verdict, detail| CheckRow {
        host: host.name.clone(),
        check: "binaries",
        verdict,
        detail,
    };
    if missing.is_empty() {
        let detail = if present.is_empty() {
            "none needed".to_string()
        } else {
            let mut d = present.join(", ");
            if let Some(v) = f.etcd_version.as_ref().filter(|_| host.has(Role::Etcd)) {
                d.push_str(&format!(" ({v})"));
            }
            d
        };
        return make(Verdict::Pass, detail);
    }
    let etcd_missing = missing.iter().any(|b| b.starts_with("etcd"));
    let lb_missing = missing.iter().any(|b| b == "haproxy" || b == "keepalived");
    let etcd_obtainable = !etcd_missing || !matches!(inv.etcd.source, BinarySource::Package) || f.apt;
    let lb_obtainable = !lb_missing || f.apt;
    if etcd_obtainable && lb_obtainable {
        make(
            Verdict::Pass,
            format!(
                "{} missing, obtainable ({})",
                missing.join(", "),
                source_word(inv, f)
            ),
        )
    } else {
        make(
            Verdict::Fail,
            format!(
                "{} missing and no apt-get on the host: install them, or set etcd.source to release or bundle",
                missing.join(", ")
            ),
        )
    }
}

fn source_word(inv: &Inventory, f: &HostFacts) -> &'static str {
    match (&inv.etcd.source, f.apt) {
        (BinarySource::Release { .. }, _) => "release tarball uploaded by hactl",
        (BinarySource::Bundle { .. }, _) => "bundle uploaded by hactl",
        (BinarySource::Package, _) => "apt-get",
    }
}

pub fn human_bytes(b: u64) -> String {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    if b as f64 >= GIB {
        format!("{:.1} GiB", b as f64 / GIB)
    } else {
        format!("{:.0} MiB", b as f64 / 1024.0 / 1024.0)
    }
}

/// Renders rows as an aligned table.
pub fn table(rows: &[CheckRow]) -> String {
    let w_host = rows.iter().map(|r| r.host.len()).max().unwrap_or(4).max(4);
    let mut out = format!("{:<w_host$}  {:<8}  {:<6}  DETAIL\n", "HOST", "CHECK", "RESULT");
    for r in rows {
        let verdict = match r.verdict {
            Verdict::Pass => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
        };
        out.push_str(&format!(
            "{:<w_host$}  {:<8}  {:<6}  {}\n",
            r.host, r.check, verdict, r.detail
        ));
    }
    out
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Runs the preflight; returns the exit code (0 when every check passed).
pub async fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    let hosts: Vec<&Host> = inv.hosts.iter().collect();
    let rows = check_hosts(&inv, &state, &hosts, &args.connect).await;
    match args.output {
        OutputFormat::Table => print!("{}", table(&rows)),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
    }
    let failed = rows.iter().filter(|r| r.verdict == Verdict::Fail).count();
    if failed > 0 {
        eprintln!("check: {failed} check(s) failed");
        Ok(1)
    } else {
        eprintln!("check: all hosts ready");
        Ok(0)
    }
}

/// Connects to `hosts`, probes them, and evaluates every check, rows in inventory order.
pub async fn check_hosts(
    inv: &Inventory,
    state: &crate::state::StateDir,
    hosts: &[&Host],
    connect: &crate::cli::ConnectArgs,
) -> Vec<CheckRow> {
    let conns = crate::exec::connect::connect(state, hosts, connect).await;
    let mut rows = Vec::new();
    let results: Vec<anyhow::Result<(HostFacts, i128)>> = futures::stream::iter(hosts.iter().map(|host| {
        let conn = conns.get(&host.name).cloned();
        let query = crate::phases::query_for(inv, host);
        async move {
            let t = match conn {
                Some(Ok(t)) => t,
                Some(Err(e)) => return Err(anyhow::anyhow!(e)),
                None => return Err(anyhow::anyhow!("not connected")),
            };
            let before = now_ns();
            let f = facts::gather(t.as_ref(), &query).await?;
            let after = now_ns();
            Ok((f, before + (after - before) / 2))
        }
    }))
    .buffered(connect.concurrency.max(1))
    .collect()
    .await;
    for (host, result) in hosts.iter().zip(results) {
        match result {
            Ok((f, local)) => rows.extend(evaluate(inv, host, Ok(&f), local)),
            Err(e) => rows.extend(evaluate(inv, host, Err(&format!("{e:#}")), 0)),
        }
    }
    if let Some(remote) = &inv.backup.remote {
        rows.push(check_backup_remote(state, remote, connect).await);
    }
    rows
}

/// `spec.backup.remote` can be reached (host key verified) and its path written: fails naming
/// the host and the path.
async fn check_backup_remote(
    state: &crate::state::StateDir,
    remote: &crate::inventory::BackupRemote,
    connect: &crate::cli::ConnectArgs,
) -> CheckRow {
    let row = |verdict, detail: String| CheckRow {
        host: crate::inventory::REMOTE_HOST_NAME.to_string(),
        check: "remote",
        verdict,
        detail,
    };
    let host = remote.host();
    let conns = crate::exec::connect::connect(state, &[&host], connect).await;
    let t = match conns.get(crate::inventory::REMOTE_HOST_NAME) {
        Some(Ok(t)) => t.clone(),
        Some(Err(e)) => return row(Verdict::Fail, format!("cannot reach {}: {e}", remote.describe())),
        None => return row(Verdict::Fail, format!("cannot reach {}", remote.describe())),
    };
    match t.run(&crate::backup_remote::write_probe(remote)).await {
        Ok(out) if out.success() => row(
            Verdict::Pass,
            format!("{} reachable and writable", remote.describe()),
        ),
        Ok(out) => row(
            Verdict::Fail,
            format!(
                "{} is not writable: {}",
                remote.describe(),
                out.stderr_str().trim()
            ),
        ),
        Err(e) => row(
            Verdict::Fail,
            format!("cannot write in {}: {e}", remote.describe()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::HostFacts;
    use std::path::Path;

    fn stacked() -> Inventory {
        let yaml = concat!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  ssh:\n    agent: true\n",
            "  hosts:\n",
            "    - { name: cp1, address: 10.0.0.11, roles: [etcd, control-plane, load-balancer] }\n",
            "    - { name: cp2, address: 10.0.0.12, roles: [etcd, control-plane, load-balancer] }\n",
            "    - { name: cp3, address: 10.0.0.13, roles: [etcd, control-plane] }\n",
            "  vip: { address: 10.0.0.100 }\n",
            "  stateDir: /tmp/hactl-check-test\n",
        );
        crate::inventory::load_str(Path::new("c.yaml"), yaml).unwrap()
    }

    fn good_facts() -> HostFacts {
        let mut f = HostFacts {
            os_id: "debian".into(),
            os_version: "13".into(),
            init: "systemd".into(),
            time_ns: 1_000_000_000_000,
            privileged: true,
            apt: true,
            data_dir_free_bytes: Some(50 << 30),
            ..HostFacts::default()
        };
        for b in ["etcd", "etcdctl", "haproxy", "keepalived"] {
            f.binaries.insert(b.into(), format!("/usr/bin/{b}"));
        }
        f
    }

    fn verdict(rows: &[CheckRow], check: &str) -> (Verdict, String) {
        let r = rows.iter().find(|r| r.check == check).unwrap();
        (r.verdict, r.detail.clone())
    }

    #[test]
    fn a_stacked_port_held_by_etcd_and_haproxy_is_hactls_own() {
        let inv = stacked();
        let mut f = good_facts();
        f.listeners
            .entry(2379)
            .or_default()
            .extend(["etcd".to_string(), "haproxy".to_string()]);
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), f.time_ns);
        let (v, detail) = verdict(&rows, "ports");
        assert_eq!(v, Verdict::Pass, "{detail}");
        assert!(detail.contains("2379 by etcd+haproxy"), "{detail}");
    }

    #[test]
    fn a_foreign_process_on_the_etcd_metrics_port_fails() {
        // The load balancers' health checks ask etcd's metrics listener on 2381.
        let inv = stacked();
        let mut f = good_facts();
        f.listeners
            .entry(2381)
            .or_default()
            .insert("node_exporter".to_string());
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), f.time_ns);
        let (v, detail) = verdict(&rows, "ports");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            detail,
            "2381 held by node_exporter (hactl needs it for etcd): stop that service or move it"
        );
    }

    #[test]
    fn a_foreign_process_on_an_etcd_port_fails_and_names_itself() {
        let inv = stacked();
        let mut f = good_facts();
        f.listeners.entry(2380).or_default().insert("nginx".to_string());
        let rows = evaluate(&inv, &inv.hosts[2], Ok(&f), f.time_ns);
        let (v, detail) = verdict(&rows, "ports");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            detail,
            "2380 held by nginx (hactl needs it for etcd): stop that service or move it"
        );
    }

    #[test]
    fn clock_skew_over_a_second_fails_and_under_passes() {
        let inv = stacked();
        let f = good_facts();
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), f.time_ns - 1_500_000_000);
        assert_eq!(verdict(&rows, "clock").0, Verdict::Fail);
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), f.time_ns - 400_000_000);
        assert_eq!(verdict(&rows, "clock").0, Verdict::Pass);
    }

    #[test]
    fn an_unreachable_host_fails_ssh_and_skips_the_rest() {
        let inv = stacked();
        let rows = evaluate(
            &inv,
            &inv.hosts[1],
            Err("failed to connect to cp2 at 10.0.0.12:22"),
            0,
        );
        assert_eq!(rows[0].verdict, Verdict::Fail);
        assert!(rows[1..].iter().all(|r| r.verdict == Verdict::Skip));
    }

    #[test]
    fn missing_binaries_without_apt_fail_with_the_fix() {
        let inv = stacked();
        let mut f = good_facts();
        f.apt = false;
        f.binaries.clear();
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), f.time_ns);
        let (v, detail) = verdict(&rows, "binaries");
        assert_eq!(v, Verdict::Fail);
        assert!(
            detail.contains("set etcd.source to release or bundle"),
            "{detail}"
        );
    }
}
