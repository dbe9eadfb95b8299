#!/usr/bin/env bash
# Instructions per round trip of the 8 B epoch ping-pong of `bench.sh pscw` at 2 ranks (start /
# write / complete, then post / wait), per call of the window, beside the write_notify
# ping-pong it is held against (`epoch_over_write_notify`), counted by callgrind on rank 0 (rank
# 1 runs natively):
# `scripts/callgrind-pscw.sh [PROVIDER...]` (default shm), with GASPI_INTRANODE as set (direct
# by default), on the build of `coll/examples/cg_pscw` in profile $CG_PROFILE (default ci). The
# counts leave out the waiting loop (`gaspi_notifications::wait::wait_until` and what it
# calls), whose instructions grow with the time waited. Two ways per case: `there`, where
# rank 0 waits (uncounted) before each counted wait until what it waits for is there, then
# sleeps 1 ms, so that the counts repeat whatever the machine's load (through the fabric, an
# epoch's `done` may still be on its way then: see the example's docs), and `step`, where
# nobody sleeps, as in the bench, so that a wait's way to its sleep is counted too (as often
# as the load makes it wait). One line per provider, case and way:
#   provider=shm mode=direct case=epoch way=there round_trip=2539 start=417 write=660 ...
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
    total=$(callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v f="cg_pscw::$2 [" 'index($0, f) {gsub(",", "", $1); print $1; exit}')
    echo $((${total:-0} / iters))
}

providers=("$@")
[ ${#providers[@]} -gt 0 ] || providers=(shm)
mode=${GASPI_INTRANODE:-direct}
for provider in "${providers[@]}"; do
    for way in there step; do
        for case in epoch pingpong; do
            out="$dir/cg.pscw.$case.$way.$provider.$mode"
            CG_OUT=$out "$bin/gaspirun" -n 2 --provider "$provider" --timeout 600 \
                "$wrapper" "$bin/examples/cg_pscw" "$case" "$iters" "$way" >&2
            line="provider=$provider mode=$mode case=$case way=$way"
            line="$line round_trip=$(cg_per_call "$out" "$iters")"
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
done
