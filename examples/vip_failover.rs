//! Benchmark: how long the VIP is silent after a power cut of the load balancer holding it.
//!
//! Brings up a 3+2 lab (`hactl lab`, needs root), runs `hactl up`, then `RUNS` times: power-cuts
//! the VIP holder and polls a TCP connect to VIP:2379 every 10 ms until it answers (from the
//! other load balancer), then powers the cut host on again and waits until it is a BACKUP.
//! Prints each run, the median, and beside them keepalived's own bound for the configured
//! advert interval: master down interval = 3 × advert_int + (256 − priority)/256 × advert_int.
//! The floor measured in the same run: a TCP connect to the healthy VIP and the poll interval.
//!
//! `cargo run --release --example vip_failover [runs]` (or `bench/vip_failover.sh`).

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hactl::inventory::DEFAULT_ADVERT_INTERVAL;
use hactl::lab::{self, Fault, Lab, LabUpOptions};
use hactl::load_balancer::{master_down_interval_secs, priority};

const POLL: Duration = Duration::from_millis(10);

/// Tears the lab down however the benchmark ends.
struct Teardown {
    root: std::path::PathBuf,
    name: String,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Err(e) = lab::down_at(&self.root, &self.name) {
            eprintln!("lab {}: teardown failed: {e}", self.name);
        }
    }
}

fn answers(vip: Ipv4Addr) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from((vip, 2379)), Duration::from_millis(100)).is_ok()
}

fn holder(lab: &Lab) -> Option<String> {
    let needle = format!(" {}/", lab.vip);
    ["lb1", "lb2"]
        .into_iter()
        .find(|h| {
            lab.exec(h, &["ip", "-o", "-4", "addr", "show"])
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&needle))
        })
        .map(str::to_string)
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> anyhow::Result<()> {
    let advert = DEFAULT_ADVERT_INTERVAL.as_secs_f64();
    let runs: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5);
    lab::require_root()?;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let root = lab::lab_root();
    let name = format!("vipbench{}", std::process::id() % 10000);
    let mut opts = LabUpOptions::new(&name);
    opts.control_planes = 3;
    opts.load_balancers = 2;
    opts.root = root.clone();
    opts.out = lab::lab_dir(&root, &name).join("inventory.yaml");
    let mut lab = lab::up(&opts)?;
    let _teardown = Teardown {
        root: root.clone(),
        name: name.clone(),
    };
    let args = hactl::cli::UpArgs {
        inventory: hactl::cli::InventoryArgs {
            inventory: lab.inventory_path.clone(),
            state_dir: None,
        },
        connect: hactl::cli::ConnectArgs {
            concurrency: 16,
            accept_new_host_key: vec![],
            connect_timeout: None,
        },
        yes: true,
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(hactl::commands::up::up(&args))?;
    let vip = lab.vip;
    anyhow::ensure!(
        wait_until(Duration::from_secs(10), || answers(vip)),
        "the VIP does not answer after hactl up"
    );

    // Floor: one TCP connect to the healthy VIP.
    let mut connects: Vec<f64> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let ok = answers(vip);
            assert!(ok, "the healthy VIP stopped answering");
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    let connect_ms = median(&mut connects);

    let mut times = Vec::new();
    let mut bounds = Vec::new();
    for run in 1..=runs {
        let cut = holder(&lab).ok_or_else(|| anyhow::anyhow!("no load balancer holds the VIP"))?;
        let other = if cut == "lb1" { "lb2" } else { "lb1" };
        let other_priority = priority(usize::from(other == "lb2"));
        let bound = master_down_interval_secs(advert, other_priority);
        let t0 = Instant::now();
        lab.fault(&cut, Fault::PowerCut)?;
        while !answers(vip) {
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "run {run}: the VIP did not answer within 30 s"
            );
            std::thread::sleep(POLL);
        }
        let secs = t0.elapsed().as_secs_f64();
        let now = holder(&lab).unwrap_or_else(|| "?".into());
        println!(
            "run {run}: power cut of {cut}; VIP answered from {now} after {secs:.3} s (bound for {other}, priority {other_priority}: {bound:.3} s)"
        );
        times.push(secs);
        bounds.push(bound);
        // Back to two load balancers: the cut host boots and becomes a BACKUP (nopreempt).
        lab.fault(&cut, Fault::Poweron)?;
        let backup = wait_until(Duration::from_secs(60), || {
            lab.exec(
                &cut,
                &["journalctl", "-b", "-u", "keepalived", "--no-pager", "-o", "cat"],
            )
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Entering BACKUP STATE"))
        });
        anyhow::ensure!(
            backup,
            "run {run}: {cut} did not become a BACKUP after its reboot"
        );
        // Let it receive a few adverts, so its own master-down timer is armed.
        std::thread::sleep(Duration::from_secs(2));
    }

    let bound_max = bounds.iter().copied().fold(0.0, f64::max);
    let (min, max) = (
        times.iter().copied().fold(f64::INFINITY, f64::min),
        times.iter().copied().fold(0.0, f64::max),
    );
    let med = median(&mut times);
    println!();
    println!("VIP failover after a power cut of the holder ({runs} runs, advert_int {advert:.2} s)");
    println!("  median {med:.3} s   min {min:.3} s   max {max:.3} s");
    println!(
        "  keepalived bound: master down interval = 3 × advert_int + (256 − priority)/256 × advert_int = {:.3} s (priority 150) / {:.3} s (priority 140)",
        master_down_interval_secs(advert, 150),
        master_down_interval_secs(advert, 140)
    );
    println!(
        "  the timer runs from the last advert heard (0 to {advert:.2} s before the cut): expected window {:.3}–{bound_max:.3} s",
        bound_max - advert
    );
    println!(
        "  floor: TCP connect to the healthy VIP {connect_ms:.2} ms (median of 20); poll interval {} ms",
        POLL.as_millis()
    );
    Ok(())
}
