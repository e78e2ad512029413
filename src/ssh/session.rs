//! One authenticated SSH connection to one host, kept for the whole run.
//!
//! Every command, upload and forwarded connection opens its own channel on the connection, so
//! callers may use one [`Session`] from many tasks at once (`&self` everywhere).
//!
//! Invariants:
//! - the host key is checked against the cluster's [`KnownHosts`] during the handshake; a changed
//!   key ends the connection before authentication, so nothing can run on such a host;
//! - the line sent for a [`RemoteCommand`] is `quote::command_line(argv, sudo)`, as `hactl plan`
//!   prints it;
//! - upload content travels over SFTP or stdin, never in argv, logs or errors.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client;
use russh::keys::agent::client::AgentClient;
use russh::keys::ssh_key::PublicKey;
use russh::keys::{PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, Disconnect, Sig};
use russh_sftp::client::SftpSession;
use russh_sftp::protocol::{FileAttributes, OpenFlags};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OnceCell;
use tracing::{debug, info, warn};

use super::known_hosts::{fingerprint, Verdict};
use super::{Error, KnownHosts, Output, UploadOutcome};
use crate::inventory::{SshAuth, SshSpec};
use crate::plan::{Content, RemoteCommand, Upload};
use crate::quote;

/// How to connect, shared by all hosts of a run.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The cluster's known_hosts file.
    pub known_hosts: Arc<KnownHosts>,
    /// Host names (or bastion addresses) whose changed host key the user accepts
    /// (`--accept-new-host-key`).
    pub accept_new_host_key: Vec<String>,
    /// Overrides each host's `connect_timeout_secs` when set.
    pub timeout: Option<Duration>,
    /// The ssh-agent socket for `SshAuth::Agent`; `None` reads `SSH_AUTH_SOCK`.
    pub agent_socket: Option<PathBuf>,
    /// Where the passphrase of an encrypted key file comes from.
    pub key_passphrase: PassphraseSource,
}

impl ConnectOptions {
    pub fn new(known_hosts: Arc<KnownHosts>) -> ConnectOptions {
        ConnectOptions {
            known_hosts,
            accept_new_host_key: Vec::new(),
            timeout: None,
            agent_socket: None,
            key_passphrase: PassphraseSource::default(),
        }
    }
}

/// The environment variable that holds the passphrase of encrypted key files.
pub const PASSPHRASE_ENV: &str = "HACTL_SSH_KEY_PASSPHRASE";

/// Where the passphrase of an encrypted key file comes from. It is never logged or put in an
/// error; `Debug` shows only where it came from.
#[derive(Clone, Default)]
pub enum PassphraseSource {
    /// `HACTL_SSH_KEY_PASSPHRASE` when set, else asked on the terminal (when stdin and stderr are
    /// one), else none: the error says how to give one.
    #[default]
    EnvOrTerminal,
    /// This passphrase (tests; callers that read it elsewhere).
    Given(Arc<str>),
    /// Never ask: encrypted key files are refused.
    None,
}

impl std::fmt::Debug for PassphraseSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PassphraseSource::EnvOrTerminal => "EnvOrTerminal",
            PassphraseSource::Given(_) => "Given(<redacted>)",
            PassphraseSource::None => "None",
        })
    }
}

/// Where a passphrase came from, for the error when it does not decrypt the key.
enum PassphraseOrigin {
    Env,
    Terminal,
    Given,
}

/// Decrypted keys by file, so a run asks once and decrypts once however many hosts share a key.
/// The lock is held while asking, so parallel connections wait for the one prompt.
static DECRYPTED_KEYS: std::sync::Mutex<std::collections::BTreeMap<PathBuf, Arc<russh::keys::PrivateKey>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Loads a key file, decrypting it with a passphrase from `source` when it is encrypted.
fn load_key_file(
    path: &std::path::Path,
    source: &PassphraseSource,
) -> Result<Arc<russh::keys::PrivateKey>, Error> {
    match russh::keys::load_secret_key(path, None) {
        Ok(key) => return Ok(Arc::new(key)),
        Err(e) if !is_encrypted(&e) => return Err(key_file_error(path, e)),
        Err(_) => {}
    }
    let mut cache = DECRYPTED_KEYS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(key) = cache.get(path) {
        return Ok(key.clone());
    }
    let (passphrase, origin): (zeroize_on_drop::Secret, PassphraseOrigin) = match source {
        PassphraseSource::Given(p) => (zeroize_on_drop::Secret(p.to_string()), PassphraseOrigin::Given),
        PassphraseSource::None => return Err(encrypted_error(path, None)),
        PassphraseSource::EnvOrTerminal => match std::env::var(PASSPHRASE_ENV) {
            Ok(p) => (zeroize_on_drop::Secret(p), PassphraseOrigin::Env),
            Err(_) => {
                use std::io::IsTerminal;
                if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
                    return Err(encrypted_error(path, None));
                }
                let prompt = format!("passphrase for key file {}: ", path.display());
                match rpassword::prompt_password(prompt) {
                    Ok(p) => (zeroize_on_drop::Secret(p), PassphraseOrigin::Terminal),
                    Err(_) => return Err(encrypted_error(path, None)),
                }
            }
        },
    };
    match russh::keys::load_secret_key(path, Some(&passphrase.0)) {
        Ok(key) => {
            let key = Arc::new(key);
            cache.insert(path.to_path_buf(), key.clone());
            Ok(key)
        }
        Err(e) if is_encrypted(&e) => Err(encrypted_error(path, Some(origin))),
        Err(e) => Err(key_file_error(path, e)),
    }
}

/// Holds a passphrase and overwrites it when dropped.
mod zeroize_on_drop {
    pub struct Secret(pub String);
    impl Drop for Secret {
        fn drop(&mut self) {
            // Safe Rust cannot write through a `String` as bytes of another type; replacing every
            // byte with a NUL keeps it valid UTF-8.
            let len = self.0.len();
            self.0.clear();
            self.0.extend(std::iter::repeat_n('\0', len));
        }
    }
}

fn is_encrypted(e: &russh::keys::Error) -> bool {
    matches!(
        e,
        russh::keys::Error::KeyIsEncrypted | russh::keys::Error::SshKey(russh::keys::ssh_key::Error::Crypto)
    )
}

