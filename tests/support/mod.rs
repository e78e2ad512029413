//! The one harness of the lab tests, compiled once into each lab test binary (`tests/etcd_labs/`,
//! `tests/kube_labs/`) by its `main.rs` with `#[path = "../support/mod.rs"] mod support;`, and used
//! from a test module as `crate::support::…`. The modules build on each other through this tree
//! (`bench`, `init`, `kube`, `members` and `writer` on `lab`; `init` on `release`; `members` on
//! `cli`).
//!
//! `cli.rs`, `release.rs` and `sshd.rs` use no other support module, so a test file outside the
//! lab binaries that needs one of them alone includes just that file with `#[path]`
//! (`tests/cli_conventions.rs`, `tests/binaries.rs`, `tests/ssh_transport.rs`). Every support
//! file allows dead code: each binary uses a part of it.

pub mod bench;
pub mod cli;
pub mod init;
pub mod kube;
pub mod lab;
pub mod members;
pub mod release;
pub mod writer;
