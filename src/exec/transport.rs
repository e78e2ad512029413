//! The seam between plans and hosts: a [`Transport`] runs commands and uploads files on one host.
//!
//! The live implementation is [`crate::ssh::Session`], implemented here so that `ssh` (below `exec`)
//! knows nothing of it. Tests wrap it (for example a transport that
//! fails on any mutation proves that `hactl plan` changes nothing).

use async_trait::async_trait;

use crate::plan::{RemoteCommand, Upload};
use crate::ssh::{Error, ForwardGuard, Session};
pub use crate::ssh::{Output, UploadOutcome};

/// Runs commands and uploads on one host.
#[async_trait]
pub trait Transport: Send + Sync {
    /// The inventory name of the host.
    fn host(&self) -> &str;
    /// Whether commands go through `sudo -n --`.
    fn sudo(&self) -> bool;
    /// Runs `cmd` (with sudo when the host needs it) and collects its output. A non-zero exit
    /// is not an error here: callers decide.
    async fn run(&self, cmd: &RemoteCommand) -> Result<Output, Error>;
    /// Places a file atomically; skipped when the remote sha256, mode and owner already match.
    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, Error>;
    /// Forwards a local loopback port to `remote_host:remote_port` as seen from this host, for
    /// as long as the returned guard lives. Returns the local port.
    async fn forward(&self, remote_host: &str, remote_port: u16) -> Result<(u16, ForwardGuard), Error>;
}

#[async_trait]
impl Transport for Session {
    fn host(&self) -> &str {
        Session::host(self)
    }

    fn sudo(&self) -> bool {
        Session::sudo(self)
    }

    async fn run(&self, cmd: &RemoteCommand) -> Result<Output, Error> {
        Session::run(self, cmd).await
    }

    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, Error> {
        Session::upload(self, upload).await
    }

    async fn forward(&self, remote_host: &str, remote_port: u16) -> Result<(u16, ForwardGuard), Error> {
        Session::forward(self, remote_host, remote_port).await
    }
}
