#!/bin/sh
# The Debian archive this machine uses, for every script that fetches from it (debootstrap, or apt
# with a private sources list): scripts/kube-binaries.sh (also embedded in hactl, which writes this
# file beside it), etcd-bundle.sh, vagrant-box.sh, vagrant-deps.sh and lib/fresh-root.sh. POSIX sh,
# so /bin/sh scripts can source it too.
#
#   . scripts/lib/debian-mirror.sh; mirror=$(debian_mirror) || exit 1
#   scripts/lib/debian-mirror.sh [ETC]     run on its own: prints it
#
# debian_mirror [ETC] prints, in this order:
#   1. HACTL_DEBIAN_MIRROR when set; the older names HACTL_APT_MIRROR, HACTL_FRESH_MIRROR and
#      HACTL_LAB_MIRROR are still read, in that order, after it;
#   2. else the URI of the first `deb` source of this machine's apt configuration
#      (ETC/apt/sources.list, then ETC/apt/sources.list.d/*.list and *.sources in name order, as apt
#      reads them; one-line and deb822 formats; ETC defaults to /etc) that serves a release itself
#      and Debian's `main`: a suite without `-` or `/` (not bookworm-security, -updates or
#      -backports), a `main` component, not `Enabled: no`. Among those, one that serves this
#      machine's own release (VERSION_CODENAME in ETC/os-release) wins over one listed earlier,
#      so a third-party repository that sorts first is passed over.
# With none, it says which variable to set and returns 1. The machine's apt files are only read.

# The candidates, one per line: "<suites><TAB><uri>", in apt's order.
debian_mirror_sources() {
  _dm_etc=$1
  for _dm_f in "$_dm_etc/apt/sources.list" "$_dm_etc"/apt/sources.list.d/*; do
    [ -f "$_dm_f" ] || continue
    case "$_dm_f" in
      *.sources)
        awk '
          function flush() {
            if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled !~ /^(no|false|0)$/ && uri ~ /^[a-z][a-z0-9+.-]*:\/\// \
                && comps ~ /(^|[ \t])main([ \t]|$)/)
              printf "%s\t%s\n", suites, uri
            types = ""; uri = ""; suites = ""; comps = ""; enabled = ""
          }
          /^[ \t]*$/ { flush(); next }
          /^#/ || /^[ \t]/ { next }
          {
            i = index($0, ":"); if (i == 0) next
            key = tolower(substr($0, 1, i - 1)); value = substr($0, i + 1)
            gsub(/^[ \t]+|[ \t]+$/, "", value)
            if (key == "types") types = value
            else if (key == "uris") { split(value, u, /[ \t]+/); uri = u[1] }
            else if (key == "suites") suites = value
            else if (key == "components") comps = value
            else if (key == "enabled") enabled = tolower(value)
          }
          END { flush() }' "$_dm_f"
        ;;
      */sources.list | *.list)
        awk '
          {
            line = $0; sub(/#.*/, "", line)
            if (line !~ /^[ \t]*deb[ \t]/) next
            sub(/^[ \t]*deb[ \t]+/, "", line)
            if (line ~ /^\[/) sub(/^\[[^]]*\][ \t]*/, "", line)
            n = split(line, f, /[ \t]+/)
            if (n < 3 || f[1] !~ /^[a-z][a-z0-9+.-]*:\/\//) next
            main = 0
            for (i = 3; i <= n; i++) if (f[i] == "main") main = 1
            if (main) printf "%s\t%s\n", f[2], f[1]
          }' "$_dm_f"
        ;;
    esac
  done
}

debian_mirror() {
  _dm_etc=${1:-/etc}
  for _dm_var in HACTL_DEBIAN_MIRROR HACTL_APT_MIRROR HACTL_FRESH_MIRROR HACTL_LAB_MIRROR; do
    eval "_dm_value=\${$_dm_var:-}"
    if [ -n "$_dm_value" ]; then
      echo "$_dm_value"
      return 0
    fi
  done
  _dm_code=$(sed -n 's/^VERSION_CODENAME=["'"'"']\{0,1\}\([a-z]*\).*/\1/p' "$_dm_etc/os-release" 2>/dev/null | head -n1)
  _dm_uri=$(debian_mirror_sources "$_dm_etc" | awk -F '\t' -v code="$_dm_code" '
    {
      n = split($1, s, /[ \t]+/)
      for (i = 1; i <= n; i++) {
        if (s[i] == "" || s[i] ~ /[-\/]/) continue
        if (first == "") first = $2
        if (code != "" && s[i] == code && own == "") own = $2
      }
    }
    END { print (own != "" ? own : first) }')
  if [ -z "$_dm_uri" ]; then
    echo "no Debian archive in $_dm_etc/apt/sources.list or $_dm_etc/apt/sources.list.d/ (a \`deb\` source of a release's \`main\`): set HACTL_DEBIAN_MIRROR to the archive's URI" >&2
    return 1
  fi
  echo "$_dm_uri"
}

# Run on its own (not sourced): print it.
case "${0##*/}" in
  debian-mirror.sh) debian_mirror "$@" ;;
esac
