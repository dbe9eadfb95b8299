#!/usr/bin/env bash
# The alltoallv comparison behind `scripts/bench.sh alltoallv`, which installs the MPI packages
# and builds gaspi first: gaspi-coll's sparse alltoallv (`gaspi-bench alltoallv`) beside
# MPI_Alltoallv and MPI_Neighbor_alltoallv of MPICH and Open MPI from Debian
# (bench/mpi/alltoallv.c, built here into target/mpi/), at 2, 4 and 8 local ranks, in three
# variants (dense: every other rank; sparse2: ranks r±1; sparse4: r±1 and r±2, without
# duplicates or the rank itself, so all three are one peer at 2 ranks and sparse4 is dense at
# 4; lines carry "peers") with blocks of 8 B, 1 KiB, 64 KiB and 1 MiB; gaspi over tcp and shm,
# each with GASPI_INTRANODE=direct and =fabric (gaspi lines carry "mode"). One gaspi round is
# `alltoallv` until it reports completion, each arrival checked and reset; one MPI round is one
# call ("op"). Every figure is the largest of the ranks' median round times. On an
# oversubscribed host (4 and 8 ranks on 2 cores) every library runs the same fewer rounds.
# Then coll/examples/fft_transpose on 4 ranks (the runtime's defaults) gives the pipelining
# figure, its line passed through.
#
# Prints every figure as a JSON line, grouped by variant, size and rank count, then the ratios
# of gaspi's median to MPI's for every variant and size, against the targets:
#   gaspi_over_openmpi_tcp  2 ranks: gaspi over tcp in fabric mode (the only mode in which it
#                           is over tcp) / Open MPI restricted to tcp (btl self,tcp)    <= 0.8
#   gaspi_over_faster_mpi   4 and 8 ranks, for each gaspi mode: gaspi over its faster provider
#                           / the faster of MPICH and Open MPI on their own transports   <= 0.8
#   pipelining              fft_transpose: pipelined time / max(communication alone,
#                           compute alone)                                               <= 1.15
# Like for like, MPI's figure is the faster of its two calls for the same exchange
# (MPI_Alltoallv with zero counts off the variant, or MPI_Neighbor_alltoallv over its graph):
# gaspi's one alltoallv serves dense and sparse exchanges alike, so each is held against the
# best an MPI program could pick for it. "versus" names the figure divided by, "transport" the
# provider of gaspi's. A job that fails or times out gives one JSON line with an "error" key
# instead of its figures, and its ratios a null value. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-mpi.sh
. scripts/bench-mpi.sh
sweep alltoallv alltoallv --capped alltoallv

# The example is written beside this benchmark: until it is there, its figure is an error line.
if [ -e coll/examples/fft_transpose ] || [ -e coll/examples/fft_transpose.rs ]; then
    echo "$me: building coll/examples/fft_transpose" >&2
    cargo build --release -q -p gaspi-coll --example fft_transpose
    job pipelining gaspi tcp "" 4 ./target/release/gaspirun -n 4 --no-prefix \
        --timeout "$limit" ./target/release/examples/fft_transpose
else
    echo '{"bench":"pipelining","lib":"gaspi","error":"coll/examples/fft_transpose is missing"}' \
        >>"$figures"
fi

python3 - "$figures" <<'PY'
import json, sys
rows = [(l.strip(), json.loads(l)) for l in open(sys.argv[1])]
variants = {"dense": 0, "sparse2": 1, "sparse4": 2}
ops = {"alltoallv": 0, "neighbor_alltoallv": 1}
def place(r):
    """Where a line goes: alltoallv before the example's line, which may lack any other key."""
    return (r.get("bench") != "alltoallv", variants.get(r.get("variant"), 3), r.get("bytes", 0),
            r.get("ranks", 0), r.get("lib") != "gaspi", r.get("lib", ""),
            r.get("transport", ""), r.get("mode", ""), ops.get(r.get("op"), 2))
measured = sorted((tr for tr in rows if "error" not in tr[1]), key=lambda tr: place(tr[1]))
for text, _ in measured + [tr for tr in rows if "error" in tr[1]]:
    print(text)
figures = [r for _, r in measured]

def fastest(ranks, variant, size, mpi, **want):
    """The fastest alltoallv figure of gaspi (mpi false) or of an MPI that matches `want`."""
    found = [r for r in figures if r.get("bench") == "alltoallv"
             and (r["ranks"], r["variant"], r["bytes"]) == (ranks, variant, size)
             and (r["lib"] != "gaspi") == mpi and all(r.get(k) == v for k, v in want.items())]
    return min(found, key=lambda r: r["median_us"], default=None)

def ratio(name, ranks, variant, size, mode, ours, theirs, target):
    value = round(ours["median_us"] / theirs["median_us"], 3) if ours and theirs else None
    versus = "/".join((theirs["lib"], theirs["transport"], theirs["op"])) if theirs else None
    print(json.dumps({"ratio": name, "variant": variant, "bytes": size, "ranks": ranks,
                      "transport": ours["transport"] if ours else None, "mode": mode,
                      "versus": versus, "value": value, "target": target}))

sizes = sorted({r["bytes"] for r in figures if r.get("bench") == "alltoallv"})
for variant in variants:
    for size in sizes:
        ratio("gaspi_over_openmpi_tcp", 2, variant, size, "fabric",
              fastest(2, variant, size, False, transport="tcp", mode="fabric"),
              fastest(2, variant, size, True, lib="openmpi", transport="tcp"), "<=0.8")
        for ranks in (4, 8):
            for mode in ("direct", "fabric"):
                ratio("gaspi_over_faster_mpi", ranks, variant, size, mode,
                      fastest(ranks, variant, size, False, mode=mode),
                      fastest(ranks, variant, size, True, transport="any"), "<=0.8")
pipelining = [r["value"] for r in figures if r.get("bench") == "pipelining" and "value" in r]
print(json.dumps({"ratio": "pipelining", "value": pipelining[0] if pipelining else None,
                  "target": "<=1.15"}))
PY
