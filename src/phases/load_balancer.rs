//! The files a load-balancer host holds (HAProxy's config and health-check certificates,
//! keepalived's config and track script, the runtime-API helper, the sysctl that lets HAProxy
//! bind the VIP anywhere), and the rolling-rule hooks other phases call to take a backend server
//! out of HAProxy before it stops and put it back once it is ready.
//!
//! Invariant: pure and deterministic (backends in inventory order), so a converged host plans
//! nothing; keys are uploaded 0600 and never printed.

use std::time::Duration;

use serde::Serialize;

use super::{Ctx, PlanError};
use crate::inventory::{Host, Inventory, Role};
use crate::load_balancer as lb;
use crate::plan::{Check, HostSteps, Parallelism, PlannedPhase, RemoteCommand, Step, Upload};
use crate::render;

/// keepalived's `advert_int` for `interval` (VRRPv3: seconds in hundredths).
fn advert_int(interval: Option<Duration>) -> String {
    let d = interval.unwrap_or(crate::inventory::DEFAULT_ADVERT_INTERVAL);
    format!("{}.{:02}", d.as_secs(), d.subsec_millis() / 10)
}

/// HAProxy's time syntax: whole milliseconds (`300ms`, `1000ms`).
fn haproxy_time(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// How soon a server is checked again once a check has failed (HAProxy's `fastinter`): a
/// quarter of the interval, at least 100 ms, so `fall` checks in a row take about
/// `inter + (fall − 1) × fastinter`.
fn fast_interval(interval: Duration) -> Duration {
    (interval / 4).max(Duration::from_millis(100)).min(interval)
}

/// One backend server in haproxy.cfg.
#[derive(Debug, Clone, Serialize)]
pub struct BackendServer {
    /// Inventory host name: HAProxy's server name and the name its certificate must carry.
    pub name: String,
    /// The address as it appears before `:port` (IPv6 in brackets).
    pub address: String,
}

/// The context of `templates/haproxy.cfg.tera`.
#[derive(Debug, Clone, Serialize)]
pub struct HaproxyConfig {
    pub cluster: String,
    pub host: String,
    pub address: String,
    pub vip: String,
    pub admin_socket: String,
    pub check_interval: String,
    pub fast_interval: String,
    pub connect_timeout: String,
    pub check_timeout: String,
    pub fall: u32,
    pub rise: u32,
    pub stats_port: u16,
    pub api_port: u16,
    pub etcd_port: u16,
    pub kubernetes_backend: String,
    pub etcd_backend: String,
    /// Empty without a kubernetes section: no API frontend is rendered then.
    pub api_servers: Vec<BackendServer>,
    pub etcd_servers: Vec<BackendServer>,
    pub kubernetes_ca: String,
    /// etcd's metrics listener on each member, where HAProxy asks `/health` without a certificate.
    pub etcd_health_port: u16,
    /// [`lb::FAILOPEN_SUFFIX`]: the name of each apiserver's unchecked backup twin.
    pub failopen_suffix: String,
}

/// The context of `templates/keepalived.conf.tera`.
#[derive(Serialize)]
pub struct KeepalivedConfig {
    pub cluster: String,
    pub host: String,
    pub instance: String,
    pub check_script: String,
    pub interface: String,
    pub router_id: u8,
    pub priority: u8,
    /// Seconds with two decimals (VRRPv3 counts in centiseconds), e.g. `0.30`.
    pub advert_int: String,
    pub address: String,
    pub peers: Vec<String>,
    pub vip: String,
    pub prefix_length: u8,
}

fn url_host(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(a) => a.to_string(),
        std::net::IpAddr::V6(a) => format!("[{a}]"),
    }
}

fn servers(hosts: &[&Host]) -> Vec<BackendServer> {
    hosts
        .iter()
        .map(|h| BackendServer {
            name: h.name.clone(),
            address: h.url_host(),
        })
        .collect()
}

