//! Read-only probes of the control-plane components, run on the control-plane host itself.
//!
//! /readyz, /livez and /healthz are readable anonymously (the `system:public-info-viewer` role),
//! so the probes need no client certificate. The apiserver is checked against the Kubernetes CA
//! on the address it binds; controller-manager and scheduler serve a self-signed certificate
//! generated at start, so curl cannot verify it (`-k`) and only the answer counts.

use std::time::Duration;

use super::files::CA_CRT;
use super::{Component, API_PORT, CONTROLLER_MANAGER_PORT, SCHEDULER_PORT};
use crate::inventory::Host;
use crate::plan::{Check, RemoteCommand};

/// The command that exits 0 when `component` on `host` answers its health endpoint.
pub fn healthy(component: Component, host: &Host) -> RemoteCommand {
    let argv: Vec<String> = match component {
        Component::ApiServer => vec![
            "curl".into(),
            "-fsS".into(),
            "--max-time".into(),
            "5".into(),
            "--cacert".into(),
            CA_CRT.into(),
            format!("https://{}:{API_PORT}/readyz", host.url_host()),
        ],
        Component::ControllerManager | Component::Scheduler => vec![
            "curl".into(),
            "-fsSk".into(),
            "--max-time".into(),
            "5".into(),
            format!(
                "https://127.0.0.1:{}/healthz",
                if component == Component::ControllerManager {
                    CONTROLLER_MANAGER_PORT
                } else {
                    SCHEDULER_PORT
                }
            ),
        ],
    };
    RemoteCommand::read_only(argv).with_timeout(Duration::from_secs(10))
}

/// The endpoint a [`healthy`] probe asks, for people.
pub fn endpoint(component: Component) -> &'static str {
    match component {
        Component::ApiServer => "/readyz",
        Component::ControllerManager | Component::Scheduler => "/healthz",
    }
}

/// The last lines of a component's journal (systemd mode).
pub fn journal_tail(component: Component) -> RemoteCommand {
    RemoteCommand::read_only([
        "journalctl".to_string(),
        "-u".to_string(),
        component.unit(),
        "-n".to_string(),
        "25".to_string(),
        "--no-pager".to_string(),
        "-o".to_string(),
        "cat".to_string(),
    ])
}

/// Waits until `component` on `host` answers its health endpoint.
pub fn wait_healthy(component: Component, host: &Host, timeout: Duration) -> Check {
    Check::command(
        format!(
            "{} on {} answers {}",
            component.binary(),
            host.name,
            endpoint(component)
        ),
        healthy(component, host),
        timeout,
    )
    .diagnose_with(journal_tail(component))
}

/// The longest a live leader goes without renewing its Lease: client-go renews every retry
/// period (2 s by default), so a renewal older than this means nobody leads right now (the old
/// holder stopped and its Lease has not expired yet).
pub const LEASE_FRESH_SECS: u32 = 6;

/// Holds when `component`'s leader-election Lease in kube-system has a holder that renewed it
/// within [`LEASE_FRESH_SECS`] (host clock), read from `host`'s own apiserver with the
/// component's own client certificate (its RBAC role may read its Lease).
pub fn lease_fresh(component: Component, host: &Host) -> RemoteCommand {
    let (name, cert, key) = match component {
        Component::ControllerManager => (
            "kube-controller-manager",
            super::files::CONTROLLER_MANAGER_CRT,
            super::files::CONTROLLER_MANAGER_KEY,
        ),
        _ => (
            "kube-scheduler",
            super::files::SCHEDULER_CRT,
            super::files::SCHEDULER_KEY,
        ),
    };
    let script = "j=$(curl -fsS --max-time 5 --cacert \"$1\" --cert \"$2\" --key \"$3\" \"$4\") || exit 1; \
h=$(printf '%s' \"$j\" | sed -n 's/.*\"holderIdentity\": *\"\\([^\"]*\\)\".*/\\1/p'); \
r=$(printf '%s' \"$j\" | sed -n 's/.*\"renewTime\": *\"\\([^\"]*\\)\".*/\\1/p'); \
[ -n \"$h\" ] && [ -n \"$r\" ] && [ $(( $(date +%s) - $(date -d \"$r\" +%s) )) -le \"$5\" ]";
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        "hactl-lease".to_string(),
        CA_CRT.to_string(),
        cert.to_string(),
        key.to_string(),
        format!(
            "{}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}",
            super::files::local_apiserver_url(host)
        ),
        LEASE_FRESH_SECS.to_string(),
    ])
    .with_timeout(Duration::from_secs(10))
}

