//! The etcd lab tests: each module boots lab hosts (systemd-nspawn, real systemd, sshd, etcd,
//! HAProxy and keepalived) and proves one area on them; none starts Kubernetes (those are in
//! `tests/kube_labs/`). One test binary for all of them, so the harness (`tests/support/`) and the
//! tests compile and link once. A module is named after what it proves; its tests run by name:
//! `cargo nextest run --test etcd_labs recover::`.
//!
//! They need root; without it each test prints `SKIPPED <name>: needs root` and passes.

#[path = "../support/mod.rs"]
mod support;

mod backups_remote;
mod backups_scheduled;
mod benches;
mod binaries;
mod certs_check_renew;
mod certs_rotate_ca;
mod cluster_lock;
mod etcd_peer_port_trust;
mod etcd_up_plan_reset;
mod etcd_upgrade_roll;
mod hosts;
mod init_inventory;
mod load_balancers_vip;
mod maintenance_drains_load_balancers;
mod maintenance_with_a_dead_member;
mod old_members;
mod preflight_fanout_host_keys;
mod progress_on_a_terminal;
mod recover;
mod remove_members;
mod replace_five_members;
mod replace_heal_maintenance;
mod roll_direct_clients;
mod state_identity;
