#!/usr/bin/env bash
# Builds gaspi and runs the demo, a ring of write_notify, on 4 local ranks.
# GASPI_PROVIDER=shm ./scripts/demo.sh runs it over shared memory instead of tcp.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# The workspace root is also the `gaspi` package: without --workspace, cargo builds only that
# package and never the launcher.
cargo build --release --workspace --bins --examples
exec ./target/release/gaspirun -n 4 --provider "${GASPI_PROVIDER:-tcp}" --timeout 120 \
    ./target/release/examples/ring