/// Waits until `component`'s Lease is held and freshly renewed (see [`lease_fresh`]).
pub fn wait_lease_fresh(component: Component, host: &Host, timeout: Duration) -> Check {
    Check::command(
        format!(
            "a {} leads (its Lease renewed within {LEASE_FRESH_SECS} s, read on {})",
            component.binary(),
            host.name
        ),
        lease_fresh(component, host),
        timeout,
    )
}

/// The name the kernel gives `component`'s process (`comm`: the binary's name cut to 15 bytes,
/// `kube-controller` for the controller-manager), which `pgrep -x` and /proc/PID/comm compare.
pub fn process_name(component: Component) -> &'static str {
    let b = component.binary();
    &b[..b.len().min(15)]
}

/// Holds when no process of `component` runs on the host (the kubelet stopped its pod).
pub fn stopped(component: Component) -> RemoteCommand {
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        "if p=$(pgrep -x \"$1\"); then echo \"$1 still runs: pid $(echo $p)\" >&2; exit 1; fi".to_string(),
        "hactl-stopped".to_string(),
        process_name(component).to_string(),
    ])
    .with_timeout(Duration::from_secs(10))
}

/// What a static pod that does not come back looks like on its host: the component's processes
/// with their start, the manifest's time, and the kubelet's last journal lines naming the
/// component (a port in use, an image missing, a crash loop's back-off).
pub fn static_pod_diagnosis(component: Component, manifest: &str) -> RemoteCommand {
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        "ps -eo pid,lstart,comm | awk -v c=\"$1\" 'NR == 1 || $NF == c'; \
ls -l --time-style=full-iso \"$2\" 2>&1; \
journalctl -u kubelet.service -n 400 --no-pager -o short-iso 2>/dev/null | grep -F -- \"$3\" | tail -n 15"
            .to_string(),
        "hactl-diagnose".to_string(),
        process_name(component).to_string(),
        manifest.to_string(),
        component.binary().to_string(),
    ])
    .with_timeout(Duration::from_secs(15))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn which(name: &str) -> Option<std::path::PathBuf> {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|d| std::path::Path::new(d).join(name))
            .find(|p| p.is_file())
    }

    fn run_locally(cmd: &RemoteCommand) -> bool {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.line(false))
            .status()
            .unwrap()
            .success()
    }

    /// `pgrep -x` and /proc/PID/comm see at most 15 bytes of a name: the controller-manager's
    /// full name would never match. `stopped` against a real process: it runs, then it does not.
    #[test]
    fn process_names_are_cut_as_the_kernel_cuts_them_and_stopped_sees_a_real_process() {
        assert_eq!(process_name(Component::ControllerManager), "kube-controller");
        assert_eq!(process_name(Component::ApiServer), "kube-apiserver");
        assert_eq!(process_name(Component::Scheduler), "kube-scheduler");
        let dir = tempfile::tempdir().unwrap();
        let name = format!("hs{}", std::process::id());
        let bin = dir.path().join(&name);
        std::fs::copy(which("sleep").expect("sleep is installed"), &bin).unwrap();
        let mut probe = stopped(Component::ApiServer);
        probe.argv[4] = name.clone();
        assert!(run_locally(&probe), "nothing named {name} runs yet");
        let mut child = std::process::Command::new(&bin).arg("30").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let while_running = run_locally(&probe);
        child.kill().ok();
        child.wait().ok();
        assert!(!while_running, "{name} runs: not stopped");
        assert!(run_locally(&probe), "{name} was killed: stopped");
    }

    #[test]
    fn probes_are_read_only_and_check_the_apiserver_against_the_ca() {
        let host = crate::inventory::Host {
            name: "cp1".into(),
            address: "10.0.0.11".parse().unwrap(),
            prefix_length: 24,
            roles: vec![],
            interface: None,
            ssh: crate::inventory::SshSpec {
                address: "10.0.0.11".parse().unwrap(),
                port: 22,
                user: "root".into(),
                auth: crate::inventory::SshAuth::Agent,
                sudo: false,
                bastion: None,
                connect_timeout_secs: 1,
            },
        };
        let cmd = healthy(Component::ApiServer, &host);
        assert!(cmd.read_only);
        assert_eq!(
            cmd.line(false),
            "curl -fsS --max-time 5 --cacert /etc/hactl/pki/kubernetes/ca.crt https://10.0.0.11:6443/readyz"
        );
        assert_eq!(
            healthy(Component::Scheduler, &host).line(false),
            "curl -fsSk --max-time 5 https://127.0.0.1:10259/healthz"
        );
    }
}
