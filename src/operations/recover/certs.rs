//! R2.3: before anything is restored, every target member's etcd server and peer certificates
//! must carry its address (and 127.0.0.1, for local clients) as SANs and be issued by the etcd CA
//! in hactl's state directory. R2.3's uploads then place exactly these files on the hosts (their
//! postcondition compares sha256), so checking the local files checks what the members will use.
//!
//! Invariant: a certificate that fails is re-issued only from the CA in the state directory
//! (deterministically: the same request `hactl up` makes), never from anything on a host; a
//! failure that re-issuing cannot fix refuses (exit 2) before any change. Keys are never printed.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use crate::inventory::Inventory;
use crate::pki::{self, Pki};

/// One certificate that does not cover its member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertProblem {
    /// `etcd/server-cp1`.
    pub name: String,
    pub cert_path: std::path::PathBuf,
    pub what: String,
}

impl std::fmt::Display for CertProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.name, self.cert_path.display(), self.what)
    }
}

/// Pure over the PKI's PEM text: what is wrong with the targets' server and peer certificates.
pub fn problems(pki: &Pki, inv: &Inventory, targets: &[String]) -> Vec<CertProblem> {
    let mut out = Vec::new();
    let ca = pki.etcd_ca_pem();
    for name in targets {
        let Some(host) = inv.host(name) else {
            continue;
        };
        for (kind, files) in [("server", pki.etcd_server(name)), ("peer", pki.etcd_peer(name))] {
            let cert_name = format!("etcd/{kind}-{name}");
            let Some(files) = files else {
                out.push(CertProblem {
                    name: cert_name,
                    cert_path: pki.dir.join(format!("etcd/{kind}-{name}.crt")),
                    what: "missing".into(),
                });
                continue;
            };
            let problem = |what: String| CertProblem {
                name: cert_name.clone(),
                cert_path: files.cert_path.clone(),
                what,
            };
            let info = match pki::inspect(&files.cert_pem) {
                Ok(i) => i,
                Err(e) => {
                    out.push(problem(format!("unreadable: {e}")));
                    continue;
                }
            };
            let want: [IpAddr; 2] = [host.address, IpAddr::V4(Ipv4Addr::LOCALHOST)];
            let missing: Vec<String> = want
                .iter()
                .map(|ip| ip.to_string())
                .filter(|ip| !info.sans.contains(ip))
                .collect();
            if !missing.is_empty() {
                out.push(problem(format!(
                    "its SANs [{}] lack {} ({name}'s address and the local client address)",
                    info.sans.join(", "),
                    missing.join(" and ")
                )));
            }
            match pki::is_signed_by(&files.cert_pem, ca) {
                Ok(true) => {}
                Ok(false) => out.push(problem(format!(
                    "issued by {:?}, not by the etcd CA {}",
                    info.issuer_cn,
                    pki.etcd_ca().cert_path.display()
                ))),
                Err(e) => out.push(problem(format!("cannot check its issuer: {e}"))),
            }
        }
    }
    out
}

