#!/usr/bin/env bash
# The epoch comparison behind `scripts/bench.sh pscw`, which installs the MPI packages and builds
# gaspi first: gaspi-coll's window (`gaspi-bench pscw`) beside MPI_Win_post / start / complete /
# wait with MPI_Put on a window of MPI_Win_allocate, of MPICH and Open MPI from Debian
# (bench/mpi/pscw.c, built here into target/mpi/), at 2, 4 and 8 local ranks, blocks of 8 B and
# 64 KiB, in two patterns ("bench"):
#   pscw       an epoch ping-pong (start / write / complete, then post / wait, mirrored) in the
#              pairs (0, 1), (2, 3)..., all pairs at once, so that every rank is busy;
#              median_us is half a round trip
#   pscw_halo  one epoch (post, start, a block to each, complete, wait) with the distinct
#              neighbours on a periodic 2-D grid (px × py, px the largest divisor of the job
#              size not above its square root); lines carry "peers" (1, 2, 3 at 2, 4, 8 ranks)
# Every figure is the largest of the ranks' median times. gaspi runs over tcp and shm, each with
# GASPI_INTRANODE=direct and =fabric (its lines carry "mode"); MPI on its own transports (its
# windows in shared memory) and, at 2 ranks, Open MPI restricted to tcp (btl self,tcp with osc
# pt2pt). On an oversubscribed host (4 and 8 ranks on 2 cores) every library runs the same fewer
# round trips and epochs.
#
# The epoch's yardstick is measured inside the same gaspi job (`"bench":"pingpong"`, gaspi
# only): gaspi-bench's write_notify ping-pong, in the same pairs, with the same counts, between
# the same segments as the epochs' writes; so it shares the provider, mode, rank count and
# moment of the epoch it is held against.
#
# Prints every figure as a JSON line, grouped by bench, size and rank count, then the ratios,
# for every size and rank count:
#   epoch_over_write_notify  pscw / the pingpong of the same job, for each gaspi transport and
#                            mode                                                      <= 2.0
#   gaspi_over_faster_mpi    for pscw and pscw_halo and each gaspi mode: gaspi over its faster
#                            provider / the faster of MPICH and Open MPI on their own
#                            transports                                                <= 1.0
# "versus" names the figure divided by, "transport" the provider of gaspi's. A job that fails
# or times out gives one JSON line with an "error" key instead of its figures, and its ratios a
# null value. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-mpi.sh
. scripts/bench-mpi.sh
# Open MPI's windows live in shared memory (osc sm, or ucx) whatever the btl: pt2pt carries
# their epochs and puts over the btl, tcp.
ompi_tcp+=(--mca osc pt2pt)
sweep pscw pscw --capped pscw

PYTHONPATH=scripts PYTHONDONTWRITEBYTECODE=1 python3 - "$figures" <<'PY'
import json, sys
from functools import partial
import bench_report
benches = {"pscw": 0, "pingpong": 1, "pscw_halo": 2}
def place(r):
    return (benches.get(r.get("bench"), 3), r.get("bytes", 0), r.get("ranks", 0),
            r.get("lib") != "gaspi", r.get("lib", ""), r.get("transport", ""), r.get("mode", ""))
figures = bench_report.figures(sys.argv[1], place)
fastest = partial(bench_report.fastest, figures)

def ratio(name, bench, ranks, size, transport, mode, ours, theirs, versus, target):
    value = round(ours["median_us"] / theirs["median_us"], 3) if ours and theirs else None
    print(json.dumps({"ratio": name, "bench": bench, "bytes": size, "ranks": ranks,
                      "transport": transport, "mode": mode, "versus": versus, "value": value,
                      "target": target}))

sizes = sorted({r["bytes"] for r in figures if r["bench"] in benches})
for size in sizes:
    for ranks in (2, 4, 8):
        for transport in ("tcp", "shm"):
            for mode in ("direct", "fabric"):
                same = dict(transport=transport, mode=mode)
                ratio("epoch_over_write_notify", "pscw", ranks, size, transport, mode,
                      fastest("pscw", ranks, size, False, **same),
                      fastest("pingpong", ranks, size, False, **same),
                      f"gaspi/{transport}/{mode}/pingpong", "<=2.0")
for bench in ("pscw", "pscw_halo"):
    for size in sizes:
        for ranks in (2, 4, 8):
            for mode in ("direct", "fabric"):
                ours = fastest(bench, ranks, size, False, mode=mode)
                theirs = fastest(bench, ranks, size, True, transport="any")
                versus = f"{theirs['lib']}/{theirs['transport']}" if theirs else None
                ratio("gaspi_over_faster_mpi", bench, ranks, size,
                      ours["transport"] if ours else None, mode, ours, theirs, versus, "<=1.0")
PY
