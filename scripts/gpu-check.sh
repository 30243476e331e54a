#!/usr/bin/env bash
# The prepared GPU check (issue 11, point 4): on a machine with an NVIDIA
# GPU (written for an H100 / H200), in under 8 minutes,
#   1. checks the tools and the GPU before anything else, and stops at once
#      (exit 2, saying what is wrong) where something is missing;
#   2. builds Loom (Release) and the tests it runs;
#   3. runs the quick CUDA tests against the reference: test_cuda,
#      cuda_abi_check, NCCL on one rank (under mpirun), cli_gpu.sh;
#   4. runs `loom bench --backend cuda` (the memory-bound workloads, the BERT
#      layer, the GPT-2 block) with LOOM_CUDA_TIMING=1 (the device's own
#      time per run in the log), and the cpu backend's stitch mode beside it;
#   5. runs PyTorch eager and torch.compile on the GPU on the same workloads
#      where PyTorch with CUDA is installed (bench/peers/torch_bench.py),
#      and prints both side by side (bench/peers/compare.py);
#   6. runs the longer tests: test_ops and test_models on the cuda backend
#      against ref (LOOM_TEST_BACKENDS=cuda: PoCL's OpenCL is skipped) and
#      test_codegen (every generated kernel through NVRTC); last, so that a
#      slow step cannot crowd out the measurements;
#   7. writes OUT/gpu-check.json: the machine, every step's status, time and
#      files. Exit status 0 only if every test step passed; 2 (at once) if
#      the tools, the build or the GPU are missing.
#
# usage: scripts/gpu-check.sh [--out DIR] [--build DIR] [--dry-run] [--no-torch]
#   --out DIR    where results go (default: $OUT if set, else gpu-check-out)
#   --build DIR  the build directory (default build-gpu; reused if present)
#   --dry-run    check the tools, print every step's command, run nothing
#   --no-torch   skip the PyTorch peers
# The attention RNG sweep (loom bench attention) is skipped, saying why: the
# cuda backend has no flash attention or RNG placements yet (docs/GPU.md).
set -uo pipefail

die() { echo "gpu-check: $*" >&2; exit 2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || die "cannot find the repository root"
out=${OUT:-$root/gpu-check-out}
build=$root/build-gpu
dry=0
torch=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --no-torch) torch=0; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $build = /* ]] || build=$root/$build
[[ $out = /* ]] || out=$PWD/$out

budget=470 # seconds for everything; later steps are skipped past it
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
jobs=$(nproc 2>/dev/null || echo 4)
loom=$build/loom
tests=$build/tests

# ---- 1. the tools and the GPU, before anything else -------------------------
for tool in cmake make cc timeout; do
  command -v "$tool" > /dev/null || die "$tool is missing (scripts/install-deps.sh installs the build tools)"
done
have_python=0
command -v python3 > /dev/null && have_python=1
have_mpirun=0
command -v mpirun > /dev/null && have_mpirun=1
gpu_line="(not asked: dry run)"
if [[ $dry = 0 ]]; then
  # nvidia-smi informs; Loom's own view (loom devices, after the build) decides
  if command -v nvidia-smi > /dev/null; then
    gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
  else
    gpu_line="(no nvidia-smi)"
  fi
  mkdir -p "$out" || die "cannot create $out"
fi
echo "gpu-check: GPU: $gpu_line; results in $out"

# ---- the steps ----------------------------------------------------------------
steps_json=""
failed=0
# step NAME KIND LIMIT_S LOG CMD...: runs CMD with a time limit, its output
# in OUT/LOG; KIND test (counts toward the exit status) or bench.
step() {
  local name=$1 kind=$2 limit=$3 log=$4
  shift 4
  if [[ $dry = 1 ]]; then
    printf '  %-14s %4ss  %s\n' "$name" "$limit" "$*"
    return 0
  fi
  local left=$(( budget - $(elapsed) ))
  local status rc=0 t0
  t0=$(date +%s)
  if (( left < 20 )); then
    status=skipped
    echo "gpu-check: $name: skipped (the ${budget}s budget is spent)" >&2
    [[ $kind = test ]] && failed=1 # not checked is not passed
  else
    (( limit > left )) && limit=$left
    echo "gpu-check: $name ($kind, up to ${limit}s): $*"
    timeout --kill-after=10 "$limit" "$@" > "$out/$log" 2>&1
    rc=$?
    if [[ $rc = 0 ]]; then status=passed
    elif [[ $rc = 124 || $rc = 137 ]]; then status=timed_out
    else status=failed; fi
    if [[ $status != passed ]]; then
      echo "gpu-check: $name $status (exit $rc); the end of $log:" >&2
      tail -15 "$out/$log" >&2
      [[ $kind = test ]] && failed=1
    else
      tail -2 "$out/$log" | sed "s/^/  /"
    fi
  fi
  local dt=$(( $(date +%s) - t0 ))
  steps_json+="${steps_json:+,}
    {\"name\": \"$name\", \"kind\": \"$kind\", \"status\": \"$status\", \"exit\": $rc, \"seconds\": $dt, \"log\": \"$log\"}"
}

# ---- 2. build -------------------------------------------------------------------
targets=(loom_cli test_cuda test_ops test_models test_codegen)
if [[ $dry = 1 ]]; then echo "gpu-check: would run, in order (limit, command):"; fi
step configure test 90 configure.log cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
step build test 240 build.log cmake --build "$build" -j "$jobs" --target "${targets[@]}"
if [[ $dry = 0 ]]; then
  [[ -x $loom ]] || die "the build made no $loom (see $out/build.log)"
  # cuda_abi_check exists only where the toolkit's headers were found
  cmake --build "$build" -j "$jobs" --target cuda_abi_check >> "$out/build.log" 2>&1
  # the GPU as Loom sees it: stop here, saying why, if the backend is absent
  "$loom" devices > "$out/devices.txt" 2>&1
  cat "$out/devices.txt"
  grep -q "^  cuda     CUDA:" "$out/devices.txt" ||
    die "the cuda backend is unavailable: $(grep '^  cuda' "$out/devices.txt")"
  drv=$(sed -n 's/.*driver \([0-9]*\.[0-9]*\).*/\1/p' "$out/devices.txt" | head -1)
  nvrtc=$(sed -n 's/^NVRTC \([0-9]*\.[0-9]*\) .*/\1/p' "$out/devices.txt" | head -1)
  [[ -n $nvrtc ]] || die "no NVRTC: $(grep NVRTC "$out/devices.txt")"
  # NVRTC's PTX loads only on a driver at least as new as NVRTC
  if [[ -n $drv ]] && [[ $(printf '%s\n%s\n' "$nvrtc" "$drv" | sort -V | head -1) != "$nvrtc" ]]; then
    die "the driver supports CUDA $drv but NVRTC is $nvrtc: its PTX will not load (use a toolkit no newer than the driver, CUDA_HOME=...)"
  fi
