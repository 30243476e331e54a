#!/usr/bin/env bash
# The prepared GPU check (issue 11, point 4): on a machine with an NVIDIA
# GPU (written for an H100 / H200), in under 8 minutes,
#   1. checks the tools and the GPU before anything else, and stops at once
#      (exit 2, saying what is wrong) where something is missing;
#   2. builds Loom (Release) and the tests it runs;
#   3. runs the quick CUDA tests against the reference: test_cuda,
#      cuda_abi_check, NCCL on one rank (under mpirun), cli_gpu.sh, flash
#      attention with an additive bias (test_opencl_attention --bias);
#   4. runs `loom bench --backend cuda` (the memory-bound workloads, the BERT
#      layer, the GPT-2 block) with LOOM_CUDA_TIMING=1 (the device's own
#      time per run in the log), the two models again with --gemm tf32; then
#      relbias_attention (a learned position bias) with flash attention and
#      decomposed, alternating; the attention RNG sweep
#      (tests/test_cuda_attention.c --sweep): a
#      Llama-2-7B block (d 4096, 32 heads of 128, d_ff 11008, sequence 2048)
#      forward + backward + AdamW with attention dropout under the fused,
#      sequential and overlap placements, the same bits checked, each
#      placement's median step and device time (attention_rng.txt);
#   5. runs PyTorch eager and torch.compile on the GPU on the same workloads
#      where PyTorch with CUDA is installed (bench/peers/torch_bench.py),
#      and prints both side by side (bench/peers/compare.py);
#   6. runs the longer tests: test_ops and test_models on the cuda backend
#      against ref (LOOM_TEST_BACKENDS=cuda: PoCL's OpenCL is skipped) and
#      test_codegen and test_codegen_ops (every generated kernel through
#      NVRTC, and run on the GPU against the interpreter); last, so that a
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
#   --debs DIR   unpack DIR/*.deb into / first where oneDNN is missing (the
#                GPU image has none): made here by --fetch-debs
#   --fetch-debs DIR   download those .deb files into DIR (apt-get
#                download, on a Debian machine with network) and exit
#   --no-pack    leave every log as its own file in OUT (by default they are
#                packed into OUT/gpu-check-files.tar.gz beside gpu-check.json
#                and gpu-check.txt: the device tool returns at most 8 files)
# On the device machine, carry the --fetch-debs folder (an ignored folder of
# the repository) and pass it to --debs.
set -uo pipefail

