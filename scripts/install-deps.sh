#!/usr/bin/env bash
# Installs xshard's build and test dependencies on Debian 12 (run as root).
# Idempotent: when every package is already installed it does nothing, so
# reruns are fast. Nothing is downloaded besides Debian packages. CLI11 and
# nlohmann-json are for the examples' command lines and xshard-plan's JSON
# (the library itself needs neither). Open MPI is for the MPI backend
# (xshard::mpi) and its tests, HDF5 for checkpoints (xshard::hdf5; the
# parallel flavour, which installs beside it, for xshard::hdf5_mpi) and h5py
# for the interop test; without them they are skipped.
#
# XSHARD_BENCH_DEPS=1 also installs the optional benchmark peers (bench/ only;
# the tests never need them): OpenBLAS and Eigen for bench/einsum, numpy,
# torch and matplotlib for bench/peers.py and bench/plot_einsum.py.
set -euo pipefail

packages=(
  g++ cmake ninja-build clang-14 libclang-rt-14-dev clang-format lld
  xtensor-dev libxsimd-dev xtl-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  libhdf5-dev libhdf5-openmpi-dev python3-h5py
  ca-certificates python3
)
if [ "${XSHARD_BENCH_DEPS:-0}" = "1" ]; then
  packages+=(libopenblas-dev libeigen3-dev python3-numpy python3-torch python3-matplotlib)
fi

missing=()
for pkg in "${packages[@]}"; do
  if [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != "installed" ]; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "install-deps: not root and no sudo; install these packages: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update
"${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
