//! The load-balancer layer without hosts: rendered haproxy.cfg and keepalived.conf for the
//! example inventory (snapshots), and what the phases plan from given facts.

use std::collections::BTreeMap;
use std::path::Path;

use hactl::facts::{FileState, HostFacts, UnitState};
use hactl::inventory::Inventory;
use hactl::phases::configure_load_balancer::ConfigureLoadBalancer;
use hactl::phases::install_load_balancer::InstallLoadBalancer;
use hactl::phases::load_balancer::{haproxy_cfg, keepalived_conf};
use hactl::phases::{Ctx, Phase, PlanError};
use hactl::plan::{Plan, Step};

/// `inventories/example.yaml` as written.
fn example() -> Inventory {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/inventories/example.yaml"));
    let text = fs_err::read_to_string(path).unwrap();
    hactl::inventory::load_str(path, &text).unwrap()
}

#[test]
fn haproxy_cfg_for_the_example_inventory() {
    let inv = example();
    insta::assert_snapshot!(haproxy_cfg(inv.host("lb1").unwrap(), &inv).unwrap());
}

#[test]
fn the_stats_page_listens_on_loopback_only_and_checks_need_no_etcd_certificate() {
    let inv = example();
    let cfg = hactl::phases::load_balancer::haproxy_cfg(inv.host("lb1").unwrap(), &inv).unwrap();
    assert!(cfg.contains("    bind 127.0.0.1:8404\n"), "{cfg}");
    assert!(
        !cfg.contains(&format!("{}:8404", inv.host("lb1").unwrap().address)),
        "{cfg}"
    );
    assert!(
        cfg.contains("server cp1 10.0.0.11:2379 check port 2381 on-marked-down shutdown-sessions\n"),
        "{cfg}"
    );
    assert!(
        !cfg.contains(" crt "),
        "HAProxy presents a client certificate:\n{cfg}"
    );
}

#[test]
fn keepalived_conf_for_the_example_inventory() {
    let inv = example();
    insta::assert_snapshot!(
        "keepalived_lb1",
        keepalived_conf(inv.host("lb1").unwrap(), &inv, "eth0").unwrap()
    );
    insta::assert_snapshot!(
        "keepalived_lb2",
        keepalived_conf(inv.host("lb2").unwrap(), &inv, "ens3").unwrap()
    );
}

/// `spec.vip.advertInterval` and `spec.loadBalancer` reach the files as keepalived's and
/// HAProxy's syntax.
#[test]
fn tuning_from_the_inventory_reaches_haproxy_and_keepalived() {
    let mut inv = example();
    inv.vip.as_mut().unwrap().advert_interval = std::time::Duration::from_millis(1_250);
    inv.load_balancer.check_interval = std::time::Duration::from_millis(400);
    inv.load_balancer.connect_timeout = std::time::Duration::from_millis(700);
    inv.load_balancer.check_timeout = std::time::Duration::from_millis(4_500);
    inv.load_balancer.fall = 3;
    inv.load_balancer.rise = 4;
    let conf = keepalived_conf(inv.host("lb1").unwrap(), &inv, "eth0").unwrap();
    assert!(conf.contains("    advert_int 1.25\n"), "{conf}");
    assert!(conf.contains("    vrrp_version 3\n"), "{conf}");
    assert!(!conf.contains("auth_pass"), "{conf}");
    let cfg = haproxy_cfg(inv.host("lb1").unwrap(), &inv).unwrap();
    assert!(cfg.contains("    timeout connect 700ms\n"), "{cfg}");
    assert!(cfg.contains("    timeout check 4500ms\n"), "{cfg}");
    assert!(
        cfg.contains("default-server inter 400ms fastinter 100ms fall 3 rise 4 observe layer4"),
        "{cfg}"
    );
    assert!(cfg.contains("    retries 3\n    option redispatch 1\n"), "{cfg}");
}

#[test]
fn without_a_kubernetes_section_there_is_no_api_frontend() {
    let mut inv = example();
    inv.kubernetes = None;
    let cfg = haproxy_cfg(inv.host("lb1").unwrap(), &inv).unwrap();
    assert!(!cfg.contains("kubernetes-api"), "{cfg}");
    assert!(!cfg.contains(":6443"), "{cfg}");
    assert!(
        cfg.contains("listen etcd-client\n    bind 10.0.0.100:2379"),
        "{cfg}"
    );
}

struct Fixture {
    inv: Inventory,
    pki: hactl::pki::Pki,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let inv = example();
    let dir = tempfile::tempdir().unwrap();
    let pki = hactl::pki::ensure(dir.path(), &inv, time::OffsetDateTime::now_utc()).unwrap();
    Fixture { inv, pki, _dir: dir }
}

fn plan(fx: &Fixture, facts: &BTreeMap<String, HostFacts>) -> Result<Plan, PlanError> {
    let ctx = Ctx::new(&fx.inv, &fx.pki, facts);
    let phases: Vec<Box<dyn Phase>> = vec![Box::new(InstallLoadBalancer), Box::new(ConfigureLoadBalancer)];
    hactl::phases::build(&phases, &ctx)
}

