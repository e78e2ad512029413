//! hactl: bring up, and keep alive, a highly available Kubernetes control plane on hosts you own.
//!
//! ```text
//! inventory.yaml ──load + validate──▶ Inventory        (pure; reports every problem at once)
//!       │                                  │
//!       │                  pki::ensure(state_dir, &inv) ──▶ Pki  (local files, 0600/0700, idempotent)
//!       ▼                                  ▼
//! facts::gather(&inv) ──(read-only SSH)──▶ Facts       (units, file hashes, etcd members per host)
//!       ▼
//! commands::up::phases() ──▶ Plan of Steps           (pure: no I/O)
//!       ▼
//! exec::run(&plan, Mode::{Live | DryRun}) ──▶ Report   (the one place where a run and a dry-run differ)
//!       ▼
//! Step::Wait(Check) inside the plan = verification
//! ```
//!
//! Above it, `commands/` is the top floor (parse → call the library → print; only `main.rs`
//! imports it), and the day-two operations are a wing of their own, `operations`: one manager
//! runs every operation (`recover`, `replace`, `remove`, `heal`, `maintenance`, `rotate_ca`, each
//! a folder with pure decisions apart from its steps and acts) with the one lock, the one journal
//! and the one runner. The floor under both: `exit`, `exec::connect`, `phases::query_for`,
//! `etcd::snapshot`.
//!
//! See ARCHITECTURE.md for the code map and the invariants.

pub mod backup;
pub mod backup_remote;
pub mod binaries;
pub mod bolt;
pub mod certs;
pub mod cli;
pub mod commands;
pub mod duration;
pub mod etcd;
pub mod exec;
pub mod exit;
pub mod facts;
pub mod hwm;
pub mod images;
pub mod inventory;
pub mod kubernetes;
pub mod lab;
pub mod load_balancer;
pub mod operations;
pub mod output;
pub mod phases;
pub mod pki;
pub mod plan;
pub mod render;
pub mod snapshot;
pub mod ssh;
pub mod state;
