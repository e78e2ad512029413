//! A real OpenSSH server on loopback for transport tests: its own host key, config and
//! authorized_keys in a temporary directory, on a free port; killed when dropped.
//!
//! Needs `/usr/sbin/sshd` and `ssh-keygen` (Debian: `openssh-server`, `openssh-client`).
#![allow(dead_code)]

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hactl::inventory::{SshAuth, SshSpec};

pub const SSHD: &str = "/usr/sbin/sshd";
pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Why the tests cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    if !Path::new(SSHD).exists() {
        return Some(format!("{SSHD} is missing (apt-get install openssh-server)"));
    }
    if Command::new("ssh-keygen").arg("-?").output().is_err() {
        return Some("ssh-keygen is missing (apt-get install openssh-client)".into());
    }
    None
}

/// Skips the calling test with a reason when sshd is not installed.
#[macro_export]
macro_rules! require_sshd {
    () => {
        if let Some(why) = sshd::unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// A client key (ed25519) listed in authorized_keys.
    pub client_key: PathBuf,
    child: Child,
}

impl Sshd {
    /// Starts sshd with a fresh host key, accepting `client_key` for any user.
    pub fn start() -> Sshd {
        let dir = tempfile::Builder::new().prefix("hactl-sshd").tempdir().unwrap();
        // Readable by unprivileged users too: sshd reads authorized_keys as the logging-in user.
        set_mode(dir.path(), 0o755);
        std::fs::create_dir_all("/run/sshd").unwrap();
        let client_key = dir.path().join("client_ed25519");
        keygen(&client_key, "ed25519");
        let public = std::fs::read_to_string(client_key.with_extension("pub")).unwrap();
        std::fs::write(dir.path().join("authorized_keys"), public).unwrap();
        set_mode(&dir.path().join("authorized_keys"), 0o644);
        keygen(&dir.path().join("host_ed25519"), "ed25519");
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            match spawn(dir.path(), port) {
                Ok(child) => {
                    return Sshd {
                        dir,
                        port,
                        client_key,
                        child,
                    }
                }
                Err(e) => last = e,
            }
        }
        panic!("sshd did not start: {last}");
    }

    /// Stops sshd, replaces its host key (as a re-installed host would have) and starts it again
    /// on the same port.
    pub fn restart_with_new_host_key(&mut self) {
        self.stop();
        let key = self.dir.path().join("host_ed25519");
        std::fs::remove_file(&key).unwrap();
        std::fs::remove_file(key.with_extension("pub")).unwrap();
        keygen(&key, "ed25519");
        self.child = spawn(self.dir.path(), self.port).expect("sshd restart");
    }

    /// `authorized_keys` gets one more line.
    pub fn authorize(&self, public_key_file: &Path) {
        let mut keys = std::fs::read_to_string(self.dir.path().join("authorized_keys")).unwrap();
        keys.push_str(&std::fs::read_to_string(public_key_file).unwrap());
        std::fs::write(self.dir.path().join("authorized_keys"), keys).unwrap();
    }

    /// `ssh-keygen -l` of the current host key: `SHA256:…`.
    pub fn host_fingerprint(&self) -> String {
        fingerprint_of(&self.dir.path().join("host_ed25519.pub"))
    }

    /// `keytype base64` of the current host key.
    pub fn host_public_key(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("host_ed25519.pub")).unwrap();
        text.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
    }

    /// How to log in as root with the client key.
    pub fn spec(&self) -> SshSpec {
        SshSpec {
            address: LOOPBACK,
            port: self.port,
            user: "root".into(),
            auth: SshAuth::KeyFile(self.client_key.clone()),
            sudo: false,
            bastion: None,
            connect_timeout_secs: 10,
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn keygen(path: &Path, kind: &str) {
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", kind, "-N", "", "-C", "", "-f"]).arg(path);
    if kind == "rsa" {
        cmd.args(["-b", "2048"]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn fingerprint_of(public_key_file: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .arg("-lf")
        .arg(public_key_file)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().nth(1).unwrap().to_string()
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((LOOPBACK, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(dir: &Path, port: u16) -> Result<Child, String> {
    let config = dir.join("sshd_config");
    let d = dir.display();
    std::fs::write(
        &config,
        format!(
            "Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_ed25519
AuthorizedKeysFile {d}/authorized_keys
StrictModes no
PidFile none
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
MaxSessions 64
MaxStartups 100
Subsystem sftp internal-sftp
LogLevel VERBOSE
"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
    let mut child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("spawn {SSHD}: {e}"))?;
    // Ready when it greets us with its version line.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let log = std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
            return Err(format!("sshd exited with {status}: {log}"));
        }
        if let Ok(mut s) = TcpStream::connect((LOOPBACK, port)) {
            let mut buf = [0u8; 8];
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            if s.read_exact(&mut buf).is_ok() && &buf[..4] == b"SSH-" {
                return Ok(child);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err("sshd did not greet within 10s".into())
}

/// An ssh-agent on a socket in `dir`, holding the given keys; killed when dropped.
pub struct Agent {
    pub socket: PathBuf,
    child: Child,
}

impl Agent {
    pub fn start(dir: &Path, keys: &[&Path]) -> Option<Agent> {
        let socket = dir.join("agent.sock");
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let agent = Agent { socket, child };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !agent.socket.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for key in keys {
            let out = Command::new("ssh-add")
                .arg(key)
                .env("SSH_AUTH_SOCK", &agent.socket)
                .output()
                .ok()?;
            assert!(
                out.status.success(),
                "ssh-add: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(agent)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
