#!/bin/sh
# VIP failover time after a power cut of the holder, beside keepalived's bound (needs root).
# Usage: bench/vip_failover.sh [runs]   (default 5; a 3+2 lab is brought up and torn down)
set -eu
cd "$(dirname "$0")/.."
# BENCH_PROFILE: the cargo profile to build it with (release; the quick run in the lab tests: dev).
exec cargo run --profile "${BENCH_PROFILE:-release}" --quiet --example vip_failover -- "$@"
