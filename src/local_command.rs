//! Programs hactl runs on this machine (debootstrap, apt-get, systemd-nspawn, ip, the embedded
//! Kubernetes build script, a binary's `--version`) start from a clean, explicit environment.
//!
//! hactl's own environment may hold variables meant for some other build: `cargo run` exports
//! `OUT_DIR`, `CARGO_*` and `LD_LIBRARY_PATH` to the program it runs, and a shell may carry
//! `MAKEFLAGS`, `GOFLAGS` or `CC`. Passed on, they change what a build does (Kubernetes' Makefile
//! writes its generators into `OUT_DIR`: `cargo run -- lab up` once failed that way). So
//! [`new`] clears the environment and passes on only:
//! - `PATH` (hactl's, then the system directories it lacks), `HOME`, and `LANG=C`;
//! - this machine's network settings: the proxy variables (`http_proxy`, `https_proxy`,
//!   `ftp_proxy`, `all_proxy`, `no_proxy`, in either case) and the CA files (`SSL_CERT_FILE`,
//!   `SSL_CERT_DIR`);
//! - `TMPDIR`;
//! - hactl's own knobs, `HACTL_*` (the build script reads `HACTL_DEBIAN_MIRROR`, for one).
//!
//! A call site adds what its program needs beyond that (apt-get's `DEBIAN_FRONTEND`, the build
//! script's `HACTL_KUBE_CACHE`). Programs run on the hosts go over SSH and are not concerned.

use std::ffi::{OsStr, OsString};
use std::process::Command;

/// The system directories every `PATH` given on ends with (lab tools live in the sbin ones).
const SYSTEM_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Passed on as they are, when set.
const PASSED: &[&str] = &[
    "HOME",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "http_proxy",
    "https_proxy",
    "ftp_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "FTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
];

/// A `Command` for `program` with the environment [`environment`] makes from this process's.
pub fn new(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear().envs(environment(std::env::vars_os()));
    cmd
}

/// Tests: `sh -c script sh args…` (`sh` is dash here, as on the hosts), from [`new`]'s
/// environment, with `input` on its stdin: whether it succeeded, and its stdout. The shell, awk
/// and grep programs hactl sends to hosts are checked with it on this machine.
#[cfg(test)]
pub fn sh_with_input(script: &str, args: &[&str], input: &[u8]) -> (bool, String) {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sh");
    // A program that exits without reading all of its input closes the pipe: not an error here.
    let _ = child.stdin.take().expect("stdin").write_all(input);
    let out = child.wait_with_output().expect("wait for sh");
    (
        out.status.success(),
        String::from_utf8(out.stdout).expect("UTF-8 output"),
    )
}

/// The environment a program run by hactl gets, from hactl's `vars` (see the module's doc).
/// Sorted by name.
pub fn environment(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let mut path = None;
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for (name, value) in vars {
        let Some(text) = name.to_str() else { continue };
        if text == "PATH" {
            path = Some(value);
        } else if PASSED.contains(&text) || text.starts_with("HACTL_") {
            env.push((name, value));
        }
    }
    env.push(("PATH".into(), full_path(path.as_deref())));
    env.push(("LANG".into(), "C".into()));
    env.sort();
    env
}

/// `path` (when set), then each system directory it does not hold.
fn full_path(path: Option<&OsStr>) -> OsString {
    let mut dirs: Vec<OsString> = path
        .map(|p| {
            std::env::split_paths(p)
                .map(OsString::from)
                .filter(|d| !d.is_empty())
                .collect()
        })
        .unwrap_or_default();
    for dir in SYSTEM_PATH {
        if !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.into());
        }
    }
    std::env::join_paths(dirs).unwrap_or_else(|_| SYSTEM_PATH.join(":").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.to_str().unwrap()).collect()
    }

    #[test]
    fn build_variables_stay_behind_and_the_machines_settings_go_on() {
        let env = environment(vars(&[
            ("OUT_DIR", "/work/target/release/build/hactl-1/out"),
            ("CARGO_MANIFEST_DIR", "/work"),
            ("CARGO_PKG_NAME", "hactl"),
            ("LD_LIBRARY_PATH", "/work/target/release/deps"),
            ("MAKEFLAGS", "-j64"),
            ("GOFLAGS", "-mod=mod"),
            ("CC", "clang"),
            ("RUSTFLAGS", "-Ctarget-cpu=native"),
            ("LANG", "de_DE.UTF-8"),
            ("LC_ALL", "de_DE.UTF-8"),
            ("HOME", "/root"),
            ("https_proxy", "http://proxy:3128"),
            ("NO_PROXY", "10.0.0.0/8"),
            ("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"),
            ("HACTL_DEBIAN_MIRROR", "http://mirror/debian"),
            ("PATH", "/root/.cargo/bin:/usr/bin:/bin"),
        ]));
        assert_eq!(
            names(&env),
            [
                "HACTL_DEBIAN_MIRROR",
                "HOME",
                "LANG",
                "NO_PROXY",
                "PATH",
                "SSL_CERT_FILE",
                "https_proxy"
            ]
        );
        let get = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_str().unwrap())
        };
        assert_eq!(get("LANG"), Some("C"));
        assert_eq!(
            get("PATH"),
            Some("/root/.cargo/bin:/usr/bin:/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin")
        );
    }

    #[test]
    fn without_a_path_the_system_directories_serve() {
        let env = environment(vars(&[("PATH", "")]));
        assert_eq!(names(&env), ["LANG", "PATH"]);
        assert_eq!(
            env[1].1,
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        assert_eq!(environment(Vec::new()), env);
    }

    #[test]
    fn a_spawned_program_sees_exactly_that_environment() {
        let out = new("env").output().unwrap();
        assert!(out.status.success());
        let seen: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        let mut want: Vec<String> = environment(std::env::vars_os())
            .into_iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        let mut seen_sorted = seen.clone();
        seen_sorted.sort();
        want.sort();
        assert_eq!(seen_sorted, want);
    }
}
