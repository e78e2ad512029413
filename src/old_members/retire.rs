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
    /// Refuse when the local etcd answers as a member of this cluster (ID), or does not answer
    /// while running: an etcd-role host, whose running etcd could be a current member.
    NotOfCluster(u64),
    /// Refuse when the local etcd answers as a member of this cluster; a running etcd that does
    /// not answer is fenced (a host whose peer URL is in no current member list).
    NotOfClusterOrSilent(u64),
    /// No cluster to protect (recover: the new cluster does not exist yet on these hosts).
    None,
}

const RETIRE: &str = r#"set -u
why=$1 dd=$2 aside=$3 cid=$4 silent=$5 mdir=$6
ctl=/usr/local/sbin/hactl-etcdctl
ours_unit() {
  systemctl cat "$1" >/dev/null 2>&1 || return 1
  case "$1" in
    haproxy.service) grep -qs 'Managed by hactl' /etc/haproxy/haproxy.cfg ;;
    keepalived.service) grep -qs 'Managed by hactl' /etc/keepalived/keepalived.conf ;;
  esac
}
if [ -n "$cid" ] && pgrep -x etcd >/dev/null 2>&1; then
  s=$([ -x "$ctl" ] && "$ctl" --dial-timeout=2s --command-timeout=3s endpoint status -w json 2>/dev/null | tr -d '\n')
  case "$s" in
    *"\"cluster_id\":$cid,"*)
      echo "hactl: refusing to fence etcd on $(uname -n): it answers as a member of the current cluster (rule: only an etcd of another cluster is fenced for good); take it out with hactl remove or hactl replace instead" >&2
      exit 2 ;;
    *'"cluster_id":'*) ;;
    *) if [ "$silent" != yes ]; then
         echo "hactl: refusing to fence etcd on $(uname -n): it runs but does not say which cluster it belongs to (rule: an etcd host's member is fenced only once it answers as a member of another cluster); run hactl status to see it, then try again" >&2
         exit 2
       fi ;;
  esac
fi
{FENCES}for c in kube-apiserver kube-controller-manager kube-scheduler; do
  if [ -e "/etc/kubernetes/manifests/$c.yaml" ]; then
    mkdir -p "$mdir" && mv -f "/etc/kubernetes/manifests/$c.yaml" "$mdir/$c.yaml" && echo "moved /etc/kubernetes/manifests/$c.yaml to $mdir/"
  fi
done
ours() {
  for p in $(pgrep -x etcd 2>/dev/null); do
    d=$(tr '\0' '\n' < "/proc/$p/cmdline" 2>/dev/null | awk 'f { print; exit } /^--data-dir=/ { sub(/^--data-dir=/, ""); print; exit } /^--data-dir$/ { f = 1 }')
    case "$d" in "$dd"|"$dd".hactl-*) echo "$p" ;; esac
  done
}
for p in $(ours); do echo "stopping etcd pid $p (on hactl's data)"; kill -TERM "$p" 2>/dev/null || true; done
i=0
while [ -n "$(ours)" ] && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
for p in $(ours); do kill -KILL "$p" 2>/dev/null || true; done
i=0
while [ -n "$(ours)" ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
[ -z "$(ours)" ] || { echo "hactl: etcd on $dd still runs on $(uname -n) after TERM and KILL" >&2; exit 1; }
"#;

/// The fence for good of the old member on one host: `units` in stop order (those not
/// installed there are skipped, and HAProxy and keepalived unless hactl wrote their config), `why` in the drop-in's comment, the data dir `data_dir` moved
/// to [`aside`]`(data_dir, run)`.
pub fn command(why: &str, run: &str, data_dir: &str, guard: Guard, units: &[&str]) -> RemoteCommand {
    let (cid, silent) = match guard {
        Guard::NotOfCluster(c) => (c.to_string(), "no"),
        Guard::NotOfClusterOrSilent(c) => (c.to_string(), "yes"),
        Guard::None => (String::new(), "yes"),
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
        RETIRE.replace("{FENCES}", &fences),
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
        silent.into(),
        manifests_aside(run),
    ];
    RemoteCommand::new(argv).with_timeout(std::time::Duration::from_secs(120))
}

/// Read-only: the old member is fenced for good: no etcd runs on hactl's data, every unit of
/// `units` that is installed is fenced, stopped and not enabled, no control-plane manifest is
/// left, and the data dir holds no member.
pub fn done_command(data_dir: &str, units: &[&str]) -> RemoteCommand {
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        r#"dd=$1; shift
for p in $(pgrep -x etcd 2>/dev/null); do
  d=$(tr '\0' '\n' < "/proc/$p/cmdline" 2>/dev/null | awk 'f { print; exit } /^--data-dir=/ { sub(/^--data-dir=/, ""); print; exit } /^--data-dir$/ { f = 1 }')
  case "$d" in "$dd"|"$dd".hactl-*) exit 1 ;; esac
done
for u in "$@"; do
  systemctl cat "$u" >/dev/null 2>&1 || continue
  case "$u" in
    haproxy.service) grep -qs 'Managed by hactl' /etc/haproxy/haproxy.cfg || continue ;;
    keepalived.service) grep -qs 'Managed by hactl' /etc/keepalived/keepalived.conf || continue ;;
  esac
  {FENCED} || exit 1
  case "$(systemctl is-active "$u" 2>/dev/null)" in active|activating|reloading|deactivating) exit 1 ;; esac
  [ "$(systemctl is-enabled "$u" 2>/dev/null)" != enabled ] || exit 1
done
for c in kube-apiserver kube-controller-manager kube-scheduler; do [ ! -e "/etc/kubernetes/manifests/$c.yaml" ] || exit 1; done
[ ! -d "$dd/member" ]"#
            .replace("{FENCED}", &crate::fence::is_fenced("$u")),
        "hactl-retired".into(),
        data_dir.into(),
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
            " 42 no ",
            "kube-apiserver.service etcd.service hactl-etcd-backup.timer keepalived.service haproxy.service",
        ] {
            assert!(line.contains(w), "{w}: {line}");
        }
        assert!(done_command("/var/lib/etcd", &["etcd.service"]).read_only);
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
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.line(false))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!dd.exists());
        let aside = std::path::PathBuf::from(aside(dds, "r9"));
        assert_eq!(
            std::fs::read_to_string(aside.join("member/wal/0.wal")).unwrap(),
            "x"
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("moved to"));
        let done = done_command(dds, &[]);
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(done.line(false))
            .status()
            .unwrap();
        assert!(ok.success());
    }
}