/// The rendered haproxy.cfg of `host`. Without a kubernetes section there is no apiserver to
/// send traffic to, so no API frontend is rendered (rather than one that always answers 503).
pub fn haproxy_cfg(host: &Host, inv: &Inventory) -> Result<String, PlanError> {
    let vip = inv.vip.as_ref().map(|v| url_host(v.address)).unwrap_or_default();
    let api_servers = if inv.kubernetes.is_some() {
        servers(&inv.with_role(Role::ControlPlane))
    } else {
        vec![]
    };
    Ok(render::render(
        "haproxy.cfg",
        &HaproxyConfig {
            cluster: inv.name.clone(),
            host: host.name.clone(),
            address: host.url_host(),
            vip,
            admin_socket: lb::ADMIN_SOCKET.into(),
            check_interval: haproxy_time(inv.load_balancer.check_interval),
            fast_interval: haproxy_time(fast_interval(inv.load_balancer.check_interval)),
            connect_timeout: haproxy_time(inv.load_balancer.connect_timeout),
            check_timeout: haproxy_time(inv.load_balancer.check_timeout),
            fall: inv.load_balancer.fall,
            rise: inv.load_balancer.rise,
            stats_port: lb::STATS_PORT,
            api_port: lb::API_PORT,
            etcd_port: inv.etcd.client_port,
            kubernetes_backend: lb::KUBERNETES_BACKEND.into(),
            etcd_backend: lb::ETCD_BACKEND.into(),
            api_servers,
            etcd_servers: servers(&inv.with_role(Role::Etcd)),
            kubernetes_ca: lb::KUBERNETES_CA.into(),
            etcd_health_port: crate::etcd::METRICS_PORT,
            failopen_suffix: lb::FAILOPEN_SUFFIX.into(),
        },
    )?)
}

/// The rendered keepalived.conf of `host`; `interface` is the one that carries its address.
pub fn keepalived_conf(host: &Host, inv: &Inventory, interface: &str) -> Result<String, PlanError> {
    let balancers = inv.with_role(Role::LoadBalancer);
    let index = balancers.iter().position(|h| h.name == host.name).unwrap_or(0);
    let vip = inv.vip.as_ref();
    Ok(render::render(
        "keepalived.conf",
        &KeepalivedConfig {
            cluster: inv.name.clone(),
            host: host.name.clone(),
            instance: format!("hactl_{}", inv.name.replace('-', "_")),
            check_script: lb::CHECK_SCRIPT.into(),
            interface: interface.to_string(),
            router_id: vip.map(|v| v.router_id).unwrap_or(51),
            priority: lb::priority(index),
            advert_int: advert_int(vip.map(|v| v.advert_interval)),
            address: host.address.to_string(),
            peers: balancers
                .iter()
                .filter(|h| h.name != host.name)
                .map(|h| h.address.to_string())
                .collect(),
            vip: vip.map(|v| v.address.to_string()).unwrap_or_default(),
            prefix_length: host.prefix_length,
        },
    )?)
}

/// Every path a load-balancer host holds for hactl, for the facts probe.
pub fn managed_paths(inv: &Inventory) -> Vec<String> {
    // The health-check key an earlier hactl placed is probed so that `up` removes it.
    let mut paths = vec![lb::ETCD_HEALTHCHECK_PEM];
    if inv.kubernetes.is_some() {
        paths.push(lb::KUBERNETES_CA);
    }
    paths.extend([
        lb::HAPROXY_CFG,
        lb::HAPROXY_CLI,
        lb::CHECK_SCRIPT,
        lb::KEEPALIVED_CONF,
        lb::SYSCTL_CONF,
    ]);
    paths.into_iter().map(String::from).collect()
}

/// The sysctl file (net.ipv4.ip_nonlocal_bind).
pub fn sysctl_file() -> Result<Upload, PlanError> {
    let text = render::render("hactl-load-balancer.sysctl.conf", &serde_json::json!({}))?;
    Ok(Upload::new(
        lb::SYSCTL_CONF,
        0o644,
        "root",
        "root",
        text.into_bytes(),
    ))
}