fi

# ---- 3. the tests against the reference -------------------------------------------
step test_cuda test 90 test_cuda.log "$tests/test_cuda"
if [[ $dry = 1 || -x $build/tests/cuda_abi_check ]]; then
  step cuda_abi_check test 10 cuda_abi_check.log "$build/tests/cuda_abi_check"
fi
if [[ $have_mpirun = 1 ]]; then
  step nccl_1rank test 90 nccl.log env LOOM_TEST_NCCL=1 OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --allow-run-as-root -np 1 "$tests/test_cuda"
else
  echo "gpu-check: nccl_1rank skipped: no mpirun"
fi
step cli_gpu test 90 cli_gpu.log bash "$root/tests/cli_gpu.sh" "$loom" "$root/tests/data"

# ---- 4. loom bench on the GPU, the cpu backend beside it ---------------------------------
workloads=(layernorm_fwd layernorm_bwd softmax_fwd softmax_bwd bias_gelu bias_dropout_residual_ln
           cross_entropy adamw bert_layer gpt2_block)
step bench_cuda bench 150 bench_cuda.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
  "$out/bench_cuda.jsonl" env LOOM_CUDA_TIMING=1 "$loom" bench --backend cuda --modes none,stitch \
  --runs 10 --json --quiet "${workloads[@]}"
step bench_cpu bench 90 bench_cpu.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
  "$out/bench_cpu.jsonl" "$loom" bench --modes stitch --runs 5 --json --quiet "${workloads[@]}"
echo "gpu-check: attention RNG sweep skipped: the cuda backend has no flash attention or RNG placements yet (docs/GPU.md)"

# ---- 5. PyTorch on the GPU, side by side -----------------------------------------------
if [[ $torch = 1 && $have_python = 1 ]] &&
   { [[ $dry = 1 ]] || python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; }; then
  # torch.compile compiles each workload first: only where the targets compare
  step torch_eager bench 120 torch_eager.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
    "$out/torch_eager.jsonl" env LOOM_PEER_DEVICE=cuda python3 "$root/bench/peers/torch_bench.py" \
    --modes torch_eager --runs 10 "${workloads[@]}"
  step torch_compile bench 150 torch_compile.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
    "$out/torch_compile.jsonl" env LOOM_PEER_DEVICE=cuda python3 "$root/bench/peers/torch_bench.py" \
    --modes torch_compile --runs 10 layernorm_fwd layernorm_bwd softmax_fwd softmax_bwd cross_entropy
  step compare bench 20 compare.txt python3 "$root/bench/peers/compare.py" "$out/bench_cuda.jsonl" \
    "$out/torch_eager.jsonl" "$out/torch_compile.jsonl"
  [[ $dry = 0 && -s $out/compare.txt ]] && cat "$out/compare.txt"
else
  echo "gpu-check: PyTorch peers skipped: $([[ $torch = 0 ]] && echo "--no-torch" || echo "no python3 with torch and CUDA")"
fi

# ---- 6. the longer test suites, last: the measurements above come first -----------------
step test_ops test 150 test_ops.log env LOOM_TEST_BACKENDS=cuda "$tests/test_ops"
step test_models test 120 test_models.log env LOOM_TEST_BACKENDS=cuda "$tests/test_models" --quick
step test_codegen test 90 test_codegen.log "$tests/test_codegen"

[[ $dry = 1 ]] && { echo "gpu-check: dry run: nothing was run"; exit 0; }

# ---- 7. the summary ----------------------------------------------------------------
json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n'; }
cat > "$out/gpu-check.json" << EOF
{
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "commit": "$(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)",
  "gpu": "$(json_str "$gpu_line")",
  "loom_cuda": "$(json_str "$(grep '^  cuda' "$out/devices.txt")")",
  "nvrtc": "${nvrtc:-}",
  "seconds": $(elapsed),
  "passed": $([[ $failed = 0 ]] && echo true || echo false),
  "steps": [$steps_json
  ]
}
EOF
echo "gpu-check: $(elapsed)s; $([[ $failed = 0 ]] && echo "every test passed" || echo "TESTS FAILED"); summary in $out/gpu-check.json"
exit $failed
