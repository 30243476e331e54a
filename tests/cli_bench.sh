#!/usr/bin/env bash
# `loom bench` end to end at --size small: the JSON lines carry the keys of
# issue 3 (a machine line first, then one line per mode), `loom bench rng`
# those of issue 4 (one line per Philox path, rounds and thread count), `loom
# bench attention` one line per point and RNG placement (issue 4, point 5),
# --trace writes a Chrome trace and never overwrites without --force, the
# tables print, and wrong arguments exit 2 with a usage message. Timings are
# never checked (machines are noisy). Needs only bash, coreutils and grep
# (python3, where there is one, checks that the trace parses as JSON).
#
# usage: bash tests/cli_bench.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_bench.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_bench.sh LOOM DATA_DIR}
DATA=$(cd "$DATA" && pwd) || exit 1
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"
# A private kernel cache, so the test neither reads nor fills the user's.
export XDG_CACHE_HOME=$tmp/cache

has_keys() {
  local line=$1 k
  shift
  [[ $line == "{"*"}" ]] || return 1
  for k in "$@"; do
    [[ $line == *"\"$k\": "* ]] || { echo "  missing key $k in: $line" >&2; return 1; }
  done
}

# ---- JSON: one workload, every mode --------------------------------------
run bench --size small --json --runs 2 softmax_fwd
check "bench --json exits 0" test "$rc" -eq 0
mapfile -t lines <<<"$out"
check "json: 6 lines (machine + 5 modes)" test "${#lines[@]}" -eq 6
check "json: machine line first" has_keys "${lines[0]}" machine triad_gbps sgemm_gflops llc_bytes threads
for mode in reference eager none loop stitch; do
  line=$(printf '%s\n' "$out" | grep -F "\"mode\": \"$mode\"")
  check "json: a line for $mode" test -n "$line"
  check "json: $mode has the schema's keys" has_keys "$line" workload mode shape ops kernels \
    bytes median_s gbps bw_fraction
  check "json: $mode names its workload" test "${line#*\"workload\": \"softmax_fwd\"}" != "$line"
done
check "json: progress goes to stderr, not stdout" test "${out#*bench:}" == "$out"
line=$(printf '%s\n' "$out" | grep -F '"mode": "stitch"')
check "json: stitch reports its speedup over loop" has_keys "$line" vs_loop vs_none
check "json: outputs checked against the reference" has_keys "$line" max_err

