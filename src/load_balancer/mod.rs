//! The load balancers: HAProxy in front of the apiservers and etcd members, keepalived moving the
//! VIP between load-balancer hosts. Here: where hactl puts things on those hosts, the VRRP
//! password kept in the state directory, and the parsing of what HAProxy's admin socket says.
//! The phases are in `phases/{install,configure}_load_balancer.rs`, the files they write in
//! `phases/load_balancer.rs`.
//!
//! Invariant: neither HAProxy nor keepalived asks etcd or an apiserver anything to decide where
//! the VIP lives: keepalived tracks only the local HAProxy (its unit and its admin socket).

pub mod status;

/// HAProxy's configuration (Debian's unit reads this path).
pub const HAPROXY_CFG: &str = "/etc/haproxy/haproxy.cfg";
pub const HAPROXY_UNIT: &str = "haproxy.service";
/// keepalived's configuration (Debian's unit starts only when it exists and is not empty).
pub const KEEPALIVED_CONF: &str = "/etc/keepalived/keepalived.conf";
pub const KEEPALIVED_UNIT: &str = "keepalived.service";
/// Certificates HAProxy's health checks use.
pub const PKI_DIR: &str = "/etc/hactl/pki/haproxy";
pub const ETCD_CA: &str = "/etc/hactl/pki/haproxy/etcd-ca.crt";
/// The etcd health-check client certificate and key, in one PEM (HAProxy's `crt` format).
pub const ETCD_HEALTHCHECK_PEM: &str = "/etc/hactl/pki/haproxy/etcd-healthcheck.pem";
pub const KUBERNETES_CA: &str = "/etc/hactl/pki/haproxy/kubernetes-ca.crt";
/// HAProxy's runtime API, for hactl (admin level, group haproxy).
pub const ADMIN_SOCKET: &str = "/run/haproxy/admin.sock";
/// Sends one command to [`ADMIN_SOCKET`]; `hactl-haproxy is <backend> <server> <STATUS>` tests a
/// server's status. Uses curl's telnet client over the Unix socket (no socat needed).
pub const HAPROXY_CLI: &str = "/usr/local/sbin/hactl-haproxy";
/// Where `hactl up` notes, on a load-balancer host, each server it takes out of a backend (a
/// roll, a mode switch; `phases::load_balancer::Holder::Up`): one file `<backend>,<server>` holding the time,
/// written before the server leaves the rotation and removed once it is back. A run cut in
/// between leaves it, so `status` reports the server and the next `up` returns it once its host
/// answers ([`crate::phases::return_held_servers`]). Servers taken out by anything else (an
/// operator's own `set server`, `hactl maintenance`) are not noted and never returned by `up`.
pub const HELD_DIR: &str = "/var/lib/hactl/held-by-up";
/// keepalived's track script: exits 0 while the local HAProxy runs and answers on its socket.
pub const CHECK_SCRIPT: &str = "/usr/local/sbin/hactl-check-haproxy";
/// Lets HAProxy bind the VIP on a host that does not hold it (the BACKUP).
pub const SYSCTL_CONF: &str = "/etc/sysctl.d/90-hactl-load-balancer.conf";
/// HAProxy's HTTP stats page, bound to the host's own address.
pub const STATS_PORT: u16 = 8404;
/// The Kubernetes API port, on the VIP and on every apiserver.
pub const API_PORT: u16 = 6443;
/// The highest VRRP priority (the first load-balancer host); each next host gets 10 less.
pub const TOP_PRIORITY: u8 = 150;
/// The suffix of an apiserver's fail-open twin in `kubernetes-api`: the same server as a
/// `backup` without a health check, used only while no checked server is UP (haproxy.cfg says
/// why). Host names are DNS labels, so no host is named like a twin.
pub const FAILOPEN_SUFFIX: &str = "_failopen";
/// Proxy names in haproxy.cfg; `set server <backend>/<server>` takes them.
pub const ETCD_BACKEND: &str = "etcd-client";
pub const KUBERNETES_BACKEND: &str = "kubernetes-api";

/// VRRP priority of the `index`-th load-balancer host (inventory order).
pub fn priority(index: usize) -> u8 {
    let step = u8::try_from(index.min(10)).unwrap_or(10) * 10;
    TOP_PRIORITY.saturating_sub(step)
}

/// keepalived's bound on how long a BACKUP waits before it takes over a silent MASTER:
/// 3 × advert_int + skew, skew = (256 − priority) / 256 × advert_int (RFC 5798 §6.1, as in
/// RFC 3768 for VRRPv2).
pub fn master_down_interval_secs(advert_int: f64, backup_priority: u8) -> f64 {
    3.0 * advert_int + (256.0 - f64::from(backup_priority)) / 256.0 * advert_int
}

