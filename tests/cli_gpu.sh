#!/usr/bin/env bash
# The GPU side of the command line: `loom devices`, `loom compile
# --backend opencl --emit c` (OpenCL C from the GPU renderer) and `loom run
# --backend opencl` on tests/data/cli/mlp.loom, its outputs byte for byte
# the independently computed .npy files. Without an OpenCL device the
# opencl checks become the message saying why (and still pass). The same
# for cuda: with a GPU, `loom run --backend cuda` byte for byte; without
# one, `loom devices` and `loom run --backend cuda` say why (the run
# exits 1).
#
# usage: bash tests/cli_gpu.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_gpu.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_gpu.sh LOOM DATA_DIR}/cli
DATA=$(cd "$DATA" && pwd) || exit 1
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"

inputs=(--input "x=$DATA/x.npy" --input "w1=$DATA/w1.npy"
        --input "b1=$DATA/b1.npy" --input "w2=$DATA/w2.npy"
        --input "b2=$DATA/b2.npy")

run devices
expect "devices" 0 "backends:*ref *host CPU*cpu *host CPU*opencl *OpenCL:*CUDA*"
# loom bounds OpenMP's spin-waits unless the user chose a policy
spin=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$LOOM" devices | grep '^OpenMP waits')
check "devices: loom bounds the spin ($spin)" test "$spin" = "OpenMP waits: 3000 spins, then sleep (GOMP_SPINCOUNT)"
spin=$(env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive "$LOOM" devices | grep '^OpenMP waits')
check "devices: the user's OMP_WAIT_POLICY stands ($spin)" test "$spin" = "OpenMP waits: OMP_WAIT_POLICY=passive"
spin=$(env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=77 "$LOOM" devices | grep '^OpenMP waits')
check "devices: the user's GOMP_SPINCOUNT stands ($spin)" test "$spin" = "OpenMP waits: 77 spins, then sleep (GOMP_SPINCOUNT)"
run devices extra
expect "devices: extra argument" 2 "" "*unexpected argument 'extra'*"
run compile "$DATA/mlp.loom" --backend gpu
expect "compile: unknown backend" 2 "" "*unknown backend 'gpu'*"
# --gemm: checked everywhere, used by GPU backends (the cpu backend computes in f32)
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/gemm" --gemm fp8
expect "run: unknown --gemm" 2 "" "*unknown gemm precision 'fp8' (known: f32, tf32, bf16)*"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/gemm" --gemm bf16
expect "run --gemm bf16 on cpu" 0 "*logits: f32[2, 3]*-5.5, 6.25, 0.75*"
same_bytes "run --gemm bf16 on cpu: logits" "$tmp/gemm/logits.npy" "$DATA/expected_logits.npy"

if [[ $out == *"opencl   unavailable"* ]] || ! "$LOOM" devices | grep -q "^  opencl   OpenCL:"; then
  echo "cli_gpu: opencl checks skipped: $("$LOOM" devices | grep '^  opencl')"
else
  run compile "$DATA/mlp.loom" --backend opencl --emit c
  expect "compile --backend opencl --emit c" 0 "*get_local_id(0)*barrier(*__kernel*__local float *restrict lm_red*lm_g*" "*kernels*"
  run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/ocl" --backend opencl
  expect "run --backend opencl" 0 "*logits: f32[2, 3]*-5.5, 6.25, 0.75*positive: bool[2, 3]*total: f32[]*-0.125*"
  for name in logits positive total; do
    same_bytes "run --backend opencl: $name" "$tmp/ocl/$name.npy" "$DATA/expected_$name.npy"
  done
  run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/ocl_none" --backend opencl --fusion none
  expect "run --backend opencl --fusion none" 0 "*logits*"
  same_bytes "run --backend opencl --fusion none: logits" "$tmp/ocl_none/logits.npy" "$DATA/expected_logits.npy"
fi

if "$LOOM" devices | grep -q "^  cuda     CUDA:"; then
  run compile "$DATA/mlp.loom" --backend cuda --emit c
  expect "compile --backend cuda --emit c" 0 "*extern \"C\" __global__*threadIdx.x*__syncthreads()*"
  run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/cuda" --backend cuda
  expect "run --backend cuda" 0 "*logits: f32[2, 3]*-5.5, 6.25, 0.75*positive: bool[2, 3]*total: f32[]*-0.125*"
  for name in logits positive total; do
    same_bytes "run --backend cuda: $name" "$tmp/cuda/$name.npy" "$DATA/expected_$name.npy"
  done
  run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/cuda_none" --backend cuda --fusion none
  expect "run --backend cuda --fusion none" 0 "*logits*"
  same_bytes "run --backend cuda --fusion none: logits" "$tmp/cuda_none/logits.npy" "$DATA/expected_logits.npy"
else
  run devices
  expect "devices: cuda unavailable" 0 "*cuda     unavailable: backend cuda: no CUDA d*CUDA: no CUDA d*"
  run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/cuda" --backend cuda
  expect "run --backend cuda without a GPU" 1 "" "*backend cuda: no CUDA d*"
  echo "cli_gpu: cuda runs skipped: $("$LOOM" devices | grep '^  cuda')"
fi

finish cli_gpu
