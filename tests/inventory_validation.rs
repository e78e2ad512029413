//! Inventory validation: a table of bad inventories, each with the exact messages it must
//! produce (all of them, in order), and good inventories with their defaults.

use std::net::IpAddr;

use clap::Parser;
use std::path::{Path, PathBuf};

use hactl::inventory::{self, BinarySource, KeyType, KubernetesMode, Role, SshAuth, SshSpec, API_VERSION};

/// Three stacked control-plane hosts, two load balancers, a VIP: valid as it is. Each case below
/// changes one thing.
const GOOD: &str = "\
apiVersion: hactl.io/v1alpha1
kind: Cluster
metadata:
  name: lab
spec:
  ssh:
    agent: true
  hosts:
    - name: cp1
      address: 192.168.56.11
      roles: [etcd, control-plane]
    - name: cp2
      address: 192.168.56.12
      roles: [etcd, control-plane]
    - name: cp3
      address: 192.168.56.13
      roles: [etcd, control-plane]
    - name: lb1
      address: 192.168.56.21
      roles: [load-balancer]
    - name: lb2
      address: 192.168.56.22
      roles: [load-balancer]
  vip:
    address: 192.168.56.100
  kubernetes:
    version: 1.31.4
    source: release
    releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz
    sha256: abababababababababababababababababababababababababababababababab
";

/// `GOOD` with each `(from, to)` replaced once; panics if `from` is not there, so a case cannot
/// silently test the good inventory.
fn edit(edits: &[(&str, &str)]) -> String {
    let mut text = GOOD.to_string();
    for (from, to) in edits {
        assert!(text.contains(from), "{from:?} is not in GOOD");
        text = text.replacen(from, to, 1);
    }
    text
}

fn problems(dir: &Path, text: &str) -> Vec<String> {
    match inventory::load_str(&dir.join("lab.yaml"), text) {
        Ok(_) => Vec::new(),
        Err(err) => err.problems.iter().map(ToString::to_string).collect(),
    }
}

fn hosts_yaml(n: usize, roles: &str) -> String {
    (1..=n)
        .map(|i| format!("    - {{ name: h{i}, address: 10.0.0.{i}, roles: {roles} }}\n"))
        .collect()
}