/// One server line of HAProxy's `show stat`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStat {
    /// The proxy (`etcd-client`, `kubernetes-api`).
    pub backend: String,
    pub server: String,
    /// `UP`, `DOWN`, `MAINT`, `DRAIN`, `UP 1/2` (going down), `DOWN 1/2` (coming up), `no check`.
    pub status: String,
    /// The last check's result, e.g. `L7OK`, `L4CON`, `L6TOUT`, `L7STS`.
    pub check_status: String,
    /// Seconds since the last status change.
    pub last_change_secs: u64,
    /// Sessions open now.
    pub sessions: u64,
}

impl ServerStat {
    /// The first word of `status`: `UP`, `DOWN`, `MAINT`, …
    pub fn state(&self) -> &str {
        self.status.split_whitespace().next().unwrap_or("")
    }
}

/// Parses `show stat` CSV (columns found by the `# pxname,svname,…` header), keeping servers
/// only (not the FRONTEND/BACKEND summary lines, nor the fail-open twins, which follow their
/// servers' admin state and have no check of their own).
pub fn parse_show_stat(text: &str) -> Vec<ServerStat> {
    let mut lines = text.lines();
    let Some(header) = lines.next().and_then(|h| h.strip_prefix("# ")) else {
        return vec![];
    };
    let cols: Vec<&str> = header.split(',').collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(px), Some(sv), Some(st)) = (col("pxname"), col("svname"), col("status")) else {
        return vec![];
    };
    let (chk, lastchg, scur) = (col("check_status"), col("lastchg"), col("scur"));
    let mut out = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let get = |i: Option<usize>| i.and_then(|i| f.get(i)).copied().unwrap_or("");
        let server = get(Some(sv));
        if server.is_empty()
            || server == "FRONTEND"
            || server == "BACKEND"
            || server.ends_with(FAILOPEN_SUFFIX)
        {
            continue;
        }
        out.push(ServerStat {
            backend: get(Some(px)).to_string(),
            server: server.to_string(),
            status: get(Some(st)).to_string(),
            check_status: get(chk).trim_start_matches('*').trim().to_string(),
            last_change_secs: get(lastchg).parse().unwrap_or(0),
            sessions: get(scur).parse().unwrap_or(0),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_descend_in_inventory_order() {
        assert_eq!([0, 1, 2].map(priority), [150, 140, 130]);
        assert_eq!(priority(50), 50);
    }

    #[test]
    fn master_down_interval_follows_rfc_5798() {
        let t = master_down_interval_secs(1.0, 140);
        assert!((t - (3.0 + 116.0 / 256.0)).abs() < 1e-9, "{t}");
        // The default interval: the second balancer takes over within about 1.04 s.
        let t = master_down_interval_secs(0.3, priority(1));
        assert!(t < 1.1, "{t}");
    }

    /// Recorded from HAProxy 3.0.11 (`show stat`, columns cut after check_status's neighbours).
    #[test]
    fn parses_show_stat_from_haproxy() {
        let text = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,\n\
stats,FRONTEND,,,0,1,262120,1,0,0,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,1,,,,\n\
etcd-client,FRONTEND,,,1,2,262120,5,0,0,0,0,0,,,,,OPEN,,,,,,,,,1,3,0,,,,0,0,0,2,,,,\n\
etcd-client,cp1,0,0,1,1,,3,0,0,,0,,0,0,0,0,UP,1,1,0,0,0,42,0,,1,3,1,,3,,2,0,,1,L7OK,200,3,\n\
etcd-client,cp2,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,1,1,0,2,1,3,3,,1,3,2,,0,,2,0,,0,L4CON,,0,\n\
etcd-client,cp3,0,0,0,0,,0,0,0,,0,,0,0,0,0,MAINT,1,1,0,0,0,7,7,,1,3,3,,0,,2,0,,0,* L7OK,200,2,\n\
kubernetes-api,cp1_failopen,0,0,0,0,,0,0,0,,0,,0,0,0,0,no check,1,0,1,0,0,42,0,,1,4,4,,0,,2,0,,0,,,,\n\
etcd-client,BACKEND,0,0,1,2,26212,5,0,0,0,0,,0,0,0,0,UP,2,2,0,,0,42,0,,1,3,0,,5,,1,0,,2,,,,\n";
        let s = parse_show_stat(text);
        // The fail-open twin is left out.
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0],
            ServerStat {
                backend: "etcd-client".into(),
                server: "cp1".into(),
                status: "UP".into(),
                check_status: "L7OK".into(),
                last_change_secs: 42,
                sessions: 1,
            }
        );
        assert_eq!((s[1].state(), s[1].check_status.as_str()), ("DOWN", "L4CON"));
        assert_eq!((s[2].state(), s[2].check_status.as_str()), ("MAINT", "L7OK"));
        assert!(parse_show_stat("").is_empty());
    }
}
