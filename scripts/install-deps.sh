#!/usr/bin/env bash
# Installs the Debian packages Loom needs to build and test, if missing.
# Open MPI (libopenmpi-dev, openmpi-bin) is for the MPI communicator and its
# tests (src/comm); without it Loom still builds and those tests skip.
# OpenCL (the ICD loader, headers, PoCL as a CPU device) is for the opencl
# backend and its tests, CLBlast its GEMMs; they are loaded at run time, and
# the tests skip without them.
# Graphviz renders `loom compile --svg/--png`; without it those say so.
# libonnx-testdata holds the ONNX node tests that tests/cli_onnx_conformance.sh
# runs (skipped without it).
# --fuzz adds what `make fuzz` needs: clang and its libFuzzer runtime.
set -euo pipefail

packages=(cmake make gcc libc6-dev libdnnl-dev libopenmpi-dev openmpi-bin graphviz libonnx-testdata
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast1)
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang libclang-rt-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# Without dpkg's fsync after every file (what it guards against, a crash
# halfway through an install, costs a CI container nothing); the package
# lists are fetched only when the install cannot go without them (a fresh
# image has none; stale ones name versions the mirror no longer has).
install=($sudo apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io)
if ! "${install[@]}" "${missing[@]}" 2>/dev/null; then
  $sudo apt-get update -qq
  "${install[@]}" "${missing[@]}"
fi
