//! Runs plans: `Live` sends each step over a [`Transport`]; `DryRun` only prints it.

pub mod connect;
pub mod parallel;
pub mod run;
pub mod transport;

pub use run::{run, Mode, PhaseFailed, Report, Transports};
pub use transport::{Output, Transport, UploadOutcome};
