//! The cluster's own known_hosts file, in OpenSSH format so `ssh -o UserKnownHostsFile=<it>` reads it.
//!
//! Lines are `addr keytype base64` for port 22 and `[addr]:port keytype base64` otherwise.
//! Trust on first use: an unknown host's key is recorded; a changed key is refused unless the
//! user named the host in `--accept-new-host-key`, and then its line is replaced.
//!
//! Invariants: one lock guards the map and the file, so concurrent connects never lose a line;
//! every write goes to a temporary file in the same directory, created 0600, then renamed over
//! the file (readers see the old or the new file, never half of one).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use russh::keys::ssh_key::{HashAlg, PublicKey};

use super::Error;

/// What the file says about a presented key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyCheck {
    /// The key is the one recorded for this address and port.
    Match,
    /// Nothing is recorded for this address and port.
    Unknown,
    /// Another key is recorded: the host was re-installed, or someone is in the middle.
    Changed { known: PublicKey },
}

/// What [`KnownHosts::verify`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The key matched the recorded one.
    Known,
    /// The host was unknown; its key is now recorded.
    Recorded,
    /// The key had changed and the user accepted the new one; it replaced the old line.
    Replaced { old: PublicKey },
    /// The key changed and the host was not in the accept list: refuse it.
    Refused { known: PublicKey },
}

/// One line of the file: comments and lines hactl does not understand are kept as they are.
#[derive(Debug, Clone)]
enum Line {
    Entry { hosts: Vec<String>, key: PublicKey },
    Other(String),
}

#[derive(Debug)]
struct State {
    lines: Vec<Line>,
    /// `host_token(addr, port)` → keys recorded for it (several only if the user added them).
    by_host: BTreeMap<String, Vec<PublicKey>>,
}

/// A known_hosts file shared by all connections of a run.
#[derive(Debug)]
pub struct KnownHosts {
    path: PathBuf,
    state: Mutex<State>,
    /// Opened by a read-only command: what would be recorded is kept in memory (and listed by
    /// [`KnownHosts::unrecorded`]), never written.
    read_only: bool,
}

/// The host field OpenSSH uses: bare address for port 22, else `[addr]:port`.
pub fn host_token(addr: IpAddr, port: u16) -> String {
    if port == 22 {
        addr.to_string()
    } else {
        format!("[{addr}]:{port}")
    }
}

/// `SHA256:…`, as `ssh-keygen -l` prints it.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

