//! The SSH transport against a real OpenSSH server on loopback (see `support/sshd.rs`).
//! Each test starts its own sshd; tests skip with a reason when sshd is not installed.

#[path = "support/sshd.rs"]
mod sshd;

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use hactl::exec::connect::{connect_with, Reach};
use hactl::exec::parallel::for_each_host;
use hactl::exec::UploadOutcome;
use hactl::inventory::{Host, Role, SshAuth, SshSpec};
use hactl::plan::{RemoteCommand, Upload};
use hactl::ssh::{ConnectOptions, Error, KnownHosts, OutputChunk, PassphraseSource, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use sshd::Sshd;

fn options(dir: &std::path::Path) -> ConnectOptions {
    ConnectOptions::new(Arc::new(KnownHosts::load(dir.join("known_hosts")).unwrap()))
}

async fn connect(sshd: &Sshd) -> Session {
    Session::connect("node1", &sshd.spec(), &options(sshd.dir.path()))
        .await
        .expect("connect")
}

/// An unprivileged user without a password or sudo rule, created when missing (needs root and
/// useradd). `None` (with the reason printed) when that is not possible.
fn test_user() -> Option<&'static str> {
    static ONCE: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *ONCE.get_or_init(create_test_user)
}

fn create_test_user() -> Option<&'static str> {
    const USER: &str = "hactl-sudo-test";
    let exists = std::process::Command::new("id")
        .arg(USER)
        .output()
        .ok()?
        .status
        .success();
    if !exists {
        let created = std::process::Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", USER])
            .output();
        if !created.map(|o| o.status.success()).unwrap_or(false) {
            eprintln!("skipped: cannot create user {USER} (needs root and useradd)");
            return None;
        }
    }
    // Not locked (sshd without PAM refuses locked accounts), but no password either.
    let _ = std::process::Command::new("usermod")
        .args(["-p", "*", USER])
        .output();
    Some(USER)
}

fn sshd_log(sshd: &Sshd) -> String {
    std::fs::read_to_string(sshd.dir.path().join("sshd.log")).unwrap()
}

#[tokio::test]
async fn command_output_exit_status_and_stderr_are_captured() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = connect(&sshd).await;
    let out = s
        .run(&RemoteCommand::script("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(out.status, Some(3));
    assert_eq!(out.stdout_str(), "out\n");
    assert_eq!(out.stderr_str(), "err\n");
    assert!(!out.success());
}

/// A command that prints without end (or more than its caller keeps) is ended at the limit, and
/// the error names it, its host, the stream and the limit; the session stays usable.
#[tokio::test]
async fn output_past_the_limit_ends_the_command_with_an_error_naming_it() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = connect(&sshd).await;
    let err = s
        .run(&RemoteCommand::new(["cat", "/dev/zero"]).with_output_limit(1 << 20))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::OutputTooLarge { stream: "stdout", .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("`cat /dev/zero` on node1 printed more than 1 MiB on stdout"),
        "{err}"
    );
    // (Ended at the limit: had it run to the command's 120 s timeout, the error would be
    // `Error::Timeout`.)
    let err = s
        .run(&RemoteCommand::script("head -c 2048 /dev/zero >&2").with_output_limit(1024))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::OutputTooLarge { stream: "stderr", .. }),
        "{err}"
    );
    let out = s
        .run(&RemoteCommand::script("head -c 1024 /dev/zero").with_output_limit(1024))
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), 1024);
}

#[tokio::test]
async fn argv_round_trips_exactly() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = connect(&sshd).await;
    let words = [
        "a b",
        "it's",
        "\"dq\"",
        "$HOME",
        "`id`",
        "*",
        "x\ny",
        "",
        "tab\there",
        "back\\slash",
    ];
    let mut cmd = vec!["printf", "%s|"];
    cmd.extend(words);
    let out = s.run(&RemoteCommand::new(cmd)).await.unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr_str());
    assert_eq!(out.stdout_str(), format!("{}|", words.join("|")));
}

#[tokio::test]
async fn stdin_reaches_the_command_and_not_its_argv() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = connect(&sshd).await;
    let secret = b"secret\x00bytes\nline two";
    let out = s
        .run_with_stdin(&RemoteCommand::new(["sha256sum"]), secret)
        .await
        .unwrap();
    let expected = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(secret))
    };
    assert_eq!(out.stdout_str(), format!("{expected}  -\n"));
}

