#!/usr/bin/env bash
# The collective comparison behind `scripts/bench.sh coll`, which installs the MPI packages and
# builds gaspi first: barrier and allreduce at 2, 4 and 8 local ranks, gaspi over tcp and shm
# beside MPICH and Open MPI from Debian (bench/mpi/coll.c, built here into target/mpi/).
#
# Prints every figure as a JSON line, grouped by bench, size and rank count, then the ratios
# of gaspi's median to MPI's:
#   gaspi tcp / Open MPI restricted to tcp (btl self,tcp) at 2 ranks     target <= 1.0
#   gaspi tcp / the faster MPI, any transport, at 4 and 8 ranks          target <= 1.0
#   gaspi shm / the faster MPI, any transport, at 2, 4 and 8 ranks       info
# MPI's "any" transport is its own choice (shared memory between local ranks). A job that fails
# or times out gives one JSON line with an "error" key instead of its figures. Progress goes to
# stderr.
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

# job LIB TRANSPORT RANKS COMMAND...: runs one job under a time limit and keeps its JSON lines,
# or one error line when it fails.
job() {
    local lib=$1 transport=$2 ranks=$3
    shift 3
    echo "bench-coll: $lib over $transport, $ranks ranks" >&2
    local status=0
    timeout -k 10 "$limit" "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
    if [ "$status" -eq 0 ]; then
        grep '^{' "$tmp/out" >>"$tmp/figures" || true
        return
    fi
    python3 - "$lib" "$transport" "$ranks" "$status" "$tmp/err" >>"$tmp/figures" <<'PY'
import json, sys
lib, transport, ranks, status, err = sys.argv[1:]
last = [l.strip() for l in open(err, errors="replace") if l.strip()][-1:]
reason = "timed out" if status == "124" else f"exit status {status}"
print(json.dumps({"bench": "coll", "lib": lib, "transport": transport, "ranks": int(ranks),
                  "error": ": ".join([reason] + last)}))
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
        job gaspi "$provider" "$ranks" ./target/release/gaspirun -n "$ranks" \
            --provider "$provider" --no-prefix --timeout "$limit" \
            ./target/release/gaspi-bench barrier allreduce
    done
    job mpich any "$ranks" mpiexec.mpich -n "$ranks" target/mpi/coll-mpich mpich any "$calls"
    if [ "$ranks" -eq 2 ]; then
        job openmpi tcp "$ranks" "${ompi[@]}" "${spread[@]}" --mca btl self,tcp -n "$ranks" \
            target/mpi/coll-openmpi openmpi tcp
    fi
    job openmpi any "$ranks" "${ompi[@]}" "${spread[@]}" -n "$ranks" \
        target/mpi/coll-openmpi openmpi any
done

python3 - "$tmp/figures" <<'PY'
import json, sys
rows = [(l.strip(), json.loads(l)) for l in open(sys.argv[1])]
order = {"barrier": 0, "allreduce": 1}
def place(r):
    return (order.get(r["bench"], 2), r["bytes"], r["ranks"], r["lib"] != "gaspi", r["lib"], r["transport"])
measured = sorted((tr for tr in rows if "error" not in tr[1]), key=lambda tr: place(tr[1]))
for text, _ in measured + [tr for tr in rows if "error" in tr[1]]:
    print(text)
figures = [r for _, r in measured]

def find(bench, size, ranks, pick):
    found = [r for r in figures if (r["bench"], r["bytes"], r["ranks"]) == (bench, size, ranks) and pick(r)]
    return min(found, key=lambda r: r["median_us"], default=None)

def ratio(name, bench, size, ranks, transport, pick, target):
    ours = find(bench, size, ranks, lambda r: (r["lib"], r["transport"]) == ("gaspi", transport))
    theirs = find(bench, size, ranks, pick)
    value = round(ours["median_us"] / theirs["median_us"], 3) if ours and theirs else None
    versus = f'{theirs["lib"]}/{theirs["transport"]}' if theirs else None
    print(json.dumps({"ratio": name, "bench": bench, "bytes": size, "ranks": ranks, "transport": transport,
                      "versus": versus, "value": value, "target": target}))

mpi = lambda r: r["lib"] != "gaspi"
for bench, size in sorted({(r["bench"], r["bytes"]) for r in figures}, key=lambda bs: (order.get(bs[0], 2), bs[1])):
    ratio("gaspi_over_openmpi_tcp", bench, size, 2, "tcp", lambda r: (r["lib"], r["transport"]) == ("openmpi", "tcp"), "<=1.0")
    for ranks in (4, 8):
        ratio("gaspi_over_fastest_mpi", bench, size, ranks, "tcp", mpi, "<=1.0")
    for ranks in (2, 4, 8):
        ratio("gaspi_over_fastest_mpi", bench, size, ranks, "shm", mpi, "info")
PY
