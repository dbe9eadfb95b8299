#!/usr/bin/env bash
# The comparison of GASNet's data-movement collectives behind `scripts/bench.sh gasnet`, which
# installs the MPI packages and builds gaspi first: each operation of gaspi-coll's Team
# (`gaspi-bench gasnet`) beside the matching MPI call of MPICH and Open MPI from Debian
# (bench/mpi/gasnet.c, built here into target/mpi/), at 2, 4 and 8 local ranks, root 0:
#   broadcast  MPI_Bcast       scatter   MPI_Scatter    gather       MPI_Gather
#   gather_all MPI_Allgather   exchange  MPI_Alltoall
#   scatterv   MPI_Scatterv    gatherv   MPI_Gatherv    gather_allv  MPI_Allgatherv
#   exchangev  MPI_Alltoallv
# "bench" names the team's operation on the lines of both sides; MPI lines add "op", the MPI
# call, and gaspi lines "algorithm", the one the team chose (Handle::algorithm).
#
# "bytes" (8 B, 64 KiB, 1 MiB) is the block of one member: what a broadcast moves, what a
# scatter gives each member, what each member adds to a gather or gather_all, what each member
# sends each member in an exchange. In the v forms blocks are uneven and the same on both
# sides: member i's block (in exchangev the one from i to j, by i + j) is bytes/2 when even and
# 3·bytes/2 when odd, so that on 2, 4 and 8 ranks a v form moves as many bytes in all as its
# regular form.
#
# Like for like: one sample is one blocking call (gaspi: Flags::EAGER, IN_NOSYNC | OUT_MYSYNC:
# data may move before its receiver entered, into staging, as an MPI eager send does, and a
# call returns once this member's buffers are done, as an MPI collective does); calls follow
# each other with no barrier between them, as consecutive MPI calls do; every figure is the
# largest of the ranks' median call times; every block's stamp (round, sender, receiver) is
# checked after the call. gaspi runs over tcp and shm, each with GASPI_INTRANODE=direct and
# =fabric (its lines carry "mode"); MPI on its own transports ("any") and, at 2 ranks, Open MPI
# restricted to tcp (btl self,tcp). Calls per figure: 1000, 300 and 100 for 8 B, 64 KiB and
# 1 MiB; on an oversubscribed host (4 and 8 ranks on 2 cores), where MPICH busy-polls and takes
# milliseconds per call (at 8 ranks seconds for MPI_Allgatherv of 1 MiB blocks), every library
# makes the same fewer, the cap of `sweep` for 8 B and as many fewer for larger blocks, at
# least 20 (at 8 ranks 50, 20, 20), which keeps the part within minutes.
#
# The team is built with 4 lanes of staging large enough for every case (2n + 1 of the widest
# blocks), so that every call runs as one piece: with the default lanes of 1 MiB, calls that
# stage more run as pieces, and exchangev (never cut) is refused (Error::TooLarge).
#
# Prints every figure as a JSON line, grouped by operation, size and rank count, then the
# ratios of gaspi's median to MPI's for every operation and size, against the targets:
#   gaspi_over_openmpi_tcp  2 ranks: gaspi over tcp in fabric mode (the only mode in which it
#                           is over tcp) / Open MPI restricted to tcp                <= 1.0
#   gaspi_over_faster_mpi   4 and 8 ranks, for each gaspi mode: gaspi over its faster provider
#                           / the faster of MPICH and Open MPI on their own transports <= 1.0
# "versus" names the figure divided by, "transport" the provider of gaspi's. A job that fails
# or times out gives one JSON line with an "error" key instead of its figures, and its ratios a
# null value. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-mpi.sh
. scripts/bench-mpi.sh
sweep gasnet gasnet --capped gasnet

PYTHONPATH=scripts PYTHONDONTWRITEBYTECODE=1 python3 - "$figures" <<'PY'
import json, sys
from functools import partial
import bench_report
ops = ["broadcast", "scatter", "gather", "gather_all", "exchange",
       "scatterv", "gatherv", "gather_allv", "exchangev"]
def place(r):
    bench = r.get("bench")
    return (ops.index(bench) if bench in ops else len(ops), r.get("bytes", 0), r.get("ranks", 0),
            r.get("lib") != "gaspi", r.get("lib", ""), r.get("transport", ""), r.get("mode", ""))
fastest = partial(bench_report.fastest, bench_report.figures(sys.argv[1], place))

def ratio(name, op, ranks, size, mode, ours, theirs, target):
    value = round(ours["median_us"] / theirs["median_us"], 3) if ours and theirs else None
    print(json.dumps({"ratio": name, "bench": op, "bytes": size, "ranks": ranks,
                      "transport": ours["transport"] if ours else None, "mode": mode,
                      "algorithm": ours.get("algorithm") if ours else None,
                      "versus": f"{theirs['lib']}/{theirs['transport']}" if theirs else None,
                      "value": value, "target": target}))

# Fixed, not read off the figures: a size whose every job failed still gets its null ratios.
sizes = (8, 65536, 1 << 20)
for op in ops:
    for size in sizes:
        ratio("gaspi_over_openmpi_tcp", op, 2, size, "fabric",
              fastest(op, 2, size, False, transport="tcp", mode="fabric"),
              fastest(op, 2, size, True, lib="openmpi", transport="tcp"), "<=1.0")
        for ranks in (4, 8):
            for mode in ("direct", "fabric"):
                ratio("gaspi_over_faster_mpi", op, ranks, size, mode,
                      fastest(op, ranks, size, False, mode=mode),
                      fastest(op, ranks, size, True, transport="any"), "<=1.0")
PY
