#!/usr/bin/env bash
# `loom cluster` end to end (docs/CLI.md, docs/CLUSTER.md): the shipped
# descriptions read and print with their derived figures; a broken file is
# an error at PATH:LINE:COL (exit 1); wrong arguments exit 2; this
# machine's description is measured and written, never over a file
# without --force, and reads back.
#
# usage: bash tests/cli_cluster.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_cluster.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_cluster.sh LOOM DATA_DIR}
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"
CLUSTERS=$DATA/../../clusters

run help cluster
expect "help cluster" 0 "*usage: loom cluster FILE*--this-machine*"
run cluster "$CLUSTERS/dgx-a100-80gb-hdr.txt"
expect "the A100 cluster" 0 "*name              dgx-a100-80gb-hdr*inter.bandwidth   25 GB/s*ridge point bf16     153.0 FLOP/byte*network: 200.0 GB/s per node out (8 NICs), 25.00 GB/s per device*"
for f in "$CLUSTERS"/*.txt; do
  run cluster "$f"
  expect "reads $(basename "$f")" 0 "*node.devices*# derived*"
done

# mistakes
printf 'name t\ndevice d\nflops.f32 19.5 TFLOPS\n' >"$tmp/bad.txt"
run cluster "$tmp/bad.txt"
expect "a wrong unit at its place" 1 "" "loom cluster: $tmp/bad.txt:3:16: 'TFLOPS' is not a unit of 'flops.f32'*"
run cluster "$tmp/none.txt"
expect "a missing file" 1 "" "loom cluster: *$tmp/none.txt*"
run cluster
expect "no file" 2 "" "*give a cluster FILE or --this-machine*"
run cluster "$tmp/bad.txt" --this-machine
expect "both" 2 "" "*not both*"
run cluster --frobnicate
expect "unknown option" 2 "" "*unknown option '--frobnicate'*"
run cluster "$tmp/bad.txt" --out "$tmp/x.txt"
expect "--out without --this-machine" 2 "" "*--out goes with --this-machine*"

# this machine, measured
echo "keep me" >"$tmp/mine.txt"
run cluster --this-machine --out "$tmp/mine.txt"
expect "--out never replaces a file" 1 "" "*mine.txt*"
[[ $(<"$tmp/mine.txt") == "keep me" ]] && ok || bad "the file is untouched"
run cluster --this-machine --out "$tmp/mine.txt" --force
expect "--force replaces it" 0 "wrote $tmp/mine.txt"
run cluster "$tmp/mine.txt"
expect "this machine's description reads back" 0 "*device            cpu-core*node.devices      $(getconf _NPROCESSORS_ONLN)*nodes             1*intra.kind        mpi-shm*one node: no network*"

finish cli_cluster
