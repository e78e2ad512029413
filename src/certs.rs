//! `hactl certs check`: every certificate in the state directory and on the hosts, with its
//! expiry, issuer, SANs and serial, and whether each host's copy is the state directory's.
//!
//! Invariants: reading only. The state directory's PKI is read, never ensured (nothing is
//! issued); each host gets one read-only command that prints the certificate blocks of the
//! files hactl manages there, so private keys (a `.pem` may hold one beside its certificate)
//! never leave the host. Matching is by the certificate's DER bytes.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use time::OffsetDateTime;

use crate::pki;
use crate::plan::RemoteCommand;

/// One certificate, in the state directory or on a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertRow {
    /// `state` or the host's name.
    pub location: String,
    /// The path stem under the state directory's `pki/` (`etcd/server-cp1`) or the host's path.
    pub file: String,
    pub subject: String,
    pub issuer: String,
    pub serial: String,
    pub sans: Vec<String>,
    /// RFC 3339.
    pub not_after: String,
    pub days_left: i64,
    /// For a host's copy: the state directory's certificate it is byte for byte (`None`: it is
    /// none of them, so `hactl up` or `hactl certs renew` will replace it). Always `None` for
    /// the state directory's own rows.
    pub matches: Option<String>,
    /// Why a row could not be read (an unparsable file); the other fields are then empty
    /// (`null` in [`json`]).
    pub error: Option<String>,
}

impl CertRow {
    /// A host's copy that is not the state directory's certificate.
    pub fn differs(&self) -> bool {
        self.location != STATE && self.matches.is_none()
    }
}

/// The location of the state directory's rows.
pub const STATE: &str = "state";

/// The `kind` of `hactl certs check -o json`'s document.
pub const JSON_KIND: &str = "CertificateReport";

/// The body of `hactl certs check -o json`: every row and the problems. What a row that could
/// not be read does not know (subject, issuer, serial, SANs, expiry) is `null`. Pure.
pub fn json(rows: &[CertRow], problems: &[String]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let mut v = serde_json::json!(r);
            if r.error.is_some() {
                for unknown in ["subject", "issuer", "serial", "sans", "notAfter", "daysLeft"] {
                    v[unknown] = serde_json::Value::Null;
                }
            }
            v
        })
        .collect();
    serde_json::json!({ "certificates": rows, "problems": problems })
}

/// A certificate read from a file: its DER (for matching) and its row.
struct Read {
    der: Vec<u8>,
    row: CertRow,
}

fn row_of(location: &str, file: &str, pem: &str, now: OffsetDateTime) -> Read {
    let mut row = CertRow {
        location: location.to_string(),
        file: file.to_string(),
        subject: String::new(),
        issuer: String::new(),
        serial: String::new(),
        sans: vec![],
        not_after: String::new(),
        days_left: 0,
        matches: None,
        error: None,
    };
    let der = pki::pem_to_der(pem).unwrap_or_default();
    match pki::inspect(pem) {
        Ok(info) => {
            row.subject = info.subject_cn;
            row.issuer = info.issuer_cn;
            row.serial = info.serial;
            row.sans = info.sans;
            row.not_after = info
                .not_after
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            row.days_left = (info.not_after - now).whole_days();
        }
        Err(e) => row.error = Some(e.to_string()),
    }
    Read { der, row }
}

/// The certificates under the state directory's `pki/` (`<dir>/<ca>/<name>.crt`), by path stem.
pub fn read_state(pki_dir: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for sub in ["etcd", "kubernetes", "front-proxy"] {
        let Ok(entries) = fs_err::read_dir(pki_dir.join(sub)) else {
            continue;
        };
        let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for path in files {
            if path.extension().and_then(|e| e.to_str()) != Some("crt") {
                continue;
            }
            let Ok(pem) = crate::bounded::read_to_string(&path, crate::bounded::TEXT) else {
                continue;
            };
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
            found.push((format!("{sub}/{stem}"), pem));
        }
    }
    found
}

/// The files on a host whose certificates are checked: the managed `.crt` and `.pem` files.
pub fn host_paths(managed: &[String]) -> Vec<String> {
    managed
        .iter()
        .filter(|p| p.ends_with(".crt") || p.ends_with(".pem"))
        .cloned()
        .collect()
}

/// The read-only command that prints, for each existing path, `== PATH` and the file's
/// certificate blocks only (never a key).
pub fn probe_command(paths: &[String]) -> RemoteCommand {
    let script = "for f in \"$@\"; do [ -f \"$f\" ] || continue; echo \"== $f\"; \
sed -n '/-----BEGIN CERTIFICATE-----/,/-----END CERTIFICATE-----/p' \"$f\"; done";
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        "hactl-certs".to_string(),
    ];
    argv.extend(paths.iter().cloned());
    RemoteCommand::read_only(argv)
}

