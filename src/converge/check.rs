//! The preflight (`hactl check`): every host probed read-only and judged, one row per host and
//! check; the verdicts ([`evaluate`]) are pure.
//!
//! Invariant: sends only read-only commands (the facts probe, then [`CLOCK_SAMPLES`] readings of
//! `date +%s.%N`, each bracketed by this machine's clock, for the clock rule); a failed check
//! makes the exit code non-zero.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde::Serialize;

use crate::exec::connect::ConnectSettings;
use crate::facts::{self, HostFacts};
use crate::inventory::{BinarySource, Host, Inventory, Role};

/// Largest clock difference between a host and the operator machine that passes.
pub const MAX_CLOCK_SKEW_NS: i128 = 1_000_000_000;
/// How many times `check` reads each host's clock; the reading with the shortest round trip
/// is the one judged (as an NTP client prefers its fastest exchange).
pub const CLOCK_SAMPLES: usize = 3;
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

/// One reading of a host's clock: this machine's clock just before the command was sent and
/// just after its answer arrived, and what the host's clock said in between.
///
/// The host read its clock at some unknown moment inside `[sent_ns, received_ns]`, so its
/// offset from this machine is `remote_ns - midpoint`, give or take half the round trip; the
/// skew is only known to be at least `|offset| - round_trip / 2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub sent_ns: i128,
    pub remote_ns: i128,
    pub received_ns: i128,
}

impl ClockSample {
    pub fn round_trip_ns(&self) -> i128 {
        (self.received_ns - self.sent_ns).max(0)
    }
    /// The host's clock minus this machine's, taken at the middle of the round trip.
    pub fn offset_ns(&self) -> i128 {
        self.remote_ns - (self.sent_ns + self.round_trip_ns() / 2)
    }
    /// How far `offset_ns` may be off: half the round trip.
    pub fn uncertainty_ns(&self) -> i128 {
        self.round_trip_ns() / 2
    }
    /// The smallest skew this reading is consistent with.
    pub fn least_skew_ns(&self) -> i128 {
        (self.offset_ns().abs() - self.uncertainty_ns()).max(0)
    }
}

/// The reading with the shortest round trip (the tightest bound), if any.
pub fn best_sample(samples: &[ClockSample]) -> Option<ClockSample> {
    samples.iter().copied().min_by_key(ClockSample::round_trip_ns)
}

/// Parses `date +%s.%N`'s output (`1763776000.123456789`) into nanoseconds since the epoch.
pub fn parse_epoch_ns(text: &str) -> Option<i128> {
    let text = text.trim();
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    if secs.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: i128 = secs.parse().ok()?;
    let frac_ns: i128 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    Some(secs * 1_000_000_000 + if secs < 0 { -frac_ns } else { frac_ns })
}

/// The clock row: fails only when the skew is certainly over [`MAX_CLOCK_SKEW_NS`] (the best
/// reading's offset minus its uncertainty); warns when the round trip was too slow to tell.
fn clock_row(sample: Option<ClockSample>, samples: usize) -> (Verdict, String) {
    let Some(s) = sample else {
        return (Verdict::Fail, "could not read the host's clock".into());
    };
    let ms = |ns: i128| ns as f64 / 1e6;
    let measured = format!(
        "skew {:+.0} ms ± {:.0} ms (best of {samples} readings)",
        ms(s.offset_ns()),
        ms(s.uncertainty_ns())
    );
    if s.least_skew_ns() > MAX_CLOCK_SKEW_NS {
        (
            Verdict::Fail,
            format!("{measured}: at least {:.0} ms, over 1 s: etcd and TLS need synchronised clocks; enable NTP (systemd-timesyncd or chrony)", ms(s.least_skew_ns())),
        )
    } else if s.offset_ns().abs() + s.uncertainty_ns() > MAX_CLOCK_SKEW_NS {
        (
            Verdict::Warn,
            format!("{measured}: the round trip is too slow to tell whether it is under 1 s"),
        )
    } else {
        (Verdict::Pass, measured)
    }
}

