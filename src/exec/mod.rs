//! Runs plans: `Live` sends each step over a [`Transport`]; `DryRun` only records it.

pub mod parallel;
pub mod transport;

pub use transport::{Output, Transport, UploadOutcome};
