//! Backups that leave the cluster (`spec.backup.remote`): an SSH/SFTP destination the leader's
//! backup timer pushes each new snapshot and its checksum to.
//!
//! The pieces: a key pair of its own for the pushes (`<state>/backup-remote/id_ed25519`, 0600,
//! generated once), installed on every etcd host at [`HOST_KEY`] (0600, root only) beside the
//! remote's pinned host key ([`HOST_KNOWN_HOSTS`], copied from the cluster's known_hosts, so the
//! hosts verify the remote as hactl does); the public key authorized on the remote by `hactl up`
//! (through hactl's own SSH to it, as the remote's user) for SFTP in the directory and nothing
//! else, and revoked there by `hactl reset`; the read-only listing `status` and `recover --auto`
//! use; the write probe `check` runs.
//!
//! Invariants: the private key never leaves the state directory except to the etcd hosts' 0600
//! file, and is never printed; the push key's authorization is `restrict` plus a forced command
//! that runs the remote's sftp-server started in the directory, so it opens no shell and runs no
//! command (docs/how-to/backups.md says why, and how to confine it to the directory with a
//! chroot); the remote is reached only at the address the inventory gives, with its key
//! verified; a listing only reads.

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;

use crate::inventory::BackupRemote;
use crate::plan::RemoteCommand;
use crate::state::StateDir;

/// The push key on an etcd host.
pub const HOST_DIR: &str = "/etc/hactl/backup-remote";
pub const HOST_KEY: &str = "/etc/hactl/backup-remote/id_ed25519";
pub const HOST_KNOWN_HOSTS: &str = "/etc/hactl/backup-remote/known_hosts";
/// The key pair in the state directory.
pub const STATE_KEY: &str = "backup-remote/id_ed25519";

/// The push key pair: the private key (OpenSSH format) and the public key line.
#[derive(Clone)]
pub struct PushKey {
    pub private_openssh: String,
    pub public_line: String,
}

impl std::fmt::Debug for PushKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushKey")
            .field("public_line", &self.public_line)
            .finish_non_exhaustive()
    }
}

/// What the backup phase installs on the etcd hosts for the pushes.
#[derive(Debug, Clone)]
pub struct HostFiles {
    pub key: PushKey,
    /// known_hosts lines for the remote, from the cluster's known_hosts.
    pub known_hosts: String,
}

/// Loads the push key pair from the state directory, generating it on first use.
pub fn ensure_key(state: &StateDir, cluster: &str) -> anyhow::Result<PushKey> {
    let (key, new) = load_or_generate(&state.file(STATE_KEY), cluster)?;
    if new {
        state.write_secret(STATE_KEY, key.private_openssh.as_bytes())?;
    }
    Ok(key)
}

/// [`ensure_key`] for a read-only command: the stored key, or one made in memory for this run
/// only (never written).
pub fn preview_key(view: &crate::state::StateView, cluster: &str) -> anyhow::Result<PushKey> {
    Ok(load_or_generate(&view.file(STATE_KEY), cluster)?.0)
}

/// The key at `path`, or a new one (`true`) when there is none.
fn load_or_generate(path: &std::path::Path, cluster: &str) -> anyhow::Result<(PushKey, bool)> {
    use russh::keys::ssh_key::{private::Ed25519Keypair, LineEnding, PrivateKey};
    let new = !path.exists();
    let key = if !new {
        let text = crate::bounded::read_to_string(path, crate::bounded::TEXT)?;
        PrivateKey::from_openssh(&text)
            .with_context(|| format!("{} is not an OpenSSH private key", path.display()))?
    } else {
        let mut seed = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut seed);
        let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
        key.set_comment(format!("hactl backup push {cluster}"));
        key
    };
    let private_openssh = key
        .to_openssh(LineEnding::LF)
        .context("failed to encode the push key")?
        .to_string();
    let public_line = key
        .public_key()
        .to_openssh()
        .context("failed to encode the push key")?;
    Ok((
        PushKey {
            private_openssh,
            public_line,
        },
        new,
    ))
}

/// [`known_hosts_lines`] from the keys a run checked (recorded or seen for the first time).
pub fn known_hosts_lines_of(known: &crate::ssh::KnownHosts, remote: &BackupRemote) -> String {
    known.lines_for(&host_token(remote))
}

