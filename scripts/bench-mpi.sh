# What the comparisons with MPI share, sourced by scripts/bench-coll.sh,
# scripts/bench-alltoallv.sh, scripts/bench-pscw.sh and scripts/bench-gasnet.sh: `sweep` builds
# their C program against both MPIs and runs it and gaspi-bench at 2, 4 and 8 local ranks, each
# job under a time limit (`job`). Sets `tmp` (a directory removed on exit), `limit` (seconds per
# job), `me` (the script's name, for progress lines), `figures` (the file the jobs' JSON lines
# go to) and `ompi_tcp` (the options that restrict Open MPI to tcp, to which a script adds what
# its calls need beyond the btl).

me=${0##*/}
me=${me%.sh}
limit=300
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
figures=$tmp/figures
touch "$figures"
ompi_tcp=(--mca btl self,tcp)

# mpi_build NAME: builds bench/mpi/NAME.c with MPICH and with Open MPI into target/mpi/NAME-LIB.
mpi_build() {
    local name=$1 tool lib
    for tool in mpicc.mpich mpiexec.mpich mpicc.openmpi mpirun.openmpi; do
        if ! command -v "$tool" >/dev/null; then
            echo "$me: $tool not found; scripts/bench.sh installs it" >&2
            exit 1
        fi
    done
    mkdir -p target/mpi
    for lib in mpich openmpi; do
        "mpicc.$lib" -O2 -Wall -Wextra -o "target/mpi/$name-$lib" "bench/mpi/$name.c"
    done
}

# job BENCH LIB TRANSPORT MODE RANKS COMMAND...: runs one job under the time limit and keeps its
# JSON lines, or one error line for BENCH when it fails. MODE is gaspi's GASPI_INTRANODE, empty
# for MPI.
job() {
    local bench=$1 lib=$2 transport=$3 mode=$4 ranks=$5
    shift 5
    echo "$me: $lib over $transport${mode:+ ($mode)}, $ranks ranks" >&2
    local status=0 env=()
    [ -z "$mode" ] || env=(env "GASPI_INTRANODE=$mode")
    "${env[@]}" timeout -k 10 "$limit" "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
    if [ "$status" -eq 0 ]; then
        grep '^{' "$tmp/out" >>"$figures" || true
        return
    fi
    python3 - "$bench" "$lib" "$transport" "$mode" "$ranks" "$status" "$tmp/err" >>"$figures" <<'PY'
import json, sys
bench, lib, transport, mode, ranks, status, err = sys.argv[1:]
lines = [l.strip() for l in open(err, errors="replace") if l.strip()]
# A rank's own first complaint (a panic and its message, or the benchmark's error) says more
# than the launcher's last line, which only tells that a rank exited.
said = [f"{l} {n}" if "panicked at" in l else l
        for l, n in zip(lines, lines[1:] + [""])
        if "panicked at" in l
        or l.startswith(("gaspi-bench:", "alltoallv:", "coll:", "pscw:", "gasnet:"))]
reason = "timed out" if status == "124" else f"exit status {status}"
line = {"bench": bench, "lib": lib, "transport": transport, "ranks": int(ranks)}
line.update({"mode": mode} if mode else {})
line["error"] = ": ".join([reason] + (said[:1] or lines[-1:]))
print(json.dumps(line))
PY
}

# sweep BENCH NAME [--capped] ARGS...: at 2, 4 and 8 ranks, gaspi-bench ARGS over tcp and shm,
# each with GASPI_INTRANODE=direct and =fabric, then target/mpi/NAME-LIB (built here from
# bench/mpi/NAME.c) under MPICH, under Open MPI restricted to tcp (`ompi_tcp`; at 2 ranks only)
# and under Open MPI on its own transports. On an oversubscribed host MPICH makes fewer
# timed calls, and with --capped every library makes that many (gaspi-bench --max-rounds).
sweep() {
    local bench=$1 name=$2 capped=false ranks provider mode calls
    shift 2
    if [ "${1:-}" = --capped ]; then
        capped=true
        shift
    fi
    mpi_build "$name"
    local ompi=(mpirun.openmpi)
    # Open MPI's launcher refuses root unless told.
    [ "$(id -u)" -ne 0 ] || ompi+=(--allow-run-as-root)
    for ranks in 2 4 8; do
        # Oversubscribed, MPICH busy-polls and every call costs milliseconds (tens at 8 ranks
        # on 2 cores): fewer calls keep the run within minutes.
        calls=1000
        # --oversubscribe also makes Open MPI yield while it waits, which slows its 64 KiB tcp
        # allreduce 40-fold at 2 ranks on 2 cores: it is given only when it is needed.
        local spread=() cap=() rounds=()
        if [ "$ranks" -gt "$(nproc)" ]; then
            calls=$((400 / ranks))
            spread=(--oversubscribe)
        fi
        if $capped; then
            cap=("$calls")
            rounds=(--max-rounds "$calls")
        fi
        for provider in tcp shm; do
            for mode in direct fabric; do
                job "$bench" gaspi "$provider" "$mode" "$ranks" ./target/release/gaspirun \
                    -n "$ranks" --provider "$provider" --no-prefix --timeout "$limit" \
                    ./target/release/gaspi-bench "$@" "${rounds[@]}"
            done
        done
        job "$bench" mpich any "" "$ranks" mpiexec.mpich -n "$ranks" "target/mpi/$name-mpich" \
            mpich any "$calls"
        if [ "$ranks" -eq 2 ]; then
            job "$bench" openmpi tcp "" "$ranks" "${ompi[@]}" "${spread[@]}" "${ompi_tcp[@]}" \
                -n "$ranks" "target/mpi/$name-openmpi" openmpi tcp "${cap[@]}"
        fi
        job "$bench" openmpi any "" "$ranks" "${ompi[@]}" "${spread[@]}" -n "$ranks" \
            "target/mpi/$name-openmpi" openmpi any "${cap[@]}"
    done
}
