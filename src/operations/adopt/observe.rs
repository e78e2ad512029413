//! What adopt reads from the hosts: the facts probe (units, managed files' sha256, the trust
//! files, the etcd members) asked about every role on every host, a small probe of its own
//! (fences, maintenance records, the etcd lineage token), and, in its read-back step only, the
//! files themselves.
//!
//! Invariant: every command here is read-only; the read-back's output (keys among it) stays in
//! memory, never in argv, a log or an error: an error names the host and the path only.

use std::collections::BTreeMap;

use anyhow::Context as _;

use super::decide::HostSeen;
use crate::exec::Transports;
use crate::facts::Query;
use crate::inventory::{Host, Inventory};
use crate::plan::RemoteCommand;

/// The facts probe's question for `host`: what every role would have there (a host may run
/// what the inventory does not give it), and the Kubernetes files wherever the inventory has a
/// control plane.
pub fn query(inv: &Inventory, host: &Host) -> Query {
    let mut q = crate::phases::query::member_query_for(inv, host);
    let add = |list: &mut Vec<String>, items: Vec<String>| {
        for item in items {
            if !list.contains(&item) {
                list.push(item);
            }
        }
    };
    add(
        &mut q.units,
        ["haproxy.service", "keepalived.service"]
            .map(String::from)
            .to_vec(),
    );
    add(&mut q.files, crate::phases::load_balancer::managed_paths(inv));
    if let Some(kube) = &inv.kubernetes {
        add(&mut q.files, crate::kubernetes::managed_paths(kube));
    }
    q
}

/// The probe of what the facts do not read: fence drop-ins, maintenance records, the token.
fn probe_script() -> String {
    let fence = crate::fence::DROPIN_NAME;
    let records = crate::operations::maintenance_record::HOST_RECORD_DIR;
    let env = crate::etcd::INITIAL_ENV_PATH;
    format!(
        r#"for f in /etc/systemd/system/*.d/{fence} /run/systemd/system/*.d/{fence}; do
  [ -f "$f" ] && echo "fence $f"
done
for r in {records}/*.json; do
  [ -f "$r" ] && echo "maintenance $(tr -d '\n' < "$r")"
done
if [ -f {env} ]; then
  t=$(sed -n 's/^ETCD_INITIAL_CLUSTER_TOKEN=//p' {env} | head -n 1)
  [ -n "$t" ] && echo "token $t"
fi
exit 0
"#
    )
}

/// The read-only command of [`probe_script`].
pub fn probe_command() -> RemoteCommand {
    RemoteCommand::read_only(["sh", "-c", &probe_script(), "hactl-adopt-probe"])
}

/// Parses [`probe_command`]'s output into `seen` (its fences, maintenance and token).
pub fn parse_probe(text: &str, seen: &mut HostSeen) {
    use crate::operations::maintenance_record::{MaintenanceRecord, Stage};
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(' ') else {
            continue;
        };
        match key {
            "fence" => seen.fences.push(rest.trim().to_string()),
            "maintenance" => {
                if let Ok(r) = serde_json::from_str::<MaintenanceRecord>(rest) {
                    if r.stage != Stage::Complete {
                        seen.maintenance.push((r.host, r.stage.to_string(), r.since));
                    }
                }
            }
            "token" => seen.token = Some(rest.trim().to_string()),
            _ => {}
        }
    }
}

/// Facts and the probe from every host of `transports` (two read-only round trips each).
pub async fn observe(inv: &Inventory, transports: &Transports) -> anyhow::Result<BTreeMap<String, HostSeen>> {
    let asks = inv
        .hosts
        .iter()
        .filter(|h| transports.contains_key(&h.name))
        .map(|h| {
            let t = transports[&h.name].clone();
            let q = query(inv, h);
            async move {
                let facts = crate::facts::gather(t.as_ref(), &q)
                    .await
                    .with_context(|| format!("{}: failed to read the host's facts", h.name))?;
                let out = t
                    .run(&probe_command())
                    .await
                    .with_context(|| format!("{}: failed to read fences and records", h.name))?;
                let mut seen = HostSeen {
                    facts,
                    ..Default::default()
                };
                parse_probe(&out.stdout_str(), &mut seen);
                anyhow::Ok((h.name.clone(), seen))
            }
        });
    let mut out = BTreeMap::new();
    let mut failures = Vec::new();
    for r in futures::future::join_all(asks).await {
        match r {
            Ok((h, s)) => {
                out.insert(h, s);
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    if !failures.is_empty() {
        anyhow::bail!(
            "failed to read every host, so nothing was changed:\n{}",
            failures.join("\n")
        );
    }
    Ok(out)
}

/// Prints each of its arguments that is a file as `<path> <base64 of its bytes>`, and a
/// missing one as `<path> -`.
const READ: &str = r#"for f in "$@"; do
  if [ -f "$f" ]; then printf '%s %s\n' "$f" "$(base64 -w0 "$f")"; else printf '%s -\n' "$f"; fi
done
"#;

/// The read-only command that reads `paths` back (their content travels on stdout only).
pub fn read_command(paths: &[&str]) -> RemoteCommand {
    let mut argv = vec!["sh", "-c", READ, "hactl-adopt-read"];
    argv.extend(paths);
    RemoteCommand::read_only(argv)
}

/// [`read_command`]'s output: path → bytes (`None` for a missing file).
pub fn parse_read(text: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    use base64::Engine as _;
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(path, data)| {
            let bytes = match data.trim() {
                "-" => None,
                b64 => base64::engine::general_purpose::STANDARD.decode(b64).ok(),
            };
            (path.to_string(), bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reads_fences_unfinished_maintenance_and_the_token() {
        let mut seen = HostSeen::default();
        parse_probe(
            "fence /etc/systemd/system/etcd.service.d/hactl-fence.conf\n\
             maintenance {\"host\":\"cp2\",\"stage\":\"Drain\",\"since\":\"t1\"}\n\
             maintenance {\"host\":\"cp3\",\"stage\":\"Complete\",\"since\":\"t2\"}\n\
             token hactl-lab-recover-1\n",
            &mut seen,
        );
        assert_eq!(
            seen.fences,
            ["/etc/systemd/system/etcd.service.d/hactl-fence.conf"]
        );
        assert_eq!(
            seen.maintenance,
            [("cp2".to_string(), "Drain".to_string(), "t1".to_string())]
        );
        assert_eq!(seen.token.as_deref(), Some("hactl-lab-recover-1"));
        let cmd = probe_command();
        assert!(cmd.read_only);
        assert!(cmd.argv[2].contains("/var/lib/hactl/maintenance/*.json"));
    }

    /// The read command run by a real shell on files of this machine: bytes come back exactly,
    /// a missing file is named missing, and nothing but paths is in argv.
    #[test]
    fn the_read_back_returns_the_exact_bytes_and_names_a_missing_file() {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("ca.key");
        std::fs::write(&key, b"-----BEGIN PRIVATE KEY-----\nabc\n\x00\xff-----END\n").unwrap();
        let missing = tmp.path().join("gone.crt");
        let (k, m) = (key.to_str().unwrap(), missing.to_str().unwrap());
        let cmd = read_command(&[k, m]);
        assert!(cmd.read_only);
        assert!(
            cmd.argv.iter().all(|a| !a.contains("BEGIN")),
            "no content in argv"
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.line(false))
            .output()
            .unwrap();
        assert!(out.status.success());
        let got = parse_read(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(got[k].as_deref(), Some(&std::fs::read(&key).unwrap()[..]));
        assert_eq!(got[m], None);
    }
}