/// Ports hactl will listen on, on `host`, with the process allowed to hold each.
pub fn ports_for(inv: &Inventory, host: &Host) -> Vec<(u16, &'static str)> {
    let mut ports = Vec::new();
    if host.has(Role::Etcd) {
        ports.push((inv.etcd.client_port, "etcd"));
        ports.push((inv.etcd.peer_port, "etcd"));
        // The metrics listener: loopback always, the host address when balancers check it.
        ports.push((crate::etcd::METRICS_PORT, "etcd"));
        // HTTP client services (etcd 3.5), loopback.
        ports.push((crate::etcd::HTTP_PORT, "etcd"));
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
    clock: &[ClockSample],
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
    let (verdict, detail) = clock_row(best_sample(clock), clock.len());
    rows.push(row("clock", verdict, detail));
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

/// The `kind` of `hactl check -o json`'s document.
pub const JSON_KIND: &str = "CheckReport";

/// The body of `hactl check -o json`: every row, and how many failed (the exit code is 1 when
/// any did).
pub fn json(rows: &[CheckRow]) -> serde_json::Value {
    serde_json::json!({
        "checks": rows,
        "failed": rows.iter().filter(|r| r.verdict == Verdict::Fail).count(),
    })
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

/// Reads the host's clock `n` times with `date +%s.%N`, each bracketed by this machine's clock;
/// a failed reading is left out.
async fn read_clock(t: &dyn crate::exec::Transport, n: usize) -> Vec<ClockSample> {
    let cmd = crate::plan::RemoteCommand::read_only(["date", "+%s.%N"]);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let sent_ns = now_ns();
        let Ok(out) = t.run(&cmd).await else { continue };
        let received_ns = now_ns();
        if let Some(remote_ns) = out.success().then(|| parse_epoch_ns(&out.stdout_str())).flatten() {
            samples.push(ClockSample {
                sent_ns,
                remote_ns,
                received_ns,
            });
        }
    }
    samples
}

/// Connects to `hosts`, probes them, and evaluates every check, rows in inventory order.
pub async fn check_hosts(
    inv: &Inventory,
    state: &crate::state::StateView,
    hosts: &[&Host],
    connect: &ConnectSettings,
) -> Checked {
    let conns = crate::exec::connect::connect(state, hosts, connect).await;
    let host_key_changed = conns
        .iter()
        .filter(|(_, c)| c.as_ref().is_err_and(|e| e.host_key_changed))
        .map(|(h, _)| h.clone())
        .collect();
    let mut rows = Vec::new();
    let results: Vec<anyhow::Result<(HostFacts, Vec<ClockSample>)>> =
        futures::stream::iter(hosts.iter().map(|host| {
            let conn = conns.get(&host.name).cloned();
            let query = crate::phases::query_for(inv, host);
            async move {
                let t = match conn {
                    Some(Ok(t)) => t,
                    Some(Err(e)) => return Err(anyhow::anyhow!(e.text)),
                    None => return Err(anyhow::anyhow!("not connected")),
                };
                // The facts probe reads the clock too, but it runs for a while after that: one
                // more reading at most, with its long round trip.
                let sent_ns = now_ns();
                let f = facts::gather(t.as_ref(), &query).await?;
                let mut clock = vec![ClockSample {
                    sent_ns,
                    remote_ns: f.time_ns,
                    received_ns: now_ns(),
                }];
                clock.extend(read_clock(t.as_ref(), CLOCK_SAMPLES).await);
                Ok((f, clock))
            }
        }))
        .buffered(connect.concurrency.max(1))
        .collect()
        .await;
    for (host, result) in hosts.iter().zip(results) {
        match result {
            Ok((f, clock)) => rows.extend(evaluate(inv, host, Ok(&f), &clock)),
            Err(e) => rows.extend(evaluate(inv, host, Err(&format!("{e:#}")), &[])),
        }
    }
    if let Some(remote) = &inv.backup.remote {
        rows.push(check_backup_remote(state, remote, connect).await);
    }
    Checked {
        rows,
        host_key_changed,
    }
}

/// What `hactl check` found: the rows, and the hosts whose SSH host key changed.
pub struct Checked {
    pub rows: Vec<CheckRow>,
    /// Hosts refused because their host key is not the recorded one: only the operator can say
    /// it was re-installed (`--accept-new-host-key HOST`).
    pub host_key_changed: std::collections::BTreeSet<String>,
}

impl Checked {
    /// `check`'s exit code: 0 when no check failed; 3 (needs input) when the only failures are
    /// the `ssh` rows of hosts whose key changed; else 1.
    pub fn exit_code(&self) -> i32 {
        let failed: Vec<&CheckRow> = self.rows.iter().filter(|r| r.verdict == Verdict::Fail).collect();
        if failed.is_empty() {
            crate::exit::OK
        } else if failed
            .iter()
            .all(|r| r.check == "ssh" && self.host_key_changed.contains(&r.host))
        {
            crate::exit::NEEDS_INPUT
        } else {
            crate::exit::FAILED
        }
    }
}

/// `spec.backup.remote` can be reached (host key verified) and its path written: fails naming
/// the host and the path.
async fn check_backup_remote(
    state: &crate::state::StateView,
    remote: &crate::inventory::BackupRemote,
    connect: &ConnectSettings,
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
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), &[in_step(&f)]);
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
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), &[in_step(&f)]);
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
        let rows = evaluate(&inv, &inv.hosts[2], Ok(&f), &[in_step(&f)]);
        let (v, detail) = verdict(&rows, "ports");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            detail,
            "2380 held by nginx (hactl needs it for etcd): stop that service or move it"
        );
    }

    /// A reading whose host clock equals this machine's, with a 2 ms round trip.
    fn in_step(f: &HostFacts) -> ClockSample {
        ClockSample {
            sent_ns: f.time_ns - 1_000_000,
            remote_ns: f.time_ns,
            received_ns: f.time_ns + 1_000_000,
        }
    }

    /// A reading sent at 0 and answered after `rtt_ms`, in which the host said `remote_ms`.
    fn sample(rtt_ms: i128, remote_ms: i128) -> ClockSample {
        ClockSample {
            sent_ns: 0,
            remote_ns: remote_ms * 1_000_000,
            received_ns: rtt_ms * 1_000_000,
        }
    }

    #[test]
    fn the_offset_is_taken_at_the_middle_of_the_round_trip_give_or_take_half_of_it() {
        // Sent at 0 ms, answered at 400 ms, the host said 1700 ms: 1500 ms ahead ± 200 ms.
        let s = sample(400, 1700);
        assert_eq!(s.round_trip_ns(), 400_000_000);
        assert_eq!(s.offset_ns(), 1_500_000_000);
        assert_eq!(s.uncertainty_ns(), 200_000_000);
        assert_eq!(s.least_skew_ns(), 1_300_000_000);
        // Behind: the same arithmetic on the absolute value.
        let s = sample(400, -1300);
        assert_eq!(s.offset_ns(), -1_500_000_000);
        assert_eq!(s.least_skew_ns(), 1_300_000_000);
        // An offset inside the uncertainty could be zero.
        assert_eq!(sample(3000, 2000).least_skew_ns(), 0);
    }

    #[test]
    fn the_best_reading_is_the_one_with_the_shortest_round_trip() {
        let samples = [sample(3000, 2900), sample(40, 520), sample(900, 700)];
        assert_eq!(best_sample(&samples), Some(samples[1]));
        assert_eq!(best_sample(&[]), None);
    }

    #[test]
    fn clock_skew_fails_only_when_certainly_over_a_second() {
        let inv = stacked();
        let f = good_facts();
        let clock =
            |samples: &[ClockSample]| verdict(&evaluate(&inv, &inv.hosts[0], Ok(&f), samples), "clock");
        // 1.5 s ahead ± 10 ms: certainly over.
        let (v, detail) = clock(&[sample(20, 1510)]);
        assert_eq!(v, Verdict::Fail, "{detail}");
        assert!(
            detail.starts_with("skew +1500 ms ± 10 ms (best of 1 readings): at least 1490 ms"),
            "{detail}"
        );
        // 400 ms behind ± 10 ms: passes.
        let (v, detail) = clock(&[sample(20, -390)]);
        assert_eq!(v, Verdict::Pass, "{detail}");
        assert_eq!(detail, "skew -400 ms ± 10 ms (best of 1 readings)");
        // What the old estimate failed: the facts probe read the clock at once and then ran for
        // 3 s, so its midpoint put the host 1.5 s behind; a quick `date` shows it in step.
        let (v, detail) = clock(&[sample(3000, 0), sample(60, 30)]);
        assert_eq!(v, Verdict::Pass, "{detail}");
        assert_eq!(detail, "skew +0 ms ± 30 ms (best of 2 readings)");
        // Only slow readings, 1.2 s off ± 1.5 s: cannot tell, a warning, not a failure.
        let (v, detail) = clock(&[sample(3000, 2700)]);
        assert_eq!(v, Verdict::Warn, "{detail}");
        // Slow, but 3 s off even so: fails.
        let (v, _) = clock(&[sample(3000, 4600)]);
        assert_eq!(v, Verdict::Fail);
        // No reading at all.
        let (v, detail) = clock(&[]);
        assert_eq!(v, Verdict::Fail);
        assert_eq!(detail, "could not read the host's clock");
    }

    #[test]
    fn date_output_parses_to_nanoseconds() {
        assert_eq!(
            parse_epoch_ns("1763776000.123456789\n"),
            Some(1_763_776_000_123_456_789)
        );
        assert_eq!(parse_epoch_ns("1763776000.5"), Some(1_763_776_000_500_000_000));
        assert_eq!(parse_epoch_ns("1763776000"), Some(1_763_776_000_000_000_000));
        // busybox date prints %N literally; a garbled answer is no reading.
        assert_eq!(parse_epoch_ns("1763776000.%N"), None);
        assert_eq!(parse_epoch_ns(""), None);
        assert_eq!(parse_epoch_ns("1763776000.1234567890"), None);
    }

    #[test]
    fn an_unreachable_host_fails_ssh_and_skips_the_rest() {
        let inv = stacked();
        let rows = evaluate(
            &inv,
            &inv.hosts[1],
            Err("failed to connect to cp2 at 10.0.0.12:22"),
            &[],
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
        let rows = evaluate(&inv, &inv.hosts[0], Ok(&f), &[in_step(&f)]);
        let (v, detail) = verdict(&rows, "binaries");
        assert_eq!(v, Verdict::Fail);
        assert!(
            detail.contains("set etcd.source to release or bundle"),
            "{detail}"
        );
    }
}