impl KnownHosts {
    /// Reads `path`; a missing file is an empty one (created on the first record).
    pub fn load(path: impl Into<PathBuf>) -> Result<KnownHosts, Error> {
        let path = path.into();
        let text = match crate::bounded::read_to_string(&path, crate::bounded::TEXT) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(Error::KnownHostsRead { path, source }),
        };
        let mut lines = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            lines.push(parse_line(raw).map_err(|reason| Error::KnownHostsParse {
                path: path.clone(),
                line: i + 1,
                reason,
            })?);
        }
        let state = State {
            by_host: index(&lines),
            lines,
        };
        Ok(KnownHosts {
            path,
            state: Mutex::new(state),
            read_only: false,
        })
    }

    /// [`KnownHosts::load`] for a read-only command: keys are checked as usual, an unknown
    /// host's key is trusted for this run only and never written (the file is not created).
    pub fn load_read_only(path: impl Into<PathBuf>) -> Result<KnownHosts, Error> {
        let mut k = KnownHosts::load(path)?;
        k.read_only = true;
        Ok(k)
    }

    /// The keys a read-only run trusted on first use without recording them, as the
    /// `host keytype SHA256:…` lines the operator compares (host order of the file).
    pub fn unrecorded(&self) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let written = match crate::bounded::read_to_string(&self.path, crate::bounded::TEXT) {
            Ok(t) => index(&t.lines().filter_map(|l| parse_line(l).ok()).collect::<Vec<_>>()),
            Err(_) => BTreeMap::new(),
        };
        let mut out = Vec::new();
        for (host, keys) in &state.by_host {
            for key in keys {
                if !written.get(host).is_some_and(|w| w.contains(key)) {
                    out.push(format!("{host} {} {}", key.algorithm(), fingerprint(key)));
                }
            }
        }
        out
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this run only reads the file ([`KnownHosts::load_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Compares `key` with what is recorded for `addr:port`. Reads only.
    pub fn check(&self, addr: IpAddr, port: u16, key: &PublicKey) -> HostKeyCheck {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        check_in(&state, &host_token(addr, port), key)
    }

    /// Checks `key` and, under the same lock, records it when unknown or replaces the old key
    /// when it changed and `accept_changed` is true.
    pub fn verify(
        &self,
        addr: IpAddr,
        port: u16,
        key: &PublicKey,
        accept_changed: bool,
    ) -> Result<Verdict, Error> {
        let token = host_token(addr, port);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match check_in(&state, &token, key) {
            HostKeyCheck::Match => Ok(Verdict::Known),
            HostKeyCheck::Unknown => {
                self.write_with(&mut state, |lines| lines.push(entry(&token, key)))?;
                Ok(Verdict::Recorded)
            }
            HostKeyCheck::Changed { known } if accept_changed => {
                self.write_with(&mut state, |lines| {
                    remove_host(lines, &token);
                    lines.push(entry(&token, key));
                })?;
                Ok(Verdict::Replaced { old: known })
            }
            HostKeyCheck::Changed { known } => Ok(Verdict::Refused { known }),
        }
    }

    /// Records in this (writable) file every key `seen` (a read-only run's) holds that this
    /// file lacks, replacing the line of a host whose changed key that run accepted; returns
    /// the `host keytype SHA256:…` lines recorded.
    pub fn pin_from(&self, seen: &KnownHosts) -> Result<Vec<String>, Error> {
        let theirs = {
            let s = seen.state.lock().unwrap_or_else(|p| p.into_inner());
            s.by_host.clone()
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let changed: Vec<(String, Vec<PublicKey>)> = theirs
            .into_iter()
            .filter(|(host, keys)| state.by_host.get(host) != Some(keys))
            .filter(|(host, keys)| {
                // Only hosts the file lacks or whose key the run replaced (a line the user
                // added by hand beside ours stays).
                !keys
                    .iter()
                    .all(|k| state.by_host.get(host).is_some_and(|have| have.contains(k)))
            })
            .collect();
        if changed.is_empty() {
            return Ok(vec![]);
        }
        self.write_with(&mut state, |lines| {
            for (host, keys) in &changed {
                remove_host(lines, host);
                for key in keys {
                    lines.push(entry(host, key));
                }
            }
        })?;
        Ok(changed
            .iter()
            .flat_map(|(host, keys)| {
                keys.iter()
                    .map(move |k| format!("{host} {} {}", k.algorithm(), fingerprint(k)))
            })
            .collect())
    }

    /// The lines of this file (as this run knows it) for `token` (`addr` or `[addr]:port`).
    pub fn lines_for(&self, token: &str) -> String {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .by_host
            .get(token)
            .map(|keys| {
                keys.iter()
                    .map(|k| format!("{}\n", render_line(&entry(token, k))))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Applies `change` to a copy of the lines, writes the file, and only then updates the map.
    fn write_with(&self, state: &mut State, change: impl FnOnce(&mut Vec<Line>)) -> Result<(), Error> {
        let mut lines = state.lines.clone();
        change(&mut lines);
        let mut text = String::new();
        for line in &lines {
            text.push_str(&render_line(line));
            text.push('\n');
        }
        if self.read_only {
            state.by_host = index(&lines);
            state.lines = lines;
            return Ok(());
        }
        write_atomically(&self.path, text.as_bytes()).map_err(|source| Error::KnownHostsWrite {
            path: self.path.clone(),
            source,
        })?;
        state.by_host = index(&lines);
        state.lines = lines;
        Ok(())
    }
}

fn check_in(state: &State, token: &str, key: &PublicKey) -> HostKeyCheck {
    match state.by_host.get(token) {
        None => HostKeyCheck::Unknown,
        Some(keys) if keys.iter().any(|k| k.key_data() == key.key_data()) => HostKeyCheck::Match,
        Some(keys) => HostKeyCheck::Changed {
            known: keys[0].clone(),
        },
    }
}

fn entry(token: &str, key: &PublicKey) -> Line {
    let mut key = key.clone();
    key.set_comment("");
    Line::Entry {
        hosts: vec![token.to_string()],
        key,
    }
}

/// Drops `token` from every line; a line left without hosts goes.
fn remove_host(lines: &mut Vec<Line>, token: &str) {
    lines.retain_mut(|line| match line {
        Line::Entry { hosts, .. } => {
            hosts.retain(|h| h != token);
            !hosts.is_empty()
        }
        Line::Other(_) => true,
    });
}

fn index(lines: &[Line]) -> BTreeMap<String, Vec<PublicKey>> {
    let mut map: BTreeMap<String, Vec<PublicKey>> = BTreeMap::new();
    for line in lines {
        if let Line::Entry { hosts, key } = line {
            for h in hosts {
                map.entry(h.clone()).or_default().push(key.clone());
            }
        }
    }
    map
}

/// Comments, blank lines, hashed hosts (`|1|…`) and markers (`@revoked`) are kept verbatim but
/// not matched: hactl writes plain addresses only.
fn parse_line(raw: &str) -> Result<Line, String> {
    let t = raw.trim();
    if t.is_empty() || t.starts_with('#') || t.starts_with('@') || t.starts_with('|') {
        return Ok(Line::Other(raw.to_string()));
    }
    let (hosts, key) = t
        .split_once(char::is_whitespace)
        .ok_or("expected `host keytype base64`")?;
    let key = PublicKey::from_openssh(key.trim()).map_err(|e| format!("bad key: {e}"))?;
    Ok(Line::Entry {
        hosts: hosts.split(',').map(str::to_string).collect(),
        key,
    })
}

fn render_line(line: &Line) -> String {
    match line {
        Line::Other(raw) => raw.clone(),
        Line::Entry { hosts, key } => {
            // Encoding a key that was decoded cannot fail; keep the line out rather than panic.
            let key = key.to_openssh().unwrap_or_default();
            format!("{} {}", hosts.join(","), key.trim_end())
        }
    }
}

/// Writes `bytes` to `<path>.tmp` (0600, created fresh) and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const KEY_A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIByFbOEHrajRY2wtGea+3ozlo3uolhtwT0BikLzSuv6G";
    const KEY_B: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID9UUFWIrF1bijwLXwOqaa0SmbsH4lsxkdWCw46NE7Jm";

    fn key(s: &str) -> PublicKey {
        PublicKey::from_openssh(s).unwrap()
    }

    fn addr() -> IpAddr {
        "10.0.0.1".parse().unwrap()
    }

    #[test]
    fn host_token_follows_openssh() {
        assert_eq!(host_token(addr(), 22), "10.0.0.1");
        assert_eq!(host_token(addr(), 2222), "[10.0.0.1]:2222");
        assert_eq!(host_token("fd00::1".parse().unwrap(), 22), "fd00::1");
        assert_eq!(host_token("fd00::1".parse().unwrap(), 2222), "[fd00::1]:2222");
    }

    #[test]
    fn unknown_host_is_recorded_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/known_hosts");
        let kh = KnownHosts::load(&path).unwrap();
        assert_eq!(kh.check(addr(), 2222, &key(KEY_A)), HostKeyCheck::Unknown);
        assert_eq!(
            kh.verify(addr(), 2222, &key(KEY_A), false).unwrap(),
            Verdict::Recorded
        );
        assert_eq!(kh.check(addr(), 2222, &key(KEY_A)), HostKeyCheck::Match);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("[10.0.0.1]:2222 {KEY_A}\n"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A fresh load sees the same thing.
        let again = KnownHosts::load(&path).unwrap();
        assert_eq!(again.check(addr(), 2222, &key(KEY_A)), HostKeyCheck::Match);
        // Port 22 is a different entry.
        assert_eq!(again.check(addr(), 22, &key(KEY_A)), HostKeyCheck::Unknown);
    }

    #[test]
    fn a_read_only_run_trusts_a_new_key_for_itself_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/known_hosts");
        let kh = KnownHosts::load_read_only(&path).unwrap();
        assert_eq!(
            kh.verify(addr(), 2222, &key(KEY_A), false).unwrap(),
            Verdict::Recorded
        );
        assert_eq!(kh.check(addr(), 2222, &key(KEY_A)), HostKeyCheck::Match);
        assert!(!path.exists() && !dir.path().join("state").exists());
        let lines = kh.unrecorded();
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("[10.0.0.1]:2222 ssh-ed25519 SHA256:"),
            "{lines:?}"
        );
        // A recorded key is not listed; a changed key is still refused.
        KnownHosts::load(&path)
            .unwrap()
            .verify(addr(), 22, &key(KEY_A), false)
            .unwrap();
        let before = std::fs::read(&path).unwrap();
        let kh = KnownHosts::load_read_only(&path).unwrap();
        assert!(matches!(
            kh.verify(addr(), 22, &key(KEY_B), false).unwrap(),
            Verdict::Refused { .. }
        ));
        kh.verify(addr(), 22, &key(KEY_B), true).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(kh.unrecorded().iter().any(|l| l.starts_with("10.0.0.1 ")));
    }

    #[test]
    fn keys_a_read_only_run_saw_are_pinned_once_the_command_may_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        let seen = KnownHosts::load_read_only(&path).unwrap();
        seen.verify(addr(), 22, &key(KEY_A), false).unwrap();
        assert!(!path.exists());
        let file = KnownHosts::load(&path).unwrap();
        assert_eq!(file.pin_from(&seen).unwrap().len(), 1);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("10.0.0.1 {KEY_A}\n")
        );
        assert_eq!(file.pin_from(&seen).unwrap(), Vec::<String>::new());
        assert_eq!(file.lines_for("10.0.0.1"), format!("10.0.0.1 {KEY_A}\n"));
        // A changed key the read-only run accepted replaces the line.
        let seen = KnownHosts::load_read_only(&path).unwrap();
        seen.verify(addr(), 22, &key(KEY_B), true).unwrap();
        KnownHosts::load(&path).unwrap().pin_from(&seen).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("10.0.0.1 {KEY_B}\n")
        );
    }

    #[test]
    fn changed_key_is_refused_and_the_file_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        std::fs::write(&path, format!("# kept\n10.0.0.1 {KEY_A}\n")).unwrap();
        let kh = KnownHosts::load(&path).unwrap();
        assert_eq!(
            kh.check(addr(), 22, &key(KEY_B)),
            HostKeyCheck::Changed { known: key(KEY_A) }
        );
        assert_eq!(
            kh.verify(addr(), 22, &key(KEY_B), false).unwrap(),
            Verdict::Refused { known: key(KEY_A) }
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("# kept\n10.0.0.1 {KEY_A}\n")
        );
    }

    #[test]
    fn accepted_changed_key_replaces_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        std::fs::write(
            &path,
            format!("# kept\n10.0.0.1,10.0.0.9 {KEY_A}\n[10.0.0.2]:2222 {KEY_A}\n"),
        )
        .unwrap();
        let kh = KnownHosts::load(&path).unwrap();
        assert_eq!(
            kh.verify(addr(), 22, &key(KEY_B), true).unwrap(),
            Verdict::Replaced { old: key(KEY_A) }
        );
        assert_eq!(kh.check(addr(), 22, &key(KEY_B)), HostKeyCheck::Match);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("# kept\n10.0.0.9 {KEY_A}\n[10.0.0.2]:2222 {KEY_A}\n10.0.0.1 {KEY_B}\n")
        );
    }

    #[test]
    fn concurrent_records_keep_every_host() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        let kh = std::sync::Arc::new(KnownHosts::load(&path).unwrap());
        let threads: Vec<_> = (0..16u16)
            .map(|i| {
                let kh = kh.clone();
                std::thread::spawn(move || kh.verify(addr(), 2000 + i, &key(KEY_A), false).unwrap())
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), Verdict::Recorded);
        }
        let again = KnownHosts::load(&path).unwrap();
        for i in 0..16u16 {
            assert_eq!(again.check(addr(), 2000 + i, &key(KEY_A)), HostKeyCheck::Match);
        }
    }

    #[test]
    fn garbage_line_is_reported_with_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        std::fs::write(&path, format!("10.0.0.1 {KEY_A}\nnot-a-line\n")).unwrap();
        let err = KnownHosts::load(&path).unwrap_err().to_string();
        assert!(err.contains("known_hosts:2: invalid known_hosts line"), "{err}");
    }
}
