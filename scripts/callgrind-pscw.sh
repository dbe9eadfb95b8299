#!/usr/bin/env bash
# Instructions per round trip of the 8 B epoch ping-pong of `bench.sh pscw` at 2 ranks (start /
# write / complete, then post / wait), per call of the window, beside the write_notify
# ping-pong it is held against (`epoch_over_write_notify`), counted by callgrind on rank 0 (rank
# 1 runs natively), so that they repeat whatever the machine's load:
# `scripts/callgrind-pscw.sh [PROVIDER...]` (default shm), with GASPI_INTRANODE as set (direct
# by default), on the ci profile's build of `coll/examples/cg_pscw`. The counts leave out the
# waiting loop (`gaspi_notifications::wait::wait_until` and what it calls), whose instructions
# grow with the time waited. One line per provider and case:
#   provider=shm mode=direct case=epoch round_trip=2452 start=423 write=664 complete=583 ...
# The callgrind files stay in $CG_DIR (default target/callgrind) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/callgrind-common.sh
. scripts/callgrind-common.sh
cg_setup cg_pscw 'cg_pscw::*_call'
iters=${CG_ITERS:-3000}

# The inclusive instructions of function `cg_pscw::$2` in profile `$1`, per counted round.
per_call() {
    local total
    total=$(callgrind_annotate --inclusive=yes "$1" 2>/dev/null |
        awk -v f="cg_pscw::$2 [" 'index($0, f) {gsub(",", "", $1); print $1; exit}')
    echo $((${total:-0} / iters))
}

providers=("$@")
[ ${#providers[@]} -gt 0 ] || providers=(shm)
mode=${GASPI_INTRANODE:-direct}
for provider in "${providers[@]}"; do
    for case in epoch pingpong; do
        out="$dir/cg.pscw.$case.$provider.$mode"
        CG_OUT=$out target/ci/gaspirun -n 2 --provider "$provider" --timeout 600 \
            "$wrapper" target/ci/examples/cg_pscw "$case" "$iters" >&2
        line="provider=$provider mode=$mode case=$case round_trip=$(cg_per_call "$out" "$iters")"
        if [ "$case" = epoch ]; then
            calls="start write complete post wait"
        else
            calls="send take"
        fi
        for call in $calls; do
            line="$line $call=$(per_call "$out" "${call}_call")"
        done
        echo "$line"
    done
done
