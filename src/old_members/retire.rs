//! Fencing an old member for good, as `replace` does to the host it moves a member off: the
//! units the host no longer serves are fenced ([`crate::fence`]), stopped and disabled (the
//! Kubernetes control plane first, then etcd and its backup timer, then the load balancers), the
//! static-pod manifests moved aside, any etcd still running on hactl's data (started by hand
//! from a preserved data dir) stopped, and the data dir moved aside, never deleted
//! (`<dataDir>.hactl-retired-<run>`, under the data-directory rule).
//!
//! Used by recover (R1.5: the hosts of the old cluster, before the new one starts), heal (H2: a
//! zombie, or an old member attested dead that answers again) and `up` (an old member on a host
//! without the etcd role). The script refuses (exit 2) when the etcd it finds is a member of the
//! cluster it must not touch: the destructive step re-checks its target on the host, right
//! before it acts.
//!
//! Invariant: pure builders of remote commands; the postcondition ([`done_command`]) reads only.

use crate::plan::RemoteCommand;

/// Where the data dir of a member fenced for good goes.
pub fn aside(data_dir: &str, run: &str) -> String {
    format!("{data_dir}.hactl-retired-{run}")
}

/// Where its static-pod manifests go.
pub fn manifests_aside(run: &str) -> String {
    format!("/etc/kubernetes/manifests.hactl/{run}")
}

/// What the fence must not touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The member of this cluster (ID) is kept: when the host's data dir is of it (its WAL's
    /// metadata) or its etcd answers as a member of it, only an etcd started beside it on hactl's
    /// old data is stopped; with none, the fence refuses. An etcd that neither answers nor has a
    /// WAL to read is refused too: an etcd host's member could be a current one.
    NotOfCluster(u64),
    /// As [`Guard::NotOfCluster`], but an etcd that cannot be told is fenced: a host without the
    /// etcd role whose peer URL is in no current member list.
    NotOfClusterOrSilent(u64),
    /// No cluster to protect (recover's R1.5: the new cluster does not exist yet).
    None,
}

impl Guard {
    fn cluster(self) -> Option<u64> {
        match self {
            Guard::NotOfCluster(c) | Guard::NotOfClusterOrSilent(c) => Some(c),
            Guard::None => None,
        }
    }
}

/// The bytes the metadata record of a WAL of cluster `id` holds (`ClusterID`, field 2, as a
/// varint), as `od -An -tx1` prints them between spaces: what the scripts look for in a WAL's
/// head.
pub fn wal_needle(id: u64) -> String {
    let mut out = String::from(" 10");
    let mut v = id;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push_str(&format!(" {byte:02x}"));
            break;
        }
        out.push_str(&format!(" {:02x}", byte | 0x80));
    }
    out.push(' ');
    out
}

/// Shell functions both scripts use: `datadir_of PID`, `current_data DIR` (its WAL is of the
/// cluster `$needle` names), `victims` (etcd processes on hactl's data, `$dd` or a `$dd.hactl-*`
/// copy, whose data is not of that cluster).
const FUNCTIONS: &str = r#"datadir_of() { tr '\0' '\n' < "/proc/$1/cmdline" 2>/dev/null | awk 'f { print; exit } /^--data-dir=/ { sub(/^--data-dir=/, ""); print; exit } /^--data-dir$/ { f = 1 }'; }
current_data() {
  [ -n "$needle" ] || return 1
  w=$(ls "$1/member/wal/"*.wal 2>/dev/null | head -n1)
  [ -n "$w" ] || return 1
  case " $(od -An -v -tx1 -N 256 "$w" | tr -s ' \n' ' ') " in *"$needle"*) return 0 ;; esac
  return 1
}
victims() {
  for p in $(pgrep -x etcd 2>/dev/null); do
    d=$(datadir_of "$p")
    case "$d" in "$dd"|"$dd".hactl-*) current_data "$d" || echo "$p" ;; esac
  done
}
"#;