/// Facts of load balancers that hold exactly what `plan` uploads, with both units running.
fn converged(fx: &Fixture) -> BTreeMap<String, HostFacts> {
    let mut facts: BTreeMap<String, HostFacts> = BTreeMap::new();
    for h in ["lb1", "lb2"] {
        let mut f = HostFacts::default();
        for b in ["haproxy", "keepalived", "curl"] {
            f.binaries.insert(b.into(), format!("/usr/bin/{b}"));
        }
        f.addresses = hactl::facts::parse("addr ens3 10.0.0.22/24\n").addresses;
        facts.insert(h.into(), f);
    }
    let first = plan(fx, &facts).unwrap();
    for phase in &first.phases {
        for hs in &phase.hosts {
            // The VIP is verified from an etcd host, which has no facts here.
            let Some(f) = facts.get_mut(&hs.host) else {
                continue;
            };
            for step in &hs.steps {
                if let Step::Upload(u) = step {
                    f.files.insert(
                        u.path.clone(),
                        FileState {
                            sha256: u.sha256.clone(),
                            mode: u.mode,
                            owner: u.owner.clone(),
                            group: u.group.clone(),
                            mtime: 0,
                        },
                    );
                }
            }
        }
    }
    for f in facts.values_mut() {
        for unit in ["haproxy.service", "keepalived.service"] {
            f.units.insert(
                unit.into(),
                UnitState {
                    active: "active".into(),
                    main_pid: 100,
                    enabled: "enabled".into(),
                    started_monotonic_us: 0,
                },
            );
        }
    }
    facts
}

