//! Scheduled backups on etcd hosts: the paths the `ScheduleBackups` phase installs, the read-only
//! command `hactl status` sends to read `<dir>/latest.json`, and the stale rule.
//!
//! Invariant: reading a backup's state only reads (the command is `read_only`); the stale rule is
//! pure, so it is tested without hosts.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::plan::RemoteCommand;

/// The backup script (rendered from `templates/hactl-etcd-backup.tera`).
pub const SCRIPT: &str = "/usr/local/sbin/hactl-etcd-backup";
pub const SERVICE: &str = "hactl-etcd-backup.service";
pub const TIMER: &str = "hactl-etcd-backup.timer";
pub const SERVICE_PATH: &str = "/etc/systemd/system/hactl-etcd-backup.service";
pub const TIMER_PATH: &str = "/etc/systemd/system/hactl-etcd-backup.timer";

/// Every file the phase manages on an etcd host, for the facts probe.
pub fn managed_paths() -> Vec<String> {
    [
        crate::snapshot::HELPER,
        SCRIPT,
        SERVICE_PATH,
        TIMER_PATH,
        crate::backup_remote::HOST_KEY,
        crate::backup_remote::HOST_KNOWN_HOSTS,
    ]
    .map(String::from)
    .to_vec()
}

/// `<dir>/latest.json`, written by the script after a verified snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latest {
    pub file: String,
    /// Unix seconds (host clock).
    pub time: i64,
    pub revision: i64,
    pub sha256: String,
    pub ok: bool,
}

/// One etcd host's newest backup, as `hactl status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupRow {
    pub host: String,
    /// Empty (`null`) when the host has no `latest.json`.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub file: String,
    /// Age of `latest.json`'s snapshot by the host's own clock; None without one.
    pub age_seconds: Option<i64>,
    pub ok: bool,
    /// How long the host's timer has been active (seconds), None when it is not.
    #[serde(skip)]
    pub timer_active_seconds: Option<i64>,
    /// Why the host's record could not be read; empty when it was.
    pub errors: Vec<String>,
}

/// Read-only: the host's clock, the timer's state and `<dir>/latest.json`, one per line.
pub fn read_command(dir: &str) -> RemoteCommand {
    const SCRIPT: &str = r#"
echo "now $(date +%s)"
echo "active $(systemctl is-active hactl-etcd-backup.timer 2>/dev/null)"
echo "since $(systemctl show hactl-etcd-backup.timer -p ActiveEnterTimestamp --timestamp=unix 2>/dev/null | sed -n 's/^ActiveEnterTimestamp=@//p')"
if [ -f "$1/latest.json" ]; then echo "latest $(tr -d '\n' < "$1/latest.json")"; fi
"#;
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        SCRIPT.to_string(),
        "hactl-backup-status".to_string(),
        dir.to_string(),
    ])
}

/// Parses [`read_command`]'s output into `host`'s row.
pub fn parse_read(host: &str, text: &str) -> BackupRow {
    let mut row = BackupRow {
        host: host.to_string(),
        ..BackupRow::default()
    };
    let (mut now, mut active, mut since) = (None::<i64>, false, None::<i64>);
    let mut latest = None;
    for line in text.lines() {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "now" => now = rest.trim().parse().ok(),
            "active" => active = rest.trim() == "active",
            "since" => since = rest.trim().parse().ok(),
            "latest" => match serde_json::from_str::<Latest>(rest.trim()) {
                Ok(l) => latest = Some(l),
                Err(e) => row.errors.push(format!("latest.json: {e}")),
            },
            _ => {}
        }
    }
    if let (true, Some(n), Some(s)) = (active, now, since) {
        row.timer_active_seconds = Some((n - s).max(0));
    }
    if let Some(l) = latest {
        row.file = l.file;
        row.ok = l.ok;
        row.age_seconds = now.map(|n| (n - l.time).max(0));
    }
    row
}

/// [`read_command`]'s output as `hactl recover --auto` needs it: the host's clock (unix seconds)
/// and its `latest.json`, when both are there and the snapshot was verified (`ok`).
pub fn parse_latest(text: &str) -> Option<(i64, Latest)> {
    let mut now = None;
    let mut latest = None;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("now", rest)) => now = rest.trim().parse::<i64>().ok(),
            Some(("latest", rest)) => latest = serde_json::from_str::<Latest>(rest.trim()).ok(),
            _ => {}
        }
    }
    now.zip(latest.filter(|l| l.ok && !l.file.is_empty()))
}

/// Reads every etcd host's newest backup (read-only), in inventory order.
pub async fn gather(
    hosts: &[&crate::inventory::Host],
    conns: &std::collections::BTreeMap<String, crate::exec::connect::Connection>,
    dir: &str,
) -> Vec<BackupRow> {
    let cmd = read_command(dir);
    let reads = hosts.iter().map(|h| {
        let cmd = cmd.clone();
        async move {
            let failed = |why: String| BackupRow {
                host: h.name.clone(),
                errors: vec![why],
                ..BackupRow::default()
            };
            match conns.get(&h.name) {
                Some(Ok(t)) => match t.run(&cmd).await {
                    Ok(out) if out.success() => parse_read(&h.name, &out.stdout_str()),
                    Ok(out) => failed(format!("backup state: {}", out.stderr_str().trim())),
                    Err(e) => failed(format!("backup state: {e}")),
                },
                Some(Err(e)) => failed(format!("ssh: {e}")),
                None => failed("ssh: not connected".into()),
            }
        }
    });
    futures::future::join_all(reads).await
}