#[tokio::test]
async fn timeout_fires_and_the_session_stays_usable() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = connect(&sshd).await;
    let script = "sleep 5";
    let err = s
        .run(&RemoteCommand::script(script).with_timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { secs: 1, .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("timed out after 1s running `sh -c"),
        "{err}"
    );
    let out = s.run(&RemoteCommand::new(["echo", "still here"])).await.unwrap();
    assert_eq!(out.stdout_str(), "still here\n");
}

/// sshd delivers the TERM sent on timeout only to sessions of unprivileged users (root sessions
/// run in its monitor, which refuses signals), so this test logs in as one.
#[tokio::test]
async fn timeout_terminates_the_remote_command_of_an_unprivileged_login() {
    require_sshd!();
    let Some(user) = test_user() else { return };
    let sshd = Sshd::start();
    let spec = SshSpec {
        user: user.into(),
        ..sshd.spec()
    };
    let s = Session::connect("node1", &spec, &options(sshd.dir.path()))
        .await
        .unwrap();
    let mut pid = String::new();
    let cmd = RemoteCommand::script("echo $$; exec sleep 30").with_timeout(Duration::from_secs(1));
    let err = s
        .run_streaming(&cmd, |chunk| {
            if let OutputChunk::Stdout(b) = chunk {
                pid.push_str(&String::from_utf8_lossy(b));
            }
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let proc_dir = std::path::PathBuf::from(format!("/proc/{}", pid.trim()));
    let mut gone = false;
    for _ in 0..500 {
        if !proc_dir.exists() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gone, "{} still runs", proc_dir.display());
}

#[tokio::test]
async fn parallel_channels_on_one_session_overlap() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = Arc::new(connect(&sshd).await);
    // A barrier: each command checks in, then waits until all 8 have. Run one after the other,
    // the first would wait alone until its timeout; so all 8 finishing proves they overlapped.
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_str().unwrap().to_string();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..8 {
        let s = s.clone();
        let script = format!(
            "touch {dir_path}/{i}; end=$(( $(date +%s) + 30 )); \
             while [ $(ls {dir_path} | wc -l) -lt 8 ]; do [ $(date +%s) -lt $end ] || exit 7; sleep 0.05; done"
        );
        set.spawn(async move {
            let out = s
                .run(&RemoteCommand::script(script).with_timeout(Duration::from_secs(60)))
                .await
                .unwrap();
            out.status
        });
    }
    let statuses: Vec<Option<u32>> = set.join_all().await;
    assert_eq!(
        statuses,
        vec![Some(0); 8],
        "some commands waited alone: they did not run at the same time"
    );
}

fn stat(path: &std::path::Path) -> (u64, i64, i64, i64, i64, u32) {
    let m = std::fs::metadata(path).unwrap();
    (
        m.ino(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.mode() & 0o7777,
    )
}

async fn upload_is_atomic_and_idempotent(sudo: bool) {
    let sshd = Sshd::start();
    let spec = SshSpec { sudo, ..sshd.spec() };
    let s = Session::connect("node1", &spec, &options(sshd.dir.path()))
        .await
        .unwrap();
    let path = sshd.dir.path().join("etc/hactl/pki/etcd.key");
    let p = path.to_str().unwrap();

    let first = Upload::new(
        p,
        0o640,
        "root",
        "daemon",
        b"-----BEGIN KEY-----\nfirst\n".to_vec(),
    );
    assert_eq!(s.upload(&first).await.unwrap(), UploadOutcome::Written);
    assert_eq!(std::fs::read(&path).unwrap(), b"-----BEGIN KEY-----\nfirst\n");
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (m.mode() & 0o7777, m.uid(), m.gid()),
        (0o640, 0, 1),
        "mode, root:daemon"
    );
    assert!(!std::path::Path::new(&format!("{p}.hactl-tmp")).exists());
    // The parent directories were created with ordinary permissions, not the key's.
    assert_eq!(stat(path.parent().unwrap()).5, 0o755);

    // Same content, mode and owner: nothing is written, not even chmod (ctime would move).
    let before = stat(&path);
    assert_eq!(s.upload(&first).await.unwrap(), UploadOutcome::Unchanged);
    assert_eq!(stat(&path), before);

    // Changed content: a new file renamed into place (new inode).
    let second = Upload::new(p, 0o640, "root", "daemon", b"second".to_vec());
    assert_eq!(s.upload(&second).await.unwrap(), UploadOutcome::Written);
    assert_eq!(std::fs::read(&path).unwrap(), b"second");
    assert_ne!(stat(&path).0, before.0);

    // Only the mode differs: rewritten with the new mode.
    let third = Upload::new(p, 0o600, "root", "daemon", b"second".to_vec());
    assert_eq!(s.upload(&third).await.unwrap(), UploadOutcome::Written);
    assert_eq!(stat(&path).5, 0o600);
    assert_eq!(s.upload(&third).await.unwrap(), UploadOutcome::Unchanged);

    // A file of this machine (a binary): streamed from its file, placed, then unchanged.
    let local = sshd.dir.path().join("local-kubelet");
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &big).unwrap();
    let digests = hactl::local_digests::LocalDigests::none();
    let bin_path = sshd.dir.path().join("usr/local/bin/kubelet");
    let bin = Upload::of(
        bin_path.to_str().unwrap(),
        0o755,
        "root",
        "root",
        &digests.blob(&local).unwrap(),
    );
    assert!(bin.content.in_memory().is_none());
    assert_eq!(s.upload(&bin).await.unwrap(), UploadOutcome::Written);
    assert_eq!(std::fs::read(&bin_path).unwrap(), big);
    assert_eq!(stat(&bin_path).5, 0o755);
    assert_eq!(s.upload(&bin).await.unwrap(), UploadOutcome::Unchanged);

    // The local file changed after it was planned: refused, and the host keeps what it had
    // (no temporary file left either).
    std::fs::remove_file(&bin_path).unwrap();
    let mut changed = big.clone();
    changed[1 << 20] ^= 0xff;
    std::fs::write(&local, &changed).unwrap();
    let err = s.upload(&bin).await.unwrap_err();
    let chain = format!("{:#}", anyhow::Error::from(err));
    assert!(
        chain.contains(&format!(
            "{} changed after hactl planned to upload it",
            local.display()
        )),
        "{chain}"
    );
    assert!(!bin_path.exists(), "a changed file was placed");
    let tmp = bin_path.parent().unwrap().join(".kubelet.hactl-tmp");
    assert!(!tmp.exists(), "{} left behind", tmp.display());

    // Without sudo the content went over SFTP; with sudo through stdin (SFTP runs as the login user).
    let used_sftp = sshd_log(&sshd).contains("subsystem 'sftp'");
    assert_eq!(used_sftp, !sudo, "{}", sshd_log(&sshd));
}

