#!/usr/bin/env bash
# The benchmarks, printed as JSON lines followed by ratio lines against their targets.
#
#   scripts/bench.sh [all|p2p|coll|alltoallv|pscw|gasnet]      (default: all)
#
# p2p:  gaspi-bench on 2 local ranks over tcp and over shm, each run once with
#       GASPI_INTRANODE=direct and once with =fabric. gaspi lines carry "mode", the path the
#       runtime reports it took. Every run also measures the yardsticks: raw libfabric over the
#       same provider ("variant": writedata, one fi_writedata; write+flag), a bare shared-memory
#       flag ping-pong between the two processes ("lib":"shm-flag", the physical floor of an
#       8 B ping-pong) and single-thread memcpy ("lib":"memcpy", the floor of streaming). Then
#       one ratio line per target, transport and mode, each against the best figure of its
#       yardstick in this whole run: a yardstick is a property of the machine, and a run that
#       was disturbed can only make it slower, which would flatter gaspi. "versus" names the
#       yardstick; "value" is null when a figure is missing:
#         latency_8B_gaspi_over_raw                 gaspi / fastest raw variant, same provider  <= 1.10
#         bandwidth_4MiB_gaspi_over_raw             gaspi / raw, same provider                  >= 0.90
#       and in direct mode, which between ranks of one host is the same path over either provider:
#         latency_8B_direct_over_flag               gaspi / shm-flag                            <= 2.0
#         latency_8B_direct_over_raw_shm_writedata  gaspi / raw shm fi_writedata                <= 0.5
#         bandwidth_4MiB_direct_over_memcpy         gaspi / memcpy                              >= 0.9
#       Latency ratios divide medians in µs, bandwidth ratios MiB/s.
# coll: barrier and allreduce at 2, 4 and 8 ranks, gaspi in both modes beside MPICH and Open
#       MPI, and gaspi-coll's team allreduce beside the runtime's (scripts/bench-coll.sh).
# alltoallv: gaspi-coll's sparse alltoallv, dense and sparse, at 2, 4 and 8 ranks, gaspi in
#       both modes beside MPI_Alltoallv and MPI_Neighbor_alltoallv of MPICH and Open MPI, and
#       the pipelining figure of coll/examples/fft_transpose (scripts/bench-alltoallv.sh).
# pscw: gaspi-coll's post / start / complete / wait epochs, an epoch ping-pong and a halo epoch
#       at 2, 4 and 8 ranks, gaspi in both modes beside MPI_Win_post / start / complete / wait of
#       MPICH and Open MPI, with the epoch's ratio to a write_notify ping-pong of the same job
#       (scripts/bench-pscw.sh).
# gasnet: gaspi-coll's Team collectives (broadcast, scatter, gather, gather_all, exchange and
#       the v forms) with 8 B, 64 KiB and 1 MiB blocks per member at 2, 4 and 8 ranks, gaspi in
#       both modes with the algorithm it chose, beside MPI_Bcast, MPI_Scatter, MPI_Gather,
#       MPI_Allgather, MPI_Alltoall and the v forms of MPICH and Open MPI
#       (scripts/bench-gasnet.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
case $part in
p2p) mpi_dev=() ;;
all | coll | alltoallv | pscw | gasnet) mpi_dev=(libmpich-dev libopenmpi-dev) ;;
*)
    echo "usage: $0 [all|p2p|coll|alltoallv|pscw|gasnet]" >&2
    exit 2
    ;;
esac
./scripts/setup.sh "${mpi_dev[@]}"
# --workspace: at the root, cargo builds only the gaspi package, not gaspirun or gaspi-bench.
cargo build --release --workspace --bins

if [ "$part" = all ] || [ "$part" = p2p ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for provider in tcp shm; do
        for mode in direct fabric; do
            GASPI_INTRANODE=$mode ./target/release/gaspirun -n 2 --provider "$provider" \
                --no-prefix --timeout 600 ./target/release/gaspi-bench pingpong bandwidth |
                tee "$tmp/run"
            if grep '"lib":"gaspi"' "$tmp/run" | grep -qv "\"mode\":\"$mode\""; then
                echo "bench: GASPI_INTRANODE=$mode over $provider, but gaspi took another path" >&2
            fi
            cat "$tmp/run" >>"$tmp/figures"
        done
    done
    python3 - "$tmp/figures" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]

def best(key, **want):
    """The best figure (lowest latency, highest bandwidth) among the rows that match."""
    vals = [r[key] for r in rows if all(r.get(k) == v for k, v in want.items())]
    return (min if key == "median_us" else max)(vals) if vals else None

def ratio(name, transport, mode, ours, theirs, versus, target):
    value = round(ours / theirs, 3) if ours and theirs else None
    print(json.dumps({"ratio": name, "transport": transport, "mode": mode, "versus": versus,
                      "value": value, "target": target}))

latency = dict(bench="pingpong", bytes=8)
bandwidth = dict(bench="bandwidth", bytes=4 << 20)
for t in ("tcp", "shm"):
    for mode in ("direct", "fabric"):
        lat = best("median_us", lib="gaspi", transport=t, mode=mode, **latency)
        bw = best("mib_s", lib="gaspi", transport=t, mode=mode, **bandwidth)
        raw = f"raw-libfabric/{t}"
        ratio("latency_8B_gaspi_over_raw", t, mode, lat,
              best("median_us", lib="raw-libfabric", transport=t, **latency), raw, "<=1.10")
        ratio("bandwidth_4MiB_gaspi_over_raw", t, mode, bw,
              best("mib_s", lib="raw-libfabric", transport=t, **bandwidth), raw, ">=0.90")
        if mode != "direct":
            continue
        ratio("latency_8B_direct_over_flag", t, mode, lat,
              best("median_us", lib="shm-flag", **latency), "shm-flag", "<=2.0")
        ratio("latency_8B_direct_over_raw_shm_writedata", t, mode, lat,
              best("median_us", lib="raw-libfabric", transport="shm", variant="writedata", **latency),
              "raw-libfabric/shm/writedata", "<=0.5")
        ratio("bandwidth_4MiB_direct_over_memcpy", t, mode, bw,
              best("mib_s", lib="memcpy", **bandwidth), "memcpy", ">=0.9")
PY
fi
if [ "$part" = all ] || [ "$part" = coll ]; then
    ./scripts/bench-coll.sh
fi
if [ "$part" = all ] || [ "$part" = alltoallv ]; then
    ./scripts/bench-alltoallv.sh
fi
if [ "$part" = all ] || [ "$part" = pscw ]; then
    ./scripts/bench-pscw.sh
fi
if [ "$part" = all ] || [ "$part" = gasnet ]; then
    ./scripts/bench-gasnet.sh
fi