const RETIRE: &str = r#"set -u
why=$1 dd=$2 aside=$3 cid=$4 needle=$5 silent=$6 mdir=$7
ctl=/usr/local/sbin/hactl-etcdctl
ours_unit() {
  systemctl cat "$1" >/dev/null 2>&1 || return 1
  case "$1" in
    haproxy.service) grep -qs 'Managed by hactl' /etc/haproxy/haproxy.cfg ;;
    keepalived.service) grep -qs 'Managed by hactl' /etc/keepalived/keepalived.conf ;;
  esac
}
{FUNCTIONS}keep=no
current_data "$dd" && keep=yes
if [ -n "$cid" ] && pgrep -x etcd >/dev/null 2>&1; then
  s=$([ -x "$ctl" ] && "$ctl" --dial-timeout=2s --command-timeout=3s endpoint status -w json 2>/dev/null | tr -d '\n')
  case "$s" in
    *"\"cluster_id\":$cid,"*) keep=yes ;;
    *'"cluster_id":'*) ;;
    *)
      for p in $(pgrep -x etcd); do
        d=$(datadir_of "$p")
        case "$d" in "$dd"|"$dd".hactl-*) ;; *) continue ;; esac
        if [ "$silent" != yes ] && ! current_data "$d" && [ -z "$(ls "$d/member/wal/"*.wal 2>/dev/null | head -n1)" ]; then
          echo "hactl: refusing to fence etcd on $(uname -n): pid $p runs on ${d:-an unknown data dir} and neither answers nor has a WAL that says which cluster it belongs to (rule: an etcd host's member is fenced only once it is known to be of another cluster); see journalctl -u etcd there, then try again" >&2
          exit 2
        fi
      done ;;
  esac
fi
if [ $keep = yes ]; then
  # The member here is of the current cluster: only an etcd started beside it on old data goes.
  if [ -z "$(victims)" ]; then
    echo "hactl: refusing to fence etcd on $(uname -n): it is a member of the current cluster and no other etcd runs on hactl's data (rule: only an etcd of another cluster is fenced for good); take a member out with hactl remove or hactl replace instead" >&2
    exit 2
  fi
else
{FENCES}for c in kube-apiserver kube-controller-manager kube-scheduler; do
  if [ -e "/etc/kubernetes/manifests/$c.yaml" ]; then
    mkdir -p "$mdir" && mv -f "/etc/kubernetes/manifests/$c.yaml" "$mdir/$c.yaml" && echo "moved /etc/kubernetes/manifests/$c.yaml to $mdir/"
  fi
done
fi
for p in $(victims); do echo "stopping etcd pid $p (on $(datadir_of "$p"), of another cluster)"; kill -TERM "$p" 2>/dev/null || true; done
i=0
while [ -n "$(victims)" ] && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
for p in $(victims); do kill -KILL "$p" 2>/dev/null || true; done
i=0
while [ -n "$(victims)" ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
[ -z "$(victims)" ] || { echo "hactl: an etcd of another cluster still runs on $(uname -n) after TERM and KILL" >&2; exit 1; }
[ $keep = no ] || exit 0
"#;

/// The fence for good of the old member on one host: `units` in stop order (those not
/// installed there are skipped, and HAProxy and keepalived unless hactl wrote their config),
/// `why` in the drop-in's comment, the data dir `data_dir` moved to [`aside`]`(data_dir, run)`.
/// With a [`Guard`], a member of that cluster on the host is kept (only an etcd beside it on old
/// data is stopped), re-checked on the host right before anything is done.
pub fn command(why: &str, run: &str, data_dir: &str, guard: Guard, units: &[&str]) -> RemoteCommand {
    let cid = guard.cluster().map(|c| c.to_string()).unwrap_or_default();
    let needle = guard.cluster().map(wal_needle).unwrap_or_default();
    let silent = if matches!(guard, Guard::NotOfCluster(_)) {
        "no"
    } else {
        "yes"
    };
    let again = format!("hactl heal --once (or hactl recover --resume {run})");
    // The one fence text ([`crate::fence`]), for each unit that is installed (and hactl's).
    let mut fences = String::new();
    for u in units {
        fences.push_str(&format!(
            "if ours_unit {u}; then\n  {}\n  hactl_fenced=1\nfi\n",
            crate::fence::write(
                u,
                &[
                    why,
                    "It must not start again on this host; hactl removes this file only when it gives the host this role again.",
                ]
            )
        ));
    }
    fences.push_str(&format!(
        "[ -z \"${{hactl_fenced:-}}\" ] || systemctl daemon-reload\nfor u in {}; do\n  ours_unit \"$u\" || continue\n  systemctl stop \"$u\" 2>/dev/null || true\n  systemctl disable --quiet \"$u\" 2>/dev/null || true\n  echo \"fenced $u\"\ndone\n",
        if units.is_empty() { "\"\"".to_string() } else { units.join(" ") }
    ));
    let script = format!(
        "{}{guard}{guard_fn} \"$dd\" \"move $dd aside\" '{again}'\n\
if [ -d \"$dd\" ] && [ -n \"$(ls -A \"$dd\" 2>/dev/null)\" ]; then mv -T -- \"$dd\" \"$aside\" && echo \"data dir $dd moved to $aside\"; fi",
        RETIRE.replace("{FUNCTIONS}", FUNCTIONS).replace("{FENCES}", &fences),
        guard = crate::etcd::data_dir::guard(),
        guard_fn = crate::etcd::data_dir::GUARD_FN,
    );
    let aside = aside(data_dir, run);
    let argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        script,
        "hactl-retire".into(),
        why.into(),
        data_dir.into(),
        aside,
        cid,
        needle,
        silent.into(),
        manifests_aside(run),
    ];
    RemoteCommand::new(argv).with_timeout(std::time::Duration::from_secs(120))
}

