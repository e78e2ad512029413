# Shared by the bench scripts (sourced from the repository root): the hactl binary under test
# (HACTL, default the release build, built when missing) and timing helpers.
HACTL=${HACTL:-target/release/hactl}
[ -x "$HACTL" ] || cargo build --release --quiet
now() { date +%s.%N; }
# since T: seconds from T to now, one decimal.
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# ratio A B: A / B, two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
