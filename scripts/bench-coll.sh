#!/usr/bin/env bash
# The collective comparison behind `scripts/bench.sh coll`, which installs the MPI packages and
# builds gaspi first: barrier and allreduce (f64 sum; 8 B, 64 KiB, 1 MiB) at 2, 4 and 8 local
# ranks, gaspi over tcp and shm, each with GASPI_INTRANODE=direct and =fabric (gaspi lines
# carry "mode", the path the runtime reports), beside MPICH and Open MPI from Debian
# (bench/mpi/coll.c, built here into target/mpi/).
#
# Prints every figure as a JSON line, grouped by bench, size and rank count, then the ratios
# of gaspi's median to MPI's, for every bench, size, rank count, gaspi transport and mode:
#   gaspi_over_openmpi       gaspi / Open MPI on its own transports (shared memory)  target <= 1.0
#   gaspi_over_mpich         gaspi / MPICH on its own transports (shared memory)     target < 1.0
# and, as before the direct path, at 2 ranks over tcp in fabric mode:
#   gaspi_over_openmpi_tcp   gaspi / Open MPI restricted to tcp (btl self,tcp)     target <= 1.0
# and the allreduce of gaspi-coll's team engine ("lib":"gaspi-coll", the same sizes and checks)
# beside the runtime's own, for every size, rank count, transport and mode:
#   coll_over_runtime        gaspi-coll / gaspi                                      target <= 1.0
# MPI's "any" transport is its own choice (shared memory between local ranks). A job that fails
# or times out gives one JSON line with an "error" key instead of its figures, and its ratios
# a null value. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-mpi.sh
. scripts/bench-mpi.sh
sweep coll coll barrier allreduce

python3 - "$figures" <<'PY'
import json, sys
rows = [(l.strip(), json.loads(l)) for l in open(sys.argv[1])]
order = {"barrier": 0, "allreduce": 1}
def place(r):
    return (order.get(r["bench"], 2), r["bytes"], r["ranks"], r["lib"] != "gaspi", r["lib"],
            r["transport"], r.get("mode", ""))
measured = sorted((tr for tr in rows if "error" not in tr[1]), key=lambda tr: place(tr[1]))
for text, _ in measured + [tr for tr in rows if "error" in tr[1]]:
    print(text)
figures = [r for _, r in measured]

def find(bench, size, ranks, **want):
    found = [r for r in figures if (r["bench"], r["bytes"], r["ranks"]) == (bench, size, ranks)
             and all(r.get(k) == v for k, v in want.items())]
    return min(found, key=lambda r: r["median_us"], default=None)

def ratio(name, bench, size, ranks, transport, mode, lib, mpi_transport, target):
    ours = find(bench, size, ranks, lib="gaspi", transport=transport, mode=mode)
    theirs = find(bench, size, ranks, lib=lib, transport=mpi_transport)
    value = round(ours["median_us"] / theirs["median_us"], 3) if ours and theirs else None
    print(json.dumps({"ratio": name, "bench": bench, "bytes": size, "ranks": ranks,
                      "transport": transport, "mode": mode, "versus": f"{lib}/{mpi_transport}",
                      "value": value, "target": target}))

for bench, size in sorted({(r["bench"], r["bytes"]) for r in figures}, key=lambda bs: (order.get(bs[0], 2), bs[1])):
    for ranks in (2, 4, 8):
        for transport in ("tcp", "shm"):
            for mode in ("direct", "fabric"):
                ratio("gaspi_over_openmpi", bench, size, ranks, transport, mode, "openmpi", "any", "<=1.0")
                ratio("gaspi_over_mpich", bench, size, ranks, transport, mode, "mpich", "any", "<1.0")
    ratio("gaspi_over_openmpi_tcp", bench, size, 2, "tcp", "fabric", "openmpi", "tcp", "<=1.0")

for size in sorted({r["bytes"] for r in figures if r["lib"] == "gaspi-coll"}):
    for ranks in (2, 4, 8):
        for transport in ("tcp", "shm"):
            for mode in ("direct", "fabric"):
                ours = find("allreduce", size, ranks, lib="gaspi-coll", transport=transport, mode=mode)
                theirs = find("allreduce", size, ranks, lib="gaspi", transport=transport, mode=mode)
                value = round(ours["median_us"] / theirs["median_us"], 3) if ours and theirs else None
                print(json.dumps({"ratio": "coll_over_runtime", "bench": "allreduce", "bytes": size,
                                  "ranks": ranks, "transport": transport, "mode": mode,
                                  "versus": "gaspi", "value": value, "target": "<=1.0"}))
PY