#[test]
fn bad_inventories_report_every_problem_with_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let missing_key = dir.join("keys/id_ed25519");
    let missing_bundle = dir.join("bundle/etcd");

    let cases: Vec<(&str, String, Vec<String>)> = vec![
        (
            "duplicate host name",
            edit(&[("name: cp3", "name: cp1")]),
            vec!["lab.yaml: hosts[2].name: duplicate of hosts[0]".into()],
        ),
        (
            "duplicate address",
            edit(&[("address: 192.168.56.13", "address: 192.168.56.11")]),
            vec!["lab.yaml: hosts[2].address: duplicate of hosts[0]".into()],
        ),
        (
            "even etcd count",
            edit(&[("roles: [load-balancer]", "roles: [load-balancer, etcd]")]),
            vec!["lab.yaml: hosts: 4 etcd members: an even count adds no fault tolerance; use 3 or 5".into()],
        ),
        (
            "two etcd members",
            edit(&[(
                "192.168.56.13\n      roles: [etcd, control-plane]",
                "192.168.56.13\n      roles: [control-plane]",
            )]),
            vec![
                "lab.yaml: hosts: 2 etcd members: an even count adds no fault tolerance; use 3"
                    .into(),
            ],
        ),
        (
            "zero etcd members",
            edit(&[
                ("roles: [etcd, control-plane]", "roles: [control-plane]"),
                ("roles: [etcd, control-plane]", "roles: [control-plane]"),
                ("roles: [etcd, control-plane]", "roles: [control-plane]"),
            ]),
            vec!["lab.yaml: hosts: no host has the etcd role: give it to 3 hosts (or 5)".into()],
        ),
        (
            "single member without allowSingleMember",
            edit(&[
                ("192.168.56.12\n      roles: [etcd, control-plane]", "192.168.56.12\n      roles: [control-plane]"),
                ("192.168.56.13\n      roles: [etcd, control-plane]", "192.168.56.13\n      roles: [control-plane]"),
            ]),
            vec!["lab.yaml: hosts: 1 etcd member survives no failure: use 3 members, or set allowSingleMember: true for a development cluster".into()],
        ),
        (
            "nine etcd members",
            format!(
                "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: lab\nspec:\n  ssh:\n    agent: true\n  hosts:\n{}  kubernetes:\n    version: 1.31.4\n    mode: static-pod\n    source: bundle\n    bundleDir: /\n",
                hosts_yaml(9, "[etcd, control-plane]")
            ),
            vec!["lab.yaml: hosts: 9 etcd members: more than 7 slows every write and adds little fault tolerance; use 3, 5 or 7".into()],
        ),
        (
            "vip equal to a host address",
            edit(&[("address: 192.168.56.100", "address: 192.168.56.12")]),
            vec!["lab.yaml: vip.address: equal to hosts[1].address".into()],
        ),
        (
            "vip in no subnet",
            edit(&[("address: 192.168.56.100", "address: 10.1.2.3")]),
            vec!["lab.yaml: vip.address: 10.1.2.3 is in no load balancer's subnet (192.168.56.0/24): keepalived can only hold an address of the network it is on".into()],
        ),
        (
            "vip outside one load balancer's subnet",
            edit(&[("address: 192.168.56.22", "address: 192.168.57.22")]),
            vec!["lab.yaml: vip.address: 192.168.56.100 is outside the subnet of hosts[4] (192.168.57.0/24): keepalived there could not hold it".into()],
        ),
        (
            "vip not an address",
            edit(&[("address: 192.168.56.100", "address: vip.lan")]),
            vec!["lab.yaml: vip.address: \"vip.lan\" is not an IP address: write a free IPv4 or IPv6 address in the load balancers' subnet (keepalived holds an address, not a name, and the apiserver certificates carry it as an IP SAN); `getent hosts vip.lan` prints what it resolves to here".into()],
        ),
        (
            "vip with a prefix length",
            edit(&[("address: 192.168.56.100", "address: 192.168.56.100/24")]),
            vec!["lab.yaml: vip.address: \"192.168.56.100/24\" is not an IP address: write a free IPv4 or IPv6 address in the load balancers' subnet (keepalived holds an address, not a name, and the apiserver certificates carry it as an IP SAN)".into()],
        ),
        (
            "router id 0",
            edit(&[("address: 192.168.56.100\n", "address: 192.168.56.100\n    routerId: 0\n")]),
            vec!["lab.yaml: vip.routerId: 0 is not a virtual router id: use 1 to 255, unique on the network (default 51)".into()],
        ),
        (
            "advert interval out of range and not in hundredths",
            edit(&[("address: 192.168.56.100\n", "address: 192.168.56.100\n    advertInterval: 50ms\n")]),
            vec!["lab.yaml: vip.advertInterval: 50ms is outside 100ms..10s: choose a value in that range (default 300ms)".into()],
        ),
        (
            "advert interval not a multiple of 10ms",
            edit(&[("address: 192.168.56.100\n", "address: 192.168.56.100\n    advertInterval: 305ms\n")]),
            vec!["lab.yaml: vip.advertInterval: 305ms: keepalived counts in hundredths of a second: use a multiple of 10ms (default 300ms)".into()],
        ),
        (
            "load balancer tuning out of range",
            edit(&[("  vip:\n", "  loadBalancer:\n    checkInterval: 2m\n    connectTimeout: soon\n    fall: 0\n    rise: 11\n  vip:\n")]),
            vec![
                "lab.yaml: loadBalancer.checkInterval: 2m is outside 100ms..1m: choose a value in that range (default 1s)".into(),
                "lab.yaml: loadBalancer.connectTimeout: \"soon\" is not a duration: use e.g. 30s, 10m, 1h30m or 2d".into(),
                "lab.yaml: loadBalancer.fall: 0 is outside 1..10: choose a count in that range (default 2)".into(),
                "lab.yaml: loadBalancer.rise: 11 is outside 1..10: choose a count in that range (default 2)".into(),
            ],
        ),
        (
            "load balancer without vip",
            edit(&[("  vip:\n    address: 192.168.56.100\n", "")]),
            vec!["lab.yaml: vip: required because hosts[3] has the load-balancer role: set vip.address to a free address in the load balancers' subnet".into()],
        ),
        (
            "missing key file",
            edit(&[("    agent: true\n", "    keyFile: keys/id_ed25519\n")]),
            vec![format!("lab.yaml: ssh.keyFile: {}: no such file", missing_key.display())],
        ),
        (
            "key file and agent both",
            edit(&[("    agent: true\n", "    agent: true\n    keyFile: keys/id_ed25519\n")]),
            vec!["lab.yaml: ssh: both keyFile and agent: true are set: keep one (keyFile for a key on disk, agent for the keys of the running ssh-agent)".into()],
        ),
        (
            "no ssh authentication anywhere",
            edit(&[("  ssh:\n    agent: true\n", "")]),
            vec!["lab.yaml: ssh: no ssh authentication: set keyFile: <private key> or agent: true (here for every host, or per host)".into()],
        ),
        (
            "one host without ssh authentication",
            edit(&[
                ("  ssh:\n    agent: true\n", ""),
                ("192.168.56.21\n      roles: [load-balancer]\n", "192.168.56.21\n      roles: [load-balancer]\n      ssh: { agent: true }\n"),
                ("192.168.56.22\n      roles: [load-balancer]\n", "192.168.56.22\n      roles: [load-balancer]\n      ssh: { agent: true }\n"),
            ]),
            vec![
                "lab.yaml: hosts[0].ssh: no ssh authentication: set keyFile or agent: true here or in spec ssh".into(),
                "lab.yaml: hosts[1].ssh: no ssh authentication: set keyFile or agent: true here or in spec ssh".into(),
                "lab.yaml: hosts[2].ssh: no ssh authentication: set keyFile or agent: true here or in spec ssh".into(),
            ],
        ),
        (
            "ssh port 0",
            edit(&[("    agent: true\n", "    agent: true\n    port: 0\n")]),
            vec!["lab.yaml: ssh.port: 0 is not a port: use 22 or the port sshd listens on".into()],
        ),
        (
            "bastion by host name",
            edit(&[("    agent: true\n", "    agent: true\n    bastion: { address: jump.example.com }\n")]),
            vec!["lab.yaml: ssh.bastion.address: \"jump.example.com\" is not an IP address: write the bastion's IPv4 or IPv6 address (hactl does not resolve names: every address it connects to is written in the inventory, so a DNS change cannot redirect it); `getent hosts jump.example.com` prints what it resolves to here".into()],
        ),
        (
            "bad etcd version",
            edit(&[("  kubernetes:\n", "  etcd:\n    version: \"3.5\"\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.version: \"3.5\" is not a version (use MAJOR.MINOR.PATCH, e.g. 3.5.16)".into()],
        ),
        (
            "unquoted two-part kubernetes version",
            edit(&[("version: 1.31.4", "version: 1.31")]),
            vec!["lab.yaml: kubernetes.version: \"1.31\" is not a version (use MAJOR.MINOR.PATCH, e.g. 1.31.4)".into()],
        ),
        (
            "unknown field, with its position",
            edit(&[("    agent: true\n", "    agent: true\n    identityFile: x\n")]),
            vec!["lab.yaml:8:5: unknown field `identityFile`, expected one of user, port, keyFile, agent, sudo, bastion, connectTimeout".into()],
        ),
        (
            "duplicate key",
            edit(&[("  name: lab\n", "  name: lab\n  name: lab2\n")]),
            vec!["lab.yaml:5:3: duplicate mapping key `name` is not allowed here".into()],
        ),
        (
            "yes is not a boolean",
            edit(&[("    agent: true\n", "    agent: yes\n")]),
            vec!["lab.yaml:7:12: invalid boolean (true or false expected)".into()],
        ),
        (
            "wrong apiVersion",
            edit(&[("apiVersion: hactl.io/v1alpha1", "apiVersion: v1")]),
            vec!["lab.yaml: apiVersion: \"v1\" is not supported: use hactl.io/v1alpha1".into()],
        ),
        (
            "wrong kind",
            edit(&[("kind: Cluster", "kind: cluster")]),
            vec!["lab.yaml: kind: \"cluster\" is not supported: use Cluster".into()],
        ),
        (
            "bad cluster name",
            edit(&[("name: lab\n", "name: Lab_1\n")]),
            vec!["lab.yaml: metadata.name: \"Lab_1\" is not a valid cluster name: use at most 40 lowercase letters, digits and '-', starting and ending with a letter or digit".into()],
        ),
        (
            "bad host name",
            edit(&[("name: cp1", "name: CP1")]),
            vec!["lab.yaml: hosts[0].name: \"CP1\" is not a valid host name: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit".into()],
        ),
        (
            "address is a host name",
            edit(&[("address: 192.168.56.11", "address: cp1.lan")]),
            vec!["lab.yaml: hosts[0].address: \"cp1.lan\" is not an IP address: write the host's IPv4 or IPv6 address (hactl does not resolve names: etcd's URLs, the certificates' IP SANs, HAProxy's backends and keepalived's peers are written with it, and a name that later resolved elsewhere would break them); `getent hosts cp1.lan` prints what it resolves to here".into()],
        ),
        (
            "address is not a valid IP",
            edit(&[("address: 192.168.56.11", "address: 192.168.56.311")]),
            vec!["lab.yaml: hosts[0].address: \"192.168.56.311\" is not an IP address: write the host's IPv4 or IPv6 address (hactl does not resolve names: etcd's URLs, the certificates' IP SANs, HAProxy's backends and keepalived's peers are written with it, and a name that later resolved elsewhere would break them)".into()],
        ),
        (
            "bad role and duplicate role",
            edit(&[("roles: [etcd, control-plane]", "roles: [etcd, master, etcd, control-plane]")]),
            vec![
                "lab.yaml: hosts[0].roles[1]: unknown role \"master\": use etcd, control-plane, load-balancer or worker".into(),
                "lab.yaml: hosts[0].roles[2]: duplicate of roles[0]".into(),
            ],
        ),
        (
            "a worker with another role",
            edit(&[("roles: [load-balancer]", "roles: [load-balancer, worker]")]),
            vec!["lab.yaml: hosts[3].roles[1]: a worker holds no other role: remove worker, or the other roles".into()],
        ),
        (
            "workers without a kubernetes section",
            edit(&[
                ("roles: [load-balancer]\n    - name: lb2", "roles: [worker]\n    - name: lb2"),
                ("roles: [load-balancer]\n  vip", "roles: [worker]\n  vip"),
                ("  vip:\n    address: 192.168.56.100\n", ""),
                ("  kubernetes:\n", "  pki:\n"),
                ("    version: 1.31.4\n    source: release\n    releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz\n    sha256: abababababababababababababababababababababababababababababababab\n", "    keyType: ecdsa-p256\n"),
            ]),
            vec!["lab.yaml: kubernetes: required because hosts[3] has the worker role: add a kubernetes section (version and source), or remove the worker role".into()],
        ),
        (
            "no hosts",
            format!(
                "apiVersion: {API_VERSION}\nkind: Cluster\nmetadata:\n  name: lab\nspec:\n  ssh: {{ agent: true }}\n  hosts: []\n"
            ),
            vec!["lab.yaml: hosts: no hosts: list at least one (3 for a highly available cluster)".into()],
        ),
        (
            "release over plain http without sha256",
            edit(&[("  kubernetes:\n", "  etcd:\n    source: release\n    releaseUrl: http://example.com/etcd.tar.gz\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.sha256: required when releaseUrl is not https:// (or a loopback address): the sha256 of the tarball (64 hex digits), so a changed download is refused".into()],
        ),
        (
            "release with a bad sha256 and no url",
            edit(&[("  kubernetes:\n", "  etcd:\n    source: release\n    sha256: abc123\n  kubernetes:\n")]),
            vec![
                "lab.yaml: etcd.releaseUrl: required when source is release: the https:// address of the release tarball".into(),
                "lab.yaml: etcd.sha256: \"abc123\" is not a sha256: write 64 hex digits".into(),
            ],
        ),
        (
            "release url not http",
            edit(&[("releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz", "releaseUrl: ftp://mirror/k.tgz")]),
            vec!["lab.yaml: kubernetes.releaseUrl: \"ftp://mirror/k.tgz\" is not an http:// or https:// address".into()],
        ),
        (
            "kubernetes from a package in systemd mode (what plan refuses too)",
            edit(&[(
                &format!("    source: release\n    releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz\n    sha256: {}\n", "ab".repeat(32)),
                "    source: package\n",
            )]),
            vec!["lab.yaml: kubernetes.source: package is not available: Debian has no kubelet, kube-proxy, kube-apiserver, kube-controller-manager or kube-scheduler package; set kubernetes.source to release (releaseUrl: the kubernetes-server-linux-amd64.tar.gz of your version, with its sha256) or bundle (bundleDir: a directory holding the binaries)".into()],
        ),
        (
            "kubernetes without a source (package by default) in systemd mode",
            edit(&[(
                &format!("    source: release\n    releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz\n    sha256: {}\n", "ab".repeat(32)),
                "    mode: systemd\n",
            )]),
            vec!["lab.yaml: kubernetes.source: package is not available: Debian has no kubelet, kube-proxy, kube-apiserver, kube-controller-manager or kube-scheduler package; set kubernetes.source to release (releaseUrl: the kubernetes-server-linux-amd64.tar.gz of your version, with its sha256) or bundle (bundleDir: a directory holding the binaries)".into()],
        ),
        (
            "bundle dir missing",
            edit(&[("  kubernetes:\n", "  etcd:\n    source: bundle\n    bundleDir: bundle/etcd\n  kubernetes:\n")]),
            vec![format!("lab.yaml: etcd.bundleDir: {}: no such directory", missing_bundle.display())],
        ),
        (
            "package with a release url",
            edit(&[("  kubernetes:\n", "  etcd:\n    releaseUrl: https://example.com/etcd.tar.gz\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.releaseUrl: only used with source: release, but source is package: remove releaseUrl or set source: release".into()],
        ),
        (
            "relative data dir",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: var/lib/etcd\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"var/lib/etcd\" is not an absolute path: write one, e.g. /var/lib/etcd".into()],
        ),
        (
            "root data dir",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/\" is the system directory /: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /. (a trailing . that path parsing drops)",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /.\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/.\" has a '.', '..' or empty segment: write the directory plainly, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /etc",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /etc\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/etc\" is the system directory /etc: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /var/lib/ (normalised before comparing)",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /var/lib/\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/var/lib/\" is the system directory /var/lib: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /usr",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /usr\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/usr\" is the system directory /usr: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /boot",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /boot\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/boot\" is the system directory /boot: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /home",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /home\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/home\" is the system directory /home: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /root",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /root\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/root\" is the system directory /root: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir /var",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /var\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/var\" is the system directory /var: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir with an empty segment",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: //etc\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"//etc\" has a '.', '..' or empty segment: write the directory plainly, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir with a . segment",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /var/./lib\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/var/./lib\" has a '.', '..' or empty segment: write the directory plainly, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir with a .. segment",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /var/lib/etcd/..\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/var/lib/etcd/..\" has a '.', '..' or empty segment: write the directory plainly, e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir with a space",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: '/var/lib/my etcd'\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/var/lib/my etcd\": use a plain absolute path (letters, digits, '/', '.', '_', '-'), e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir under /run",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /run/etcd\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/run/etcd\" is under /run, which does not keep files across reboots (or holds no files at all): use e.g. /var/lib/etcd".into()],
        ),
        (
            "data dir under /proc",
            edit(&[("  kubernetes:\n", "  etcd:\n    dataDir: /proc/etcd\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.dataDir: \"/proc/etcd\" is under /proc, which does not keep files across reboots (or holds no files at all): use e.g. /var/lib/etcd".into()],
        ),
        (
            "backup dir /.",
            edit(&[("  kubernetes:", "  backup:\n    dir: /.\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: \"/.\" has a '.', '..' or empty segment: write the directory plainly, e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "backup dir /etc",
            edit(&[("  kubernetes:", "  backup:\n    dir: /etc\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: \"/etc\" is the system directory /etc: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "backup dir /",
            edit(&[("  kubernetes:", "  backup:\n    dir: /\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: \"/\" is the system directory /: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "backup dir /var/lib/",
            edit(&[("  kubernetes:", "  backup:\n    dir: /var/lib/\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: \"/var/lib/\" is the system directory /var/lib: hactl creates, chmods and moves this directory aside, so give it one of its own, e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "backup dir /tmp/x",
            edit(&[("  kubernetes:", "  backup:\n    dir: /tmp/x\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: \"/tmp/x\" is under /tmp, which does not keep files across reboots (or holds no files at all): use e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "backup dir inside the data dir",
            edit(&[("  kubernetes:", "  backup:\n    dir: /var/lib/etcd/backups\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: /var/lib/etcd/backups overlaps etcd.dataDir (/var/lib/etcd): keep snapshots in a directory of their own, e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "backup dir equal to the data dir",
            edit(&[("  kubernetes:", "  backup:\n    dir: /var/lib/etcd/\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: /var/lib/etcd overlaps etcd.dataDir (/var/lib/etcd): keep snapshots in a directory of their own, e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "ports and timings",
            edit(&[("  kubernetes:\n", "  etcd:\n    clientPort: 2380\n    heartbeatInterval: 200\n    electionTimeout: 500\n  kubernetes:\n")]),
            vec![
                "lab.yaml: etcd.peerPort: equal to clientPort (2380): give peers their own port, e.g. 2380".into(),
                "lab.yaml: etcd.electionTimeout: 500 ms is less than 5 × heartbeatInterval (200 ms): use at least 1000".into(),
            ],
        ),
        (
            "kubernetes without version, bad cidrs and mode",
            edit(&[("    version: 1.31.4\n", "    serviceCidr: 10.96.0.1/12\n    podCidr: 192.168.0.0/16\n    mode: kubeadm\n")]),
            vec![
                "lab.yaml: kubernetes.version: required: the Kubernetes version to run, e.g. 1.31.4".into(),
                "lab.yaml: kubernetes.serviceCidr: 10.96.0.1/12 has host bits set: write the network address, 10.96.0.0/12".into(),
                "lab.yaml: kubernetes.podCidr: 192.168.0.0/16 contains hosts[0].address (192.168.56.11): pick a range the hosts' network does not use".into(),
                "lab.yaml: kubernetes.podCidr: 192.168.0.0/16 contains hosts[1].address (192.168.56.12): pick a range the hosts' network does not use".into(),
                "lab.yaml: kubernetes.podCidr: 192.168.0.0/16 contains hosts[2].address (192.168.56.13): pick a range the hosts' network does not use".into(),
                "lab.yaml: kubernetes.podCidr: 192.168.0.0/16 contains hosts[3].address (192.168.56.21): pick a range the hosts' network does not use".into(),
                "lab.yaml: kubernetes.podCidr: 192.168.0.0/16 contains hosts[4].address (192.168.56.22): pick a range the hosts' network does not use".into(),
                "lab.yaml: kubernetes.podCidr: 192.168.0.0/16 contains vip.address (192.168.56.100): pick another range".into(),
                "lab.yaml: kubernetes.mode: unknown mode \"kubeadm\": use systemd or static-pod".into(),
            ],
        ),
        (
            "pki",
            format!("{GOOD}  pki:\n    keyType: ed25519\n    caValidityDays: 100\n    certValidityDays: 365\n"),
            vec![
                "lab.yaml: pki.keyType: unknown key type \"ed25519\": use ecdsa-p256, rsa-2048 or rsa-4096".into(),
                "lab.yaml: pki.certValidityDays: 365 days is longer than caValidityDays (100): a certificate cannot outlive its CA".into(),
            ],
        ),
        (
            "renewal threshold",
            format!("{GOOD}  pki:\n    certValidityDays: 30\n    renewBeforeDays: 30\n"),
            vec!["lab.yaml: pki.renewBeforeDays: 30 days: use a positive number below certValidityDays (30), e.g. 30".into()],
        ),
        (
            "several problems at once, in order",
            edit(&[
                ("apiVersion: hactl.io/v1alpha1", "apiVersion: hactl.io/v1"),
                ("address: 192.168.56.13", "address: 192.168.56.11"),
                ("roles: [load-balancer]", "roles: [load-balancer, etcd]"),
                ("address: 192.168.56.100", "address: 192.168.56.21"),
                ("version: 1.31.4", "version: latest"),
            ]),
            vec![
                "lab.yaml: apiVersion: \"hactl.io/v1\" is not supported: use hactl.io/v1alpha1".into(),
                "lab.yaml: hosts[2].address: duplicate of hosts[0]".into(),
                "lab.yaml: hosts: 4 etcd members: an even count adds no fault tolerance; use 3 or 5".into(),
                "lab.yaml: vip.address: equal to hosts[3].address".into(),
                "lab.yaml: kubernetes.version: \"latest\" is not a version (use MAJOR.MINOR.PATCH, e.g. 1.31.4)".into(),
            ],
        ),
        (
            "extraArgs overriding client-cert-auth",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: [--log-level=warn, --client-cert-auth=false]\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[1]: \"--client-cert-auth=false\": hactl sets --client-cert-auth itself, and etcd would take this later copy silently: remove it (hactl manages it)".into()],
        ),
        (
            "extraArgs overriding data-dir and the initial cluster",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: [--data-dir=/tmp/x, --initial-cluster-state=new]\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--data-dir=/tmp/x\": hactl sets --data-dir itself, and etcd would take this later copy silently: remove it (set etcd.dataDir instead)".into(), "lab.yaml: etcd.extraArgs[1]: \"--initial-cluster-state=new\": hactl sets --initial-cluster-state itself, and etcd would take this later copy silently: remove it (hactl manages it)".into()],
        ),
        (
            "extraArgs with %",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: ['--log-level=%H']\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--log-level=%H\" holds '%', which systemd's ExecStart would expand, unquote or split: write the value plainly (no %, $, quotes, ;, whitespace or trailing \\)".into()],
        ),
        (
            "extraArgs with $",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: ['--log-level=$LEVEL']\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--log-level=$LEVEL\" holds '$', which systemd's ExecStart would expand, unquote or split: write the value plainly (no %, $, quotes, ;, whitespace or trailing \\)".into()],
        ),
        (
            "extraArgs with a double quote",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: ['--log-level=\"warn\"']\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--log-level=\\\"warn\\\"\" holds '\"', which systemd's ExecStart would expand, unquote or split: write the value plainly (no %, $, quotes, ;, whitespace or trailing \\)".into()],
        ),
        (
            "extraArgs with a single quote",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: [\"--log-level='warn'\"]\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--log-level='warn'\" holds '\\'', which systemd's ExecStart would expand, unquote or split: write the value plainly (no %, $, quotes, ;, whitespace or trailing \\)".into()],
        ),
        (
            "extraArgs with ;",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: ['--log-level=warn;reboot']\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--log-level=warn;reboot\" holds ';', which systemd's ExecStart would expand, unquote or split: write the value plainly (no %, $, quotes, ;, whitespace or trailing \\)".into()],
        ),
        (
            "extraArgs with a space",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: ['--log-level=warn --auto-tls']\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--log-level=warn --auto-tls\" holds ' ', which systemd's ExecStart would expand, unquote or split: write the value plainly (no %, $, quotes, ;, whitespace or trailing \\)".into()],
        ),
        (
            "extraArgs with a trailing backslash",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: ['--log-level=warn\\']\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"--log-level=warn\\\\\" ends in a backslash, which would join the next line of the unit: remove it".into()],
        ),
        (
            "extraArgs that are not flags",
            edit(&[("  kubernetes:\n", "  etcd:\n    extraArgs: [log-level=warn, ---x, --]\n  kubernetes:\n")]),
            vec!["lab.yaml: etcd.extraArgs[0]: \"log-level=warn\" is not a flag: write --name=value".into(), "lab.yaml: etcd.extraArgs[1]: \"---x\" is not a flag: write --name=value".into(), "lab.yaml: etcd.extraArgs[2]: \"--\" is not a flag: write --name=value".into()],
        ),
        (
            "backup interval that is not a time span",
            edit(&[("  kubernetes:", "  backup:\n    interval: hourly\n  kubernetes:")]),
            vec!["lab.yaml: backup.interval: \"hourly\" is not a duration: use e.g. 30s, 10m, 1h30m or 2d".into()],
        ),
        (
            "backup interval of zero",
            edit(&[("  kubernetes:", "  backup:\n    interval: 0s\n  kubernetes:")]),
            vec!["lab.yaml: backup.interval: \"0s\" is zero: use at least 1s, e.g. 1h".into()],
        ),
        (
            "backup retention of zero",
            edit(&[("  kubernetes:", "  backup:\n    retention: 0\n  kubernetes:")]),
            vec!["lab.yaml: backup.retention: 0 would delete every snapshot: keep at least 1 (default 24)".into()],
        ),
        (
            "relative backup dir",
            edit(&[("  kubernetes:", "  backup:\n    dir: backups\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: \"backups\" is not an absolute path: write one, e.g. /var/lib/etcd-backups".into()],
        ),
        (
            "backup dir with a space and ..",
            edit(&[("  kubernetes:", "  backup:\n    dir: /var/../my backups\n  kubernetes:")]),
            vec!["lab.yaml: backup.dir: \"/var/../my backups\": use a plain absolute path (letters, digits, '/', '.', '_', '-'), e.g. /var/lib/etcd-backups".into()],
        ),
    ];

    let mut failures = Vec::new();
    for (name, text, expected) in &cases {
        let got = problems(dir, text);
        if &got != expected {
            failures.push(format!("{name}:\n  expected {expected:#?}\n  got {got:#?}"));
        }
    }
    assert!(cases.len() >= 20);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_error_lists_every_problem_under_a_header() {
    let text = edit(&[
        ("name: cp3", "name: cp1"),
        ("address: 192.168.56.13", "address: 192.168.56.11"),
    ]);
    let err = inventory::load_str(Path::new("/srv/lab.yaml"), &text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "inventory lab.yaml has 2 problems\n\
         \x20 lab.yaml: hosts[2].name: duplicate of hosts[0]\n\
         \x20 lab.yaml: hosts[2].address: duplicate of hosts[0]"
    );
}

#[test]
fn a_good_inventory_gets_its_defaults() {
    let inv = inventory::load_str(Path::new("/srv/clusters/lab.yaml"), GOOD).unwrap();
    assert_eq!(inv.name, "lab");
    assert_eq!(inv.source, PathBuf::from("/srv/clusters/lab.yaml"));
    assert_eq!(inv.state_dir, PathBuf::from("/srv/clusters/.hactl/lab"));
    let names: Vec<_> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["cp1", "cp2", "cp3", "lb1", "lb2"]);
    assert_eq!(inv.with_role(Role::Etcd).len(), 3);
    assert_eq!(inv.with_role(Role::LoadBalancer).len(), 2);
    let vip = inv.vip.as_ref().unwrap();
    assert_eq!(vip.advert_interval, std::time::Duration::from_millis(300));
    assert_eq!(inv.load_balancer, hactl::inventory::LoadBalancerSpec::default());
    assert_eq!(
        inv.load_balancer.connect_timeout,
        std::time::Duration::from_secs(1)
    );

    let cp1 = &inv.hosts[0];
    assert_eq!(cp1.address, "192.168.56.11".parse::<IpAddr>().unwrap());
    assert_eq!(cp1.prefix_length, 24);
    assert_eq!(cp1.roles, [Role::Etcd, Role::ControlPlane]);
    assert_eq!(cp1.interface, None);
    assert_eq!(
        cp1.ssh,
        SshSpec {
            address: cp1.address,
            port: 22,
            user: "root".into(),
            auth: SshAuth::Agent,
            sudo: false,
            bastion: None,
            connect_timeout_secs: 10,
        }
    );

    let vip = inv.vip.as_ref().unwrap();
    assert_eq!(vip.address, "192.168.56.100".parse::<IpAddr>().unwrap());
    assert_eq!(vip.router_id, 51);

    let etcd = &inv.etcd;
    assert_eq!(etcd.version, None);
    assert_eq!(etcd.source, BinarySource::Package);
    assert_eq!(etcd.data_dir, "/var/lib/etcd");
    assert_eq!((etcd.client_port, etcd.peer_port), (2379, 2380));
    assert_eq!(
        (etcd.heartbeat_interval_ms, etcd.election_timeout_ms),
        (100, 1000)
    );
    assert_eq!(etcd.quota_backend_bytes, 8 * 1024 * 1024 * 1024);
    assert_eq!(etcd.auto_compaction_retention, "8h");
    assert!(etcd.extra_args.is_empty());

    let kube = inv.kubernetes.as_ref().unwrap();
    assert_eq!(kube.version, semver::Version::new(1, 31, 4));
    assert_eq!(
        kube.source,
        BinarySource::Release {
            url: "https://example.com/kubernetes-server-linux-amd64.tar.gz".into(),
            sha256: Some("ab".repeat(32)),
        }
    );
    assert_eq!(kube.service_cidr, "10.96.0.0/12".parse().unwrap());
    assert_eq!(kube.pod_cidr, "10.244.0.0/16".parse().unwrap());
    assert_eq!(kube.mode, KubernetesMode::Systemd);

    assert_eq!(inv.pki.key_type, KeyType::EcdsaP256);
    assert_eq!(
        (inv.pki.ca_validity_days, inv.pki.cert_validity_days),
        (3650, 365)
    );
    assert!(!inv.allow_single_member);

    let b = &inv.backup;
    assert!(b.enabled);
    assert_eq!(b.interval, std::time::Duration::from_secs(3600));
    assert_eq!(b.interval_text, "1h");
    assert_eq!(b.retention, 24);
    assert_eq!(b.dir, "/var/lib/etcd-backups");
}

#[test]
fn backup_settings_are_read() {
    let text = edit(&[(
        "  kubernetes:",
        "  backup:\n    enabled: false\n    interval: 10m\n    retention: 3\n    dir: /srv/etcd-backups/\n  kubernetes:",
    )]);
    let inv = inventory::load_str(Path::new("/srv/lab.yaml"), &text).unwrap();
    let b = &inv.backup;
    assert!(!b.enabled);
    assert_eq!(b.interval, std::time::Duration::from_secs(600));
    assert_eq!(b.interval_text, "600s");
    assert_eq!(b.retention, 3);
    assert_eq!(b.dir, "/srv/etcd-backups");
}

/// The inventory's durations and the command-line flags share one grammar (`hactl::duration`):
/// days and compound terms work in both places.
#[test]
fn inventory_durations_take_days_and_compound_terms_like_the_flags() {
    let text = edit(&[(
        "  kubernetes:",
        "  backup:\n    interval: 1h30m\n  heal:\n    retryPeriod: 1d\n    minHealthyPeriod: 1d12h\n    unhealthyTimeout: 90\n  kubernetes:",
    )]);
    let inv = inventory::load_str(Path::new("/srv/lab.yaml"), &text).unwrap();
    assert_eq!(inv.backup.interval, std::time::Duration::from_secs(5_400));
    assert_eq!(inv.heal.retry_period, std::time::Duration::from_secs(86_400));
    assert_eq!(
        inv.heal.min_healthy_period,
        std::time::Duration::from_secs(129_600)
    );
    assert_eq!(inv.heal.unhealthy_timeout, std::time::Duration::from_secs(90));
    let cli =
        hactl::cli::Cli::try_parse_from(["hactl", "recover", "--auto", "--accept-data-loss-window", "1d12h"])
            .unwrap();
    let hactl::cli::Command::Recover(args) = cli.command else {
        panic!("not recover")
    };
    assert_eq!(
        args.accept_data_loss_window,
        Some(std::time::Duration::from_secs(129_600))
    );
    let text = edit(&[("  kubernetes:", "  heal:\n    retryPeriod: 30m1h\n  kubernetes:")]);
    assert_eq!(
        problems(Path::new("/srv"), &text),
        vec!["lab.yaml: heal.retryPeriod: \"30m1h\": write the units largest first, each once (e.g. 1h30m, not 30m1h)"]
    );
}

#[test]
fn workers_are_read_with_their_role_alone() {
    let dir = tempfile::tempdir().unwrap();
    let text = edit(&[(
        "      roles: [load-balancer]\n  vip:",
        "      roles: [load-balancer]\n    - name: w1\n      address: 192.168.56.41\n      roles: [worker]\n  vip:",
    )]);
    let inv = inventory::load_str(&dir.path().join("lab.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let workers: Vec<&str> = inv
        .with_role(Role::Worker)
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(workers, ["w1"]);
    assert_eq!(inv.host("w1").unwrap().roles, [Role::Worker]);
    assert_eq!(Role::Worker.as_str(), "worker");
    assert_eq!(Role::parse("worker"), Some(Role::Worker));
}

#[test]
fn static_pod_mode_refuses_a_package_source_too() {
    // Static pods run the control plane from images, but every control-plane host runs a
    // kubelet and kube-proxy, which no distribution packages: the package source is refused.
    let text = edit(&[(
        &format!("    source: release\n    releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz\n    sha256: {}\n", "ab".repeat(32)),
        "    source: package\n    mode: static-pod\n",
    )]);
    let err = inventory::load_str(Path::new("/srv/lab.yaml"), &text).unwrap_err();
    assert!(
        err.to_string()
            .contains("kubernetes.source: package is not available: Debian has no kubelet"),
        "{err}"
    );
    let _ = (BinarySource::Package, KubernetesMode::StaticPod);
}

#[test]
fn a_single_member_is_allowed_when_asked_for() {
    let text = format!(
        "apiVersion: {API_VERSION}\nkind: Cluster\nmetadata:\n  name: dev\nspec:\n  allowSingleMember: true\n  ssh: {{ agent: true }}\n  hosts:\n    - {{ name: dev1, address: 'fd00::1', roles: [etcd] }}\n"
    );
    let inv = inventory::load_str(Path::new("dev.yaml"), &text).unwrap();
    assert!(inv.allow_single_member);
    assert_eq!(inv.hosts[0].prefix_length, 64);
    assert_eq!(inv.hosts[0].url_host(), "[fd00::1]");
    assert!(inv.vip.is_none() && inv.kubernetes.is_none());
    // Relative source: the state dir is still absolute.
    assert!(inv.state_dir.is_absolute());
    assert!(inv.state_dir.ends_with(".hactl/dev"));
}

#[test]
fn ssh_settings_are_inherited_and_overridden_field_by_field() {
    let tmp = tempfile::tempdir().unwrap();
    fs_err::create_dir(tmp.path().join("keys")).unwrap();
    fs_err::write(tmp.path().join("keys/lb"), "key").unwrap();
    fs_err::create_dir(tmp.path().join("etcd-bin")).unwrap();
    let text = edit(&[
        (
            "    agent: true\n",
            "    agent: true\n    user: debian\n    connectTimeout: 5\n    bastion: { address: 203.0.113.10, user: jump }\n",
        ),
        (
            "roles: [load-balancer]\n",
            "roles: [load-balancer]\n      ssh: { keyFile: keys/lb, port: 2222, user: root }\n",
        ),
        (
            "  kubernetes:\n",
            "  etcd:\n    version: v3.5.16\n    source: bundle\n    bundleDir: etcd-bin\n    extraArgs: [--log-level=warn]\n  stateDir: state\n  kubernetes:\n",
        ),
    ]);
    let inv = inventory::load_str(&tmp.path().join("lab.yaml"), &text).unwrap_or_else(|err| panic!("{err}"));

    let bastion = SshSpec {
        address: "203.0.113.10".parse().unwrap(),
        port: 22,
        user: "jump".into(),
        auth: SshAuth::Agent,
        sudo: false,
        bastion: None,
        connect_timeout_secs: 5,
    };
    let cp1 = &inv.hosts[0].ssh;
    assert_eq!(
        (cp1.user.as_str(), cp1.port, cp1.sudo, &cp1.auth),
        ("debian", 22, true, &SshAuth::Agent)
    );
    assert_eq!(cp1.connect_timeout_secs, 5);
    assert_eq!(cp1.bastion.as_deref(), Some(&bastion));

    let lb1 = &inv.hosts[3].ssh;
    assert_eq!((lb1.user.as_str(), lb1.port, lb1.sudo), ("root", 2222, false));
    assert_eq!(lb1.auth, SshAuth::KeyFile(tmp.path().join("keys/lb")));
    // The bastion inherits the host's authentication, its own user stays.
    assert_eq!(
        lb1.bastion.as_deref().map(|b| (&b.user, &b.auth)),
        Some((&"jump".to_string(), &SshAuth::KeyFile(tmp.path().join("keys/lb"))))
    );

    assert_eq!(inv.etcd.version, Some(semver::Version::new(3, 5, 16)));
    assert_eq!(
        inv.etcd.source,
        BinarySource::Bundle {
            dir: tmp.path().join("etcd-bin")
        }
    );
    assert_eq!(inv.etcd.extra_args, ["--log-level=warn"]);
    assert_eq!(inv.state_dir, tmp.path().join("state"));
}

#[test]
fn a_release_source_keeps_its_url_and_lowercases_the_sha256() {
    let sha = "AB".repeat(32);
    let text = edit(&[
        (
            "releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz",
            "releaseUrl: https://dl.k8s.io/v1.31.4/kubernetes-server-linux-amd64.tar.gz",
        ),
        (&format!("sha256: {}", "ab".repeat(32)), &format!("sha256: {sha}")),
    ]);
    let inv = inventory::load_str(Path::new("/srv/lab.yaml"), &text).unwrap();
    assert_eq!(
        inv.kubernetes.unwrap().source,
        BinarySource::Release {
            url: "https://dl.k8s.io/v1.31.4/kubernetes-server-linux-amd64.tar.gz".into(),
            sha256: Some("ab".repeat(32)),
        }
    );
    // Over https:// the sha256 may be left out: the published one is fetched at download.
    let text = edit(&[
        (
            "releaseUrl: https://example.com/kubernetes-server-linux-amd64.tar.gz",
            "releaseUrl: https://dl.k8s.io/v1.31.4/kubernetes-server-linux-amd64.tar.gz",
        ),
        (&format!("    sha256: {}\n", "ab".repeat(32)), ""),
    ]);
    let inv = inventory::load_str(Path::new("/srv/lab.yaml"), &text).unwrap();
    assert_eq!(
        inv.kubernetes.unwrap().source,
        BinarySource::Release {
            url: "https://dl.k8s.io/v1.31.4/kubernetes-server-linux-amd64.tar.gz".into(),
            sha256: None,
        }
    );
}

#[test]
fn the_shipped_inventories_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for entry in fs_err::read_dir(root.join("inventories")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("vagrant") {
                // Their keyFile is the user's ~/.ssh/id_ed25519: checked with a HOME that has one
                // by the_vagrant_inventories_match_the_vagrantfile.
            } else {
                inventory::load(&path).unwrap_or_else(|err| panic!("{err}"));
            }
            seen += 1;
        }
    }
    assert!(seen >= 3, "example.yaml, five-members.yaml, vagrant.yaml");

    let five_path = root.join("inventories/five-members.yaml");
    let five_text = fs_err::read_to_string(&five_path).unwrap().replacen(
        "  kubernetes:\n    version: 1.31.4\n",
        "  kubernetes:\n    version: 1.31.4\n    mode: static-pod\n",
        1,
    );
    let five = inventory::load_str(&five_path, &five_text).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(five.with_role(Role::Etcd).len(), 5);
}

/// `inventories/vagrant.yaml` (3 VMs) and `vagrant-5.yaml` (5 VMs) describe what
/// `vagrant/Vagrantfile` creates with HACTL_VAGRANT_NODES=3 and 5: the same names, addresses and
/// roles, the VIP on the private network, and the SSH key the Vagrantfile installs.
#[test]
fn the_vagrant_inventories_match_the_vagrantfile() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let vagrantfile = fs_err::read_to_string(root.join("vagrant/Vagrantfile")).unwrap();
    let all = [Role::Etcd, Role::ControlPlane, Role::LoadBalancer];
    let stacked = [Role::Etcd, Role::ControlPlane];
    /// A host of a layout: name, address, roles.
    type Machine<'a> = (&'a str, &'a str, &'a [Role]);
    let layouts: [(&str, Vec<Machine>); 2] = [
        (
            "vagrant.yaml",
            vec![
                ("cp1", "192.168.56.11", &all),
                ("cp2", "192.168.56.12", &all),
                ("cp3", "192.168.56.13", &all),
            ],
        ),
        (
            "vagrant-5.yaml",
            vec![
                ("cp1", "192.168.56.11", &stacked),
                ("cp2", "192.168.56.12", &stacked),
                ("cp3", "192.168.56.13", &stacked),
                ("lb1", "192.168.56.21", &[Role::LoadBalancer]),
                ("lb2", "192.168.56.22", &[Role::LoadBalancer]),
            ],
        ),
    ];
    // The key file need not exist for this check: point HOME at a directory that has it.
    let home = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(home.path().join(".ssh")).unwrap();
    fs_err::write(home.path().join(".ssh/id_ed25519"), "").unwrap();
    for (file, hosts) in layouts {
        let text = fs_err::read_to_string(root.join("inventories").join(file)).unwrap();
        let text = text.replace(
            "~/.ssh/id_ed25519",
            &home.path().join(".ssh/id_ed25519").display().to_string(),
        );
        let inv = inventory::load_str(&root.join("inventories").join(file), &text)
            .unwrap_or_else(|err| panic!("{err}"));
        let got: Vec<(String, String, Vec<Role>)> = inv
            .hosts
            .iter()
            .map(|h| (h.name.clone(), h.address.to_string(), h.roles.clone()))
            .collect();
        let want: Vec<(String, String, Vec<Role>)> = hosts
            .iter()
            .map(|(n, a, r)| (n.to_string(), a.to_string(), r.to_vec()))
            .collect();
        assert_eq!(got, want, "{file}");
        for (name, address, _) in &hosts {
            assert!(
                vagrantfile.contains(&format!("name: \"{name}\", ip: \"{address}\"")),
                "{file}: {name} ({address}) is not a machine of the Vagrantfile"
            );
        }
        assert_eq!(
            inv.vip.as_ref().unwrap().address.to_string(),
            "192.168.56.100",
            "{file}"
        );
        assert!(vagrantfile.contains("VIP = \"192.168.56.100\""));
        assert!(
            inv.hosts.iter().all(|h| h.ssh.user == "vagrant" && h.ssh.sudo),
            "{file}"
        );
        // The inventory logs in with the key whose public half the Vagrantfile installs.
        assert!(
            inv.hosts
                .iter()
                .all(|h| h.ssh.auth == SshAuth::KeyFile(home.path().join(".ssh/id_ed25519"))),
            "{file}"
        );
        assert!(vagrantfile.contains("DEFAULT_PUBKEY = \"~/.ssh/id_ed25519.pub\""));
        // The box's etcd (Debian bookworm's package) is the version the inventory expects.
        assert_eq!(inv.etcd.source, BinarySource::Package, "{file}");
        assert_eq!(inv.etcd.version, Some(semver::Version::new(3, 4, 23)), "{file}");
    }
}

#[test]
fn the_init_example_is_the_shipped_example_and_validates_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = hactl::commands::init::example_inventory();
    assert_eq!(
        example,
        fs_err::read_to_string(root.join("inventories/example.yaml")).unwrap()
    );
    // `init` writes a Kubernetes source `plan` accepts, so a new user meets no refusal at the
    // second step.
    let inv = inventory::load_str(Path::new("cluster.yaml"), example).unwrap_or_else(|err| panic!("{err}"));
    assert!(matches!(
        inv.kubernetes.unwrap().source,
        BinarySource::Release { .. }
    ));
}

/// Every numeric field of the inventory (integers and durations) against its range, as
/// docs/reference/inventory.md states it: the least and the greatest allowed value validate,
/// one step past either end is refused at the field's place (or, past what the field's integer
/// type holds, as a parse error at its position). Nothing past a range reaches `plan`, where a
/// value like `caValidityDays: 3000000` once overflowed a certificate's end date and panicked.
#[test]
fn every_numeric_field_is_checked_against_its_range() {
    // `{v}` in a snippet is the value under test; a snippet starting with `ssh:` goes under
    // `spec.ssh`, `host:` under the first host, anything else at the end of `spec`.
    struct Case {
        place: &'static str,
        snippet: &'static str,
        below: Option<&'static str>,
        min: &'static str,
        max: &'static str,
        above: &'static str,
    }
    let c = |place, snippet, below, min, max, above| Case {
        place,
        snippet,
        below,
        min,
        max,
        above,
    };
    let remote = "  backup:\n    remote:\n      address: 192.168.56.30\n      path: /srv/backups\n";
    let cases = [
        c(
            "ssh.port",
            "ssh:    port: {v}\n",
            Some("0"),
            "1",
            "65535",
            "65536",
        ),
        c(
            "ssh.connectTimeout",
            "ssh:    connectTimeout: {v}\n",
            Some("0"),
            "1",
            "3600",
            "3601",
        ),
        c(
            "ssh.bastion.port",
            "ssh:    bastion: { address: 192.168.56.5, port: {v} }\n",
            Some("0"),
            "1",
            "65535",
            "65536",
        ),
        c(
            "hosts[0].ssh.port",
            "host:      ssh: { port: {v} }\n",
            Some("0"),
            "1",
            "65535",
            "65536",
        ),
        c(
            "hosts[0].ssh.connectTimeout",
            "host:      ssh: { connectTimeout: {v} }\n",
            Some("0"),
            "1",
            "3600",
            "3601",
        ),
        // On a host without roles: a control-plane host's prefix also decides whether the nodes
        // share one network (host-gw), and a load balancer's whether the VIP is in its subnet,
        // which a /32 fails either way.
        c(
            "hosts[5].prefixLength",
            "spare:      prefixLength: {v}\n",
            Some("0"),
            "24",
            "32",
            "33",
        ),
        c(
            "vip.routerId",
            "  vip:\n    address: 192.168.56.100\n    routerId: {v}\n",
            Some("0"),
            "1",
            "255",
            "256",
        ),
        c(
            "vip.advertInterval",
            "  vip:\n    address: 192.168.56.100\n    advertInterval: {v}\n",
            Some("90ms"),
            "100ms",
            "10s",
            "10s10ms",
        ),
        c(
            "loadBalancer.checkInterval",
            "  loadBalancer:\n    checkInterval: {v}\n",
            Some("99ms"),
            "100ms",
            "1m",
            "1m1ms",
        ),
        c(
            "loadBalancer.connectTimeout",
            "  loadBalancer:\n    connectTimeout: {v}\n",
            Some("99ms"),
            "100ms",
            "30s",
            "30s1ms",
        ),
        c(
            "loadBalancer.checkTimeout",
            "  loadBalancer:\n    checkTimeout: {v}\n",
            Some("99ms"),
            "100ms",
            "1m",
            "1m1ms",
        ),
        c(
            "loadBalancer.fall",
            "  loadBalancer:\n    fall: {v}\n",
            Some("0"),
            "1",
            "10",
            "11",
        ),
        c(
            "loadBalancer.rise",
            "  loadBalancer:\n    rise: {v}\n",
            Some("0"),
            "1",
            "10",
            "11",
        ),
        c(
            "etcd.clientPort",
            "  etcd:\n    clientPort: {v}\n",
            Some("0"),
            "1",
            "65535",
            "65536",
        ),
        c(
            "etcd.peerPort",
            "  etcd:\n    peerPort: {v}\n",
            Some("0"),
            "1",
            "65535",
            "65536",
        ),
        c(
            "etcd.heartbeatInterval",
            "  etcd:\n    electionTimeout: 50000\n    heartbeatInterval: {v}\n",
            Some("0"),
            "1",
            "10000",
            "10001",
        ),
        c(
            "etcd.electionTimeout",
            "  etcd:\n    electionTimeout: {v}\n",
            Some("499"),
            "500",
            "50000",
            "50001",
        ),
        c(
            "etcd.quotaBackendBytes",
            "  etcd:\n    quotaBackendBytes: {v}\n",
            Some("1048575"),
            "1048576",
            "8589934592",
            "8589934593",
        ),
        c(
            "etcd.autoCompactionRetention",
            "  etcd:\n    autoCompactionRetention: {v}\n",
            None,
            "0",
            "8760h",
            "8760h1ms",
        ),
        c(
            "pki.caValidityDays",
            "  pki:\n    certValidityDays: 2\n    renewBeforeDays: 1\n    caValidityDays: {v}\n",
            Some("0"),
            "2",
            "36500",
            "36501",
        ),
        c(
            "pki.certValidityDays",
            "  pki:\n    caValidityDays: 36500\n    renewBeforeDays: 1\n    certValidityDays: {v}\n",
            Some("0"),
            "2",
            "36500",
            "36501",
        ),
        c(
            "pki.renewBeforeDays",
            "  pki:\n    certValidityDays: 365\n    renewBeforeDays: {v}\n",
            Some("0"),
            "1",
            "364",
            "365",
        ),
        c(
            "heal.maxUnhealthy",
            "  heal:\n    maxUnhealthy: {v}\n",
            None,
            "0",
            "3",
            "4",
        ),
        c(
            "heal.maxRetry",
            "  heal:\n    maxRetry: {v}\n",
            None,
            "0",
            "100",
            "101",
        ),
        c(
            "heal.retryPeriod",
            "  heal:\n    retryPeriod: {v}\n",
            None,
            "0s",
            "30d",
            "30d1ms",
        ),
        c(
            "heal.minHealthyPeriod",
            "  heal:\n    minHealthyPeriod: {v}\n",
            None,
            "0s",
            "30d",
            "30d1ms",
        ),
        c(
            "heal.unhealthyTimeout",
            "  heal:\n    unhealthyTimeout: {v}\n",
            None,
            "0s",
            "30d",
            "30d1ms",
        ),
        c(
            "backup.interval",
            "  backup:\n    interval: {v}\n",
            Some("999ms"),
            "1s",
            "30d",
            "30d1s",
        ),
        c(
            "backup.retention",
            "  backup:\n    retention: {v}\n",
            Some("0"),
            "1",
            "10000",
            "10001",
        ),
        c(
            "backup.remote.port",
            "REMOTE      port: {v}\n",
            Some("0"),
            "1",
            "65535",
            "65536",
        ),
        c(
            "backup.remote.retention",
            "REMOTE      retention: {v}\n",
            Some("0"),
            "1",
            "10000",
            "10001",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let with = |case: &Case, value: &str| -> String {
        let line = case.snippet.replace("{v}", value);
        if let Some(rest) = line.strip_prefix("ssh:") {
            edit(&[("    agent: true\n", &format!("    agent: true\n{rest}"))])
        } else if let Some(rest) = line.strip_prefix("spare:") {
            edit(&[(
                "  vip:\n",
                &format!("    - name: spare1\n      address: 192.168.56.31\n{rest}      roles: []\n  vip:\n"),
            )])
        } else if let Some(rest) = line.strip_prefix("host:") {
            edit(&[(
                "      address: 192.168.56.11\n",
                &format!("      address: 192.168.56.11\n{rest}"),
            )])
        } else if let Some(rest) = line.strip_prefix("REMOTE") {
            format!("{GOOD}{remote}{rest}")
        } else if line.starts_with("  vip:") {
            edit(&[("  vip:\n    address: 192.168.56.100\n", &line)])
        } else {
            format!("{GOOD}{line}")
        }
    };
    for case in &cases {
        for ok in [case.min, case.max] {
            let text = with(case, ok);
            assert_eq!(
                problems(dir.path(), &text),
                Vec::<String>::new(),
                "{}: {ok}\n{text}",
                case.place
            );
        }
        for bad in case.below.into_iter().chain([case.above]) {
            let text = with(case, bad);
            let found = problems(dir.path(), &text);
            let at_place = found
                .iter()
                .any(|p| p.starts_with(&format!("lab.yaml: {}: ", case.place)));
            // Past the integer type: serde's parse error, at a `line:column` position.
            let parse_error = found.len() == 1
                && found[0]
                    .strip_prefix("lab.yaml:")
                    .is_some_and(|rest| rest.starts_with(|ch: char| ch.is_ascii_digit()));
            assert!(
                at_place || parse_error,
                "{}: {bad} gave {found:?}\n{text}",
                case.place
            );
        }
    }
}
