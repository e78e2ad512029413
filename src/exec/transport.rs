//! The seam between plans and hosts: a [`Transport`] runs commands and uploads files on one host.
//!
//! The live implementation is [`crate::ssh::Session`]. Tests wrap it (for example a transport that
//! fails on any mutation proves that `hactl plan` changes nothing).

use async_trait::async_trait;

use crate::plan::{RemoteCommand, Upload};

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

/// Runs commands and uploads on one host.
#[async_trait]
pub trait Transport: Send + Sync {
    /// The inventory name of the host.
    fn host(&self) -> &str;
    /// Whether commands go through `sudo -n --`.
    fn sudo(&self) -> bool;
    /// Runs `cmd` (with sudo when the host needs it) and collects its output. A non-zero exit
    /// is not an error here: callers decide.
    async fn run(&self, cmd: &RemoteCommand) -> Result<Output, crate::ssh::Error>;
    /// Places a file atomically; skipped when the remote sha256, mode and owner already match.
    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, crate::ssh::Error>;
    /// Forwards a local loopback port to `remote_host:remote_port` as seen from this host, for
    /// as long as the returned guard lives. Returns the local port.
    async fn forward(
        &self,
        remote_host: &str,
        remote_port: u16,
    ) -> Result<(u16, crate::ssh::ForwardGuard), crate::ssh::Error>;
}
