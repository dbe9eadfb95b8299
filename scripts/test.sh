#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints and rustdoc (warnings denied), unit tests, the
# multi-process tests (real processes through gaspirun, over tcp and shm, with the direct
# intra-node path and without it), and the loom models
# of the notification table and of the engine's counters and progress hand-off. This is what
# CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
# Every test runs even after one failed (each stage with --no-fail-fast, and the stages after
# a failing one too), so that one run reports every failure; the script fails at the end.
# The `ci` profile is release without LTO (see Cargo.toml): the same optimised code, built in
# less than half the time.
failed=0
cargo test --workspace --profile ci --no-fail-fast || failed=1
# The multi-process tests again with every rank on the fabric (the default above takes the
# direct intra-node path between ranks of this host): the integration tests, which start the
# jobs; the unit tests start none, and ran above (the schedule simulations take a minute).
GASPI_INTRANODE=fabric cargo test --profile ci --no-fail-fast -p gaspi -p gaspi-coll --test '*' ||
    failed=1
# Own target directory: the changed RUSTFLAGS would otherwise rebuild the main one each run.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p gaspi-notifications -p gaspi --profile ci --no-fail-fast --lib loom || failed=1
exit "$failed"