/// `backups:` lines of the status table.
pub fn table(rows: &[BackupRow]) -> String {
    let mut out = String::from(
        "
backups (newest good per host):
",
    );
    for r in rows {
        let what = match (r.age_seconds, r.ok) {
            (Some(age), true) => format!("{} ({} s old)", r.file, age),
            (Some(age), false) => format!("{} ({} s old, NOT OK)", r.file, age),
            (None, _) if !r.errors.is_empty() => r.errors.join("; "),
            (None, _) => "none (followers skip; only the leader saves)".into(),
        };
        out.push_str(&format!("  {:<10} {what}\n", r.host));
    }
    out
}

fn span(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The stale rule: the newest good backup across hosts must be at most 2 × `interval` old; with
/// none at all, the timer must not have been active for longer than that.
pub fn stale_problem(rows: &[BackupRow], interval: Duration) -> Option<String> {
    let limit = 2 * interval.as_secs() as i64;
    let newest = rows.iter().filter(|r| r.ok).filter_map(|r| r.age_seconds).min();
    match newest {
        Some(age) if age > limit => Some(format!(
            "newest good backup is {} min old (interval {}): stale; see `journalctl -u {SERVICE}` on the leader",
            age / 60,
            span(interval)
        )),
        Some(_) => None,
        None => {
            let active = rows.iter().filter_map(|r| r.timer_active_seconds).max()?;
            (active > limit).then(|| {
                format!(
                    "no good backup although {TIMER} has been active for {} min (interval {}): stale; see `journalctl -u {SERVICE}` on the leader",
                    active / 60,
                    span(interval)
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(host: &str, age: Option<i64>, ok: bool, timer: Option<i64>) -> BackupRow {
        BackupRow {
            host: host.into(),
            file: age
                .map(|_| format!("/var/lib/etcd-backups/c-{host}.db"))
                .unwrap_or_default(),
            age_seconds: age,
            ok,
            timer_active_seconds: timer,
            errors: vec![],
        }
    }

    #[test]
    fn the_stale_rule_looks_at_the_newest_good_backup_across_hosts() {
        let hour = Duration::from_secs(3600);
        // (rows, stale?) — followers have no latest.json; only the leader's counts.
        let cases: Vec<(Vec<BackupRow>, Option<&str>)> = vec![
            (vec![row("cp1", Some(3000), true, Some(9000)), row("cp2", None, false, Some(9000))], None),
            (vec![row("cp1", Some(7200), true, Some(9000))], None),
            (
                vec![row("cp1", Some(7201), true, Some(9000))],
                Some("newest good backup is 120 min old (interval 1h): stale"),
            ),
            // An old one on a former leader does not matter when another host has a fresh one.
            (vec![row("cp1", Some(90_000), true, None), row("cp2", Some(60), true, None)], None),
            // A failed (not ok) latest.json does not count.
            (
                vec![row("cp1", Some(60), false, Some(100)), row("cp2", Some(8000), true, Some(100))],
                Some("newest good backup is 133 min old (interval 1h): stale"),
            ),
            // None yet: stale only once the timer has been active longer than 2 × interval.
            (vec![row("cp1", None, false, Some(7000))], None),
            (
                vec![row("cp1", None, false, Some(7300))],
                Some("no good backup although hactl-etcd-backup.timer has been active for 121 min (interval 1h): stale"),
            ),
            (vec![row("cp1", None, false, None)], None),
        ];
        for (rows, want) in cases {
            let got = stale_problem(&rows, hour);
            match (want, &got) {
                (None, None) => {}
                (Some(w), Some(g)) => assert!(g.starts_with(w), "{g:?} does not start with {w:?}"),
                _ => panic!("rows {rows:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn parses_the_read_command_output() {
        let text = "now 1000\nactive active\nsince 400\nlatest {\"file\":\"/b/c-1.db\",\"time\":940,\"revision\":12,\"sha256\":\"ab\",\"ok\":true}\n";
        let r = parse_read("cp1", text);
        assert_eq!(r.age_seconds, Some(60));
        assert_eq!(r.timer_active_seconds, Some(600));
        assert!(r.ok);
        assert_eq!(r.file, "/b/c-1.db");
        let r = parse_read("cp2", "now 1000\nactive inactive\nsince \n");
        assert_eq!((r.age_seconds, r.timer_active_seconds, r.ok), (None, None, false));
    }

    #[test]
    fn the_read_command_is_read_only() {
        assert!(read_command("/var/lib/etcd-backups").read_only);
    }

    #[test]
    fn parse_latest_takes_only_a_verified_backup() {
        let text = "now 1000\nactive active\nsince 400\nlatest {\"file\":\"/b/c-1.db\",\"time\":940,\"revision\":12,\"sha256\":\"ab\",\"ok\":true}\n";
        let (now, l) = parse_latest(text).unwrap();
        assert_eq!(
            (now, l.revision, l.file.as_str(), l.sha256.as_str()),
            (1000, 12, "/b/c-1.db", "ab")
        );
        assert_eq!(parse_latest(&text.replace("true}", "false}")), None);
        assert_eq!(parse_latest("now 1000\nactive active\n"), None);
    }
}