fn encrypted_error(path: &std::path::Path, tried: Option<PassphraseOrigin>) -> Error {
    let path = path.to_path_buf();
    match tried {
        None => Error::KeyFileEncrypted { path },
        Some(origin) => Error::KeyFilePassphrase {
            path,
            from: match origin {
                PassphraseOrigin::Env => format!("from {PASSPHRASE_ENV}"),
                PassphraseOrigin::Terminal => "typed".to_string(),
                PassphraseOrigin::Given => "given".to_string(),
            },
        },
    }
}

/// A piece of a command's output, as it arrives.
#[derive(Debug, Clone, Copy)]
pub enum OutputChunk<'a> {
    Stdout(&'a [u8]),
    Stderr(&'a [u8]),
}

/// A command's output kept in memory, each stream up to a limit: past it the collector stops
/// and says which stream overflowed, and the command is ended.
#[derive(Debug)]
pub struct Collector {
    limit: u64,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The stream that went past the limit, once one has.
    pub overflowed: Option<&'static str>,
}

impl Collector {
    pub fn new(limit: u64) -> Collector {
        Collector {
            limit,
            stdout: Vec::new(),
            stderr: Vec::new(),
            overflowed: None,
        }
    }

    /// Keeps `chunk`; false once a stream has gone past the limit (nothing more is kept then).
    pub fn push(&mut self, chunk: OutputChunk<'_>) -> bool {
        if self.overflowed.is_some() {
            return false;
        }
        let (buf, data, name) = match chunk {
            OutputChunk::Stdout(d) => (&mut self.stdout, d, "stdout"),
            OutputChunk::Stderr(d) => (&mut self.stderr, d, "stderr"),
        };
        if buf.len() as u64 + data.len() as u64 > self.limit {
            self.overflowed = Some(name);
            return false;
        }
        buf.extend_from_slice(data);
        true
    }

    /// The output, or the error naming the command, its host and the stream past the limit.
    fn finish(self, host: &str, line: String, status: Option<u32>) -> Result<Output, Error> {
        if let Some(stream) = self.overflowed {
            return Err(Error::OutputTooLarge {
                host: host.to_string(),
                line,
                stream,
                limit: crate::bounded::human(self.limit),
            });
        }
        Ok(Output {
            status,
            stdout: self.stdout,
            stderr: self.stderr,
        })
    }
}

/// An open connection to one host.
pub struct Session {
    host: String,
    user: String,
    sudo: bool,
    handle: Arc<client::Handle<Client>>,
    /// Opened on the first upload without sudo, then reused.
    sftp: OnceCell<SftpSession>,
    /// Kept so the tunnel under this connection stays up.
    bastion: Option<Box<Session>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("host", &self.host)
            .field("user", &self.user)
            .field("sudo", &self.sudo)
            .field("bastion", &self.bastion.as_ref().map(|b| &b.host))
            .finish()
    }
}

/// The russh handler: checks the server's key against known_hosts.
struct Client {
    host: String,
    addr: SocketAddr,
    known_hosts: Arc<KnownHosts>,
    accept_changed: bool,
    /// Why the key was refused, so connect reports it instead of a bare "disconnected".
    refusal: Arc<Mutex<Option<Error>>>,
}

impl client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(&mut self, key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let key = key.public_key();
        let presented = fingerprint(&key);
        let (ip, port) = (self.addr.ip(), self.addr.port());
        let refusal = match self.known_hosts.verify(ip, port, &key, self.accept_changed) {
            Ok(Verdict::Known) => return Ok(true),
            Ok(Verdict::Recorded) if self.known_hosts.is_read_only() => {
                info!(
                    "{}: host key {presented} seen for the first time; not recorded (this command \
                     writes nothing): compare it with `ssh-keygen -lf` on the host",
                    self.host
                );
                return Ok(true);
            }
            Ok(Verdict::Recorded) => {
                info!(
                    "{}: recorded host key {presented} in {}",
                    self.host,
                    self.known_hosts.path().display()
                );
                return Ok(true);
            }
            Ok(Verdict::Replaced { old }) if self.known_hosts.is_read_only() => {
                warn!(
                    "{}: accepted host key {presented} in place of {} for this run, as asked \
                     (--accept-new-host-key); not recorded (this command writes nothing)",
                    self.host,
                    fingerprint(&old)
                );
                return Ok(true);
            }
            Ok(Verdict::Replaced { old }) => {
                warn!(
                    "{}: replaced host key {} with {presented} as asked (--accept-new-host-key)",
                    self.host,
                    fingerprint(&old)
                );
                return Ok(true);
            }
            Ok(Verdict::Refused { known }) => Error::HostKeyChanged {
                host: self.host.clone(),
                addr: self.addr.to_string(),
                known: fingerprint(&known),
                presented,
                known_hosts: self.known_hosts.path().to_path_buf(),
            },
            Err(e) => e,
        };
        warn!("{}: refusing the connection: {refusal}", self.host);
        *self.refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(refusal);
        Ok(false)
    }
}