/// Splits the probe's output into (path, PEM) per certificate. A file with several certificates
/// is a trust bundle (hactl writes no chains): its first is listed under the path, the others as
/// `PATH#2`, `PATH#3` …, so during a CA rotation both CAs of a trust file are shown and matched.
pub fn parse_probe(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut path = String::new();
    let mut index = 0;
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("== ") {
            path = p.to_string();
            index = 0;
            out.push((path.clone(), String::new()));
            continue;
        }
        if out.is_empty() {
            continue;
        }
        if line.starts_with("-----BEGIN CERTIFICATE-----") {
            index += 1;
            if index > 1 {
                out.push((format!("{path}#{index}"), String::new()));
            }
        }
        let pem = &mut out.last_mut().expect("not empty").1;
        pem.push_str(line);
        pem.push('\n');
    }
    out
}

/// The report: the state directory's certificates, then each host's (hosts in the given
/// order), each host copy matched against the state directory by its DER bytes.
pub fn report(
    state: &[(String, String)],
    hosts: &[(String, Vec<(String, String)>)],
    now: OffsetDateTime,
) -> Vec<CertRow> {
    let state_reads: Vec<Read> = state
        .iter()
        .map(|(name, pem)| row_of(STATE, name, pem, now))
        .collect();
    let by_der: BTreeMap<&[u8], &str> = state_reads
        .iter()
        .filter(|r| !r.der.is_empty())
        .map(|r| (r.der.as_slice(), r.row.file.as_str()))
        .collect();
    let mut rows: Vec<CertRow> = Vec::new();
    for (host, files) in hosts {
        for (path, pem) in files {
            let read = row_of(host, path, pem, now);
            let mut row = read.row;
            row.matches = by_der.get(read.der.as_slice()).map(|s| s.to_string());
            rows.push(row);
        }
    }
    let mut all: Vec<CertRow> = state_reads.into_iter().map(|r| r.row).collect();
    all.extend(rows);
    all
}