/// The remote's lines of the cluster's known_hosts (OpenSSH format: `addr` for port 22,
/// `[addr]:port` otherwise); empty when hactl has not connected to it yet.
pub fn known_hosts_lines(known_hosts: &std::path::Path, remote: &BackupRemote) -> String {
    let token = host_token(remote);
    crate::bounded::read_to_string(known_hosts, crate::bounded::TEXT)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|h| h.split(',').any(|h| h == token))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

fn host_token(remote: &BackupRemote) -> String {
    if remote.ssh.port == 22 {
        remote.ssh.address.to_string()
    } else {
        format!("[{}]:{}", remote.ssh.address, remote.ssh.port)
    }
}

/// Where the remote's sshd names its sftp server (`Subsystem sftp <path>`).
pub const SSHD_CONFIG: &str = "/etc/ssh/sshd_config";

/// The key's base64 blob (the second word of `ssh-ed25519 AAAA… comment`): what identifies its
/// lines in an authorized_keys file, whatever options precede it.
fn key_blob(public_line: &str) -> &str {
    public_line.split_whitespace().nth(1).unwrap_or_default()
}

/// On the remote, as its user: the push key authorized for SFTP only, in the directory
/// (`restrict,command="<sftp-server> -d <dir>" <key>`: no shell, no command, no pty, no
/// forwarding; the sftp server found from sshd_config's `Subsystem sftp` line or where the
/// distributions install it), replacing any other line of that key (an older hactl wrote
/// `restrict <key>`, which gave a shell); and the directory there, 0700. Prints `changed` when
/// it changed anything.
pub fn authorize_command(remote: &BackupRemote, public_line: &str) -> RemoteCommand {
    authorize_command_with(remote, public_line, SSHD_CONFIG)
}