impl Session {
    /// Connects to `spec` (through its bastion if it has one), checks the host key and logs in.
    /// The whole of it is bounded by the connect timeout, except reading the key files: a key
    /// file is read (decrypted, its passphrase asked for on a terminal) first and kept, so neither
    /// a person typing nor the key derivation (slow on a busy machine) counts against it.
    pub async fn connect(host_name: &str, spec: &SshSpec, opts: &ConnectOptions) -> Result<Session, Error> {
        let mut hop = Some(spec);
        while let Some(s) = hop {
            if let SshAuth::KeyFile(path) = &s.auth {
                load_key_file(path, &opts.key_passphrase)?;
            }
            hop = s.bastion.as_deref();
        }
        let limit = opts
            .timeout
            .unwrap_or(Duration::from_secs(spec.connect_timeout_secs.max(1)));
        match tokio::time::timeout(limit, Self::connect_unbounded(host_name, spec, opts)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout {
                host: host_name.to_string(),
                what: format!("connecting to {host_name} at {}:{}", spec.address, spec.port),
                secs: limit.as_secs(),
            }),
        }
    }

    async fn connect_unbounded(
        host_name: &str,
        spec: &SshSpec,
        opts: &ConnectOptions,
    ) -> Result<Session, Error> {
        let addr = SocketAddr::new(spec.address, spec.port);
        let (handle, bastion) = match &spec.bastion {
            None => {
                debug!("{host_name}: connecting to {addr}");
                let tcp = TcpStream::connect(addr).await.map_err(|source| Error::Connect {
                    host: host_name.to_string(),
                    addr,
                    source,
                })?;
                let _ = tcp.set_nodelay(true);
                (handshake(host_name, addr, tcp, spec, opts).await?, None)
            }
            Some(b) => {
                let b_addr = SocketAddr::new(b.address, b.port);
                let via = |source: Error| Error::Bastion {
                    host: host_name.to_string(),
                    bastion: b_addr,
                    source: Box::new(source),
                };
                // The bastion is named by its address: that is what --accept-new-host-key takes for it.
                let b_name = b.address.to_string();
                let jump = Box::pin(Self::connect_unbounded(&b_name, b, opts))
                    .await
                    .map_err(via)?;
                debug!("{host_name}: connecting to {addr} through bastion {b_addr}");
                let channel = jump
                    .handle
                    .channel_open_direct_tcpip(addr.ip().to_string(), u32::from(addr.port()), "127.0.0.1", 0)
                    .await
                    .map_err(|source| {
                        via(Error::Channel {
                            host: b_name.clone(),
                            source: Box::new(source),
                        })
                    })?;
                let handle = handshake(host_name, addr, channel.into_stream(), spec, opts).await?;
                (handle, Some(Box::new(jump)))
            }
        };
        debug!("{host_name}: logged in as {}", spec.user);
        Ok(Session {
            host: host_name.to_string(),
            user: spec.user.clone(),
            sudo: spec.sudo,
            handle: Arc::new(handle),
            sftp: OnceCell::new(),
            bastion,
        })
    }

    /// The login user.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Runs `cmd`, feeding `stdin` to it and closing its stdin after (secrets go this way, never
    /// in argv).
    pub async fn run_with_stdin(&self, cmd: &RemoteCommand, stdin: &[u8]) -> Result<Output, Error> {
        self.run_with_reader(cmd, &mut &stdin[..]).await
    }

    /// [`Self::run_with_stdin`] with stdin streamed from `stdin` (a file, never whole in memory).
    async fn run_with_reader(
        &self,
        cmd: &RemoteCommand,
        stdin: &mut (dyn tokio::io::AsyncRead + Unpin + Send),
    ) -> Result<Output, Error> {
        let mut out = Collector::new(cmd.output_limit);
        let status = self.exec(cmd, Some(stdin), &mut |chunk| out.push(chunk)).await?;
        out.finish(&self.host, cmd.line(self.sudo), status)
    }

    /// Runs `cmd` and hands its output to `on_output` as it arrives; returns the exit status.
    pub async fn run_streaming(
        &self,
        cmd: &RemoteCommand,
        mut on_output: impl FnMut(OutputChunk<'_>) + Send,
    ) -> Result<Option<u32>, Error> {
        self.exec(cmd, None, &mut |chunk| {
            on_output(chunk);
            true
        })
        .await
    }

    /// Forwards a local port to `remote_host:remote_port` as seen from this host. Each connection
    /// accepted on `127.0.0.1:<port>` gets its own channel. The listener stops when the guard drops.
    pub async fn forward(&self, remote_host: &str, remote_port: u16) -> Result<(u16, ForwardGuard), Error> {
        let target = format!("{remote_host}:{remote_port}");
        let err = |local_port, source| Error::Forward {
            host: self.host.clone(),
            target: target.clone(),
            local_port,
            source,
        };
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| err(0, e))?;
        let port = listener.local_addr().map_err(|e| err(0, e))?.port();
        debug!("{}: forwarding 127.0.0.1:{port} to {target}", self.host);
        let handle = self.handle.clone();
        let host = self.host.clone();
        let remote_host = remote_host.to_string();
        let task = tokio::spawn(async move {
            // Dropping the set (when the guard aborts this task) aborts every open connection.
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((socket, peer)) => {
                            let (handle, host, remote_host) = (handle.clone(), host.clone(), remote_host.clone());
                            conns.spawn(async move {
                                if let Err(e) = pipe(&handle, socket, peer, &remote_host, remote_port).await {
                                    debug!("{host}: forwarded connection to {remote_host}:{remote_port} ended: {e}");
                                }
                            });
                        }
                        Err(e) => {
                            warn!("{host}: forward listener on 127.0.0.1:{port} failed: {e}");
                            break;
                        }
                    },
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok((port, ForwardGuard { port, task }))
    }

    /// Ends the connection (and its bastion's).
    pub async fn close(&self) -> Result<(), Error> {
        let result = self
            .handle
            .disconnect(Disconnect::ByApplication, "", "en")
            .await
            .map_err(|source| Error::Channel {
                host: self.host.clone(),
                source: Box::new(source),
            });
        if let Some(b) = &self.bastion {
            let _ = Box::pin(b.close()).await;
        }
        result
    }

    fn channel_err(&self) -> impl Fn(russh::Error) -> Error + '_ {
        move |source| Error::Channel {
            host: self.host.clone(),
            source: Box::new(source),
        }
    }

    /// The one place a command is sent: opens a channel, sends the line, feeds stdin, hands
    /// output to `sink` until the channel closes, `cmd.timeout` passes or `sink` returns false
    /// (its collector is full: the command is sent TERM and its channel closed, as on a timeout).
    async fn exec(
        &self,
        cmd: &RemoteCommand,
        stdin: Option<&mut (dyn tokio::io::AsyncRead + Unpin + Send)>,
        sink: &mut (dyn FnMut(OutputChunk<'_>) -> bool + Send),
    ) -> Result<Option<u32>, Error> {
        let line = quote::command_line(&cmd.argv, self.sudo);
        debug!("{}: run {line}", self.host);
        let command_err = |source| Error::Command {
            host: self.host.clone(),
            line: line.clone(),
            source: Box::new(source),
        };
        let channel = self
            .handle
            .channel_open_session()
            .await
            .map_err(self.channel_err())?;
        channel.exec(true, line.as_bytes()).await.map_err(command_err)?;
        let (mut read, write) = channel.split();

        let mut stderr_head = Vec::new();
        let io = async {
            let writer = async {
                if let Some(reader) = stdin {
                    write.data(reader).await?;
                }
                write.eof().await
            };
            let reader = async {
                let mut status = None;
                let mut stopped = false;
                while let Some(msg) = read.wait().await {
                    match msg {
                        // The guard hands the chunk to the sink, once; false: the sink is full.
                        ChannelMsg::Data { data } if !sink(OutputChunk::Stdout(&data)) => {
                            stopped = true;
                            break;
                        }
                        ChannelMsg::Data { .. } => {}
                        ChannelMsg::ExtendedData { data, ext: 1 } => {
                            // sudo's complaint may arrive in pieces: look at the start of stderr.
                            if self.sudo && stderr_head.len() < STDERR_HEAD {
                                let room = STDERR_HEAD - stderr_head.len();
                                stderr_head.extend_from_slice(&data[..data.len().min(room)]);
                            }
                            if !sink(OutputChunk::Stderr(&data)) {
                                stopped = true;
                                break;
                            }
                        }
                        ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                        ChannelMsg::ExitSignal { signal_name, .. } => {
                            debug!("{}: `{line}` killed by signal {signal_name:?}", self.host)
                        }
                        ChannelMsg::Close => break,
                        _ => {}
                    }
                }
                (status, stopped)
            };
            tokio::join!(writer, reader)
        };
        match tokio::time::timeout(cmd.timeout, io).await {
            Ok((_, (status, true))) => {
                // The sink has all it keeps: end the command rather than read it to its end.
                debug!(
                    "{}: `{line}` printed more than its caller keeps; sent TERM and closed its channel",
                    self.host
                );
                let _ = write.signal(Sig::TERM).await;
                let _ = write.close().await;
                Ok(status)
            }
            Ok((written, (status, false))) => {
                if contains(&stderr_head, b"sudo: a password is required") {
                    return Err(Error::SudoPasswordRequired {
                        host: self.host.clone(),
                        user: self.user.clone(),
                    });
                }
                // A command may exit without reading its stdin; its status is what counts then.
                if let (Err(e), None) = (written, status) {
                    return Err(command_err(e));
                }
                Ok(status)
            }
            Err(_) => {
                // sshd delivers the signal to sessions of unprivileged users only; a root
                // session's command keeps running after its channel closes.
                warn!(
                    "{}: `{line}` timed out after {}s; sent TERM and closed its channel",
                    self.host,
                    cmd.timeout.as_secs()
                );
                let _ = write.signal(Sig::TERM).await;
                let _ = write.close().await;
                Err(Error::Timeout {
                    host: self.host.clone(),
                    what: format!("running `{line}` on {}", self.host),
                    secs: cmd.timeout.as_secs(),
                })
            }
        }
    }

    /// Runs `cmd` and turns a non-zero exit into an error carrying its stderr.
    async fn run_checked(
        &self,
        cmd: &RemoteCommand,
        stdin: Option<&[u8]>,
        what: &str,
    ) -> Result<Output, Error> {
        let out = match stdin {
            Some(bytes) => self.run_with_stdin(cmd, bytes).await?,
            None => self.run(cmd).await?,
        };
        if out.success() {
            Ok(out)
        } else {
            Err(remote_failure(what, &out))
        }
    }

    async fn sftp(&self) -> Result<&SftpSession, Error> {
        self.sftp
            .get_or_try_init(|| async {
                let channel = self
                    .handle
                    .channel_open_session()
                    .await
                    .map_err(self.channel_err())?;
                channel
                    .request_subsystem(true, "sftp")
                    .await
                    .map_err(self.channel_err())?;
                // Writes of up to 128 KiB (OpenSSH's sftp-server takes 256 KiB), 16 in
                // flight: with the default 32 KiB a binary moved at a third of the speed.
                let config = russh_sftp::client::Config {
                    max_write_packet_len: 128 << 10,
                    ..Default::default()
                };
                SftpSession::new_with_config(channel.into_stream(), config)
                    .await
                    .map_err(|e| self.sftp_err(e.into()))
            })
            .await
    }

    fn sftp_err(&self, source: std::io::Error) -> Error {
        Error::Sftp {
            host: self.host.clone(),
            source,
        }
    }

    async fn upload_unwrapped(&self, upload: &Upload) -> Result<UploadOutcome, Error> {
        // Round trip 1: what is there now (read-only, through sudo when the host needs it).
        let probe = RemoteCommand::read_only(["sh", "-c", PROBE_SCRIPT, "sh", &upload.path]);
        let out = self.run_checked(&probe, None, "reading the current file").await?;
        let remote = RemoteFile::parse(&out.stdout_str());
        if remote.matches(upload) {
            debug!("{}: {} unchanged", self.host, upload.path);
            return Ok(UploadOutcome::Unchanged);
        }
        let tmp = temp_path(&upload.path);
        let owner = format!("{}:{}", upload.owner, upload.group);
        let mode = format!("{:04o}", upload.mode & 0o7777);
        let timeout = upload_timeout(upload.size());
        debug!("{}: write {upload}", self.host);
        let install_with = |script: &str| {
            RemoteCommand::new([
                "sh",
                "-c",
                &recording(script),
                "sh",
                &tmp,
                &owner,
                &mode,
                &upload.path,
                record_digest(upload),
                crate::digest_cache::DIR,
            ])
            .with_timeout(timeout)
        };
        let finish = install_with(FINISH_SCRIPT);

        if !self.sudo {
            match self.sftp().await {
                Ok(sftp) => {
                    if !remote.parent_exists {
                        let mkdir = RemoteCommand::new(["sh", "-c", MKDIR_SCRIPT, "sh", &upload.path]);
                        self.run_checked(&mkdir, None, "creating the parent directory")
                            .await?;
                    }
                    // Round trip 2: the content, into a temporary file only we can read.
                    let attrs = FileAttributes {
                        permissions: Some(0o600),
                        ..FileAttributes::empty()
                    };
                    let flags = OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::WRITE;
                    // Read in large pieces: the SFTP client splits each write into packets of
                    // its preferred size and keeps several in flight; small reads (8 KiB, as
                    // `tokio::io::copy` makes) would send four times as many packets.
                    let mut source = tokio::io::BufReader::with_capacity(
                        SFTP_READ_CHUNK,
                        ContentReader::open(upload).await?,
                    );
                    let write = async {
                        let mut file = sftp
                            .open_with_flags_and_attributes(tmp.clone(), flags, attrs)
                            .await
                            .map_err(std::io::Error::from)?;
                        tokio::io::copy_buf(&mut source, &mut file).await?;
                        file.shutdown().await
                    };
                    match tokio::time::timeout(timeout, write).await {
                        Ok(r) => r.map_err(|e| self.sftp_err(e))?,
                        Err(_) => {
                            return Err(Error::Timeout {
                                host: self.host.clone(),
                                what: format!("writing {tmp} over sftp on {}", self.host),
                                secs: timeout.as_secs(),
                            })
                        }
                    }
                    self.refuse_changed_source(upload, source.get_ref(), &tmp).await?;
                    // Round trip 3: owner, mode, then the atomic rename.
                    self.run_checked(&finish, None, "placing the file").await?;
                    return Ok(UploadOutcome::Written);
                }
                Err(e) => debug!("{}: sftp unavailable ({e}); writing through stdin", self.host),
            }
        }
        if let Content::Bytes(bytes) = &upload.content {
            // Round trip 2 (sudo, or no sftp): everything in one command, content on stdin.
            let install = install_with(INSTALL_SCRIPT);
            self.run_checked(&install, Some(bytes), "writing the file")
                .await?;
            return Ok(UploadOutcome::Written);
        }
        // A file of this machine: streamed into the temporary file, its sha256 checked on the
        // way, and placed only then (one round trip more than bytes in memory).
        let mut source = ContentReader::open(upload).await?;
        let write =
            RemoteCommand::new(["sh", "-c", WRITE_SCRIPT, "sh", &tmp, &upload.path]).with_timeout(timeout);
        let out = self.run_with_reader(&write, &mut source).await?;
        if !out.success() {
            return Err(remote_failure("writing the file", &out));
        }
        self.refuse_changed_source(upload, &source, &tmp).await?;
        self.run_checked(&finish, None, "placing the file").await?;
        Ok(UploadOutcome::Written)
    }

    /// After a file of this machine was sent to `tmp`: when what was read is not what was
    /// planned (the file changed since its sha256 was taken), `tmp` is removed and the upload
    /// refused, so no host ever holds content nobody planned.
    async fn refuse_changed_source(
        &self,
        upload: &Upload,
        source: &ContentReader,
        tmp: &str,
    ) -> Result<(), Error> {
        let Some((local, found, size)) = source.mismatch(upload) else {
            return Ok(());
        };
        let rm = RemoteCommand::new(["rm", "-f", "--", tmp]);
        if let Err(e) = self.run(&rm).await {
            warn!("{}: could not remove {tmp}: {e}", self.host);
        }
        Err(Error::LocalFileChanged {
            local,
            planned: upload.sha256.clone(),
            found,
            size,
        })
    }
}

/// What a transport needs from a session (`exec::Transport` delegates to these).
impl Session {
    /// The inventory name of the host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether commands go through `sudo -n --`.
    pub fn sudo(&self) -> bool {
        self.sudo
    }

    /// Runs `cmd` and collects its output; a non-zero exit is not an error here.
    pub async fn run(&self, cmd: &RemoteCommand) -> Result<Output, Error> {
        let mut out = Collector::new(cmd.output_limit);
        let status = self.exec(cmd, None, &mut |chunk| out.push(chunk)).await?;
        out.finish(&self.host, cmd.line(self.sudo), status)
    }

    /// Places a file atomically; skipped when the remote sha256, mode and owner already match.
    pub async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, Error> {
        self.upload_unwrapped(upload)
            .await
            .map_err(|source| Error::Upload {
                host: self.host.clone(),
                path: upload.path.clone(),
                source: Box::new(source),
            })
    }
}

/// Stops a [`Session::forward`] listener and its connections when dropped.
#[derive(Debug)]
pub struct ForwardGuard {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl ForwardGuard {
    /// The local port (also returned by `forward`).
    pub fn local_port(&self) -> u16 {
        self.port
    }
}

impl Drop for ForwardGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    handle: &client::Handle<Client>,
    mut socket: TcpStream,
    peer: SocketAddr,
    remote_host: &str,
    remote_port: u16,
) -> Result<(), russh::Error> {
    let _ = socket.set_nodelay(true);
    let channel = handle
        .channel_open_direct_tcpip(
            remote_host,
            u32::from(remote_port),
            peer.ip().to_string(),
            u32::from(peer.port()),
        )
        .await?;
    let mut stream = channel.into_stream();
    // Large buffers toward the local client: a snapshot streams hundreds of MB this way, and
    // tokio's default 8 KiB costs a read and a write per 8 KiB.
    tokio::io::copy_bidirectional_with_sizes(&mut socket, &mut stream, 64 << 10, 1 << 20).await?;
    Ok(())
}

/// The algorithms offered, russh's defaults, with AES-256-GCM before ChaCha20-Poly1305 when
/// `aes_fast` (the CPU has AES and carry-less multiply instructions). The server takes the first
/// cipher of this list it also has, and both ends then spend CPU on every byte of an upload (about
/// 300 MB per host with Kubernetes): AES-GCM in hardware costs each end a fraction of what
/// ChaCha20-Poly1305 does. Without those instructions ChaCha20-Poly1305 is the faster, and stays
/// first. Both are authenticated ciphers of the same strength; nothing is dropped from the list.
fn preferred(aes_fast: bool) -> russh::Preferred {
    use russh::cipher::{AES_256_GCM, CHACHA20_POLY1305};
    let mut p = russh::Preferred::default();
    if aes_fast {
        let rest = p
            .cipher
            .iter()
            .filter(|c| **c != AES_256_GCM && **c != CHACHA20_POLY1305);
        let order: Vec<_> = [AES_256_GCM, CHACHA20_POLY1305]
            .into_iter()
            .chain(rest.copied())
            .collect();
        p.cipher = order.into();
    }
    p
}

/// Whether this CPU does AES-GCM in hardware (x86-64: AES-NI and PCLMULQDQ; arm64: AES and PMULL).
fn aes_is_fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Key exchange (with the host-key check) and login over an established stream.
async fn handshake<S>(
    host: &str,
    addr: SocketAddr,
    stream: S,
    spec: &SshSpec,
    opts: &ConnectOptions,
) -> Result<client::Handle<Client>, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = Arc::new(client::Config {
        keepalive_interval: Some(Duration::from_secs(15)),
        keepalive_max: 4,
        nodelay: true,
        preferred: preferred(aes_is_fast()),
        ..Default::default()
    });
    let refusal = Arc::new(Mutex::new(None));
    let handler = Client {
        host: host.to_string(),
        addr,
        known_hosts: opts.known_hosts.clone(),
        accept_changed: opts.accept_new_host_key.iter().any(|h| h == host),
        refusal: refusal.clone(),
    };
    let mut handle = match client::connect_stream(config, stream, handler).await {
        Ok(h) => h,
        Err(source) => {
            if let Some(e) = refusal.lock().unwrap_or_else(|p| p.into_inner()).take() {
                return Err(e);
            }
            return Err(Error::Handshake {
                host: host.to_string(),
                addr,
                source: Box::new(source),
            });
        }
    };
    authenticate(&mut handle, host, spec, opts).await?;
    Ok(handle)
}