/// The report as a table (stdout of `hactl certs check`).
pub fn table(rows: &[CertRow]) -> String {
    let mut lines = vec![[
        "LOCATION".to_string(),
        "FILE".into(),
        "SUBJECT".into(),
        "ISSUER".into(),
        "SERIAL".into(),
        "EXPIRES".into(),
        "DAYS".into(),
        "MATCHES".into(),
        "SANS".into(),
    ]];
    for r in rows {
        let matches = if r.location == STATE {
            "-".to_string()
        } else if let Some(m) = &r.matches {
            m.clone()
        } else {
            "DIFFERS".to_string()
        };
        lines.push([
            r.location.clone(),
            r.file.clone(),
            r.error
                .clone()
                .map_or(r.subject.clone(), |e| format!("unreadable: {e}")),
            r.issuer.clone(),
            r.serial.clone(),
            r.not_after.get(..10).unwrap_or_default().to_string(),
            r.days_left.to_string(),
            matches,
            r.sans.join(","),
        ]);
    }
    let widths: Vec<usize> = (0..9)
        .map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> = l
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 8 {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Problems worth an exit code of their own: host copies that differ, certificates within the
/// renewal threshold.
pub fn problems(rows: &[CertRow], renew_before_days: u32) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        if r.differs() {
            out.push(format!(
                "{}: {} is not the state directory's certificate: `hactl up` (or `hactl certs renew`) replaces it",
                r.location, r.file
            ));
        }
        if r.location == STATE && r.error.is_none() && r.days_left < i64::from(renew_before_days) {
            out.push(format!(
                "{} expires in {} days (pki.renewBeforeDays is {renew_before_days})",
                r.file, r.days_left
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_pki() -> (tempfile::TempDir, Vec<(String, String)>) {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: certs\nspec:\n  ssh:\n    agent: true\n  hosts:\n    - {{ name: cp1, address: 10.0.0.11, roles: [etcd] }}\n  allowSingleMember: true\n  stateDir: {}\n",
            dir.path().display()
        );
        let inv = crate::inventory::load_str(&dir.path().join("c.yaml"), &yaml).unwrap();
        let now = OffsetDateTime::now_utc();
        crate::pki::ensure(&dir.path().join("pki"), &inv, now).unwrap();
        let state = read_state(&dir.path().join("pki"));
        (dir, state)
    }

    #[test]
    fn host_copies_match_the_state_directory_by_their_bytes() {
        let (_dir, state) = test_pki();
        let names: Vec<&str> = state.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            names.contains(&"etcd/ca") && names.contains(&"etcd/server-cp1"),
            "{names:?}"
        );
        let server = state
            .iter()
            .find(|(n, _)| n == "etcd/server-cp1")
            .unwrap()
            .1
            .clone();
        let peer = state
            .iter()
            .find(|(n, _)| n == "etcd/peer-cp1")
            .unwrap()
            .1
            .clone();
        // The host's probe output: server.crt is the state's, peer.crt holds the server's
        // certificate (a stale copy), and a .pem with a key beside it yields the certificate only.
        let probe = format!(
            "== /etc/hactl/pki/etcd/server.crt\n{server}== /etc/hactl/pki/etcd/peer.crt\n{server}== /x.pem\n{peer}"
        );
        let files = parse_probe(&probe);
        assert_eq!(files.len(), 3);
        let rows = report(&state, &[("cp1".into(), files)], OffsetDateTime::now_utc());
        let host: Vec<&CertRow> = rows.iter().filter(|r| r.location == "cp1").collect();
        assert_eq!(host[0].matches.as_deref(), Some("etcd/server-cp1"));
        assert_eq!(
            host[1].matches.as_deref(),
            Some("etcd/server-cp1"),
            "same bytes, so it matches the server's"
        );
        assert_eq!(host[2].matches.as_deref(), Some("etcd/peer-cp1"));
        assert_eq!(host[0].subject, "cp1");
        assert!(
            host[0].sans.contains(&"10.0.0.11".to_string()),
            "{:?}",
            host[0].sans
        );
        assert!(host[0].days_left > 300);
        let text = table(&rows);
        assert!(text.starts_with("LOCATION"), "{text}");
        assert!(problems(&rows, 30).is_empty());
    }

    #[test]
    fn a_copy_that_is_none_of_the_state_certificates_differs_and_is_a_problem() {
        let (_dir, state) = test_pki();
        let (_other, other_state) = test_pki();
        let foreign = other_state
            .iter()
            .find(|(n, _)| n == "etcd/server-cp1")
            .unwrap()
            .1
            .clone();
        let files = parse_probe(&format!("== /etc/hactl/pki/etcd/server.crt\n{foreign}"));
        let rows = report(&state, &[("cp1".into(), files)], OffsetDateTime::now_utc());
        let host = rows.iter().find(|r| r.location == "cp1").unwrap();
        assert!(host.differs());
        assert!(table(&rows).contains("DIFFERS"));
        let p = problems(&rows, 30);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("cp1: /etc/hactl/pki/etcd/server.crt is not the state directory's certificate")
        );
        // Every state certificate within a threshold longer than its life is a problem.
        assert_eq!(problems(&rows, 4000).len(), 1 + state.len());
    }

    /// A trust file during a rotation holds two CAs: both are listed, each matched.
    #[test]
    fn every_certificate_of_a_trust_bundle_is_listed_and_matched() {
        let (_dir, state) = test_pki();
        let pem = |name: &str| state.iter().find(|(n, _)| n == name).unwrap().1.clone();
        let (ca, server) = (pem("etcd/ca"), pem("etcd/server-cp1"));
        let (_other, other_state) = test_pki();
        let foreign = other_state
            .iter()
            .find(|(n, _)| n == "etcd/ca")
            .unwrap()
            .1
            .clone();
        let probe = format!(
            "== /etc/hactl/pki/etcd/ca.crt\n{ca}{foreign}== /etc/hactl/pki/etcd/server.crt\n{server}"
        );
        let files = parse_probe(&probe);
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/etc/hactl/pki/etcd/ca.crt",
                "/etc/hactl/pki/etcd/ca.crt#2",
                "/etc/hactl/pki/etcd/server.crt"
            ]
        );
        let rows = report(&state, &[("cp1".into(), files)], OffsetDateTime::now_utc());
        let host: Vec<&CertRow> = rows.iter().filter(|r| r.location == "cp1").collect();
        assert_eq!(host[0].matches.as_deref(), Some("etcd/ca"));
        assert!(host[1].differs(), "a CA the state directory does not have");
        assert_eq!(host[2].matches.as_deref(), Some("etcd/server-cp1"));
    }

    #[test]
    fn the_probe_never_prints_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("both.pem");
        std::fs::write(
            &f,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nSECRET\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let cmd = probe_command(&[f.display().to_string(), "/nonexistent.crt".into()]);
        assert!(cmd.read_only);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.line(false))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("SECRET") && !text.contains("PRIVATE"), "{text}");
        assert!(text.contains("AAAA"));
        assert!(!text.contains("nonexistent"));
    }
}

/// The names in `names` that are not in `known` (leaf path stems such as `etcd/server-cp1`).
pub fn unknown_names(names: &[String], known: &[String]) -> Vec<String> {
    names.iter().filter(|n| !known.contains(n)).cloned().collect()
}

#[cfg(test)]
mod name_tests {
    #[test]
    fn unknown_names_are_listed() {
        let known = vec!["etcd/server-cp1".to_string(), "etcd/peer-cp1".to_string()];
        let names = vec![
            "etcd/server-cp1".to_string(),
            "etcd/ca".to_string(),
            "server-cp9".to_string(),
        ];
        assert_eq!(super::unknown_names(&names, &known), ["etcd/ca", "server-cp9"]);
    }
}
