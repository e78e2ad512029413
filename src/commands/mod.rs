//! Subcommands: one file each.
pub mod lab;
