//! Runs plans: `Live` sends each step over a [`Transport`]; `DryRun` only records it.

pub mod transport;

pub use transport::{Output, Transport, UploadOutcome};
