#!/usr/bin/env bash
# Runs the whole test suite: formatting and lints, unit tests, the loom models of the
# notification table, and the multi-process tests (real processes through gaspirun, over tcp
# and shm). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --release
# Own target directory: the changed RUSTFLAGS would otherwise rebuild the main one each run.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p gaspi-notifications --release --lib loom