/// Read-only: the old member is fenced for good: no etcd of another cluster runs on hactl's
/// data, and either the host's data dir is of the cluster `guard` keeps (a member kept), or
/// every unit of `units` that is installed is fenced, stopped and not enabled, no control-plane
/// manifest is left and the data dir holds no member.
pub fn done_command(data_dir: &str, guard: Guard, units: &[&str]) -> RemoteCommand {
    let needle = guard.cluster().map(wal_needle).unwrap_or_default();
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        format!(
            r#"dd=$1 needle=$2; shift 2
{FUNCTIONS}[ -z "$(victims)" ] || exit 1
current_data "$dd" && exit 0
for u in "$@"; do
  systemctl cat "$u" >/dev/null 2>&1 || continue
  case "$u" in
    haproxy.service) grep -qs 'Managed by hactl' /etc/haproxy/haproxy.cfg || continue ;;
    keepalived.service) grep -qs 'Managed by hactl' /etc/keepalived/keepalived.conf || continue ;;
  esac
  {fenced} || exit 1
  case "$(systemctl is-active "$u" 2>/dev/null)" in active|activating|reloading|deactivating) exit 1 ;; esac
  [ "$(systemctl is-enabled "$u" 2>/dev/null)" != enabled ] || exit 1
done
for c in kube-apiserver kube-controller-manager kube-scheduler; do [ ! -e "/etc/kubernetes/manifests/$c.yaml" ] || exit 1; done
[ ! -d "$dd/member" ]"#,
            fenced = crate::fence::is_fenced("$u")
        ),
        "hactl-retired".into(),
        data_dir.into(),
        needle,
    ];
    argv.extend(units.iter().map(|u| u.to_string()));
    RemoteCommand::read_only(argv)
}