fn authorize_command_with(remote: &BackupRemote, public_line: &str, sshd_config: &str) -> RemoteCommand {
    const SCRIPT: &str = r#"set -eu
pub=$1; blob=$2; dir=$3; config=$4; changed=
sftp=
for c in $(sed -n 's/^[[:space:]]*[Ss]ubsystem[[:space:]][[:space:]]*sftp[[:space:]][[:space:]]*\([^[:space:]]*\).*/\1/p' "$config" 2>/dev/null) \
  /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server /usr/libexec/sftp-server /usr/lib/sftp-server; do
  case $c in /*) if [ -x "$c" ]; then sftp=$c; break; fi ;; esac
done
[ -n "$sftp" ] || { echo "no sftp-server program here (not named by the Subsystem sftp line of $config, nor in /usr/lib/openssh, /usr/libexec/openssh, /usr/lib/ssh, /usr/libexec): install the OpenSSH SFTP server (Debian: openssh-sftp-server)" >&2; exit 1; }
line="restrict,command=\"$sftp -d $dir\" $pub"
f=$HOME/.ssh/authorized_keys
umask 077
mkdir -p "$HOME/.ssh"
touch "$f"
if ! grep -qxF -- "$line" "$f"; then
  awk -v b="$blob" '{ for (i = 1; i <= NF; i++) if ($i == b) next; print }' "$f" > "$f.hactl-tmp"
  printf '%s\n' "$line" >> "$f.hactl-tmp"
  chmod --reference="$f" "$f.hactl-tmp" 2>/dev/null || chmod 600 "$f.hactl-tmp"
  mv -f "$f.hactl-tmp" "$f"
  changed=1
fi
if [ ! -d "$dir" ]; then mkdir -p "$dir"; changed=1; fi
chmod 700 "$dir"
[ -z "$changed" ] || echo changed"#;
    RemoteCommand::new([
        "sh",
        "-c",
        SCRIPT,
        "hactl-backup-remote-authorize",
        public_line,
        key_blob(public_line),
        remote.path.as_str(),
        sshd_config,
    ])
}

/// On the remote, as its user (what `hactl reset` runs): every line of the remote user's
/// authorized_keys that carries the push key removed (key material is removed, never moved);
/// the rest of the file kept as it was. Prints `removed` when there was one.
pub fn revoke_command(public_line: &str) -> RemoteCommand {
    const SCRIPT: &str = r#"set -eu
blob=$1; f=$HOME/.ssh/authorized_keys
[ -f "$f" ] || exit 0
awk -v b="$blob" '{ for (i = 1; i <= NF; i++) if ($i == b) found = 1 } END { exit !found }' "$f" || exit 0
umask 077
awk -v b="$blob" '{ for (i = 1; i <= NF; i++) if ($i == b) next; print }' "$f" > "$f.hactl-tmp"
chmod --reference="$f" "$f.hactl-tmp" 2>/dev/null || chmod 600 "$f.hactl-tmp"
mv -f "$f.hactl-tmp" "$f"
echo removed"#;
    RemoteCommand::new([
        "sh",
        "-c",
        SCRIPT,
        "hactl-backup-remote-revoke",
        key_blob(public_line),
    ])
}

/// Read-only on the remote, as its user: prints `authorized` when its authorized_keys carries
/// the push key (what `reset` asks before it plans [`revoke_command`]).
pub fn authorized_command(public_line: &str) -> RemoteCommand {
    const SCRIPT: &str = r#"f=$HOME/.ssh/authorized_keys
[ -f "$f" ] || exit 0
if awk -v b="$1" '{ for (i = 1; i <= NF; i++) if ($i == b) found = 1 } END { exit !found }' "$f"; then echo authorized; fi"#;
    RemoteCommand::read_only([
        "sh",
        "-c",
        SCRIPT,
        "hactl-backup-remote-authorized",
        key_blob(public_line),
    ])
}

/// The push key's public line, from its file in the state directory (`key_file`, at
/// [`STATE_KEY`]); `None` when there is none (the key is only made by `up` with
/// `spec.backup.remote`). Never generates one.
pub fn existing_public_line(key_file: &std::path::Path, cluster: &str) -> anyhow::Result<Option<String>> {
    if !key_file.exists() {
        return Ok(None);
    }
    Ok(Some(load_or_generate(key_file, cluster)?.0.public_line))
}

/// Read-only on the remote: the cluster's snapshots there, newest first, one per line:
/// `file <name> <size> <mtime> <sha256 or -> <revision or ->` (the checksum from
/// `<name>.sha256`, the revision from `<name>.json`, both pushed beside the file).
pub fn list_command(remote: &BackupRemote, cluster: &str) -> RemoteCommand {
    const SCRIPT: &str = r#"dir=$1; cluster=$2
echo "now $(date +%s)"
[ -d "$dir" ] || exit 0
ls -1 "$dir" | grep -E "^$cluster-[0-9]{8}T[0-9]{6}Z\.db\$" | sort -r | while read -r f; do
  sha=-; [ -f "$dir/$f.sha256" ] && sha=$(cut -d' ' -f1 < "$dir/$f.sha256")
  rev=-; [ -f "$dir/$f.json" ] && rev=$(sed -n 's/.*"revision":\([0-9]*\).*/\1/p' "$dir/$f.json")
  echo "file $f $(stat -c '%s %Y' "$dir/$f") $sha ${rev:--}"
done"#;
    RemoteCommand::read_only([
        "sh",
        "-c",
        SCRIPT,
        "hactl-backup-remote-list",
        remote.path.as_str(),
        cluster,
    ])
}

/// Write probe on the remote (what `check` runs): a file can be written in the directory and
/// removed again; a directory that does not exist yet is not created (`up` creates it): its
/// nearest existing parent must be writable instead.
pub fn write_probe(remote: &BackupRemote) -> RemoteCommand {
    const SCRIPT: &str = r#"dir=$1
if [ ! -d "$dir" ]; then
  p=$dir; while [ ! -d "$p" ]; do p=$(dirname "$p"); done
  [ -w "$p" ] || { echo "cannot create $dir: $p is not writable" >&2; exit 1; }
  exit 0
fi
t="$dir/.hactl-check-$$"
( umask 077; echo ok > "$t" ) 2>/dev/null || { echo "cannot write in $dir" >&2; exit 1; }
rm -f "$t""#;
    RemoteCommand::new([
        "sh",
        "-c",
        SCRIPT,
        "hactl-backup-remote-check",
        remote.path.as_str(),
    ])
}