#[tokio::test]
async fn upload_over_sftp_writes_atomically_and_skips_unchanged_files() {
    require_sshd!();
    upload_is_atomic_and_idempotent(false).await;
}

#[tokio::test]
async fn upload_through_sudo_writes_atomically_and_skips_unchanged_files() {
    require_sshd!();
    if !std::path::Path::new("/usr/bin/sudo").exists() {
        eprintln!("skipped: sudo is not installed (apt-get install sudo)");
        return;
    }
    upload_is_atomic_and_idempotent(true).await;
}

#[tokio::test]
async fn upload_failure_names_host_and_path_but_never_the_content() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = connect(&sshd).await;
    let path = sshd.dir.path().join("x.conf");
    let up = Upload::new(
        path.to_str().unwrap(),
        0o600,
        "no-such-user-hactl",
        "root",
        b"TOPSECRET".to_vec(),
    );
    let err = s.upload(&up).await.unwrap_err();
    let chain = format!("{:#}", anyhow::Error::from(err));
    assert!(
        chain.starts_with(&format!("failed to upload {} to node1", path.display())),
        "{chain}"
    );
    assert!(chain.contains("no-such-user-hactl"), "{chain}");
    assert!(!chain.contains("TOPSECRET"), "{chain}");
    assert!(!path.exists());
    assert!(!std::path::Path::new(&format!("{}.hactl-tmp", path.display())).exists());
}

#[tokio::test]
async fn first_connection_records_the_host_key_in_openssh_format() {
    require_sshd!();
    let sshd = Sshd::start();
    let known = sshd.dir.path().join("known_hosts");
    assert!(!known.exists());
    connect(&sshd).await;
    let text = std::fs::read_to_string(&known).unwrap();
    assert_eq!(
        text,
        format!("[127.0.0.1]:{} {}\n", sshd.port, sshd.host_public_key())
    );
    assert_eq!(std::fs::metadata(&known).unwrap().mode() & 0o777, 0o600);
    // OpenSSH itself finds the entry.
    let found = std::process::Command::new("ssh-keygen")
        .args(["-F", &format!("[127.0.0.1]:{}", sshd.port), "-f"])
        .arg(&known)
        .output()
        .unwrap();
    assert!(found.status.success());
}

