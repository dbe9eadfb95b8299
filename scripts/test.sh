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
cargo test --workspace --release
# The multi-process tests again with every rank on the fabric (the default above takes the
# direct intra-node path between ranks of this host).
GASPI_INTRANODE=fabric cargo test --release -p gaspi -p gaspi-coll --tests
# Own target directory: the changed RUSTFLAGS would otherwise rebuild the main one each run.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p gaspi-notifications -p gaspi --release --lib loom
