//! The lab's network: one private Linux bridge per lab with its own 10.213.X.0/24, the operator
//! side on `.1`, and the host-side veth of each container as a port of it.
//!
//! Invariants: the bridge name and the preferred subnet are derived from the lab name alone
//! (deterministic, so `down` finds the bridge even without `lab.json`); a subnet already on any
//! interface or recorded by another lab is never taken; nothing global (routes, forwarding,
//! firewall) is touched.

use super::proc::run;
use super::{LabError, Result};
use crate::local_command;
use std::collections::BTreeSet;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// Linux interface names hold at most 15 bytes (IFNAMSIZ - 1).
const IFNAMSIZ: usize = 15;

/// FNV-1a: a small stable hash (std's hasher may change between releases).
pub fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `hlab-<name>`, or when that is too long `hlab-<first 5>-<4 hex of the name's hash>`.
pub fn bridge_name(lab: &str) -> String {
    let full = format!("hlab-{lab}");
    if full.len() <= IFNAMSIZ {
        return full;
    }
    let head: String = lab.chars().take(5).collect();
    format!(
        "hlab-{}-{:04x}",
        head.trim_end_matches('-'),
        stable_hash(lab) & 0xffff
    )
}

pub fn bridge_exists(bridge: &str) -> bool {
    Path::new("/sys/class/net").join(bridge).exists()
}

/// The third octets of 10.213.X.* addresses on this machine's interfaces.
fn octets_in_use() -> Result<BTreeSet<u8>> {
    let out = run(local_command::new("ip").args(["-o", "-4", "addr", "show"]))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .filter_map(|w| w.split('/').next()?.parse::<Ipv4Addr>().ok())
        .filter(|a| a.octets()[..2] == [10, 213])
        .map(|a| a.octets()[2])
        .collect())
}

/// A free 10.213.X.0/24 for the lab: X from the name's hash, moved on past subnets in use by an
/// interface or recorded by another lab. Call with the network lock held.
pub fn choose_subnet(root: &Path, lab: &str) -> Result<Ipv4Addr> {
    let mut taken = octets_in_use()?;
    if let Ok(entries) = fs_err::read_dir(root.join("labs")) {
        for e in entries.flatten() {
            let other = e.file_name().to_string_lossy().into_owned();
            if other == lab {
                continue;
            }
            if let Ok(l) = super::Lab::load(root, &other) {
                if let Some(Ok(a)) = l.subnet.split('/').next().map(str::parse::<Ipv4Addr>) {
                    taken.insert(a.octets()[2]);
                }
            }
        }
    }
    let start = (stable_hash(lab) % 254) as u8 + 1;
    (0..254u16)
        .map(|i| ((u16::from(start) - 1 + i) % 254 + 1) as u8)
        .find(|x| !taken.contains(x))
        .map(|x| Ipv4Addr::new(10, 213, x, 0))
        .ok_or(LabError::NoSubnet)
}

/// Creates the bridge, gives the operator side its address, brings it up.
pub fn create_bridge(bridge: &str, operator: Ipv4Addr) -> Result<()> {
    run(local_command::new("ip").args(["link", "add", "name", bridge, "type", "bridge"]))?;
    run(local_command::new("ip").args(["addr", "add", &format!("{operator}/24"), "dev", bridge]))?;
    run(local_command::new("ip").args(["link", "set", "dev", bridge, "up"]))?;
    Ok(())
}

pub fn delete_bridge(bridge: &str) -> Result<()> {
    run(local_command::new("ip").args(["link", "del", "dev", bridge]))?;
    Ok(())
}

/// The bridge-side veth of the container whose PID 1 is `pid1`: the interface whose ifindex is
/// the peer index of the container's `host0` (`host0@ifN`).
pub fn host_veth(bridge: &str, pid1: u32) -> Result<Option<String>> {
    let inside = run(local_command::new("nsenter").args([
        "-t",
        &pid1.to_string(),
        "-n",
        "ip",
        "-o",
        "link",
        "show",
        "dev",
        "host0",
    ]))?;
    let inside = String::from_utf8_lossy(&inside.stdout);
    let Some(peer) = inside
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.trim_end_matches(':').split_once("@if"))
        .and_then(|(_, i)| i.parse::<u32>().ok())
    else {
        return Ok(None);
    };
    let ports = run(local_command::new("ip").args(["-o", "link", "show", "master", bridge]))?;
    Ok(String::from_utf8_lossy(&ports.stdout).lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let index: u32 = w.next()?.trim_end_matches(':').parse().ok()?;
        let name = w.next()?.trim_end_matches(':');
        (index == peer).then(|| name.split('@').next().unwrap_or(name).to_string())
    }))
}

/// Whether an interface is administratively up.
pub fn link_up(ifname: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/flags"))
        .ok()
        .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|flags| flags & 1 == 1)
}

pub fn set_link(ifname: &str, up: bool) -> Result<()> {
    run(local_command::new("ip").args(["link", "set", "dev", ifname, if up { "up" } else { "down" }]))?;
    Ok(())
}

/// Whether `addr:22` answers with an SSH banner within about `timeout`.
pub fn ssh_banner(addr: Ipv4Addr, timeout: Duration) -> bool {
    let sock = SocketAddr::from((addr, 22));
    let Ok(mut stream) = TcpStream::connect_timeout(&sock, timeout) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 8 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got.starts_with(b"SSH-2.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_fit_ifnamsiz_and_stay_distinct() {
        assert_eq!(bridge_name("hactl"), "hlab-hactl");
        let a = bridge_name("fault-test-one");
        let b = bridge_name("fault-test-two");
        assert!(a.len() <= IFNAMSIZ && b.len() <= IFNAMSIZ, "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(a, bridge_name("fault-test-one"));
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
