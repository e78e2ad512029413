//! hactl: bring up, and keep alive, a highly available Kubernetes control plane on hosts you own.
//!
//! ```text
//! inventory.yaml ──load + validate──▶ Inventory        (pure; reports every problem at once)
//!       │                                  │
//!       │                  pki::ensure(state_dir, &inv) ──▶ Pki  (local files, 0600/0700, idempotent)
//!       ▼                                  ▼
//! facts::gather(&inv) ──(read-only SSH)──▶ Facts       (units, file hashes, etcd members per host)
//!       ▼
//! converge::phases() ──▶ Plan of Steps           (pure: no I/O)
//!       ▼
//! exec::run(&plan, Mode::{Live | DryRun}) ──▶ Report   (the one place where a run and a dry-run differ)
//!       ▼
//! Step::Wait(Check) inside the plan = verification
//! ```
//!
//! The modules form a stack of layers, each importing only its own layer and those below
//! (ARCHITECTURE.md, "Layers", which `tests/layers.rs` enforces), bottom to top:
//!
//! ```text
//! commands                      parse → call the library → print (only main.rs imports it)
//! cli                           clap types
//! day-two wing                  operations: one manager (the one lock, journal and runner)
//!                               runs recover, replace, remove, heal, maintenance, rotate_ca,
//!                               journaled steps that survive a crash
//! bring-up                      phases (pure), converge (prepare, apply; reset, check, status)
//! components                    facts, identity, etcd, kubernetes, load_balancer, snapshot, backup,
//!                               backup_remote, certs, hwm, fence, old_members
//! transport, local artifacts    digest_cache, local_digests, ssh, exec, render, pki, binaries, images
//! model                         inventory, state, plan
//! basics                        clock, duration, exit, output, quote, local_command, bounded
//! ```
//!
//! `lab` stands beside the stack (basics and the model only).
//!
//! See ARCHITECTURE.md for the code map and the invariants.

// The crate's print macros, before every module so that they shadow std's there (a macro's
// textual scope wins over the prelude): std's panic when stdout or stderr is a closed pipe
// (`hactl status | head -0`); these drop the output and the command ends as it would have
// (output.rs). Unit tests keep std's, whose output the test harness captures.
#[cfg(not(test))]
macro_rules! print {
    ($($arg:tt)*) => { $crate::output::print_stdout(format_args!($($arg)*), false) };
}
#[cfg(not(test))]
macro_rules! println {
    () => { $crate::output::print_stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::output::print_stdout(format_args!($($arg)*), true) };
}
#[cfg(not(test))]
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::output::print_stderr(format_args!($($arg)*), false) };
}
#[cfg(not(test))]
macro_rules! eprintln {
    () => { $crate::output::print_stderr(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::output::print_stderr(format_args!($($arg)*), true) };
}

pub mod backup;
pub mod backup_remote;
pub mod binaries;
pub mod bounded;
pub mod certs;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod converge;
pub mod digest_cache;
pub mod duration;
pub mod etcd;
pub mod exec;
pub mod exit;
pub mod facts;
pub mod fence;
pub mod hwm;
pub mod identity;
pub mod images;
pub mod inventory;
pub mod kubernetes;
pub mod lab;
pub mod load_balancer;
pub mod local_command;
pub mod local_digests;
pub mod old_members;
pub mod operations;
pub mod output;
pub mod phases;
pub mod pki;
pub mod plan;
pub mod quote;
pub mod render;
pub mod snapshot;
pub mod ssh;
pub mod state;