/// One snapshot on the remote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteSnapshot {
    /// Absolute path on the remote.
    pub path: String,
    pub size: u64,
    /// Age by the remote's clock (its mtime to its now), seconds.
    pub age_seconds: i64,
    /// From `<file>.sha256`; None when the checksum file is missing (a push cut short).
    pub sha256: Option<String>,
    /// From `<file>.json` (the leader's `latest.json` of that snapshot).
    pub revision: Option<i64>,
}

/// Parses [`list_command`]'s output, newest first; only files with their checksum count.
pub fn parse_list(remote: &BackupRemote, text: &str) -> Vec<RemoteSnapshot> {
    let mut now = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("now") => now = f.next().and_then(|n| n.parse::<i64>().ok()),
            Some("file") => {
                let (Some(name), Some(size), Some(mtime), Some(sha)) =
                    (f.next(), f.next(), f.next(), f.next())
                else {
                    continue;
                };
                let (Ok(size), Ok(mtime)) = (size.parse::<u64>(), mtime.parse::<i64>()) else {
                    continue;
                };
                out.push(RemoteSnapshot {
                    path: format!("{}/{name}", remote.path),
                    size,
                    age_seconds: now.map(|n| (n - mtime).max(0)).unwrap_or(0),
                    sha256: (sha != "-").then(|| sha.to_string()),
                    revision: f.next().and_then(|r| r.parse().ok()),
                });
            }
            _ => {}
        }
    }
    out
}

/// The remote as `hactl status` shows it: the newest copy there and its age, or why it could not
/// be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteStatus {
    /// `user@address:path`.
    pub remote: String,
    pub newest: Option<RemoteSnapshot>,
    /// Copies of this cluster there (with their checksum).
    pub copies: usize,
    /// Why the remote could not be listed (`null` when it was).
    pub error: Option<String>,
}

/// Connects to the remote and lists it (read-only).
pub async fn list(
    state: crate::exec::connect::HostKeys<'_>,
    remote: &BackupRemote,
    cluster: &str,
    args: &crate::exec::connect::ConnectSettings,
) -> Result<Vec<RemoteSnapshot>, String> {
    let host = remote.host();
    let conns = crate::exec::connect::connect(state, &[&host], args).await;
    let t = match conns.get(crate::inventory::REMOTE_HOST_NAME) {
        Some(Ok(t)) => t.clone(),
        Some(Err(e)) => return Err(format!("cannot reach {}: {e}", remote.describe())),
        None => return Err(format!("cannot reach {}", remote.describe())),
    };
    let out = t
        .run(&list_command(remote, cluster))
        .await
        .map_err(|e| format!("cannot list {}: {e}", remote.describe()))?;
    if !out.success() {
        return Err(format!(
            "cannot list {}: {}",
            remote.describe(),
            out.stderr_str().trim()
        ));
    }
    Ok(parse_list(remote, &out.stdout_str())
        .into_iter()
        .filter(|s| s.sha256.is_some())
        .collect())
}

/// [`list`] as `status` shows it.
pub async fn status(
    state: crate::exec::connect::HostKeys<'_>,
    remote: &BackupRemote,
    cluster: &str,
    args: &crate::exec::connect::ConnectSettings,
) -> RemoteStatus {
    match list(state, remote, cluster, args).await {
        Ok(l) => RemoteStatus {
            remote: remote.describe(),
            copies: l.len(),
            newest: l.into_iter().next(),
            error: None,
        },
        Err(e) => RemoteStatus {
            remote: remote.describe(),
            newest: None,
            copies: 0,
            error: Some(e),
        },
    }
}

/// The status table's line for the remote.
pub fn table(s: &RemoteStatus) -> String {
    let what = match (&s.newest, &s.error) {
        (_, Some(e)) => e.clone(),
        (Some(n), None) => format!("{} ({} s old; {} copies)", n.path, n.age_seconds, s.copies),
        (None, None) => "no copy yet (the leader pushes after its next snapshot)".into(),
    };
    format!("  {:<10} {what}\n", "remote")
}

/// Where `recover --auto` copies a remote snapshot: `<state>/backups/fetched/backup-remote/`.
pub fn fetched_dir(state: &StateDir) -> PathBuf {
    state.file(
        std::path::Path::new("backups")
            .join("fetched")
            .join(crate::inventory::REMOTE_HOST_NAME),
    )
}

