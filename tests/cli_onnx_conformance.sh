#!/usr/bin/env bash
# ONNX conformance: `loom onnx-test` over the ONNX node tests of Debian's
# libonnx-testdata (scripts/install-deps.sh installs it; without it this
# test skips with a message). Every supported test must pass: all of them
# on the reference backend and on cpu eager, and every sixteenth one (by
# name, --shard 0/16) on cpu stitch (another sixteenth on opencl), whose per-test C compilation takes
# over ten minutes for all of them on a loaded machine (run `loom
# onnx-test DIR` for the whole); the PyTorch-exported tests
# (pytorch-converted, pytorch-operator) too. Also the import path of the
# command line on one node test: show, run (.pb inputs), compile, bench.
#
# usage: bash tests/cli_onnx_conformance.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_onnx_conformance.sh LOOM DATA_DIR}
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"

NODE=${LOOM_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}/node
if [ ! -d "$NODE" ]; then
  echo "cli_onnx_conformance: skipped: no ONNX node tests at $NODE (install libonnx-testdata)"
  exit 77
fi

# conformance: "N tests, S supported, P passed, 0 failed", S == P, and
# most of each folder supported (node: 743 of 932 when this was written)
DATA_ROOT=$(dirname "$NODE")
modes=("node ref eager 600" "node cpu eager 600" "node cpu stitch 30 --shard 0/16"
       "pytorch-converted ref eager 70" "pytorch-converted cpu eager 70"
       "pytorch-operator ref eager 25" "pytorch-operator cpu eager 25")
# on OpenCL where present (PoCL here; LOOM_TEST_BACKENDS may leave it out):
# another sixteenth, each test's kernels built by the OpenCL compiler
# (every test passes there too: docs/ONNX.md)
if [[ -z ${LOOM_TEST_BACKENDS:-} || ",$LOOM_TEST_BACKENDS," == *",opencl,"* ]] &&
   "$LOOM" devices 2>/dev/null | grep -q '^  opencl .*OpenCL'; then
  modes+=("node opencl stitch 30 --shard 1/16")
else
  echo "cli_onnx_conformance: opencl skipped: not present or not selected"
fi
for mode in "${modes[@]}"; do
  set -- $mode
  dir=$DATA_ROOT/$1 be=$2 fu=$3 least=$4
  shift 4
  [ -d "$dir" ] || continue
  run onnx-test "$dir" --backend "$be" --fusion "$fu" "$@"
  line=$(printf '%s\n' "$out" | tail -n 1)
  echo "$line"
  sup=$(printf '%s' "$line" | sed -n 's/.* \([0-9]*\) supported, \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2 \3/p')
  read -r s p f <<<"$sup"
  if [ "$rc" -eq 0 ] && [ -n "$s" ] && [ "$s" = "$p" ] && [ "$f" = 0 ] && [ "$s" -ge "$least" ]; then ok; else
    printf '%s\n' "$out" | grep '^FAIL' | head -20 >&2
    bad "onnx-test $mode"
  fi
done

# the command line on one model: an expanded LayerNormalization (shape
# computations folded at load time), its inputs as TensorProto files
T=$NODE/test_layer_normalization_4d_axis1_expanded
S=$T/test_data_set_0
run show "$T/model.onnx"
expect "show" 0 "*X: float[2, 3, 4, 5]*ReduceMean*import: ok*folded at load time*"
run run "$T/model.onnx" --input X=$S/input_0.pb --input W=$S/input_1.pb --input B=$S/input_2.pb --out "$tmp/out"
expect "run" 0 "*Y: f32[2, 3, 4, 5] -> *Mean: f32[2, 1, 1, 1]*InvStdDev*"
check "run wrote Y.npy" test -s "$tmp/out/Y.npy"
run run "$T/model.onnx" --input X=$S/input_0.pb --input W=$S/input_1.pb --input B=$S/input_2.pb --out "$tmp/out"
expect "run refuses to overwrite" 1 "" "*already exists*"
run run "$T/model.onnx" --out "$tmp/out2"
expect "run without inputs" 1 "" "*no value given for model input 'X'*"
run run "$T/model.onnx" --input Q=$S/input_0.pb
expect "run with an unknown input" 1 "" "*no input named 'Q'*"
run compile "$T/model.onnx" --fusion stitch
expect "compile" 0 "*fusion stitch*kernels*"
# bench: a model is a workload like any graph file, every mode, --json
run bench "$T/model.onnx" --runs 2 --modes eager,stitch --quiet --json
expect "bench" 0 "*\"workload\": \"$T/model.onnx\", \"mode\": \"eager\"*\"mode\": \"stitch\"*"
run bench "$T/model.onnx" --runs 1 --modes stitch --quiet --input X=$S/input_0.pb
expect "bench with a .pb input" 0 "*stitch*"
run bench "$T/model.onnx" --runs 1 --modes stitch --quiet --input Q=$S/input_0.pb
expect "bench with an unknown input" 1 "" "*no input named 'Q'*"
run bench "$NODE/test_acos/model.onnx" --runs 1 --modes stitch --quiet
expect "bench of an unsupported model" 1 "" "*Acos*"
run bench "$T/model.onnx" --dim N=x
expect "bench --dim wants a number" 2 "" "*--dim wants NAME=N*"
# an unsupported op is named with its node
run show "$NODE/test_acos/model.onnx"
expect "show names the unsupported node" 1 "*Acos*unsupported*unsupported nodes:*"

echo "cli_onnx_conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
