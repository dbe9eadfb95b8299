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
# MPI's "any" transport is its own choice (shared memory between local ranks). A job that fails
# or times out gives one JSON line with an "error" key instead of its figures, and its ratios
# a null value. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in mpicc.mpich mpiexec.mpich mpicc.openmpi mpirun.openmpi; do
    if ! command -v "$tool" >/dev/null; then
        echo "bench-coll: $tool not found; scripts/bench.sh coll installs it" >&2
        exit 1
    fi
done
mkdir -p target/mpi
for lib in mpich openmpi; do
    "mpicc.$lib" -O2 -Wall -Wextra -o "target/mpi/coll-$lib" bench/mpi/coll.c
done

cores=$(nproc)
limit=300
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/figures"

# job LIB TRANSPORT MODE RANKS COMMAND...: runs one job under a time limit and keeps its JSON
# lines, or one error line when it fails. MODE is gaspi's GASPI_INTRANODE, empty for MPI.
job() {
    local lib=$1 transport=$2 mode=$3 ranks=$4
    shift 4
    echo "bench-coll: $lib over $transport${mode:+ ($mode)}, $ranks ranks" >&2
    local status=0 env=()
    [ -z "$mode" ] || env=(env "GASPI_INTRANODE=$mode")
    "${env[@]}" timeout -k 10 "$limit" "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
    if [ "$status" -eq 0 ]; then
        grep '^{' "$tmp/out" >>"$tmp/figures" || true
        return
    fi
    python3 - "$lib" "$transport" "$mode" "$ranks" "$status" "$tmp/err" >>"$tmp/figures" <<'PY'
import json, sys
lib, transport, mode, ranks, status, err = sys.argv[1:]
last = [l.strip() for l in open(err, errors="replace") if l.strip()][-1:]
reason = "timed out" if status == "124" else f"exit status {status}"
line = {"bench": "coll", "lib": lib, "transport": transport, "ranks": int(ranks)}
line.update({"mode": mode} if mode else {})
line["error"] = ": ".join([reason] + last)
print(json.dumps(line))
PY
}

ompi=(mpirun.openmpi)
[ "$(id -u)" -ne 0 ] || ompi+=(--allow-run-as-root)
for ranks in 2 4 8; do
    # Oversubscribed, MPICH busy-polls and every call costs milliseconds (tens at 8 ranks on 2
    # cores): fewer calls keep the run within minutes.
    calls=1000
    # --oversubscribe also makes Open MPI yield while it waits, which slows its 64 KiB tcp
    # allreduce 40-fold at 2 ranks on 2 cores: it is given only when it is needed.
    spread=()
    if [ "$ranks" -gt "$cores" ]; then
        calls=$((400 / ranks))
        spread=(--oversubscribe)
    fi
    for provider in tcp shm; do
        for mode in direct fabric; do
            job gaspi "$provider" "$mode" "$ranks" ./target/release/gaspirun -n "$ranks" \
                --provider "$provider" --no-prefix --timeout "$limit" \
                ./target/release/gaspi-bench barrier allreduce
        done
    done
    job mpich any "" "$ranks" mpiexec.mpich -n "$ranks" target/mpi/coll-mpich mpich any "$calls"
    if [ "$ranks" -eq 2 ]; then
        job openmpi tcp "" "$ranks" "${ompi[@]}" "${spread[@]}" --mca btl self,tcp -n "$ranks" \
            target/mpi/coll-openmpi openmpi tcp
    fi
    job openmpi any "" "$ranks" "${ompi[@]}" "${spread[@]}" -n "$ranks" \
        target/mpi/coll-openmpi openmpi any
done

python3 - "$tmp/figures" <<'PY'
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
PY
