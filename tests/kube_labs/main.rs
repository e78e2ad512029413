//! The Kubernetes lab tests: each module boots lab hosts with a real Kubernetes control plane
//! (kube-apiserver, kube-controller-manager, kube-scheduler from `HACTL_KUBE_BIN_DIR`, or from the
//! cache `scripts/kube-binaries.sh` builds) brought up by `hactl up`, or (`nodes`) proves what
//! Kubernetes nodes stand on in the lab. One test binary for all of them, so the harness
//! (`tests/support/`) and the tests compile and link once. A module is named after what it proves;
//! its tests run by name: `cargo nextest run --test kube_labs failover::`.
//!
//! They need root; without it each test prints `SKIPPED <name>: needs root` and passes. As root
//! they never skip (see `support/kube.rs`).

#[path = "../support/mod.rs"]
mod support;

mod benches;
mod failover;
mod hardening;
mod heal_node_annotation;
mod maintenance_leases;
mod mode_switch;
mod nodes;
mod rebuild_roll;
mod recover_from_bundle;
mod remove_member;
mod replace;
mod rotate_etcd_ca;
mod rotate_front_proxy_ca;
mod rotate_kubernetes_ca;
mod static_pods;
mod units_and_drain;
mod up;
