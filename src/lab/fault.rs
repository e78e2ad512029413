//! Faults a test or a person can inflict on one lab host: clean power-off and power-on, a power
//! cut, and cutting or restoring its network link.
//!
//! Invariant: a fault only touches the one host it names (its own processes and its own veth on
//! the lab's bridge); `poweron` boots the same overlay, so the host keeps its disk, address and keys.

use super::{host, net, proc, Lab, LabError, Result, SHUTDOWN_GRACE};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One fault; `FromStr`/`Display` use the CLI spelling (`power-cut`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Clean shutdown: SIGTERM to systemd-nspawn, wait until it is gone.
    Poweroff,
    /// Boot the host again on the same overlay; wait for its sshd.
    Poweron,
    /// SIGKILL to the host's PID 1: every process of the host dies at once, nothing is flushed.
    PowerCut,
    /// Take the host's veth on the bridge down: the host runs but reaches no one.
    Isolate,
    /// Undo `isolate`.
    Rejoin,
}

impl Fault {
    pub const ALL: [Fault; 5] = [
        Fault::Poweroff,
        Fault::Poweron,
        Fault::PowerCut,
        Fault::Isolate,
        Fault::Rejoin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Poweroff => "poweroff",
            Fault::Poweron => "poweron",
            Fault::PowerCut => "power-cut",
            Fault::Isolate => "isolate",
            Fault::Rejoin => "rejoin",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Fault::ALL.into_iter().find(|f| f.as_str() == s).ok_or_else(|| {
            let all: Vec<&str> = Fault::ALL.iter().map(|f| f.as_str()).collect();
            format!("unknown fault {s:?}; one of: {}", all.join(", "))
        })
    }
}

pub(super) fn apply(lab: &mut Lab, name: &str, fault: Fault) -> Result<()> {
    lab.host(name)?;
    let index = lab
        .hosts
        .iter()
        .position(|h| h.name == name)
        .expect("lab.host found it");
    let h = lab.hosts[index].clone();
    let not_running = || LabError::HostNotRunning {
        lab: lab.name.clone(),
        host: name.to_string(),
    };
    match fault {
        Fault::Poweroff => host::stop(&h, SHUTDOWN_GRACE)?,
        Fault::PowerCut => {
            let nspawn = host::nspawn_pid(&h).ok_or_else(not_running)?;
            host::kill_hard(nspawn);
            if !proc::wait_gone(&[nspawn], Duration::from_secs(10)).is_empty() {
                return Err(LabError::Host {
                    host: h.name.clone(),
                    message: format!("systemd-nspawn (pid {nspawn}) survived the power cut"),
                });
            }
            host::release_cgroups(&h)?;
        }
        Fault::Poweron => {
            if host::nspawn_pid(&h).is_none() {
                host::mount_overlay(&h, &lab.base_image()?)?;
                // After a reboot of this machine the bridge is gone; the lab still owns its name.
                if !net::bridge_exists(&lab.bridge) {
                    net::create_bridge(&lab.bridge, lab.operator_address)?;
                }
                let pid = host::spawn(lab, &h)?;
                lab.hosts[index].nspawn_pid = Some(pid);
            }
            host::wait_ready(&h, super::BOOT_DEADLINE)?;
        }
        Fault::Isolate | Fault::Rejoin => {
            let init = host::nspawn_pid(&h)
                .and_then(proc::container_init)
                .ok_or_else(not_running)?;
            let veth = net::host_veth(&lab.bridge, init)?.ok_or_else(|| LabError::Host {
                host: h.name.clone(),
                message: format!("no veth of this host on bridge {}", lab.bridge),
            })?;
            net::set_link(&veth, fault == Fault::Rejoin)?;
        }
    }
    eprintln!("lab {}: {} {}", lab.name, h.name, fault);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_their_own_spelling() {
        for f in Fault::ALL {
            assert_eq!(f.to_string().parse::<Fault>(), Ok(f));
        }
        assert!("reboot".parse::<Fault>().is_err());
    }
}