#[test]
fn a_fresh_load_balancer_gets_everything_and_the_vip_is_verified() {
    let fx = fixture();
    let mut facts = converged(&fx);
    for f in facts.values_mut() {
        f.files.clear();
        f.units.clear();
    }
    let text = plan(&fx, &facts).unwrap().to_string();
    for line in [
        "== Install load balancers",
        "lb1: write /etc/sysctl.d/90-hactl-load-balancer.conf mode=0644",
        "lb1: run sudo -n -- sysctl -q -p /etc/sysctl.d/90-hactl-load-balancer.conf",
        "== Configure load balancers\n",
        "lb1: write /etc/hactl/pki/haproxy/kubernetes-ca.crt mode=0644",
        "lb1: write /etc/keepalived/keepalived.conf mode=0600 owner=root:root",
        "lb1: run sudo -n -- haproxy -c -q -f /etc/haproxy/haproxy.cfg",
        "lb1: run sudo -n -- sh -c 'systemctl start \"$1\" || {",
        "hactl-start haproxy.service",
        "== Start keepalived, highest priority first (one host at a time)\n",
        "hactl-start keepalived.service",
        "lb1: wait up to 30s: lb1 holds the VIP 10.0.0.100",
        "== Verify the VIP",
        "cp1: wait up to 30s: etcd answers through the VIP (https://10.0.0.100:2379) (sudo -n -- /usr/local/sbin/hactl-etcdctl --endpoints=https://10.0.0.100:2379",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // Nothing serves through the VIP yet: HAProxy starts on both at once, keepalived after it
    // everywhere, one host at a time, and the first (highest priority) holds the VIP before the
    // second starts.
    let at = |line: &str| {
        text.find(line)
            .unwrap_or_else(|| panic!("missing {line:?} in:\n{text}"))
    };
    let keepalived = at("== Start keepalived");
    assert!(at("lb2: run sudo -n -- haproxy -c") < keepalived, "{text}");
    let lb2_start = keepalived
        + text[keepalived..]
            .find("lb2: run")
            .expect("lb2 starts keepalived");
    assert!(at("lb1: wait up to 30s: lb1 holds the VIP") < lb2_start, "{text}");
    assert!(
        text[lb2_start..].starts_with("lb2: run sudo -n -- sh -c 'systemctl start"),
        "{text}"
    );
    assert!(!text.contains("lb2 holds the VIP"), "{text}");
    // Enabled with the rest; started only in its own phase.
    assert!(
        at("lb2: run sudo -n -- systemctl enable keepalived.service") < keepalived,
        "{text}"
    );
    assert!(
        !text[..keepalived].contains("hactl-start keepalived.service"),
        "{text}"
    );
    // The load balancers get no etcd credential at all (no key, no etcd CA).
    assert!(!text.contains("lb1: write /etc/hactl/pki/haproxy/etcd"), "{text}");
    // Only path, mode, owner, size and sha256 of secrets: no key.
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

/// A load balancer added beside one that serves (or one whose facts are unknown) is configured
/// as before, one host at a time with keepalived started in the same phase: the VIP is held
/// already, and nothing is started on two hosts at once.
#[test]
fn beside_a_running_load_balancer_the_configure_phase_stays_one_host_at_a_time() {
    let fx = fixture();
    let fresh = |facts: &mut BTreeMap<String, HostFacts>, lb: &str| {
        let f = facts.get_mut(lb).unwrap();
        f.files.clear();
        f.units.clear();
    };
    // lb2 new, lb1 running.
    let mut facts = converged(&fx);
    fresh(&mut facts, "lb2");
    let text = plan(&fx, &facts).unwrap().to_string();
    assert!(
        text.contains("== Configure load balancers (one host at a time)\n"),
        "{text}"
    );
    assert!(
        text.contains("lb2: run sudo -n -- sh -c 'systemctl start"),
        "{text}"
    );
    assert!(text.contains("hactl-start keepalived.service"), "{text}");
    assert!(!text.contains("== Start keepalived"), "{text}");
    assert!(!text.contains("holds the VIP"), "{text}");
    assert!(!text.contains("lb1:"), "{text}");
    // Both new, but nothing known of lb2 (not asked; its interface named in the inventory):
    // as above.
    let mut fx = fixture();
    for h in fx.inv.hosts.iter_mut().filter(|h| h.name == "lb2") {
        h.interface = Some("ens3".into());
    }
    let mut facts = converged(&fx);
    fresh(&mut facts, "lb1");
    fresh(&mut facts, "lb2");
    facts.remove("lb2");
    let text = plan(&fx, &facts).unwrap().to_string();
    assert!(
        text.contains("== Configure load balancers (one host at a time)\n"),
        "{text}"
    );
    assert!(!text.contains("== Start keepalived"), "{text}");
    // Only keepalived running on lb1 (its HAProxy stopped): the VIP may be held, as above.
    let mut facts = converged(&fx);
    fresh(&mut facts, "lb2");
    facts.get_mut("lb1").unwrap().units.remove("haproxy.service");
    let text = plan(&fx, &facts).unwrap().to_string();
    assert!(
        text.contains("== Configure load balancers (one host at a time)\n"),
        "{text}"
    );
    assert!(!text.contains("== Start keepalived"), "{text}");
}

#[test]
fn a_converged_load_balancer_plans_nothing() {
    let fx = fixture();
    let plan = plan(&fx, &converged(&fx)).unwrap();
    assert!(plan.is_empty(), "{plan}");
    assert_eq!(plan.to_string(), "no changes\n");
}

#[test]
fn a_changed_haproxy_cfg_is_validated_and_reloaded_not_restarted() {
    let fx = fixture();
    let mut facts = converged(&fx);
    facts
        .get_mut("lb2")
        .unwrap()
        .files
        .get_mut("/etc/haproxy/haproxy.cfg")
        .unwrap()
        .sha256 = "0".repeat(64);
    let text = plan(&fx, &facts).unwrap().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let haproxy_lines: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("lb2: ") && !l.contains("wait up to"))
        .copied()
        .collect();
    assert_eq!(
        haproxy_lines
            .iter()
            .map(|l| l.split(" mode=").next().unwrap())
            .collect::<Vec<_>>(),
        [
            "lb2: write /etc/haproxy/haproxy.cfg",
            "lb2: run sudo -n -- haproxy -c -q -f /etc/haproxy/haproxy.cfg",
            "lb2: run sudo -n -- systemctl reload haproxy.service",
        ],
        "{text}"
    );
    assert!(!text.contains("lb1:"), "{text}");
    assert!(
        text.contains("cp1: wait up to 30s: etcd answers through the VIP"),
        "{text}"
    );
    assert!(!text.contains("restart"), "{text}");
    assert!(!text.contains("keepalived.service"), "{text}");
}

#[test]
fn a_load_balancer_without_a_known_interface_is_refused_with_the_fix() {
    let fx = fixture();
    let mut facts = converged(&fx);
    facts.get_mut("lb2").unwrap().addresses.clear();
    let err = plan(&fx, &facts).unwrap_err().to_string();
    assert_eq!(
        err,
        "lb2 has no interface with address 10.0.0.22, so keepalived cannot be told where to hold the VIP: set hosts[].interface for lb2 in the inventory"
    );
}

#[test]
fn a_health_check_key_left_by_an_earlier_hactl_is_removed_after_the_reload() {
    let fx = fixture();
    let mut facts = converged(&fx);
    for lb in ["lb1", "lb2"] {
        let f = facts.get_mut(lb).unwrap();
        f.files.insert(
            "/etc/hactl/pki/haproxy/etcd-healthcheck.pem".into(),
            f.files["/etc/haproxy/haproxy.cfg"].clone(),
        );
        // The earlier config named the key: a new one is written and reloaded first.
        f.files.get_mut("/etc/haproxy/haproxy.cfg").unwrap().sha256 = "0".repeat(64);
    }
    let text = plan(&fx, &facts).unwrap().to_string();
    for lb in ["lb1", "lb2"] {
        let reload = format!("{lb}: run sudo -n -- systemctl reload haproxy.service");
        let remove = format!("{lb}: run sudo -n -- rm -f /etc/hactl/pki/haproxy/etcd-healthcheck.pem");
        let (r, d) = (text.find(&reload), text.find(&remove));
        assert!(
            r.is_some() && d.is_some() && r < d,
            "{lb}: reload, then remove:\n{text}"
        );
    }
}