async fn authenticate(
    handle: &mut client::Handle<Client>,
    host: &str,
    spec: &SshSpec,
    opts: &ConnectOptions,
) -> Result<(), Error> {
    let user = spec.user.as_str();
    let auth_err = |source| Error::Authentication {
        host: host.to_string(),
        user: user.to_string(),
        source: Box::new(source),
    };
    let refused = |tried: String| Error::AuthenticationRefused {
        host: host.to_string(),
        user: user.to_string(),
        tried,
    };
    match &spec.auth {
        SshAuth::KeyFile(path) => {
            let key = load_key_file(path, &opts.key_passphrase)?;
            let fp = fingerprint(key.public_key());
            let hash = if key.algorithm().is_rsa() {
                handle
                    .best_supported_rsa_hash()
                    .await
                    .map_err(auth_err)?
                    .flatten()
            } else {
                None
            };
            let result = handle
                .authenticate_publickey(user, PrivateKeyWithHashAlg::new(key, hash))
                .await
                .map_err(auth_err)?;
            if result.success() {
                Ok(())
            } else {
                Err(refused(format!("publickey from {} ({fp})", path.display())))
            }
        }
        SshAuth::Agent => {
            let socket = opts
                .agent_socket
                .clone()
                .or_else(|| std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from))
                .filter(|p| !p.as_os_str().is_empty())
                .ok_or(Error::AgentUnset)?;
            let agent_err = |source| Error::Agent {
                socket: socket.clone(),
                source: Box::new(source),
            };
            let mut agent = AgentClient::connect_uds(&socket).await.map_err(agent_err)?;
            let identities = agent.request_identities().await.map_err(agent_err)?;
            let mut tried = Vec::new();
            for identity in identities {
                let key: PublicKey = identity.public_key().into_owned();
                let fp = fingerprint(&key);
                let hash = if key.algorithm().is_rsa() {
                    handle
                        .best_supported_rsa_hash()
                        .await
                        .map_err(auth_err)?
                        .flatten()
                } else {
                    None
                };
                match handle
                    .authenticate_publickey_with(user, key, hash, &mut agent)
                    .await
                {
                    Ok(r) if r.success() => return Ok(()),
                    Ok(_) => tried.push(fp),
                    Err(e) => tried.push(format!("{fp} (agent refused to sign: {e})")),
                }
            }
            if tried.is_empty() {
                Err(refused(format!(
                    "ssh-agent at {} holds no keys",
                    socket.display()
                )))
            } else {
                Err(refused(format!("publickey from ssh-agent: {}", tried.join(", "))))
            }
        }
    }
}