/// What HAProxy reads: the apiservers' CA (for the `/readyz` check over TLS) and haproxy.cfg. A
/// change to any of them needs a reload. No etcd credential: etcd's `/health` is asked on the
/// members' metrics listener.
pub fn haproxy_files(host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Upload>, PlanError> {
    let pki = ctx.pki;
    let mut files = Vec::new();
    if ctx.inv.kubernetes.is_some() {
        // The trust file: both CAs during a rotation of the kubernetes CA.
        if let Some(trust) = pki.kubernetes_trust_pem() {
            files.push(Upload::new(
                lb::KUBERNETES_CA,
                0o644,
                "root",
                "root",
                trust.into_bytes(),
            ));
        }
    }
    files.push(Upload::new(
        lb::HAPROXY_CFG,
        0o644,
        "root",
        "root",
        haproxy_cfg(host, ctx.inv)?.into_bytes(),
    ));
    Ok(files)
}

/// The runtime-API helper (changing it needs no reload).
pub fn haproxy_cli() -> Result<Upload, PlanError> {
    let text = render::render(
        "hactl-haproxy",
        &serde_json::json!({ "admin_socket": lb::ADMIN_SOCKET, "failopen_suffix": lb::FAILOPEN_SUFFIX }),
    )?;
    Ok(Upload::new(
        lb::HAPROXY_CLI,
        0o755,
        "root",
        "root",
        text.into_bytes(),
    ))
}

/// What keepalived reads: its track script and keepalived.conf.
pub fn keepalived_files(host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Upload>, PlanError> {
    let interface = match &host.interface {
        Some(i) => i.clone(),
        None => ctx
            .facts(host)
            .interface_of(host.address)
            .map(str::to_string)
            .ok_or_else(|| PlanError::NoInterface {
                host: host.name.clone(),
                address: host.address.to_string(),
            })?,
    };
    let check = render::render(
        "hactl-check-haproxy",
        &serde_json::json!({ "cli": lb::HAPROXY_CLI }),
    )?;
    Ok(vec![
        Upload::new(lb::CHECK_SCRIPT, 0o755, "root", "root", check.into_bytes()),
        Upload::new(
            lb::KEEPALIVED_CONF,
            0o600,
            "root",
            "root",
            keepalived_conf(host, ctx.inv, &interface)?.into_bytes(),
        ),
    ])
}

/// `hactl-haproxy show info` answers: the local HAProxy runs and its admin socket works.
pub fn haproxy_answers(host: &str, timeout: Duration) -> Check {
    Check::command(
        format!("HAProxy on {host} answers on its admin socket"),
        RemoteCommand::read_only([lb::CHECK_SCRIPT]),
        timeout,
    )
    .diagnose_with(journal_tail(lb::HAPROXY_UNIT))
}

/// The last 25 lines of `unit`'s journal: what a wait on HAProxy or keepalived shows when it
/// runs out.
pub fn journal_tail(unit: &str) -> RemoteCommand {
    RemoteCommand::read_only(["journalctl", "-u", unit, "-n", "25", "--no-pager", "-o", "cat"])
}

/// etcd answers a health check (a read, and no alarm) through the VIP's etcd frontend: proves
/// the VIP, HAProxy, TLS to a member and the member itself. gRPC, as every etcd client speaks:
/// the client port serves nothing else (`etcd::HTTP_PORT`). Run on an etcd host, with that
/// host's client certificate: the load balancers hold no etcd credential.
pub fn vip_serves_etcd(inv: &Inventory, timeout: Duration) -> Option<Check> {
    let vip = inv.vip.as_ref()?;
    let url = format!("https://{}:{}", url_host(vip.address), inv.etcd.client_port);
    Some(Check::command(
        format!("etcd answers through the VIP ({url})"),
        RemoteCommand::read_only([
            crate::etcd::ETCDCTL_WRAPPER.to_string(),
            format!("--endpoints={url}"),
            "--dial-timeout=2s".into(),
            "--command-timeout=2s".into(),
            "endpoint".into(),
            "health".into(),
        ]),
        timeout,
    ))
}

// ── rolling-rule hooks ──────────────────────────────────────────────────────────────────────

/// A proxy in haproxy.cfg whose servers can be taken out and put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The apiservers behind VIP:6443 (rendered only with a kubernetes section).
    KubernetesApi,
    /// The etcd members behind VIP:2379.
    EtcdClient,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::KubernetesApi => lb::KUBERNETES_BACKEND,
            Backend::EtcdClient => lb::ETCD_BACKEND,
        }
    }
}

