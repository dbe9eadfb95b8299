#!/usr/bin/env bash
# Builds gaspi and runs the demo on 4 local ranks: a distributed 2-D FFT whose transpose is the
# sparse alltoallv of gaspi-coll, pipelined (blocks sent as they are computed and transformed
# as they land), checked against a plain FFT and timed against waiting for the whole exchange.
# GASPI_PROVIDER=shm ./scripts/demo.sh runs it over shared memory instead of tcp; arguments go
# to the demo (e.g. --n 2048 --reps 9).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release -p gaspi-launcher --bin gaspirun
cargo build --release -p gaspi-coll --example fft_transpose
exec ./target/release/gaspirun -n 4 --provider "${GASPI_PROVIDER:-tcp}" --timeout 120 \
    ./target/release/examples/fft_transpose "$@"