/// A key file that cannot be read or parsed keeps its cause.
fn key_file_error(path: &std::path::Path, source: russh::keys::Error) -> Error {
    Error::KeyFile {
        path: path.to_path_buf(),
        source: Box::new(source),
    }
}

/// How much of stderr is kept to recognise sudo's own failures.
const STDERR_HEAD: usize = 4096;

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// How much of an upload's content is read at a time for SFTP.
const SFTP_READ_CHUNK: usize = 1 << 20;

/// A generous bound: 2 minutes plus a second per MiB.
fn upload_timeout(size: u64) -> Duration {
    Duration::from_secs(120 + (size >> 20))
}

/// A failed remote step as an error: its status and stderr (never any content).
fn remote_failure(what: &str, out: &Output) -> Error {
    Error::Remote {
        what: what.to_string(),
        status: out
            .status
            .map_or("no status".to_string(), |s| format!("status {s}")),
        stderr: out.stderr_str().trim().to_string(),
    }
}

/// An upload's content as a reader: its bytes, or its file on this machine, hashed as it is
/// read so that a file changed since it was planned is noticed ([`Content::File`]).
/// `hasher` and `read` count the file's bytes only.
struct ContentReader {
    inner: ContentSource,
    hasher: sha2::Sha256,
    read: u64,
}