/// Copies a remote snapshot to [`fetched_dir`] (kept when it is already there with the same
/// sha256) and checks it against the sha256 pushed beside it.
pub async fn fetch(
    state: &StateDir,
    remote: &BackupRemote,
    snap: &RemoteSnapshot,
    args: &crate::exec::connect::ConnectSettings,
) -> anyhow::Result<PathBuf> {
    let sha256 = snap
        .sha256
        .as_deref()
        .with_context(|| format!("{} has no checksum beside it", snap.path))?;
    let name = std::path::Path::new(&snap.path)
        .file_name()
        .with_context(|| format!("{} names no file", snap.path))?;
    let dir = fetched_dir(state);
    let local = dir.join(name);
    if local.exists() && crate::snapshot::check_file(&local).is_ok_and(|c| c.sha256 == sha256) {
        return Ok(local);
    }
    let host = remote.host();
    let conns = crate::exec::connect::connect(state, &[&host], args).await;
    let t = match conns.get(crate::inventory::REMOTE_HOST_NAME) {
        Some(Ok(t)) => t.clone(),
        Some(Err(e)) => anyhow::bail!("cannot reach {}: {e}", remote.describe()),
        None => anyhow::bail!("cannot reach {}", remote.describe()),
    };
    let out = t
        .run(
            &RemoteCommand::read_only(["cat", snap.path.as_str()])
                .with_timeout(std::time::Duration::from_secs(900))
                .with_output_limit(crate::bounded::SNAPSHOT),
        )
        .await
        .with_context(|| format!("cannot read {} on {}", snap.path, remote.describe()))?;
    if !out.success() {
        anyhow::bail!(
            "cannot read {} on {}: {}",
            snap.path,
            remote.describe(),
            out.stderr_str().trim()
        );
    }
    fs_err::create_dir_all(&dir)?;
    crate::snapshot::write_atomically(&local, &out.stdout)?;
    let got = crate::snapshot::check_file(&local)?;
    if got.sha256 != sha256 {
        anyhow::bail!(
            "{} on {} arrived with sha256 {} but its checksum file names {sha256}",
            snap.path,
            remote.describe(),
            got.sha256
        );
    }
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote() -> BackupRemote {
        BackupRemote {
            ssh: crate::inventory::SshSpec {
                address: "10.0.0.30".parse().unwrap(),
                port: 22,
                user: "backup".into(),
                auth: crate::inventory::SshAuth::Agent,
                sudo: false,
                bastion: None,
                connect_timeout_secs: 10,
            },
            path: "/srv/etcd".into(),
            retention: 3,
        }
    }

    #[test]
    fn the_listing_keeps_only_checksummed_files_newest_first() {
        let text = "now 1000\nfile c-20261122T100000Z.db 4128 900 ab12 42\nfile c-20261122T090000Z.db 4128 400 - -\n";
        let l = parse_list(&remote(), text);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].path, "/srv/etcd/c-20261122T100000Z.db");
        assert_eq!((l[0].age_seconds, l[0].sha256.as_deref()), (100, Some("ab12")));
        assert_eq!(
            (l[0].revision, l[1].sha256.as_deref(), l[1].revision),
            (Some(42), None, None)
        );
        assert!(list_command(&remote(), "c").read_only);
        let probe = write_probe(&remote());
        let out = std::process::Command::new("sh")
            .arg("-n")
            .arg("-c")
            .arg(&probe.argv[2])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(remote().describe(), "backup@10.0.0.30:/srv/etcd");
    }

    /// Runs `cmd` here with `HOME` set to `home`: stdout, or stderr on failure.
    fn run_here(cmd: &RemoteCommand, home: &std::path::Path) -> Result<String, String> {
        let out = std::process::Command::new(&cmd.argv[0])
            .args(&cmd.argv[1..])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home)
            .output()
            .unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The push key gets SFTP in the directory and nothing else: its one line in
    /// authorized_keys forces the sftp server that sshd_config names, started in the directory;
    /// an older `restrict <key>` line (a shell) is replaced, other keys stay; a second run
    /// changes nothing; `reset`'s revoke removes that key's line only.
    #[test]
    fn the_push_key_is_authorized_for_sftp_in_the_directory_only_and_revoked() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        fs_err::create_dir_all(home.join(".ssh")).unwrap();
        let keys = home.join(".ssh/authorized_keys");
        let pub_line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPush hactl backup push c";
        let other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOther operator@laptop";
        fs_err::write(&keys, format!("{other}\nrestrict {pub_line}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs_err::set_permissions(&keys, std::fs::Permissions::from_mode(0o640)).unwrap();
        let sftp_server = tmp.path().join("sftp-server");
        fs_err::write(&sftp_server, "#!/bin/sh\n").unwrap();
        fs_err::set_permissions(&sftp_server, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = tmp.path().join("sshd_config");
        fs_err::write(
            &config,
            format!(
                "Port 22\n  Subsystem\tsftp  {} -f AUTHPRIV\n",
                sftp_server.display()
            ),
        )
        .unwrap();
        let mut r = remote();
        r.path = tmp.path().join("backups").display().to_string();
        let authorize = authorize_command_with(&r, pub_line, config.to_str().unwrap());
        assert_eq!(run_here(&authorize, &home).unwrap(), "changed\n");
        let forced = format!(
            "restrict,command=\"{} -d {}\" {pub_line}",
            sftp_server.display(),
            r.path
        );
        assert_eq!(
            fs_err::read_to_string(&keys).unwrap(),
            format!("{other}\n{forced}\n")
        );
        let mode = |p: &std::path::Path| fs_err::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(std::path::Path::new(&r.path)), 0o700);
        // Converged: nothing to change.
        assert_eq!(run_here(&authorize, &home).unwrap(), "");
        // Without a Subsystem line, where the distributions install it; with none anywhere, a
        // refusal naming the package.
        fs_err::write(&config, "Port 22\n").unwrap();
        let found = ["/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        match (found, run_here(&authorize, &home)) {
            (Some(p), Ok(_)) => assert!(fs_err::read_to_string(&keys)
                .unwrap()
                .contains(&format!("command=\"{p} -d "))),
            (None, Err(e)) => assert!(e.contains("install the OpenSSH SFTP server"), "{e}"),
            (found, got) => panic!("{found:?}: {got:?}"),
        }
        // reset: the push key's line goes, the operator's stays.
        assert_eq!(
            run_here(&authorized_command(pub_line), &home).unwrap(),
            "authorized\n"
        );
        assert!(authorized_command(pub_line).read_only);
        assert_eq!(run_here(&revoke_command(pub_line), &home).unwrap(), "removed\n");
        assert_eq!(run_here(&authorized_command(pub_line), &home).unwrap(), "");
        assert_eq!(fs_err::read_to_string(&keys).unwrap(), format!("{other}\n"));
        // The file keeps its mode through both rewrites.
        assert_eq!(mode(&keys), 0o640);
        assert_eq!(run_here(&revoke_command(pub_line), &home).unwrap(), "");
        // No authorized_keys at all: nothing to revoke.
        fs_err::remove_file(&keys).unwrap();
        assert_eq!(run_here(&revoke_command(pub_line), &home).unwrap(), "");
    }

    #[test]
    fn the_push_key_is_made_once_and_kept_private() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let a = ensure_key(&state, "c").unwrap();
        let b = ensure_key(&state, "c").unwrap();
        assert_eq!(a.public_line, b.public_line);
        assert!(a.public_line.starts_with("ssh-ed25519 "), "{}", a.public_line);
        assert!(a.private_openssh.contains("BEGIN OPENSSH PRIVATE KEY"));
        assert!(!format!("{a:?}").contains("PRIVATE"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.file(STATE_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn known_hosts_lines_are_the_remotes_only() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        fs_err::write(
            state.known_hosts_path(),
            "10.0.0.11 ssh-ed25519 AAAA1\n10.0.0.30 ssh-ed25519 AAAA2\n[10.0.0.30]:2222 ssh-ed25519 AAAA3\n",
        )
        .unwrap();
        assert_eq!(
            known_hosts_lines(&state.known_hosts_path(), &remote()),
            "10.0.0.30 ssh-ed25519 AAAA2\n"
        );
    }
}
