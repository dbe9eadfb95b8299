#!/usr/bin/env bash
# Instructions per call of the 8 B rooted collectives of `bench.sh gasnet` (broadcast, scatter,
# gather; Flags::EAGER, blocking), on the root and on a leaf of the tree, counted by callgrind on
# rank 0 (the other ranks run natively), so that they repeat whatever the machine's load:
# `scripts/callgrind-gasnet.sh [RANKS...]` (default 4), over shm with GASPI_INTRANODE as set
# (direct by default), on the build of `coll/examples/cg_gasnet` in profile $CG_PROFILE (default
# ci; `CG_PROFILE=release` counts what the bench runs). $CG_OPS chooses the operations (default
# "broadcast scatter gather"; `scatterv` and `gatherv`, every count 8 B, may be named too).
#
# Three cases per role: `late` (the others come late: rank 0 initiates first, and waits where
# it receives), `there` (rank 0 comes late: what it receives is there, and its credits back)
# and `step` (nobody sleeps: the ranks call in lock step, as in the bench's loop). The counts
# leave out the waiting loop (`gaspi_notifications::wait::wait_until` and what it calls),
# whose instructions grow with the time waited. One line per operation, role and rank count:
#   ranks=4 op=broadcast role=root late=... there=... step=...
# The callgrind files stay in $CG_DIR (default target/callgrind) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."

iters=${CG_ITERS:-2000}
# shellcheck source=scripts/callgrind-common.sh
. scripts/callgrind-common.sh
cg_setup cg_gasnet 'cg_gasnet::counted'

ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(4)
for n in "${ranks[@]}"; do
    for op in ${CG_OPS:-broadcast scatter gather}; do
        for role in root leaf; do
            line="ranks=$n op=$op role=$role"
            for case in late there step; do
                out="$dir/cg.gasnet.$op.$role.$case.$n"
                CG_OUT=$out "$bin/gaspirun" -n "$n" --provider shm --timeout 600 \
                    "$wrapper" "$bin/examples/cg_gasnet" "$op" "$role" "$case" "$iters" >&2
                line="$line $case=$(cg_per_call "$out" "$iters")"
            done
            echo "$line"
        done
    done
done