enum ContentSource {
    Bytes {
        bytes: Arc<Vec<u8>>,
        at: usize,
    },
    File {
        local: Arc<std::path::PathBuf>,
        file: tokio::fs::File,
    },
}

impl ContentReader {
    async fn open(upload: &Upload) -> Result<Self, Error> {
        let inner = match &upload.content {
            Content::Bytes(b) => ContentSource::Bytes {
                bytes: b.clone(),
                at: 0,
            },
            Content::File { local, .. } => {
                let file =
                    tokio::fs::File::open(local.as_path())
                        .await
                        .map_err(|source| Error::LocalRead {
                            local: local.as_path().to_path_buf(),
                            source,
                        })?;
                ContentSource::File {
                    local: local.clone(),
                    file,
                }
            }
        };
        Ok(ContentReader {
            inner,
            hasher: sha2::Sha256::default(),
            read: 0,
        })
    }

    /// For a file whose bytes sent are not the planned ones: its path, the sha256 and size read.
    fn mismatch(&self, upload: &Upload) -> Option<(std::path::PathBuf, String, u64)> {
        let ContentSource::File { local, .. } = &self.inner else {
            return None;
        };
        use sha2::Digest as _;
        let found = hex::encode(self.hasher.clone().finalize());
        (found != upload.sha256 || self.read != upload.size())
            .then(|| (local.as_path().to_path_buf(), found, self.read))
    }
}

impl tokio::io::AsyncRead for ContentReader {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use sha2::Digest as _;
        let this = self.get_mut();
        let before = buf.filled().len();
        match &mut this.inner {
            // Bytes in memory were hashed when they were made, and cannot change.
            ContentSource::Bytes { bytes, at } => {
                let n = (bytes.len() - *at).min(buf.remaining());
                buf.put_slice(&bytes[*at..*at + n]);
                *at += n;
                std::task::Poll::Ready(Ok(()))
            }
            ContentSource::File { file, .. } => {
                let polled = std::pin::Pin::new(file).poll_read(cx, buf);
                if let std::task::Poll::Ready(Ok(())) = &polled {
                    let new = &buf.filled()[before..];
                    this.hasher.update(new);
                    this.read += new.len() as u64;
                }
                polled
            }
        }
    }
}

/// Prints `sha256 <hex>` and `stat <mode> <owner> <group>` when the file exists, and `parent`
/// when its directory does. `$1` = path.
const PROBE_SCRIPT: &str = r#"if [ -e "$1" ]; then s=$(sha256sum < "$1") || exit 1; echo "sha256 ${s%% *}"; stat -L -c "stat %a %U %G" -- "$1" || exit 1; fi; if [ -d "$(dirname -- "$1")" ]; then echo parent; fi"#;

