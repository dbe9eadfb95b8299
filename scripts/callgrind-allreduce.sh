#!/usr/bin/env bash
# Instructions per call of the 8 B allreduce (f64 sum), the team engine's beside the runtime's
# and, at a power-of-two number of ranks on the direct path, beside the floor of the runtime's
# public calls (the example's `floor`: recursive doubling on them with no engine around it),
# counted by callgrind on rank 0 (the other ranks run natively), so that they repeat whatever
# the machine's load: `scripts/callgrind-allreduce.sh [RANKS...]` (default 2 4), over shm with
# GASPI_INTRANODE as set (direct by default), on the build of `coll/examples/cg_allreduce` in
# profile $CG_PROFILE (default ci; `CG_PROFILE=release` counts what the bench runs).
#
# Three cases per rank count: `late` (the partners come late: rank 0 initiates and waits),
# `there` (rank 0 comes late: its partners' data is there when it initiates) and `step` (nobody
# sleeps: the ranks call in lock step, as in the bench's loop, whose 8 B lines count). The counts
# leave out the waiting loop (`gaspi_notifications::wait::wait_until` and what it calls),
# whose instructions grow with the time waited. One line per case:
#   ranks=2 case=late engine=7129 runtime=1840 floor=... engine/runtime=3.87 floor/runtime=...
# The callgrind files stay in $CG_DIR (default target/callgrind) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."

iters=${CG_ITERS:-2000}
# shellcheck source=scripts/callgrind-common.sh
. scripts/callgrind-common.sh
cg_setup cg_allreduce 'cg_allreduce::engine_call' 'cg_allreduce::runtime_call' \
    'cg_allreduce::floor_call'

ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4)
for n in "${ranks[@]}"; do
    for case in late there step; do
        line="ranks=$n case=$case"
        declare -A count=()
        libs="engine runtime"
        # The floor needs partners by recursive doubling, and the direct path (it puts out of
        # ordinary memory, as the engine does towards members it reaches directly).
        if (( (n & (n - 1)) == 0 )) && [ "${GASPI_INTRANODE:-direct}" = direct ]; then
            libs="$libs floor"
        fi
        for lib in $libs; do
            out="$dir/cg.$lib.$case.$n"
            CG_OUT=$out "$bin/gaspirun" -n "$n" --provider shm --timeout 600 \
                "$wrapper" "$bin/examples/cg_allreduce" "$lib" "$case" "$iters" >&2
            count[$lib]=$(cg_per_call "$out" "$iters")
            line="$line $lib=${count[$lib]}"
        done
        line="$line engine/runtime=$(python3 -c "print(f'{${count[engine]} / ${count[runtime]}:.2f}')")"
        if [ -n "${count[floor]:-}" ]; then
            line="$line floor/runtime=$(python3 -c "print(f'{${count[floor]} / ${count[runtime]}:.2f}')")"
        fi
        echo "$line"
    done
done