#[cfg(test)]
mod exit_code_tests {
    use super::*;

    fn row(host: &str, check: &'static str, verdict: Verdict) -> CheckRow {
        CheckRow {
            host: host.into(),
            check,
            verdict,
            detail: String::new(),
        }
    }

    #[test]
    fn a_changed_host_key_alone_needs_input_and_any_other_failure_fails() {
        let keys = |hosts: &[&str]| hosts.iter().map(|h| h.to_string()).collect();
        let ok = Checked {
            rows: vec![
                row("cp1", "ssh", Verdict::Pass),
                row("cp1", "clock", Verdict::Warn),
            ],
            host_key_changed: keys(&[]),
        };
        assert_eq!(ok.exit_code(), crate::exit::OK);
        let key = Checked {
            rows: vec![
                row("cp1", "ssh", Verdict::Pass),
                row("cp2", "ssh", Verdict::Fail),
                row("cp2", "sudo", Verdict::Skip),
            ],
            host_key_changed: keys(&["cp2"]),
        };
        assert_eq!(key.exit_code(), crate::exit::NEEDS_INPUT);
        let also_down = Checked {
            rows: vec![row("cp1", "ssh", Verdict::Fail), row("cp2", "ssh", Verdict::Fail)],
            host_key_changed: keys(&["cp2"]),
        };
        assert_eq!(also_down.exit_code(), crate::exit::FAILED);
        let also_disk = Checked {
            rows: vec![
                row("cp1", "disk", Verdict::Fail),
                row("cp2", "ssh", Verdict::Fail),
            ],
            host_key_changed: keys(&["cp2"]),
        };
        assert_eq!(also_disk.exit_code(), crate::exit::FAILED);
    }
}