/// `script` (which exits on failure), then, once the file is in place, the record of its digest
/// ([`crate::digest_cache`]) when `$5` is one (`-`: none); `$6` = the records' directory.
fn recording(script: &str) -> String {
    format!(
        "{}{script}\n[ \"$5\" = - ] || hactl_digest_record \"$6\" \"$4\" \"$5\"",
        crate::digest_cache::shell_functions()
    )
}

/// What [`recording`] gets as `$5`: the digest of a file large enough to be worth a record, else `-`.
fn record_digest(upload: &Upload) -> &str {
    if upload.size() >= crate::digest_cache::MIN_SIZE as u64 {
        &upload.sha256
    } else {
        "-"
    }
}

/// `$1` = path.
const MKDIR_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$1")""#;

/// Owner and mode on the temporary file, then rename it over the path; the temporary file goes
/// on failure. `$1` = tmp, `$2` = owner:group, `$3` = mode, `$4` = path.
const FINISH_SCRIPT: &str = r#"{ chown -- "$2" "$1" && chmod -- "$3" "$1" && mv -f -- "$1" "$4"; } || { rc=$?; rm -f -- "$1"; exit $rc; }"#;

/// Parent directory, stdin into a fresh 0600 temporary file, then as [`FINISH_SCRIPT`].
/// Where an upload to `path` is written before its rename: beside it (so the rename is atomic),
/// under a name that starts with a dot. Readers of a whole directory skip such names: the
/// kubelet takes every other file in its static-pod directory as a pod (a `<name>.hactl-tmp`
/// there once started as a second apiserver), and a `*.conf` drop-in directory takes
/// `<name>.conf.hactl-tmp` no more than `.<name>.hactl-tmp`.
pub fn temp_path(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/.{name}.hactl-tmp"),
        None => format!(".{path}.hactl-tmp"),
    }
}

/// Parent directory, then stdin into a fresh 0600 temporary file (placed by [`FINISH_SCRIPT`]
/// once its content is known to be the planned one). `$1` = tmp, `$2` = path.
const WRITE_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$2")" && rm -f -- "$1" && ( umask 077 && cat > "$1" ) || { rc=$?; rm -f -- "$1"; exit $rc; }"#;

const INSTALL_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$4")" && rm -f -- "$1" && { ( umask 077 && cat > "$1" ) && chown -- "$2" "$1" && chmod -- "$3" "$1" && mv -f -- "$1" "$4"; } || { rc=$?; rm -f -- "$1"; exit $rc; }"#;

/// What [`PROBE_SCRIPT`] saw.
#[derive(Debug, Default, PartialEq, Eq)]
struct RemoteFile {
    sha256: Option<String>,
    mode: Option<u32>,
    owner: Option<(String, String)>,
    parent_exists: bool,
}

