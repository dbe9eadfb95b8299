#!/usr/bin/env bash
# Installs what building and testing gaspi needs on Debian/Ubuntu, if it is missing:
# libfabric headers and tools, libclang for bindgen, and MPICH (whose mpiexec.hydra a test
# uses to start the ring example unchanged), plus any packages named as arguments (the
# benchmark's MPI comparison adds the MPI development packages). Safe to run again; does
# nothing when all is present.
set -euo pipefail

packages=(libfabric-dev libfabric-bin libclang-dev clang pkg-config mpich "$@")
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found; install Rust (https://rustup.rs) and run this again" >&2
    exit 1
fi
