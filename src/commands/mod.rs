//! Subcommands: one file each.
pub mod init;