impl RemoteFile {
    fn parse(text: &str) -> RemoteFile {
        let mut f = RemoteFile::default();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["sha256", hex] => f.sha256 = Some(hex.trim_start_matches('\\').to_string()),
                ["stat", mode, user, group] => {
                    f.mode = u32::from_str_radix(mode, 8).ok();
                    f.owner = Some((user.to_string(), group.to_string()));
                }
                ["parent"] => f.parent_exists = true,
                _ => {}
            }
        }
        f
    }

    fn matches(&self, upload: &Upload) -> bool {
        self.sha256.as_deref() == Some(upload.sha256.as_str())
            && self.mode == Some(upload.mode & 0o7777)
            && self
                .owner
                .as_ref()
                .is_some_and(|(u, g)| *u == upload.owner && *g == upload.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aes_gcm_is_offered_first_only_where_the_cpu_does_aes_and_nothing_is_dropped() {
        use russh::cipher::{AES_256_GCM, CHACHA20_POLY1305};
        let default = russh::Preferred::default().cipher.to_vec();
        assert_eq!(preferred(false).cipher.to_vec(), default);
        let fast = preferred(true).cipher.to_vec();
        assert_eq!(fast[..2], [AES_256_GCM, CHACHA20_POLY1305]);
        let (mut a, mut b) = (fast.clone(), default.clone());
        a.sort_by_key(|n| n.as_ref().to_string());
        b.sort_by_key(|n| n.as_ref().to_string());
        assert_eq!(a, b, "the same ciphers, in another order");
    }

    #[test]
    fn the_collector_keeps_each_stream_up_to_its_limit_then_stops() {
        let mut c = Collector::new(8);
        assert!(c.push(OutputChunk::Stdout(b"1234")));
        assert!(c.push(OutputChunk::Stderr(b"12345678")));
        assert!(c.push(OutputChunk::Stdout(b"5678")));
        // One byte past the limit on stdout: refused, and nothing more is kept.
        assert!(!c.push(OutputChunk::Stdout(b"9")));
        assert!(!c.push(OutputChunk::Stderr(b"")));
        assert_eq!(
            (c.stdout.as_slice(), c.overflowed),
            (&b"12345678"[..], Some("stdout"))
        );
        let err = c.finish("cp1", "cat /dev/zero".into(), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`cat /dev/zero` on cp1 printed more than 8 bytes on stdout, the most hactl keeps of a command's output; it was ended there"
        );
        let mut c = Collector::new(4);
        assert!(!c.push(OutputChunk::Stderr(b"12345")));
        assert_eq!(c.overflowed, Some("stderr"));
        let mut c = Collector::new(4);
        assert!(c.push(OutputChunk::Stdout(b"ok")));
        let out = c.finish("cp1", "echo ok".into(), Some(0)).unwrap();
        assert_eq!((out.stdout_str().as_ref(), out.status), ("ok", Some(0)));
        assert_eq!(
            RemoteCommand::new(["true"]).output_limit,
            crate::bounded::COMMAND_OUTPUT
        );
    }

    #[test]
    fn probe_output_is_parsed() {
        let f = RemoteFile::parse("sha256 abc\nstat 640 root etcd\nparent\n");
        assert_eq!(
            f,
            RemoteFile {
                sha256: Some("abc".into()),
                mode: Some(0o640),
                owner: Some(("root".into(), "etcd".into())),
                parent_exists: true,
            }
        );
        assert_eq!(RemoteFile::parse(""), RemoteFile::default());
    }

    #[test]
    fn upload_matches_only_when_content_mode_and_owner_agree() {
        let u = Upload::new("/etc/x", 0o640, "root", "etcd", b"hello".to_vec());
        let same = format!("sha256 {}\nstat 640 root etcd\nparent\n", u.sha256);
        assert!(RemoteFile::parse(&same).matches(&u));
        let mode = format!("sha256 {}\nstat 644 root etcd\nparent\n", u.sha256);
        assert!(!RemoteFile::parse(&mode).matches(&u));
        let owner = format!("sha256 {}\nstat 640 root root\nparent\n", u.sha256);
        assert!(!RemoteFile::parse(&owner).matches(&u));
        assert!(!RemoteFile::parse("parent\n").matches(&u));
    }

    #[test]
    fn an_uploads_temp_file_is_a_dot_file_beside_it() {
        // The kubelet starts every file of its static-pod directory whose name has no leading dot.
        assert_eq!(
            temp_path("/etc/kubernetes/manifests/kube-apiserver.yaml"),
            "/etc/kubernetes/manifests/.kube-apiserver.yaml.hactl-tmp"
        );
        assert_eq!(temp_path("x"), ".x.hactl-tmp");
    }

    #[test]
    fn scripts_run_in_a_real_shell() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/file").to_string_lossy().into_owned();
        let tmp = temp_path(&path);
        let sh = crate::local_command::sh_with_input;
        let (ok, out) = sh(PROBE_SCRIPT, &[&path], b"");
        assert!(ok);
        assert_eq!(RemoteFile::parse(&out), RemoteFile::default());

        let user = String::from_utf8(
            std::process::Command::new("id")
                .arg("-un")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let group = String::from_utf8(
            std::process::Command::new("id")
                .arg("-gn")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let owner = format!("{}:{}", user.trim(), group.trim());
        let (ok, _) = sh(INSTALL_SCRIPT, &[&tmp, &owner, "0640", &path], b"content");
        assert!(ok);
        assert_eq!(std::fs::read(&path).unwrap(), b"content");
        assert!(!std::path::Path::new(&tmp).exists());

        let u = Upload::new(
            path.clone(),
            0o640,
            user.trim(),
            group.trim(),
            b"content".to_vec(),
        );
        let (ok, out) = sh(PROBE_SCRIPT, &[&path], b"");
        assert!(ok);
        assert!(RemoteFile::parse(&out).matches(&u), "{out}");

        // A large file placed through `recording` leaves the record the facts probe then reads
        // (a recorded digest that is not the content's shows the record was used); a small one
        // leaves none.
        let big = vec![1u8; crate::digest_cache::MIN_SIZE];
        let u = Upload::new(path.clone(), 0o640, user.trim(), group.trim(), big.clone());
        assert_eq!(record_digest(&u), u.sha256);
        let records = dir.path().join("digests").to_string_lossy().into_owned();
        let fake = "b".repeat(64);
        let (ok, _) = sh(
            &recording(INSTALL_SCRIPT),
            &[&tmp, &owner, "0640", &path, &fake, &records],
            &big,
        );
        assert!(ok);
        assert_eq!(std::fs::read(&path).unwrap(), big);
        let read = format!(
            "{}hactl_recorded_list \"$1\" \"$2\"",
            crate::digest_cache::shell_functions()
        );
        let list = format!("{} {path}\n", crate::digest_cache::record_name(&path));
        let (ok, out) = sh(&read, &[&records, &list], b"");
        assert!(ok);
        assert_eq!(out.trim(), format!("{fake} {path}"));
        let small = Upload::new(path.clone(), 0o640, "root", "root", b"small".to_vec());
        assert_eq!(record_digest(&small), "-");

        // A file of this machine: written to the temporary file (0600, its parent made), then
        // placed by the finishing script.
        let other = dir.path().join("c/d/file").to_string_lossy().into_owned();
        let other_tmp = temp_path(&other);
        let (ok, _) = sh(WRITE_SCRIPT, &[&other_tmp, &other], b"streamed");
        assert!(ok);
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&other_tmp).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(!std::path::Path::new(&other).exists(), "placed before its check");
        let (ok, _) = sh(FINISH_SCRIPT, &[&other_tmp, &owner, "0640", &other], b"");
        assert!(ok);
        assert_eq!(std::fs::read(&other).unwrap(), b"streamed");

        // A failing step removes the temporary file.
        std::fs::write(&tmp, b"x").unwrap();
        let (ok, _) = sh(
            FINISH_SCRIPT,
            &[&tmp, "no-such-user-hactl:nogroup", "0640", &path],
            b"",
        );
        assert!(!ok);
        assert!(!std::path::Path::new(&tmp).exists());
    }

    /// A file's content is hashed as it is read: the same file passes, a file changed after it
    /// was planned is named with what was read; bytes in memory are never "changed".
    #[tokio::test]
    async fn a_file_changed_after_planning_is_noticed_while_it_is_read() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("kubelet");
        std::fs::write(&local, b"planned bytes").unwrap();
        let digests = crate::local_digests::LocalDigests::none();
        let upload = Upload::of(
            "/usr/local/bin/kubelet",
            0o755,
            "root",
            "root",
            &digests.blob(&local).unwrap(),
        );
        assert!(upload.content.in_memory().is_none(), "a file stays in its file");

        let read_all = |upload: Upload| async move {
            let mut reader = ContentReader::open(&upload).await.unwrap();
            let mut sent = Vec::new();
            reader.read_to_end(&mut sent).await.unwrap();
            (sent, reader.mismatch(&upload))
        };
        let (sent, mismatch) = read_all(upload.clone()).await;
        assert_eq!(sent, b"planned bytes");
        assert_eq!(mismatch, None);

        std::fs::write(&local, b"other bytes!!").unwrap();
        let (_, mismatch) = read_all(upload.clone()).await;
        let (path, found, size) = mismatch.expect("a changed file is noticed");
        assert_eq!(path, local);
        assert_eq!(
            found,
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"other bytes!!"))
        );
        assert_eq!(size, 13);

        let bytes = Upload::new("/etc/x", 0o644, "root", "root", b"in memory".to_vec());
        let (sent, mismatch) = read_all(bytes).await;
        assert_eq!(sent, b"in memory");
        assert_eq!(mismatch, None);

        std::fs::remove_file(&local).unwrap();
        assert!(matches!(
            ContentReader::open(&upload).await,
            Err(Error::LocalRead { local: l, .. }) if l == local
        ));
    }
}
