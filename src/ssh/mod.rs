//! SSH transport on russh: verified host keys, key files or ssh-agent, bastions, sudo, uploads.
//!
//! - [`Session`] is one authenticated connection to one host, kept for the whole run; commands,
//!   uploads and port forwards each open their own channel on it, so they run in parallel.
//! - [`KnownHosts`] is the cluster's own known_hosts file: trust on first use, and a changed key
//!   refuses the host before anything is run on it.
//! - Commands reach the shell as [`crate::quote`] wrote them (the one place argv becomes a shell line).
//!
//! Invariants: upload content and key material never appear in argv, logs or errors; every log
//! line about a host starts with the host's name.

pub mod known_hosts;
pub mod session;

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::quote;

pub use known_hosts::{HostKeyCheck, KnownHosts};
pub use session::{ConnectOptions, ForwardGuard, OutputChunk, PassphraseSource, Session, PASSPHRASE_ENV};

/// Errors of the SSH transport. Each says what was being done and on which host.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to connect to {host} at {addr}")]
    Connect {
        host: String,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("ssh handshake with {host} at {addr} failed")]
    Handshake {
        host: String,
        addr: SocketAddr,
        #[source]
        source: Box<russh::Error>,
    },

    #[error("`{line}` on {host} printed more than {limit} on {stream}, the most hactl keeps of a command's output; it was ended there")]
    OutputTooLarge {
        host: String,
        line: String,
        stream: &'static str,
        limit: String,
    },

    /// `what` names the step and the host: "connecting to cp1 at 10.0.0.1:22".
    #[error("timed out after {secs}s {what}")]
    Timeout { host: String, what: String, secs: u64 },

    #[error("{host} refused authentication as {user} (tried: {tried})")]
    AuthenticationRefused {
        host: String,
        user: String,
        tried: String,
    },

    #[error("authentication as {user} on {host} failed")]
    Authentication {
        host: String,
        user: String,
        #[source]
        source: Box<russh::Error>,
    },

    #[error("key file {} is encrypted and no passphrase was given: set HACTL_SSH_KEY_PASSPHRASE, run hactl on a terminal to be asked, or load the key into ssh-agent and set agent: true", path.display())]
    KeyFileEncrypted { path: PathBuf },

    #[error("key file {}: the passphrase ({from}) does not decrypt it", path.display())]
    KeyFilePassphrase { path: PathBuf, from: String },

    #[error("failed to read key file {}", path.display())]
    KeyFile {
        path: PathBuf,
        #[source]
        source: Box<russh::keys::Error>,
    },

    #[error("ssh-agent is unavailable: SSH_AUTH_SOCK is not set (start an agent or use a key file)")]
    AgentUnset,

    #[error("failed to talk to ssh-agent at {}", socket.display())]
    Agent {
        socket: PathBuf,
        #[source]
        source: Box<russh::keys::Error>,
    },

    #[error(
        "the host key of {host} ({addr}) changed: known {known}, presented {presented} (known_hosts: {}); \
         nothing was run on it. If {host} was re-installed or recreated (a recreated VM has a new host \
         key), check that {presented} is its key and run again with --accept-new-host-key {host}: {}",
        known_hosts.display(),
        rerun_accepting(.host)
    )]
    HostKeyChanged {
        host: String,
        /// `ip:port` as connected to.
        addr: String,
        /// SHA256 fingerprint of the recorded key.
        known: String,
        /// SHA256 fingerprint of the key the server presented.
        presented: String,
        known_hosts: PathBuf,
    },

    #[error("failed to read known_hosts file {}", path.display())]
    KnownHostsRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}:{line}: invalid known_hosts line: {reason}", path.display())]
    KnownHostsParse {
        path: PathBuf,
        line: usize,
        reason: String,
    },

    #[error("failed to write known_hosts file {}", path.display())]
    KnownHostsWrite {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("failed to reach {host} through bastion {bastion}")]
    Bastion {
        host: String,
        bastion: SocketAddr,
        #[source]
        source: Box<Error>,
    },

    #[error("failed to open a channel on {host}")]
    Channel {
        host: String,
        #[source]
        source: Box<russh::Error>,
    },

    #[error("failed to run `{line}` on {host}")]
    Command {
        host: String,
        line: String,
        #[source]
        source: Box<russh::Error>,
    },

    #[error(
        "sudo on {host} needs a password for {user}: hactl runs `sudo -n`; add a NOPASSWD rule, \
         e.g. `{user} ALL=(ALL) NOPASSWD: ALL` in /etc/sudoers.d/hactl"
    )]
    SudoPasswordRequired { host: String, user: String },

    #[error("failed to upload {path} to {host}")]
    Upload {
        host: String,
        path: String,
        #[source]
        source: Box<Error>,
    },

    #[error(
        "{} changed after hactl planned to upload it (sha256 {planned} planned, {found} and {size} bytes read now): nothing was placed; run again to plan with the file as it is now",
        local.display()
    )]
    LocalFileChanged {
        local: PathBuf,
        planned: String,
        found: String,
        size: u64,
    },

    #[error("failed to read {} to upload it", local.display())]
    LocalRead {
        local: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A remote step failed with this exit status and stderr (never the content).
    #[error("`{what}` exited with {status}: {stderr}")]
    Remote {
        what: String,
        status: String,
        stderr: String,
    },

    #[error("sftp failed on {host}")]
    Sftp {
        host: String,
        #[source]
        source: std::io::Error,
    },

    #[error("failed to forward 127.0.0.1:{local_port} to {target} through {host}")]
    Forward {
        host: String,
        target: String,
        local_port: u16,
        #[source]
        source: std::io::Error,
    },
}

/// What a command left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit status; `None` when the command was killed by a signal or the channel closed early.
    pub status: Option<u32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadOutcome {
    /// The remote file already had this sha256, mode and owner: nothing was written.
    Unchanged,
    Written,
}

/// The command line this process was started with, quoted for a shell, with
/// `--accept-new-host-key <host>` added: what a refusal of a changed host key tells the user to run.
pub fn rerun_accepting(host: &str) -> String {
    rerun_line(std::env::args(), host)
}

fn rerun_line(args: impl IntoIterator<Item = String>, host: &str) -> String {
    let mut words: Vec<String> = args.into_iter().map(|a| quote::word(&a)).collect();
    words.push("--accept-new-host-key".into());
    words.push(quote::word(host));
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rerun_line_is_the_command_with_the_flag_added_and_quoted() {
        let args = ["target/debug/hactl", "up", "-i", "inventories/vagrant.yaml"].map(String::from);
        assert_eq!(
            rerun_line(args, "cp2"),
            "target/debug/hactl up -i inventories/vagrant.yaml --accept-new-host-key cp2"
        );
        let args = ["hactl", "status", "-i", "my cluster.yaml"].map(String::from);
        assert_eq!(
            rerun_line(args, "cp1"),
            "hactl status -i 'my cluster.yaml' --accept-new-host-key cp1"
        );
    }
}
