//! SSH transport on russh: verified host keys, key files or ssh-agent, bastions, sudo, uploads.

pub mod quote;

/// Errors of the SSH transport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Other(String),
}