/// The units a fence for good stops on a host with `roles` (what the inventory now gives it):
/// every unit of [`super::probe::UNITS`] that none of its roles runs, in stop order.
pub fn units_for(roles: &[crate::inventory::Role]) -> Vec<&'static str> {
    use crate::inventory::Role;
    super::probe::UNITS
        .into_iter()
        .filter(|u| {
            let needed = match *u {
                "kube-scheduler.service" | "kube-controller-manager.service" | "kube-apiserver.service" => {
                    roles.contains(&Role::ControlPlane)
                }
                crate::load_balancer::KEEPALIVED_UNIT | crate::load_balancer::HAPROXY_UNIT => {
                    roles.contains(&Role::LoadBalancer)
                }
                _ => false, // etcd and its backup timer: the old member's, never kept
            };
            !needed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Role;

    #[test]
    fn the_fence_checks_its_target_first_and_never_deletes() {
        let cmd = command(
            "fenced by hactl recover r1",
            "r1",
            "/var/lib/etcd",
            Guard::NotOfCluster(42),
            &units_for(&[]),
        );
        assert!(!cmd.read_only);
        let line = cmd.line(false);
        assert!(!line.contains("rm -"), "{line}");
        let script = &cmd.argv[2];
        let check = script.find("cluster_id\\\":$cid,").unwrap();
        assert!(check < script.find("systemctl stop").unwrap(), "{script}");
        assert!(script.find("hactl_data_dir_guard \"$dd\"").unwrap() < script.find("mv -T --").unwrap());
        // The one fence text.
        assert!(
            script.contains(&crate::fence::dropin_path("etcd.service")),
            "{script}"
        );
        for w in [
            "/var/lib/etcd.hactl-retired-r1",
            "/etc/kubernetes/manifests.hactl/r1",
            " 42 ' 10 2a ' no ",
            "kube-apiserver.service etcd.service hactl-etcd-backup.timer keepalived.service haproxy.service",
        ] {
            assert!(line.contains(w), "{w}: {line}");
        }
        assert!(done_command("/var/lib/etcd", Guard::None, &["etcd.service"]).read_only);
    }

    #[test]
    fn the_needle_is_the_cluster_id_as_the_wal_metadata_holds_it() {
        // cdf818194e3a8c32 as etcd 3.5.16 wrote it: `10 b2 98 ea f1 94 83 86 fc cd 01`.
        assert_eq!(
            wal_needle(0xcdf818194e3a8c32),
            " 10 b2 98 ea f1 94 83 86 fc cd 01 "
        );
        assert_eq!(wal_needle(1), " 10 01 ");
    }

    /// A data dir whose WAL is of the kept cluster is never moved and stops nothing; another
    /// cluster's is moved aside (`sh` on scratch dirs: the WAL head etcd 3.5.16 wrote).
    #[test]
    fn a_member_of_the_kept_cluster_is_kept_in_a_real_shell() {
        let head: Vec<u8> = "04 00 00 00 00 00 00 84 08 04 10 00 00 00 00 00 20 00 00 00 00 00 00 00 08 01 10 bb 81 c7 fc 05 1a 16 08 cd d2 91 8b d2 b8 81 cf 8e 01 10 b2 98 ea f1 94 83 86 fc cd 01 0e 00 00 00 00 00 00 82"
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        let dd = tmp.path().join("etcd");
        std::fs::create_dir_all(dd.join("member/wal")).unwrap();
        std::fs::write(dd.join("member/wal/0000000000000000-0000000000000000.wal"), &head).unwrap();
        let dds = dd.to_str().unwrap();
        let run = |cmd: RemoteCommand| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd.line(false))
                .output()
                .unwrap()
        };
        let kept = Guard::NotOfCluster(0xcdf818194e3a8c32);
        let out = run(command("why", "r1", dds, kept, &[]));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("it is a member of the current cluster"), "{err}");
        assert!(dd.join("member").exists(), "the kept member's data was touched");
        assert!(run(done_command(dds, kept, &[])).status.success());
        // Of another cluster: moved aside.
        let other = Guard::NotOfCluster(0x1234);
        assert!(!run(done_command(dds, other, &[])).status.success());
        let out = run(command("why", "r1", dds, other, &[]));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!dd.exists() && tmp.path().join("etcd.hactl-retired-r1/member/wal").exists());
        assert!(run(done_command(dds, other, &[])).status.success());
    }

    #[test]
    fn a_host_keeps_the_units_of_the_roles_it_still_has() {
        assert_eq!(units_for(&[]).len(), 7);
        let lb = units_for(&[Role::LoadBalancer]);
        assert!(!lb.contains(&"haproxy.service") && lb.contains(&"etcd.service"));
        let cp = units_for(&[Role::ControlPlane, Role::Worker]);
        assert!(!cp.contains(&"kube-apiserver.service") && cp.contains(&"haproxy.service"));
    }

    /// The script, run by `sh` against a scratch data dir with systemd absent: it moves the data
    /// aside (never deletes) and the postcondition then holds for the data dir.
    #[test]
    fn the_script_moves_the_data_aside_in_a_real_shell() {
        let tmp = tempfile::tempdir().unwrap();
        let dd = tmp.path().join("etcd");
        std::fs::create_dir_all(dd.join("member/wal")).unwrap();
        std::fs::write(dd.join("member/wal/0.wal"), "x").unwrap();
        let dds = dd.to_str().unwrap();
        let cmd = command("why", "r9", dds, Guard::None, &[]);
        let out = cmd.run_in("sh");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!dd.exists());
        let aside = std::path::PathBuf::from(aside(dds, "r9"));
        assert_eq!(
            std::fs::read_to_string(aside.join("member/wal/0.wal")).unwrap(),
            "x"
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("moved to"));
        let done = done_command(dds, Guard::None, &[]);
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(done.line(false))
            .status()
            .unwrap();
        assert!(ok.success());
    }
}