fn set_state(backend: Backend, server: &str, state: &str) -> RemoteCommand {
    RemoteCommand::new([lb::HAPROXY_CLI, "state", backend.name(), server, state])
}

/// Who takes a server out of a backend, and so who brings it back after a cut run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// A phase of `hactl up` (a roll, a mode switch; replace's move of the control plane, which
    /// is one): noted on the load balancer ([`lb::HELD_DIR`]), so that the next `up` returns a
    /// server a cut run left out ([`super::return_held_servers`]).
    Up,
    /// A day-two operation that keeps it out on purpose until its own later step (remove,
    /// maintenance): its journal or record says so, and `up` leaves it alone.
    Operation,
}

/// The note [`Holder::Up`] leaves on a load balancer: `<HELD_DIR>/<backend>,<server>`.
pub fn held_note(backend: &str, server: &str) -> String {
    format!("{}/{backend},{server}", lb::HELD_DIR)
}

/// Writes the note (the time it was taken out) before the server leaves the rotation. A separate
/// command, not an option of the helper, so a load balancer with an older helper takes it too.
fn hold(backend: Backend, server: &str) -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        "mkdir -p \"${1%/*}\" && date -u +%Y-%m-%dT%H:%M:%SZ > \"$1\"",
        "hactl-hold",
        &held_note(backend.name(), server),
    ])
}

/// Removes the note once the server is back (nothing when there is none).
pub fn release(backend: &str, server: &str) -> RemoteCommand {
    RemoteCommand::new(["rm", "-f", &held_note(backend, server)])
}

fn server_is(backend: Backend, server: &str, status: &str, timeout: Duration) -> Check {
    Check::command(
        format!("HAProxy shows {}/{server} {status}", backend.name()),
        RemoteCommand::read_only([lb::HAPROXY_CLI, "is", backend.name(), server, status]),
        timeout,
    )
}

fn on_every_balancer(inv: &Inventory, steps: impl Fn() -> Vec<Step>) -> Vec<HostSteps> {
    inv.with_role(Role::LoadBalancer)
        .into_iter()
        .map(|h| HostSteps {
            host: h.name.clone(),
            sudo: h.ssh.sudo,
            steps: steps(),
        })
        .collect()
}

/// Steps, on every load-balancer host, that wait up to `timeout` until the running HAProxy lists
/// every server of `servers` in `backend`. `systemctl reload haproxy` returns before the new
/// worker answers on the admin socket; until it does, the old one answers "No such server" for a
/// server only the new config has (seen when replace readied a new host right after re-rendering
/// haproxy.cfg, on a loaded machine).
pub fn servers_known_steps(
    inv: &Inventory,
    backend: Backend,
    servers: &[String],
    timeout: Duration,
) -> Vec<HostSteps> {
    let script = format!(
        "b=$1; shift; out=$({} show stat) || exit 1; for s in \"$@\"; do printf '%s\\n' \"$out\" | grep -q \"^$b,$s,\" || exit 1; done",
        lb::HAPROXY_CLI
    );
    let mut argv = vec![
        "sh".to_string(),
        "-c".into(),
        script,
        "hactl-servers-known".into(),
        backend.name().into(),
    ];
    argv.extend(servers.iter().cloned());
    on_every_balancer(inv, || {
        vec![Step::Wait(Check::command(
            format!("HAProxy lists {} in {}", servers.join(", "), backend.name()),
            RemoteCommand::read_only(argv.clone()),
            timeout,
        ))]
    })
}

/// How long a drain waits for the sessions already open to a server to end.
pub const DRAIN_SESSIONS: Duration = Duration::from_secs(10);