#[tokio::test]
async fn changed_host_key_is_refused_before_anything_runs() {
    require_sshd!();
    let mut sshd = Sshd::start();
    let opts = options(sshd.dir.path());
    Session::connect("node1", &sshd.spec(), &opts).await.unwrap();
    let old = sshd.host_fingerprint();
    sshd.restart_with_new_host_key();
    let new = sshd.host_fingerprint();
    assert_ne!(old, new);

    let marker = sshd.dir.path().join("ran");
    let result = Session::connect("node1", &sshd.spec(), &opts).await;
    if let Ok(s) = &result {
        let _ = s
            .run(&RemoteCommand::new(["touch", marker.to_str().unwrap()]))
            .await;
    }
    let err = result.unwrap_err();
    match &err {
        Error::HostKeyChanged {
            host,
            known,
            presented,
            ..
        } => {
            assert_eq!(host, "node1");
            assert_eq!(known, &old);
            assert_eq!(presented, &new);
        }
        other => panic!("expected HostKeyChanged, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&old) && msg.contains(&new), "{msg}");
    assert!(
        msg.contains("run again with --accept-new-host-key node1"),
        "{msg}"
    );
    assert!(!marker.exists());
    // A fresh load of the file (a later run) refuses too: the old key is still the one on record.
    let again = Session::connect("node1", &sshd.spec(), &options(sshd.dir.path())).await;
    assert!(matches!(again, Err(Error::HostKeyChanged { .. })));
}

#[tokio::test]
async fn accept_new_host_key_replaces_the_known_key() {
    require_sshd!();
    let mut sshd = Sshd::start();
    connect(&sshd).await;
    sshd.restart_with_new_host_key();
    let mut opts = options(sshd.dir.path());
    opts.accept_new_host_key = vec!["node1".into()];
    // Accepting another host changes nothing for this one.
    let mut other = options(sshd.dir.path());
    other.accept_new_host_key = vec!["node2".into()];
    assert!(matches!(
        Session::connect("node1", &sshd.spec(), &other).await,
        Err(Error::HostKeyChanged { .. })
    ));
    let s = Session::connect("node1", &sshd.spec(), &opts).await.unwrap();
    assert!(s.run(&RemoteCommand::new(["true"])).await.unwrap().success());
    let text = std::fs::read_to_string(sshd.dir.path().join("known_hosts")).unwrap();
    assert_eq!(
        text,
        format!("[127.0.0.1]:{} {}\n", sshd.port, sshd.host_public_key())
    );
    // And the next run needs no flag.
    connect(&sshd).await;
}

#[tokio::test]
async fn bastion_reaches_the_target_with_its_own_host_key_check() {
    require_sshd!();
    let target = Sshd::start();
    let jump = Sshd::start();
    // One client key for both.
    jump.authorize(&target.client_key.with_extension("pub"));
    let spec = SshSpec {
        bastion: Some(Box::new(SshSpec {
            auth: SshAuth::KeyFile(target.client_key.clone()),
            ..jump.spec()
        })),
        ..target.spec()
    };
    let s = Session::connect("node1", &spec, &options(target.dir.path()))
        .await
        .unwrap();
    let out = s.run(&RemoteCommand::new(["echo", "via bastion"])).await.unwrap();
    assert_eq!(out.stdout_str(), "via bastion\n");
    let text = std::fs::read_to_string(target.dir.path().join("known_hosts")).unwrap();
    assert!(
        text.contains(&format!("[127.0.0.1]:{} {}", jump.port, jump.host_public_key())),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "[127.0.0.1]:{} {}",
            target.port,
            target.host_public_key()
        )),
        "{text}"
    );
}

#[tokio::test]
async fn forward_tunnels_tcp_to_a_service_on_the_host() {
    require_sshd!();
    let sshd = Sshd::start();
    let s = connect(&sshd).await;
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = echo.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = sock.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let (port, guard) = s.forward("127.0.0.1", echo_port).await.unwrap();
    assert_eq!(guard.local_port(), port);
    for round in 0..3 {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let msg = format!("hello {round}");
        c.write_all(msg.as_bytes()).await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).await.unwrap();
        assert_eq!(back, msg);
    }
    drop(guard);
    // The listener goes away once the guard is dropped.
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused);
}

fn host(name: &str, ssh: SshSpec) -> Host {
    Host {
        name: name.into(),
        address: ssh.address,
        prefix_length: 8,
        roles: vec![Role::Etcd],
        interface: None,
        ssh,
    }
}

