#!/usr/bin/env bash
# The benchmarks, printed as JSON lines followed by ratio lines against their targets.
#
#   scripts/bench.sh [all|p2p|coll]      (default: all)
#
# p2p:  gaspi-bench over tcp and shm on 2 local ranks, gaspi and raw-libfabric side by side,
#       then the gaspi/raw ratios the foundation targets name (8 B latency: gaspi / best raw,
#       want <= 1.10; 4 MiB bandwidth: gaspi / best raw, want >= 0.90).
# coll: barrier and allreduce at 2, 4 and 8 ranks, gaspi beside MPICH and Open MPI
#       (scripts/bench-coll.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
case $part in
p2p) mpi_dev=() ;;
all | coll) mpi_dev=(libmpich-dev libopenmpi-dev) ;;
*)
    echo "usage: $0 [all|p2p|coll]" >&2
    exit 2
    ;;
esac
./scripts/setup.sh "${mpi_dev[@]}"
cargo build --release --bins

if [ "$part" != coll ]; then
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    for provider in tcp shm; do
        ./target/release/gaspirun -n 2 --provider "$provider" --no-prefix --timeout 600 \
            ./target/release/gaspi-bench pingpong bandwidth | tee -a "$out"
    done
    python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def best(bench, lib, transport, size, key, pick):
    vals = [r[key] for r in rows if (r["bench"], r["lib"], r["transport"], r["bytes"]) == (bench, lib, transport, size)]
    return pick(vals) if vals else None
for t in ("tcp", "shm"):
    g, r = best("pingpong", "gaspi", t, 8, "median_us", min), best("pingpong", "raw-libfabric", t, 8, "median_us", min)
    if g and r:
        print(json.dumps({"ratio": "latency_8B_gaspi_over_raw", "transport": t, "value": round(g / r, 3), "target": "<=1.10"}))
    g, r = best("bandwidth", "gaspi", t, 4 << 20, "mib_s", max), best("bandwidth", "raw-libfabric", t, 4 << 20, "mib_s", max)
    if g and r:
        print(json.dumps({"ratio": "bandwidth_4MiB_gaspi_over_raw", "transport": t, "value": round(g / r, 3), "target": ">=0.90"}))
PY
fi
if [ "$part" != p2p ]; then
    ./scripts/bench-coll.sh
fi