die() { echo "gpu-check: $*" >&2; exit 2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || die "cannot find the repository root"
out=${OUT:-$root/gpu-check-out}
build=$root/build-gpu
dry=0
torch=1
debs=""
fetch=""
pack=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --no-torch) torch=0; shift ;;
    --debs) debs=${2:?--debs needs a directory}; shift 2 ;;
    --fetch-debs) fetch=${2:?--fetch-debs needs a directory}; shift 2 ;;
    --no-pack) pack=0; shift ;;
    -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $build = /* ]] || build=$root/$build
[[ $out = /* ]] || out=$PWD/$out

# the build's one Debian dependency the GPU image lacks: oneDNN
dnnl_debs=(libdnnl2 libdnnl-dev ocl-icd-libopencl1) # libdnnl.so.2 needs libOpenCL.so.1
if [[ -n $fetch ]]; then
  mkdir -p "$fetch" && cd "$fetch" && apt-get download "${dnnl_debs[@]}" ||
    die "apt-get download ${dnnl_debs[*]} failed"
  ls -l "$fetch"
  exit 0
fi

budget=470 # seconds for everything; later steps are skipped past it
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
jobs=$(nproc 2>/dev/null || echo 4)
loom=$build/loom
tests=$build/tests

# ---- 1. the tools and the GPU, before anything else -------------------------
for tool in cmake timeout; do
  command -v "$tool" > /dev/null || die "$tool is missing (scripts/install-deps.sh installs the build tools)"
done
cc=$(command -v cc || command -v gcc) || die "no C compiler (cc or gcc)"
generator=()
if ! command -v make > /dev/null; then
  command -v ninja > /dev/null || die "neither make nor ninja: CMake cannot build"
  generator=(-G Ninja)
fi
has_dnnl() { echo '#include <dnnl.h>' | "$cc" -E -x c - > /dev/null 2>&1; }
if ! has_dnnl && [[ -n $debs && $dry = 0 ]]; then
  ls "$debs"/*.deb > /dev/null 2>&1 || die "--debs $debs: no .deb files there"
  for f in "$debs"/*.deb; do dpkg -x "$f" / || die "cannot unpack $f"; done
  ldconfig 2> /dev/null
fi
has_dnnl || [[ $dry = 1 ]] ||
  die "no oneDNN (dnnl.h): scripts/install-deps.sh here, or --fetch-debs DIR on a Debian machine and --debs DIR on this one"
# the CUDA libraries Loom opens: where the loader does not find them, the
# toolkit's and the Python wheels' folders (the GPU image has both)
missing_libs() {
  local lib
  for lib in libnvrtc.so libcublas.so.13 libnccl.so.2; do
    ldconfig -p 2> /dev/null | grep -q "$lib" || echo "$lib"
  done
}
if [[ -n $(missing_libs) ]]; then
  extra=""
  for d in "${CUDA_HOME:-/usr/local/cuda}"/lib64 "${CUDA_HOME:-/usr/local/cuda}"/lib \
           $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d) for p in nvidia.__path__ for d in os.listdir(p)))' 2> /dev/null); do
    for sub in "$d" "$d/lib"; do
      ls "$sub"/libnvrtc.so* "$sub"/libcublas.so* "$sub"/libnccl.so* > /dev/null 2>&1 && extra+="$sub:"
    done
  done
  export LD_LIBRARY_PATH="${extra}${LD_LIBRARY_PATH:-}"
  echo "gpu-check: not on the loader's path: $(missing_libs | tr '\n' ' '); LD_LIBRARY_PATH gets ${extra:-nothing}"
fi
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
  # everything said also goes to gpu-check.txt; at the end (even at a die)
  # the other files are packed into one archive
  exec > >(tee "$out/gpu-check.txt") 2>&1
  pack_files() {
    [[ $pack = 1 ]] || return 0
    local f files=()
    for f in "$out"/*; do
      case ${f##*/} in
        gpu-check.json | gpu-check.txt | gpu-check-files.tar.gz) ;;
        *) [[ -e $f ]] && files+=("${f##*/}") ;;
      esac
    done
    [[ ${#files[@]} -gt 0 ]] || return 0
    (cd "$out" && tar czf gpu-check-files.tar.gz "${files[@]}" && rm -rf "${files[@]}")
  }
  trap pack_files EXIT
  { nvidia-smi 2>&1 || true; uptime; } > "$out/machine.txt"
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
targets=(loom_cli test_cuda test_cuda_attention test_opencl_attention test_ops test_models test_codegen
         test_codegen_ops)
if [[ $dry = 1 ]]; then echo "gpu-check: would run, in order (limit, command):"; fi
step configure test 90 configure.log cmake "${generator[@]}" -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
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
else # Loom without MPI: a single process is a one-rank NCCL world
  step nccl_1rank test 90 nccl.log env LOOM_TEST_NCCL=1 "$tests/test_cuda"
fi
step cli_gpu test 90 cli_gpu.log bash "$root/tests/cli_gpu.sh" "$loom" "$root/tests/data"
# flash attention with an additive bias (each broadcast shape, causal,
# dropout fused and sequential; dbias) and a runtime padding mask, against ref
step attention_bias_cuda test 90 attention_bias_cuda.log env LOOM_TEST_BACKENDS=cuda \
  "$tests/test_opencl_attention" --bias
# issue 11, point 5: a short training run with dropout on cuda prints the
# cpu backend's losses (the same masks; float differences only)
step train_vs_cpu test 120 train_vs_cpu.log bash -c '
  a=(train --layers 1 --d-model 32 --heads 2 --context 16 --batch 4 --steps 5 --log-every 1 --dropout 0.1)
  "$1" "${a[@]}" --backend cpu --attention decomposed > "$2/train_cpu.txt" 2>&1 || { tail "$2/train_cpu.txt"; exit 1; }
  "$1" "${a[@]}" --backend cuda > "$2/train_cuda.txt" 2>&1 || { tail "$2/train_cuda.txt"; exit 1; }
  paste <(grep -o "^step .*loss [0-9.]*" "$2/train_cpu.txt" | grep -o "[0-9.]*$") \
        <(grep -o "^step .*loss [0-9.]*" "$2/train_cuda.txt" | grep -o "[0-9.]*$") |
    awk "{ d = \$1 - \$2; if (d < 0) d = -d; bad += (d > 2e-3 || \$2 == \"\"); n++; print \"cpu\", \$1, \"cuda\", \$2 }
         END { print n, \"steps,\", bad + 0, \"differ by more than 2e-3\"; exit (bad > 0 || n != 5) }"' _ "$loom" "$out"

# ---- 4. loom bench on the GPU, the cpu backend beside it ---------------------------------
memory_bound=(layernorm_fwd layernorm_bwd softmax_fwd softmax_bwd bias_gelu bias_dropout_residual_ln
              cross_entropy adamw)
models=(bert_layer gpt2_block)
workloads=("${memory_bound[@]}" "${models[@]}")
# the models in stitch only: mode none makes hundreds of kernels for NVRTC
step bench_cuda bench 120 bench_cuda.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
  "$out/bench_cuda.jsonl" env LOOM_CUDA_TIMING=1 "$loom" bench --backend cuda --modes none,stitch \
  --runs 10 --json "${memory_bound[@]}"
step bench_cuda_models bench 90 bench_cuda_models.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
  "$out/bench_cuda_models.jsonl" env LOOM_CUDA_TIMING=1 "$loom" bench --backend cuda --modes stitch \
  --runs 10 --json "${models[@]}"
step bench_cuda_tf32 bench 60 bench_cuda_tf32.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
  "$out/bench_cuda_tf32.jsonl" env LOOM_CUDA_TIMING=1 "$loom" bench --backend cuda --gemm tf32 \
  --modes stitch --runs 10 --json "${models[@]}"
# the learned position bias (held-out relbias_attention): flash attention
# with the bias against the decomposition, alternating
step bench_cuda_relbias bench 90 bench_cuda_relbias.log bash -c 'set -o pipefail; f=$1; l=$2
  for a in flash decomposed flash decomposed; do
    "$l" bench relbias_attention --backend cuda --modes stitch --attention $a --runs 10 --json |
      sed "s/^{/{\"attention\": \"$a\", /" >> "$f" || exit 1
  done' _ "$out/bench_cuda_relbias.jsonl" "$loom"
# the device's own times (LOOM_CUDA_TIMING lines after each workload's
# "timing" line), median per workload and kernel count: the bandwidth figure
summarize='
import json, re, statistics, sys
for path in sys.argv[1:]:
    # the workload minimum bytes from the JSON beside the log, by workload and kernels
    least = {}
    try:
        for line in open(path[:-4] + ".jsonl"):
            r = json.loads(line)
            if "min_bytes" in r and "kernels" in r:
                least[(r.get("workload"), r["kernels"])] = r["min_bytes"]
    except (OSError, ValueError):
        pass
    try:
        lines = open(path, errors="replace").readlines()
    except OSError:
        continue  # that bench step did not run
    work, rows, timing = None, {}, False
    for line in lines:
        m = re.match(r"bench: (\S+): (\S+)", line)
        if m:
            work, timing = m.group(1), m.group(2) == "timing"
            continue
        m = re.match(r"cuda run: (\d+) kernels, \d+ steps, modeled (\d+) bytes: ([0-9.]+) ms on the device.*, ([0-9.]+) ms with", line)
        if m and timing and work:
            rows.setdefault((work, int(m.group(1)), int(m.group(2))), []).append((float(m.group(3)), float(m.group(4))))
    print(path.rsplit("/", 1)[-1])
    for (w, k, b), t in rows.items():
        dev = statistics.median(x[0] for x in t)
        tot = statistics.median(x[1] for x in t)
        mb = least.get((w, k))
        print("  %-26s %4d kernels  device %9.4f ms  %8.1f GB/s modeled  %s  (with copies %9.4f ms, %d runs)"
              % (w, k, dev, b / dev / 1e6 if dev > 0 else 0,
                 "%8.1f GB/s minimum bytes" % (mb / dev / 1e6) if mb and dev > 0 else "(no minimum bytes)",
                 tot, len(t)))
'
if [[ $have_python = 1 ]]; then
  summarizer=$(mktemp "${TMPDIR:-/tmp}/gpu-check-summarize.XXXXXX.py") || die "mktemp failed"
  printf '%s\n' "$summarize" > "$summarizer"
  step device_times bench 20 device_times.txt python3 "$summarizer" "$out/bench_cuda.log" \
    "$out/bench_cuda_models.log" "$out/bench_cuda_tf32.log"
  rm -f "$summarizer"
  [[ $dry = 0 && -s $out/device_times.txt ]] && cat "$out/device_times.txt"
fi
# the attention RNG sweep: whole steps (copies in and out included) on
# stdout, the device's own time per run (LOOM_CUDA_TIMING) in the log; a
# failed equality of the placements' bits fails it like a test
step attention_rng test 150 attention_rng.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
  "$out/attention_rng.jsonl" env LOOM_CUDA_TIMING=1 "$tests/test_cuda_attention" --sweep --runs 5
if [[ $dry = 0 && -s $out/attention_rng.log ]]; then
  # 6 runs per placement (1 warm-up), in the order fused, sequential, overlap
  grep -o "[0-9.]* ms on the device" "$out/attention_rng.log" | awk '
    { t[n++] = $1 }
    END {
      split("fused sequential overlap", name, " ")
      for (p = 0; p < 3 && 6 * p + 5 < n; p++) {
        for (r = 1; r < 6; r++) v[r] = t[6 * p + r]
        for (r = 2; r < 6; r++) for (q = r; q > 1 && v[q - 1] > v[q]; q--) { x = v[q]; v[q] = v[q - 1]; v[q - 1] = x }
        med[p] = v[3]
        printf "attention rng sweep: %s: median device time %.3f ms\n", name[p + 1], med[p]
      }
      if (med[0] > 0 && med[2] > 0) printf "attention rng sweep: overlap over fused (device time): x%.3f\n", med[0] / med[2]
    }' > "$out/attention_rng.txt"
  cat "$out/attention_rng.jsonl" "$out/attention_rng.txt"
fi

# ---- 5. PyTorch on the GPU, side by side -----------------------------------------------
if [[ $torch = 1 && $have_python = 1 ]] &&
   { [[ $dry = 1 ]] || python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; }; then
  # torch.compile compiles each workload first: only where the targets compare
  step torch_eager bench 120 torch_eager.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
    "$out/torch_eager.jsonl" env LOOM_PEER_DEVICE=cuda python3 "$root/bench/peers/torch_bench.py" \
    --modes torch_eager --runs 10 "${workloads[@]}"
  step torch_compile bench 120 torch_compile.log bash -c 'f=$1; shift; exec "$@" > "$f"' _ \
    "$out/torch_compile.jsonl" env LOOM_PEER_DEVICE=cuda python3 "$root/bench/peers/torch_bench.py" \
    --modes torch_compile --runs 10 layernorm_fwd layernorm_bwd softmax_fwd softmax_bwd cross_entropy
  step compare bench 20 compare.txt python3 "$root/bench/peers/compare.py" "$out/bench_cuda.jsonl" \
    "$out/bench_cuda_models.jsonl" "$out/torch_eager.jsonl" "$out/torch_compile.jsonl"
  [[ $dry = 0 && -s $out/compare.txt ]] && cat "$out/compare.txt"
else
  echo "gpu-check: PyTorch peers skipped: $([[ $torch = 0 ]] && echo "--no-torch" || echo "no python3 with torch and CUDA")"
fi

# ---- 6. the longer test suites, last: the measurements above come first -----------------
step test_ops test 150 test_ops.log env LOOM_TEST_BACKENDS=cuda "$tests/test_ops"
step test_models test 120 test_models.log env LOOM_TEST_BACKENDS=cuda "$tests/test_models" --quick
step test_attention_cuda test 90 test_attention_cuda.log env LOOM_TEST_BACKENDS=cuda \
  "$tests/test_opencl_attention" --no-bias
step test_codegen test 90 test_codegen.log "$tests/test_codegen"
step test_codegen_ops test 90 test_codegen_ops.log "$tests/test_codegen_ops"

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
  "load": "$(json_str "$(uptime)")",
  "seconds": $(elapsed),
  "passed": $([[ $failed = 0 ]] && echo true || echo false),
  "steps": [$steps_json
  ]
}
EOF
echo "gpu-check: $(elapsed)s; $([[ $failed = 0 ]] && echo "every test passed" || echo "TESTS FAILED"); summary in $out/gpu-check.json"
exit $failed
