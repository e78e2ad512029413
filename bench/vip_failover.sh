#!/bin/sh
# VIP failover time after a power cut of the holder, beside keepalived's bound (needs root).
# Usage: bench/vip_failover.sh [runs]   (default 5; a 3+2 lab is brought up and torn down)
set -eu
cd "$(dirname "$0")/.."
exec cargo run --release --quiet --example vip_failover -- "$@"
