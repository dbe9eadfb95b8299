#!/usr/bin/env bash
# Instructions per round of the sparse alltoallv with 8 B blocks (dense: every rank sends to
# every other), counted by callgrind on rank 0 (the other ranks run natively), so that they
# repeat whatever the machine's load: `scripts/callgrind-alltoallv.sh [RANKS...]` (default
# 4 8), over shm with GASPI_INTRANODE as set (direct by default), on the build of
# `coll/examples/cg_alltoallv` in profile $CG_PROFILE (default ci).
#
# Two cases per rank count: `late` (rank 0's sources come late: it waits for their blocks)
# and `there` (rank 0 comes late: its sources' blocks are there when it begins). A round is
# `alltoallv` until `Complete`, each arrival reset. The counts leave out the waiting loop
# (`gaspi_notifications::wait::wait_until` and what it calls), whose instructions grow with
# the time waited. One line per case:
#   ranks=4 case=there per_round=8900
# The callgrind files stay in $CG_DIR (default target/callgrind) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${CG_ROUNDS:-400}
# shellcheck source=scripts/callgrind-common.sh
. scripts/callgrind-common.sh
cg_setup cg_alltoallv 'cg_alltoallv::round_call'

ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(4 8)
for n in "${ranks[@]}"; do
    for case in late there; do
        out="$dir/cg.alltoallv.$case.$n"
        CG_OUT=$out "$bin/gaspirun" -n "$n" --provider shm --timeout 900 \
            "$wrapper" "$bin/examples/cg_alltoallv" "$case" "$rounds" >&2
        echo "ranks=$n case=$case per_round=$(cg_per_call "$out" "$rounds")"
    done
done