# The memory roof (issue 8, point 7) is the best of its variants, on the
# machine line and on every memory-bound workload's line (its footprint).
json_num() { [[ $1 =~ \"$2\":\ ([-0-9.e+]+) ]] && printf '%s\n' "${BASH_REMATCH[1]}"; }
roof_is_max() {
  local line=$1 v best
  best=$(for v in triad triad_stream copy copy_stream; do json_num "$line" "roof_${v}_gbps"; done |
         sort -g | tail -n 1)
  [[ -n $best && $(json_num "$line" roof_gbps) == "$best" ]] ||
    { echo "  roof_gbps is not the best variant in: $line" >&2; return 1; }
}
check "json: machine roof is the best variant" roof_is_max "${lines[0]}"
check "json: machine roof says how it counts" has_keys "${lines[0]}" roof_variant roof_counting \
  roof_bytes roof_triad_stream_gbps
line=$(printf '%s\n' "$out" | grep -F '"mode": "stitch"')
check "json: the workload's roof is the best variant" roof_is_max "$line"
check "json: the fraction is of the workload's roof" has_keys "$line" roof_bytes triad_fraction

# ---- a model workload: its GEMM steps' rate and both plans' modeled time ----
run bench --size small --json --runs 1 --modes loop,stitch --quiet bert_layer
check "bench bert_layer --json exits 0" test "$rc" -eq 0
line=$(printf '%s\n' "$out" | grep -F '"mode": "stitch"')
check "json: a model workload's GEMM time and rate" has_keys "$line" gemm_s gemm_step_flops \
  gemm_gflops gemm_sgemm_fraction gemm_floor_s modeled_s
# compare.py (bench/peers): the peers' times over Loom's and over the GEMM
# floor (a peer line at twice the floor reads 2.00)
if command -v python3 >/dev/null 2>&1; then
  printf '%s\n' "$out" >"$tmp/loom.jsonl"
  floor=$(sed -n 's/.*"gemm_floor_s": \([0-9.e+-]*\).*/\1/p' <<<"$line")
  printf '{"workload": "bert_layer", "mode": "peer", "median_s": %s}\n' \
    "$(awk -v f="$floor" 'BEGIN { printf "%.9g", 2 * f }')" >"$tmp/peer.jsonl"
  cmp=$(python3 "$DATA/../../bench/peers/compare.py" "$tmp/loom.jsonl" "$tmp/peer.jsonl")
  check "compare.py: the peer over the GEMM floor" \
    grep -Eq '^bert_layer .* 2\.00$' <<<"$(sed -n '/time \/ GEMM floor/,$p' <<<"$cmp")"
fi
run bench --size small --runs 1 --modes loop,stitch --quiet bert_layer
check "table: GEMM steps' rate per mode" test "${out#*stitch     GEMM steps}" != "$out"
check "table: loop and stitch modeled and measured" test "${out#*model      loop}" != "$out"

check "json: rng runs only when named" test "${out#*\"workload\": \"rng\"}" == "$out"

# ---- rng: the Philox paths (issue 4, point 1) -------------------------------
# Every path has a line per rounds (10 and 7 by default): either the rate on
# 1 thread and, with more than one thread, on all of them, or "skipped"
# (a path this CPU lacks). ref and portable run everywhere.
run bench --json --seconds 0.02 --quiet rng
check "rng --json exits 0" test "$rc" -eq 0
check "rng alone: no machine line" test "${out#*\"machine\"}" == "$out"
check "rng --quiet prints nothing on stderr" test -z "$err"
for path in ref portable avx2 avx512; do
  for rounds in 10 7; do
    sel=$(printf '%s\n' "$out" | grep -F "\"path\": \"$path\", \"rounds\": $rounds,")
    check "rng: lines for $path at $rounds rounds" test -n "$sel"
    if [[ $sel == *'"skipped": '* ]]; then
      check "rng: $path skipped is one line" test "$(printf '%s\n' "$sel" | wc -l)" -eq 1
      check "rng: $path may be skipped" test "$path" != ref -a "$path" != portable
      continue
    fi
    while IFS= read -r line; do
      check "rng: $path $rounds has the schema's keys" has_keys "$line" workload path rounds \
        bytes_per_s threads per_core_bytes_per_s vs_ref
      check "rng: $path $rounds names the workload" test "${line#*\"workload\": \"rng\"}" != "$line"
    done <<<"$sel"
    check "rng: $path $rounds on 1 thread" test "${sel#*\"threads\": 1,}" != "$sel"
  done
done
run bench --json --seconds 0.02 --quiet --rounds 7 --threads 1 rng
check "rng --rounds 7 --threads 1 exits 0" test "$rc" -eq 0
check "rng --rounds 7: no 10-round line" test "${out#*\"rounds\": 10}" == "$out"
check "rng --threads 1: no 2-thread line" test "${out#*\"threads\": 2}" == "$out"
line=$(printf '%s\n' "$out" | grep -F '"path": "ref"')
check "rng --rounds 7 --threads 1: one ref line" test "$(printf '%s\n' "$line" | wc -l)" -eq 1
check "rng: ref is its own reference" has_keys "$line" vs_ref
run bench --seconds 0.02 --rounds 10 --quiet rng
check "rng table exits 0" test "$rc" -eq 0
for path in ref portable avx2 avx512; do
  check "rng table: a row for $path" test "${out#*  $path }" != "$out"
done
check "rng table: ratios to the reference" test "${out#*vs ref}" != "$out"
run bench --size small --json --runs 1 --modes stitch --seconds 0.02 --rounds 10 --quiet \
  softmax_fwd rng
check "rng with a workload exits 0" test "$rc" -eq 0
mapfile -t lines <<<"$out"
check "rng with a workload: machine line first" has_keys "${lines[0]}" machine triad_gbps
check "rng with a workload: the workload ran" test "${out#*\"workload\": \"softmax_fwd\"}" != "$out"
check "rng with a workload: rng ran" test "${out#*\"workload\": \"rng\"}" != "$out"

# ---- attention: RNG placements against their model (issue 4, point 5) ------
# --size small: seq 128 and 256 at head dim 64; per point a line for each
# placement and for the block without dropout ("none").
trace=$tmp/attention.trace.json
run bench attention --size small --runs 1 --json --quiet --trace "$trace"
check "attention --json exits 0" test "$rc" -eq 0
check "attention --quiet prints nothing on stderr" test -z "$err"
mapfile -t lines <<<"$out"
check "attention: 13 lines (machine + 2 points x 4 + the GPU model's 4)" test "${#lines[@]}" -eq 13
gpu=$(printf '%s\n' "$out" | grep -F '"workload": "attention_gpu_model"')
check "attention: the GPU model's lines, H100 and H200" \
  test "$(printf '%s\n' "$gpu" | grep -c 'H100')" -eq 2 -a "$(printf '%s\n' "$gpu" | grep -c 'H200')" -eq 2
check "attention: the GPU model's lines have the keys" has_keys "$(printf '%s\n' "$gpu" | head -1)" \
  machine none_s fused_s sequential_s overlap_s picked overlap_vs_fused
check "attention: machine line first" has_keys "${lines[0]}" machine triad_gbps sgemm_gflops
names_placement() { # LINE KEY: the value of KEY is a placement's name
  [[ $1 =~ \"$2\":\ \"(fused|sequential|overlap)\" ]] ||
    { echo "  $2 is not a placement in: $1" >&2; return 1; }
}
for seq in 128 256; do
  for pl in none fused sequential overlap; do
    sel=$(printf '%s\n' "$out" | grep -F "\"seq\": $seq, \"head_dim\": 64, \"placement\": \"$pl\"")
    check "attention: one line for seq $seq $pl" test "$(printf '%s\n' "$sel" | grep -c .)" -eq 1
    check "attention: seq $seq $pl has the keys" has_keys "$sel" workload seq head_dim \
      placement predicted_s measured_s picked best
    check "attention: seq $seq $pl names its workload" \
      test "${sel#*\"workload\": \"attention\"}" != "$sel"
    check "attention: seq $seq $pl: picked is a placement" names_placement "$sel" picked
    check "attention: seq $seq $pl: best is a placement" names_placement "$sel" best
    if [[ $pl != none ]]; then
      check "attention: seq $seq $pl gives the same results as fused" \
        test "${sel#*\"same_results\": true}" != "$sel"
    fi
  done
done
check "--trace writes the file" test -s "$trace"
if command -v python3 >/dev/null 2>&1; then
  check "--trace: the file parses as JSON with traceEvents" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d["traceEvents"], list) and d["traceEvents"], "no events"' "$trace"
else
  check "--trace: the file has traceEvents" grep -q '"traceEvents"' "$trace"
fi
check "--trace: GEMM steps carry their problem (m, n, k, batch)" \
  grep -q '"cat":"gemm","ph":"X",[^}]*"args":{"m":[1-9][0-9]*,"n":[1-9][0-9]*,"k":[1-9][0-9]*,"batch":[1-9][0-9]*}' "$trace"
cp "$trace" "$tmp/trace.before"
run bench attention --size small --runs 1 --json --quiet --trace "$trace"
check "--trace refuses an existing file (exit 1)" test "$rc" -eq 1
check "--trace refusal names --force" test "${err#*--force}" != "$err"
check "--trace refusal runs nothing" test -z "$out"
same_bytes "--trace refusal leaves the file" "$trace" "$tmp/trace.before"
run bench --seconds 0.02 --rounds 10 --quiet --trace "$trace" --force rng
check "--trace --force overwrites (exit 0)" test "$rc" -eq 0
check "--trace --force: a new file" test "$(od -An -v -tx1 "$trace")" != \
  "$(od -An -v -tx1 "$tmp/trace.before")"
check "--trace --force: still a trace" grep -q '"traceEvents"' "$trace"

# ---- table ---------------------------------------------------------------
run bench --size small --modes eager,stitch --runs 1 --quiet bias_gelu
check "table exits 0" test "$rc" -eq 0
check "table: machine line" test "${out#*triad}" != "$out"
check "table: the workload" test "${out#*bias_gelu}" != "$out"
check "table: the stitch row" test "${out#*stitch}" != "$out"
check "table: --quiet prints nothing on stderr" test -z "$err"

# ---- arguments -------------------------------------------------------------
run bench --size small no_such_workload
check "unknown workload exits 2" test "$rc" -eq 2
check "unknown workload is named" test "${err#*no_such_workload}" != "$err"
check "unknown workload prints usage" test "${err#*usage: loom bench}" != "$err"
run bench --size small --no-such-flag
check "unknown flag exits 2" test "$rc" -eq 2
run bench --size tiny
check "bad --size exits 2" test "$rc" -eq 2
run bench --runs 0
check "--runs 0 exits 2" test "$rc" -eq 2
run bench --modes stitch,warp
check "bad --modes exits 2" test "$rc" -eq 2
run bench --fusion warp
check "bad --fusion exits 2" test "$rc" -eq 2
run bench --runs
check "--runs without a value exits 2" test "$rc" -eq 2
run bench --rounds 17 rng
check "--rounds 17 exits 2" test "$rc" -eq 2
run bench --seconds 0 rng
check "--seconds 0 exits 2" test "$rc" -eq 2
run bench --seconds abc rng
check "bad --seconds exits 2" test "$rc" -eq 2
run bench --list
check "--list exits 0" test "$rc" -eq 0
for w in layernorm_fwd layernorm_bwd softmax_fwd softmax_bwd bias_gelu \
  bias_dropout_residual_ln cross_entropy adamw rmsnorm_fwd rmsnorm_bwd swiglu rotary \
  groupnorm_silu ls_cross_entropy bce_logits instnorm_lrelu instnorm_lrelu_bwd t5_norm_residual \
  alibi_softmax alibi_softmax_bwd geglu_bwd layerscale_droppath rotary_bwd focal_loss softcap_zloss \
  moe_top2_lb sqrelu_mlp lora_mlp convnext_tail resnet_block llama_block gqa_attention mixer_block \
  bert_layer gpt2_block train_step \
  rng attention; do
  check "--list names $w" test "${out#*$w}" != "$out"
done
# the main job's step, built as the trainer builds it: 1024 tokens at full
# size, 256 at small (eager: no compile, to keep this quick)
run bench train_step --size small --modes eager --runs 1 --quiet --json
check "train_step runs" test "$rc" -eq 0
check "train_step is the trainer's step at batch 8 (256 tokens)" \
  test "${out#*\"shape\": \"b8 t32 d128 L2: 256 tokens\"}" != "$out"
run bench --help
check "--help exits 0" test "$rc" -eq 0
check "--help prints usage" test "${out#*usage: loom bench}" != "$out"
check "--help documents attention and --trace" \
  test "${out#*attention}" != "$out" -a "${out#*--trace FILE}" != "$out"
run bench --trace
check "--trace without a file exits 2" test "$rc" -eq 2

run bench softmax_fwd --size small --modes loop,stitch --runs 2 --back-to-back --json --quiet
check "--back-to-back runs every mode" test "$rc" -eq 0 -a "$(grep -c '"workload": "softmax_fwd"' <<<"$out")" -eq 2

# ---- held-out graphs in the text IR (bench/wl_heldout.c) -------------------------
# each against the reference executor in loop and stitch mode; the
# memory-bound ones are one stitched kernel, but the top-2 gate, whose
# load-balancing counts need every row's choice first: whether its softmax
# is stored between two kernels or its exp recomputed in one is the cost
# model's call on the measured machine, so either plan passes
for w in rotary_bwd focal_loss softcap_zloss moe_top2_lb sqrelu_mlp lora_mlp convnext_tail llama_block \
  resnet_block gqa_attention mixer_block; do
  run bench $w --size small --modes reference,loop,stitch --runs 1 --with-reference --json --quiet
  check "$w runs" test "$rc" -eq 0
  n=$(grep -c '"checked_against": "reference"' <<<"$out")
  check "$w: loop and stitch checked against the reference" test "$n" -eq 2
  errs=$(sed -n 's/.*"max_err": \([0-9.e+-]*\).*/\1/p' <<<"$out")
  check "$w: within 1e-5 of the reference ($(echo $errs))" \
    awk -v e="$errs" 'BEGIN { n = split(e, a, " "); if (n != 2) exit 1; for (i = 1; i <= n; i++) if (!(a[i] + 0 <= 1e-5)) exit 1 }'
  case $w in
  sqrelu_mlp | lora_mlp | convnext_tail | llama_block | resnet_block | gqa_attention | mixer_block) ;;
  moe_top2_lb) check "$w: one or two stitched kernels" grep -Eq '"mode": "stitch".*"kernels": [12],' <<<"$out" ;;
  *) check "$w: one stitched kernel" grep -q '"mode": "stitch".*"kernels": 1,' <<<"$out" ;;
  esac
done

# ---- the user's own graph file as a workload ------------------------------------
CLI=$DATA/cli
run bench "$CLI/mlp.loom" --runs 1 --json --quiet --modes eager,stitch
check "bench FILE exits 0" test "$rc" -eq 0
check "bench FILE: a line per mode" test "$(grep -c "\"workload\": \"$CLI/mlp.loom\"" <<<"$out")" -eq 2
fwd_ops=$(grep '"mode": "stitch"' <<<"$out" | sed -n 's/.*"ops": \([0-9]*\).*/\1/p')
check "bench FILE: stitch agrees with eager" grep -q '"mode": "stitch".*"max_err": [0-9.e+-]*, "checked_against": "eager"' <<<"$out"
run bench "$CLI/mlp.loom" --grad --runs 1 --json --quiet --modes eager,stitch
check "bench FILE --grad exits 0" test "$rc" -eq 0
check "bench FILE --grad: forward + backward" grep -q '"shape": "f32\[2, 4\] fwd+bwd"' <<<"$out"
grad_ops=$(grep '"mode": "stitch"' <<<"$out" | sed -n 's/.*"ops": \([0-9]*\).*/\1/p')
check "bench FILE --grad: more ops than the forward ($grad_ops > $fwd_ops)" test "${grad_ops:-0}" -gt "${fwd_ops:-0}"
max_err=$(grep '"mode": "stitch"' <<<"$out" | sed -n 's/.*"max_err": \([0-9.e+-]*\).*/\1/p')
check "bench FILE --grad: stitch's gradients equal eager's ($max_err)" awk -v e="${max_err:-1}" 'BEGIN { exit !(e < 1e-5) }'
run bench "$CLI/mlp.loom" --input "x=$CLI/x.npy" --input "w1=$CLI/w1.npy" --runs 1 --quiet --fusion stitch
check "bench FILE --input exits 0" test "$rc" -eq 0
run bench "$CLI/mlp.loom" --input "x=$CLI/x_f64.npy" --runs 1 --quiet
check "bench FILE --input of the wrong dtype exits 1" test "$rc" -eq 1
check "... saying what the input holds" matches "$err" "*does not hold f32[2, 4]*"
run bench "$CLI/mlp.loom" --input "nope=$CLI/x.npy" --runs 1 --quiet
check "bench FILE --input of an unknown name exits 1" test "$rc" -eq 1
check "... naming it" matches "$err" "*has no input 'nope'*"
run bench "$CLI/bad.loom" --runs 1 --quiet
check "bench of a malformed file exits 1" test "$rc" -eq 1
check "... naming LINE:COL" matches "$err" "*bad.loom:3:25*"
run bench "$DATA/adamw_step.loom" --grad --runs 1 --quiet
check "bench --grad without a scalar loss exits 1" test "$rc" -eq 1
check "... saying so" matches "$err" "*no scalar f32 output*"
run bench softmax_fwd --grad
check "--grad without a FILE exits 2" test "$rc" -eq 2
run bench no/such/file.loom
check "an unknown workload or missing file exits 2" test "$rc" -eq 2