#[tokio::test]
async fn fan_out_keeps_inventory_order_and_per_host_errors() {
    require_sshd!();
    let a = Sshd::start();
    let b = Sshd::start();
    let dead = SshSpec {
        port: sshd::free_port(),
        ..a.spec()
    };
    let hosts = [
        host("cp1", a.spec()),
        host("cp2", dead),
        host("cp3", b.spec()),
        host("cp4", a.spec()),
    ];
    let refs: Vec<&Host> = hosts.iter().collect();
    let opts = options(a.dir.path());
    let reach = Reach::sort(&refs, connect_with(&refs, &opts, 2).await);
    let names: Vec<&str> = reach.transports.keys().map(String::as_str).collect();
    assert_eq!(names, ["cp1", "cp3", "cp4"]);
    assert_eq!(reach.unreachable.len(), 1);
    let (name, chain) = reach.unreachable.iter().next().unwrap();
    assert_eq!(name, "cp2");
    assert!(
        chain.text.starts_with("failed to connect to cp2 at 127.0.0.1:"),
        "{chain}"
    );
    assert!(chain.text.to_lowercase().contains("refused"), "{chain}");

    let results = for_each_host(&refs, 4, |h| {
        let (name, spec, opts) = (h.name.clone(), h.ssh.clone(), opts.clone());
        async move {
            let s = Session::connect(&name, &spec, &opts).await?;
            let out = s.run(&RemoteCommand::new(["echo", &name])).await?;
            Ok(out.stdout_str())
        }
    })
    .await;
    let summary: Vec<(&str, Result<&str, ()>)> = results
        .iter()
        .map(|(n, r)| (n.as_str(), r.as_ref().map(|s| s.as_str()).map_err(|_| ())))
        .collect();
    assert_eq!(
        summary,
        [
            ("cp1", Ok("cp1\n")),
            ("cp2", Err(())),
            ("cp3", Ok("cp3\n")),
            ("cp4", Ok("cp4\n"))
        ]
    );
}

#[tokio::test]
async fn rsa_key_logs_in_with_a_sha2_signature() {
    require_sshd!();
    let sshd = Sshd::start();
    let rsa = sshd.dir.path().join("client_rsa");
    sshd::keygen(&rsa, "rsa");
    sshd.authorize(&rsa.with_extension("pub"));
    let spec = SshSpec {
        auth: SshAuth::KeyFile(rsa),
        ..sshd.spec()
    };
    let s = Session::connect("node1", &spec, &options(sshd.dir.path()))
        .await
        .unwrap();
    assert!(s.run(&RemoteCommand::new(["true"])).await.unwrap().success());
}

#[tokio::test]
async fn refused_key_reports_user_and_what_was_tried() {
    require_sshd!();
    let sshd = Sshd::start();
    let stranger = sshd.dir.path().join("stranger");
    sshd::keygen(&stranger, "ed25519");
    let spec = SshSpec {
        auth: SshAuth::KeyFile(stranger.clone()),
        ..sshd.spec()
    };
    let err = Session::connect("node1", &spec, &options(sshd.dir.path()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AuthenticationRefused { .. }), "{err:?}");
    let msg = err.to_string();
    let fp = sshd::fingerprint_of(&stranger.with_extension("pub"));
    assert!(msg.starts_with("node1 refused authentication as root"), "{msg}");
    assert!(
        msg.contains(&fp) && msg.contains(stranger.to_str().unwrap()),
        "{msg}"
    );
}

/// An encrypted key file in `dir`, authorized on `sshd`.
fn encrypted_key(sshd: &Sshd, name: &str, passphrase: &str) -> std::path::PathBuf {
    let key = sshd.dir.path().join(name);
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-C", "", "-N", passphrase, "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    sshd.authorize(&key.with_extension("pub"));
    key
}

#[tokio::test]
async fn encrypted_key_file_without_a_passphrase_says_how_to_give_one() {
    require_sshd!();
    let sshd = Sshd::start();
    let key = encrypted_key(&sshd, "locked", "passphrase");
    let spec = SshSpec {
        auth: SshAuth::KeyFile(key.clone()),
        ..sshd.spec()
    };
    let mut opts = options(sshd.dir.path());
    opts.key_passphrase = PassphraseSource::None;
    let err = Session::connect("node1", &spec, &opts).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "key file {} is encrypted and no passphrase was given: set HACTL_SSH_KEY_PASSPHRASE, \
             run hactl on a terminal to be asked, or load the key into ssh-agent and set agent: true",
            key.display()
        )
    );
}

