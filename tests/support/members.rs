//! What the replace tests share: running `hactl … -i INVENTORY` with a log of what it said,
//! reading the member list through `hactl-etcdctl` on a lab host, the run journals in the state
//! directory, and editing the lab's inventory.
//!
//! `support::members` (see `support/mod.rs`); it builds on `support::lab` and `support::cli`.
#![allow(dead_code)]

use std::path::Path;
use std::process::Output;

use super::cli::text;
use super::lab::TestLab;

/// `hactl ARGS -i INV` with extra environment.
pub fn hactl_env(inv: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    super::cli::hactl_env(inv, args, env)
}

/// `hactl ARGS -i INV`.
pub fn hactl(inv: &Path, args: &[&str]) -> Output {
    super::cli::hactl_in(inv, args)
}

/// `hactl-etcdctl ARGS` on `host`: (success, stdout and stderr).
pub fn ctl(lab: &TestLab, host: &str, args: &[&str]) -> (bool, String) {
    let mut argv = vec!["/usr/local/sbin/hactl-etcdctl"];
    argv.extend_from_slice(args);
    let o = lab.exec(host, &argv);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), out)
}

/// Member list lines `id, status, name, peer, client, learner` as seen from `host`.
pub fn members(lab: &TestLab, host: &str) -> Vec<String> {
    let o = lab.exec(host, &["/usr/local/sbin/hactl-etcdctl", "member", "list"]);
    assert!(o.status.success(), "member list on {host}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The ID of member `name` as seen from `from`.
pub fn member_id(lab: &TestLab, from: &str, name: &str) -> Option<String> {
    members(lab, from)
        .into_iter()
        .find(|l| l.split(", ").nth(2) == Some(name))
        .map(|l| l.split(", ").next().unwrap().to_string())
}

/// How many members have peer URL `url`, as seen from `from` (B7: never two).
pub fn at_url(lab: &TestLab, from: &str, url: &str) -> usize {
    members(lab, from)
        .iter()
        .filter(|l| l.split(", ").nth(3) == Some(url))
        .count()
}

/// Learner lines in the member list.
pub fn learners(lab: &TestLab, from: &str) -> Vec<String> {
    members(lab, from)
        .into_iter()
        .filter(|l| l.ends_with(", true"))
        .collect()
}

/// The newest run whose id starts with `prefix`.
pub fn newest_run(state: &Path, prefix: &str) -> String {
    let mut runs: Vec<_> = std::fs::read_dir(state.join("runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .collect();
    runs.sort_by_key(|e| e.metadata().unwrap().modified().unwrap());
    runs.last()
        .expect("a run")
        .file_name()
        .to_string_lossy()
        .to_string()
}

/// Journal entries of the newest run whose id starts with `prefix`.
pub fn journal(state: &Path, prefix: &str) -> Vec<serde_json::Value> {
    let path = state
        .join("runs")
        .join(newest_run(state, prefix))
        .join("journal.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The time `step` was done in a journal.
pub fn done_ts(j: &[serde_json::Value], step: &str) -> Option<String> {
    j.iter()
        .find(|e| e["step"] == step && e["phase"] == "done")
        .map(|e| e["ts"].as_str().unwrap().to_string())
}

/// Rewrites the inventory through `f`.
pub fn set_inventory(inv: &Path, f: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(inv).unwrap();
    std::fs::write(inv, f(text)).unwrap();
}

/// Moves the roles of `from` (etcd, control-plane) to `to` in a lab inventory, leaving `from`
/// with `roles: []` (what the operator does before `replace --host`).
pub fn move_roles(lab: &TestLab, inv: &Path, from: &str, to: &str) {
    let (a, b) = (lab.ip(from), lab.ip(to));
    set_inventory(inv, |t| {
        t.replace(
            &format!("address: \"{a}\"\n    prefixLength: 24\n    roles:\n    - etcd\n    - control-plane"),
            &format!("address: \"{a}\"\n    prefixLength: 24\n    roles: []"),
        )
        .replace(
            &format!("address: \"{b}\"\n    prefixLength: 24\n    roles: []"),
            &format!("address: \"{b}\"\n    prefixLength: 24\n    roles:\n    - etcd\n    - control-plane"),
        )
    });
}