# ---- --save-graph: a built-in workload as text IR, for loom compile --------
mkdir -p "$tmp/graphs"
run bench gpt2_block softmax_fwd --size small --save-graph "$tmp/graphs" --quiet
check "bench --save-graph exits 0" test "$rc" -eq 0
check "... runs nothing" test -z "$out"
check "... writes one file per workload" test -s "$tmp/graphs/gpt2_block.loom" -a -s "$tmp/graphs/softmax_fwd.loom"
run compile "$tmp/graphs/gpt2_block.loom" --dump-after fuse
check "the saved GPT-2 block compiles" test "$rc" -eq 0
# at full size the QKV product's bias add runs in its GEMM: the constant
# counter of flash attention is no second part of that kernel
# (plan_merge.c). The launch cost is pinned: a busy machine measures it
# high, and at small sizes a launch may rightly outweigh the epilogue.
run bench gpt2_block --save-graph "$tmp/graphs" --force --quiet
export LOOM_KERNEL_LAUNCH_US=0.5
run compile "$tmp/graphs/gpt2_block.loom" --dump-after fuse
unset LOOM_KERNEL_LAUNCH_US
qkv=$(grep -A1 '^step [0-9]*: gemm %[a-z0-9]* = matmul(%[a-z0-9]*, %attn.qkv.w)' <<<"$out" | sed -n 2p)
check "the QKV product's bias add is its epilogue" matches "$qkv" "  epilogue on blocks of *"
before=$(cksum <"$tmp/graphs/softmax_fwd.loom")
run bench softmax_fwd --size small --save-graph "$tmp/graphs" --quiet
check "--save-graph over an existing file exits 1" test "$rc" -eq 1
check "... and leaves it as it was" test "$(cksum <"$tmp/graphs/softmax_fwd.loom")" == "$before"
run bench softmax_fwd --save-graph "$tmp/graphs" --force --quiet
check "--save-graph --force replaces it" test "$rc" -eq 0
run bench softmax_fwd --save-graph "$tmp/no/such/folder" --quiet
check "--save-graph into a missing folder exits 1" test "$rc" -eq 1
run bench rng --save-graph "$tmp/graphs" --quiet
check "--save-graph of a workload that is no graph exits 1" test "$rc" -eq 1
run bench "$CLI/mlp.loom" --grad --save-graph "$tmp/graphs" --quiet
check "--save-graph of a FILE --grad writes its forward + backward" test "$rc" -eq 0 -a -s "$tmp/graphs/mlp.grad.loom"
run compile "$tmp/graphs/mlp.grad.loom"
check "... which compiles" test "$rc" -eq 0
run bench "$CLI/mlp.loom" --save-graph "$tmp/graphs"
check "--save-graph of a graph FILE alone writes nothing and says so" matches "$err" "*is a graph file already (nothing written)*"
check "... exits 0" test "$rc" -eq 0 -a ! -e "$tmp/graphs/mlp.loom"
run bench softmax_fwd --save-graph "$tmp/graphs" --trace "$tmp/t.json"
check "--save-graph with --trace exits 2" test "$rc" -eq 2

finish cli_bench