/// The passphrase decrypts the key and the server accepts it; a wrong one is named by its origin
/// and never shown; `HACTL_SSH_KEY_PASSPHRASE` is read when no passphrase is given.
#[tokio::test]
async fn encrypted_key_file_logs_in_with_its_passphrase() {
    require_sshd!();
    let sshd = Sshd::start();
    let secret = "correct horse battery staple";
    let connect_with = |key: &std::path::Path, source: PassphraseSource| {
        let spec = SshSpec {
            auth: SshAuth::KeyFile(key.to_path_buf()),
            ..sshd.spec()
        };
        let mut opts = options(sshd.dir.path());
        opts.key_passphrase = source;
        async move { Session::connect("node1", &spec, &opts).await }
    };

    let key = encrypted_key(&sshd, "given", secret);
    let Err(err) = connect_with(&key, PassphraseSource::Given("wrong passphrase".into())).await else {
        panic!("a wrong passphrase logged in")
    };
    let msg = format!("{:#}", anyhow::Error::from(err));
    assert_eq!(
        msg,
        format!(
            "key file {}: the passphrase (given) does not decrypt it",
            key.display()
        )
    );
    assert!(!msg.contains("wrong passphrase"), "{msg}");
    let s = connect_with(&key, PassphraseSource::Given(secret.into()))
        .await
        .unwrap();
    let out = s.run(&RemoteCommand::new(["echo", "in"])).await.unwrap();
    assert_eq!(out.stdout, b"in\n");

    let key = encrypted_key(&sshd, "from-env", secret);
    // Only this test reads or writes the variable.
    std::env::set_var(hactl::ssh::PASSPHRASE_ENV, secret);
    let s = connect_with(&key, PassphraseSource::EnvOrTerminal).await;
    std::env::remove_var(hactl::ssh::PASSPHRASE_ENV);
    let out = s
        .unwrap()
        .run(&RemoteCommand::new(["echo", "env"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"env\n");
}

#[tokio::test]
async fn agent_identities_log_in() {
    require_sshd!();
    let sshd = Sshd::start();
    // A key the server does not know comes first: the agent's keys are tried in turn.
    let stranger = sshd.dir.path().join("stranger");
    sshd::keygen(&stranger, "ed25519");
    let Some(agent) = sshd::Agent::start(sshd.dir.path(), &[&stranger, &sshd.client_key]) else {
        eprintln!("skipped: ssh-agent is not installed (apt-get install openssh-client)");
        return;
    };
    let spec = SshSpec {
        auth: SshAuth::Agent,
        ..sshd.spec()
    };
    let mut opts = options(sshd.dir.path());
    opts.agent_socket = Some(agent.socket.clone());
    let s = Session::connect("node1", &spec, &opts).await.unwrap();
    assert!(s.run(&RemoteCommand::new(["true"])).await.unwrap().success());
}

#[tokio::test]
async fn connect_times_out_on_a_silent_port() {
    require_sshd!();
    // Accepts TCP but never speaks SSH.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = SshSpec {
        port: silent.local_addr().unwrap().port(),
        connect_timeout_secs: 1,
        ..SshSpec {
            address: sshd::LOOPBACK,
            port: 0,
            user: "root".into(),
            auth: SshAuth::Agent,
            sudo: false,
            bastion: None,
            connect_timeout_secs: 1,
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let err = Session::connect("node1", &spec, &options(dir.path()))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "timed out after 1s connecting to node1 at 127.0.0.1:{}",
            spec.port
        )
    );
}

/// sudo -n without a NOPASSWD rule: a clear error naming the fix. Needs root (to create the user
/// `hactl-sudo-test`) and sudo; skips with the reason otherwise.
#[tokio::test]
async fn sudo_without_nopasswd_rule_names_the_fix() {
    require_sshd!();
    if !std::path::Path::new("/usr/bin/sudo").exists() {
        eprintln!("skipped: sudo is not installed (apt-get install sudo)");
        return;
    }
    let Some(user) = test_user() else { return };
    let sshd = Sshd::start();
    let spec = SshSpec {
        user: user.into(),
        sudo: true,
        ..sshd.spec()
    };
    let s = Session::connect("node1", &spec, &options(sshd.dir.path()))
        .await
        .unwrap();
    let err = s.run(&RemoteCommand::new(["true"])).await.unwrap_err();
    assert!(matches!(err, Error::SudoPasswordRequired { .. }), "{err:?}");
    assert!(err.to_string().contains("NOPASSWD"), "{err}");
}