/// Steps, on every load-balancer host, that drain `server` of `backend` and then put it in
/// maintenance, and wait until each HAProxy shows it `MAINT`. Run them before stopping the
/// server. Runtime state: a reload of HAProxy forgets it.
///
/// First `drain` (HAProxy sends it no new session and leaves the open ones alone), then a wait
/// of up to [`DRAIN_SESSIONS`] for the sessions already open to end, then `maint`. Straight to
/// `maint` is not enough: etcd's servers have `on-marked-down shutdown-sessions` (so clients of
/// a member that dies reconnect at once), and HAProxy applies it to maintenance too, so a put in
/// flight at that instant was cut ("going DOWN for maintenance … 1 sessions active", then the
/// writer's `EOF`; the maintenance lab test, seen once in CI with the journals). And the wait
/// itself: etcd cuts a request in flight when it stops, so a
/// put that connected just before the drain would fail (seen in the CA-rotation lab test under
/// load); an apiserver finishes the requests it is serving on SIGTERM, but a connection HAProxy
/// opened to it just before the drain and that it had not yet accepted is closed mid-handshake
/// (kubectl through the VIP: "Unable to connect to the server: EOF", seen once in the
/// front-proxy CA rotation lab test). A long-lived watch is left to the stop, and its client
/// reconnects.
pub fn drain_backend_steps(inv: &Inventory, backend: Backend, server: &str) -> Vec<HostSteps> {
    drain_backend_steps_by(inv, backend, server, Holder::Operation)
}

/// [`drain_backend_steps`] for `holder`: [`Holder::Up`] notes the server as taken out by `up`.
pub fn drain_backend_steps_by(
    inv: &Inventory,
    backend: Backend,
    server: &str,
    holder: Holder,
) -> Vec<HostSteps> {
    on_every_balancer(inv, || {
        let note = (holder == Holder::Up).then(|| Step::Run(hold(backend, server)));
        note.into_iter()
            .chain([
                Step::Run(set_state(backend, server, "drain")),
                Step::Run(RemoteCommand::read_only([
                    lb::HAPROXY_CLI.to_string(),
                    "idle".into(),
                    backend.name().into(),
                    server.into(),
                    DRAIN_SESSIONS.as_secs().to_string(),
                ])),
                Step::Run(set_state(backend, server, "maint")),
                Step::Wait(server_is(backend, server, "MAINT", Duration::from_secs(10))),
            ])
            .collect()
    })
}

/// Steps, on every load-balancer host, that take `server` of `backend` out of maintenance and
/// wait up to `timeout` until its health check passes (`UP`). Run them once the server is ready.
pub fn ready_backend_steps(
    inv: &Inventory,
    backend: Backend,
    server: &str,
    timeout: Duration,
) -> Vec<HostSteps> {
    ready_backend_steps_by(inv, backend, server, timeout, Holder::Operation)
}

/// [`ready_backend_steps`] for `holder`: [`Holder::Up`] removes its note once the server is UP.
pub fn ready_backend_steps_by(
    inv: &Inventory,
    backend: Backend,
    server: &str,
    timeout: Duration,
    holder: Holder,
) -> Vec<HostSteps> {
    on_every_balancer(inv, || {
        let mut steps = vec![
            Step::Run(set_state(backend, server, "ready")),
            Step::Wait(server_is(backend, server, "UP", timeout)),
        ];
        if holder == Holder::Up {
            steps.push(Step::Run(release(backend.name(), server)));
        }
        steps
    })
}

/// [`drain_backend_steps`] as a phase of its own ("Take cp1 out of kubernetes-api").
pub fn drain_backend_phase(inv: &Inventory, backend: Backend, server: &str) -> PlannedPhase {
    PlannedPhase {
        title: format!("Take {server} out of {} on the load balancers", backend.name()),
        parallelism: Parallelism::All,
        disruptive: false,
        hosts: drain_backend_steps(inv, backend, server),
    }
}

/// [`ready_backend_steps`] as a phase of its own.
pub fn ready_backend_phase(
    inv: &Inventory,
    backend: Backend,
    server: &str,
    timeout: Duration,
) -> PlannedPhase {
    PlannedPhase {
        title: format!("Put {server} back into {} on the load balancers", backend.name()),
        parallelism: Parallelism::All,
        disruptive: false,
        hosts: ready_backend_steps(inv, backend, server, timeout),
    }
}
