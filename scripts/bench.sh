#!/usr/bin/env bash
# Runs gaspi-bench over tcp and shm on 2 local ranks and prints its JSON lines, gaspi and
# raw-libfabric side by side, followed by the gaspi/raw ratios the foundation targets name
# (8 B latency: gaspi / best raw, want <= 1.10; 4 MiB bandwidth: gaspi / best raw, want >= 0.90).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --bins
out=$(mktemp)
for provider in tcp shm; do
    ./target/release/gaspirun -n 2 --provider "$provider" --no-prefix --timeout 600 \
        ./target/release/gaspi-bench all | tee -a "$out"
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
rm -f "$out"