/// R2.3 on the operator machine: checks the targets' certificates; re-issues the ones that fail
/// from the etcd CA in `pki_dir` (the failing certificate is moved aside to
/// `<cert>.hactl-pre-<run>`, then [`pki::ensure`] issues it as `hactl up` would) and checks again.
/// Returns the PKI to use and one line per re-issued certificate, or the refusal text.
pub fn ensure_member_certs(
    pki_dir: &Path,
    inv: &Inventory,
    targets: &[String],
    run: &str,
    pki: Pki,
) -> Result<(Pki, Vec<String>), String> {
    let found = problems(&pki, inv, targets);
    if found.is_empty() {
        return Ok((pki, Vec::new()));
    }
    for p in &found {
        if p.cert_path.exists() {
            let aside = format!("{}.hactl-pre-{run}", p.cert_path.display());
            if let Err(e) = fs_err::rename(&p.cert_path, &aside) {
                return Err(format!(
                    "R2.3: {p}; moving it aside to re-issue it failed: {e}. Nothing was changed on the hosts"
                ));
            }
        }
    }
    let pki = pki::ensure(pki_dir, inv, time::OffsetDateTime::now_utc()).map_err(|e| {
        format!(
            "R2.3: re-issuing from the etcd CA in {} failed: {e}. Nothing was changed on the hosts",
            pki_dir.display()
        )
    })?;
    let left = problems(&pki, inv, targets);
    if !left.is_empty() {
        let list: Vec<String> = left.iter().map(|p| p.to_string()).collect();
        return Err(format!(
            "R2.3: the etcd certificates do not cover the members even after re-issuing them from the CA in {}: {}. \
             Nothing was changed on the hosts. Restore {} from the backup bundle taken with the cluster's \
             snapshots (the CA there must be the one the members trust), then run again",
            pki_dir.display(),
            list.join("; "),
            pki_dir.display()
        ));
    }
    Ok((
        pki,
        found
            .iter()
            .map(|p| format!("R2.3: re-issued {} from the etcd CA: it was {}", p.name, p.what))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory(state: &Path) -> Inventory {
        let yaml = format!(
            concat!(
                "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  ssh:\n    agent: true\n",
                "  hosts:\n",
                "    - {{ name: cp1, address: 10.0.0.11, roles: [etcd] }}\n",
                "    - {{ name: cp2, address: 10.0.0.12, roles: [etcd] }}\n",
                "    - {{ name: cp3, address: 10.0.0.13, roles: [etcd] }}\n",
                "  stateDir: {}\n",
            ),
            state.display()
        );
        crate::inventory::load_str(Path::new("c.yaml"), &yaml).unwrap()
    }

    fn targets() -> Vec<String> {
        ["cp1", "cp2", "cp3"].map(String::from).to_vec()
    }

    #[test]
    fn certificates_from_the_state_dir_cover_every_member() {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path());
        let pki = pki::ensure(&dir.path().join("pki"), &inv, time::OffsetDateTime::now_utc()).unwrap();
        assert_eq!(problems(&pki, &inv, &targets()), vec![]);
    }

    #[test]
    fn a_certificate_for_another_address_or_from_another_ca_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path());
        let now = time::OffsetDateTime::now_utc();
        let mut pki = pki::ensure(&dir.path().join("pki"), &inv, now).unwrap();
        // cp1's server certificate swapped for cp2's: it lacks 10.0.0.11.
        let cp2 = pki.etcd_server("cp2").unwrap().cert_pem.clone();
        let other = tempfile::tempdir().unwrap();
        let foreign = pki::ensure(&other.path().join("pki"), &inventory(other.path()), now).unwrap();
        let foreign_peer = foreign.etcd_peer("cp3").unwrap().cert_pem.clone();
        for e in &mut pki.entries {
            if e.name == "etcd/server-cp1" {
                e.files.cert_pem = cp2.clone();
            }
            if e.name == "etcd/peer-cp3" {
                e.files.cert_pem = foreign_peer.clone();
            }
        }
        let got = problems(&pki, &inv, &targets());
        assert_eq!(got.len(), 2, "{got:#?}");
        assert_eq!(got[0].name, "etcd/server-cp1");
        assert!(got[0].what.contains("lack 10.0.0.11"), "{}", got[0]);
        assert_eq!(got[1].name, "etcd/peer-cp3");
        assert!(got[1].what.contains("not by the etcd CA"), "{}", got[1]);
        // Only the targets are checked.
        assert_eq!(problems(&pki, &inv, &["cp2".to_string()]), vec![]);
    }

    #[test]
    fn a_failing_certificate_is_reissued_from_the_ca_in_the_state_dir() {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path());
        let pki_dir = dir.path().join("pki");
        let pki = pki::ensure(&pki_dir, &inv, time::OffsetDateTime::now_utc()).unwrap();
        let ca_before = pki.etcd_ca_pem().to_string();
        // The PKI as loaded holds a certificate for the wrong member (as a hand-copied file
        // would): R2.3 moves it aside and issues cp1's again from the same CA.
        let mut bad = pki.clone();
        let cp2 = pki.etcd_server("cp2").unwrap().cert_pem.clone();
        let cp1_path = pki.etcd_server("cp1").unwrap().cert_path.clone();
        std::fs::write(&cp1_path, &cp2).unwrap();
        for e in &mut bad.entries {
            if e.name == "etcd/server-cp1" {
                e.files.cert_pem = cp2.clone();
            }
        }
        let (fixed, lines) = ensure_member_certs(&pki_dir, &inv, &targets(), "r1", bad).unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("R2.3: re-issued etcd/server-cp1 from the etcd CA"),
            "{}",
            lines[0]
        );
        assert_eq!(problems(&fixed, &inv, &targets()), vec![]);
        assert_eq!(fixed.etcd_ca_pem(), ca_before, "the CA is never replaced");
        assert!(Path::new(&format!("{}.hactl-pre-r1", cp1_path.display())).exists());
        // Nothing to do the second time.
        let (_, lines) = ensure_member_certs(&pki_dir, &inv, &targets(), "r1", fixed).unwrap();
        assert!(lines.is_empty());
    }
}
