#!/usr/bin/env bash
# `loom plan` end to end (docs/CLI.md): a plan file over a one-matmul
# text-IR graph, lowered and shown per device, with summary numbers worked
# out by hand; --show, --dot (one cluster per device, never overwritten
# without --force); plan-file errors at PATH:LINE:COL and plans the
# lowering rejects (exit 1); wrong arguments (exit 2); the gpt model.
#
# usage: bash tests/cli_plan.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_plan.sh LOOM DATA_DIR}
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"

# y = x @ w: x [4, 8], w [8, 6], so y [4, 6]
cat >"$tmp/mm.loom" <<'G'
input %x : f32[4, 8]
param %w : f32[8, 6]
%y = matmul(%x, %w)
output y = %y
G
# data parallel: each device multiplies 2 rows of x by all of w
cat >"$tmp/dp.plan" <<'P'
plan devices 2          # rows of x on two devices
trans matmul.0 split out0 0 2
assign matmul.0 0 1
input %x D(0,2) on 0 1
input %w R(2) on 0 1
output y D(0,2) on 0 1
P
# the k dimension split: partial sums of y, joined by one all-reduce
cat >"$tmp/k.plan" <<'P'
plan devices 2
trans matmul.* split in0 1 2
assign matmul.0 0 1
input %x D(1,2) on 0 1
input %w D(0,2) on 0 1
output y R(2) on 0 1
P

# field F of the summary row for device D (columns: device flops all_reduce
# all_gather reduce_scatter all_to_all broadcast transfer peak_bytes
# input_bytes nodes comms)
field() { awk -v d="$1" -v f="$2" '$1 == d && NF == 12 { print $f }' <<<"$out"; }
row_is() {  # row_is DEVICE FIELD VALUE
  local got
  got=$(field "$1" "$2")
  [[ $got == "$3" ]] || { echo "  device $1 field $2: got '$got', wanted '$3'" >&2; return 1; }
}

# ---- help ------------------------------------------------------------------------
run help plan
expect "help plan" 0 "*usage: loom plan MODEL --plan P --devices N*--dot FILE*"
run plan --help
expect "plan --help" 0 "*usage: loom plan*--memory-limit*"
run --help
expect "--help lists plan" 0 "*plan MODEL*"

# ---- a data-parallel plan ----------------------------------------------------------
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2
expect "dp: both programs and the summary" 0 "*== device 0 ==*matmul(*== device 1 ==*matmul(*device*flops*all_reduce*transfer*peak_bytes*input_bytes*total*"
# per device: 2 x 6 outputs x 8 products x 2 = 192 FLOPs; x's rows
# (2 x 8 x 4 B = 64) and all of w (8 x 6 x 4 B = 192) held: 256 bytes
check "dp: device 0 flops 192" row_is 0 2 192
check "dp: device 1 flops 192" row_is 1 2 192
check "dp: device 0 input bytes 256" row_is 0 10 256
check "dp: device 1 input bytes 256" row_is 1 10 256
check "dp: no comms" row_is 0 12 0
# the global graph's inputs are whole: each device slices its pieces of x
# and w out of them, then multiplies (3 nodes); its peak is those pieces
# and its rows of y: 64 + 192 + 2 x 6 x 4 = 304 bytes
check "dp: three nodes on device 1" row_is 1 11 3
check "dp: device 0 peak 304" row_is 0 9 304
check "dp: total flops 384" row_is total 2 384
check "dp: total input bytes 512" row_is total 10 512
[[ $out == *"f32[2, 8]"* && $out == *"f32[2, 6]"* ]] && ok || bad "dp: programs over the pieces' shapes"
# the costs: defaults until an MPI run has measured this machine, then the
# model the machine profile keeps (perf/profile.h)
expect "dp: the default comm model" 0 "*comm model: 5 us per message + bytes / 5 GB/s (defaults: no MPI run measured yet)*"
policy=${OMP_WAIT_POLICY:+-$(tr 'A-Z' 'a-z' <<<"$OMP_WAIT_POLICY" | tr -cd 'a-z')}
mkdir -p "$XDG_CACHE_HOME/loom"
profile=$XDG_CACHE_HOME/loom/machine-$(getconf _NPROCESSORS_ONLN)$policy.txt
# a file opens with its format version; one without reads as stale
version=$(sed -n 's/^#define LOOM_PROFILE_VERSION //p' "$2/../../src/perf/profile.h")
[ -s "$profile" ] || echo "profile_version $version" >"$profile"
printf 'comm_mpi_latency_s 2e-05\ncomm_mpi_bytes_per_s 1e+09\n' >>"$profile"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2
expect "dp: the kept comm model" 0 "*comm model: 20 us per message + bytes / 1 GB/s (MPI, as the machine profile keeps it)*"

run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2 --show 1
expect "--show 1" 0 "*== device 1 ==*total*"
[[ $out != *"== device 0 =="* ]] && ok || bad "--show 1 leaves out device 0"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2 --show none
expect "--show none" 0 "device*total*"
[[ $out != *"== device"* ]] && ok || bad "--show none prints no program"

# ---- a reduction split: one all-reduce of y ([4, 6] f32, 96 bytes) --------------------
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2
expect "k split" 0 "*== device 0 ==*all_reduce(*== device 1 ==*all_reduce(*total*"
# each device: 4 x 6 outputs x 4 products x 2 = 192 FLOPs; a ring
# all-reduce of 96 bytes over 2 members sends 2 x (1/2) x 96 = 96 each
check "k: device 0 flops 192" row_is 0 2 192
check "k: all_reduce bytes of device 0" row_is 0 3 96
check "k: all_reduce bytes of device 1" row_is 1 3 96
check "k: one comm each" row_is 1 12 1
check "k: one comm in all" row_is total 12 1
check "k: input bytes 4x4x4 + 4x6x4 = 160" row_is 0 10 160
# x's and w's pieces, the partial y and the all-reduced y: 64 + 96 + 96 + 96
check "k: peak 352" row_is 1 9 352
check "k: total all_reduce bytes 192" row_is total 3 192

# ---- --dot -------------------------------------------------------------------------
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --show none --dot "$tmp/k.dot"
expect "--dot" 0 "*wrote $tmp/k.dot*"
grep -q "subgraph cluster_0" "$tmp/k.dot" && grep -q "subgraph cluster_1" "$tmp/k.dot" &&
  grep -q "all_reduce" "$tmp/k.dot" && grep -q "^digraph" "$tmp/k.dot" && ok || bad "--dot: clusters and the comm op"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --dot "$tmp/k.dot"
expect "--dot does not overwrite" 1 "" "*already exists*--force*"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --show none --dot "$tmp/k.dot" --force
expect "--dot --force overwrites" 0 "*wrote*"

# ---- --save-plan: the plan as a file, read back to the same programs -----------------------
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --save-plan "$tmp/saved.plan"
expect "--save-plan" 0 "wrote $tmp/saved.plan*== device 0 ==*"
first=${out#*$'\n'}
grep -qx "trans matmul.0 split in0 1 2" "$tmp/saved.plan" && grep -qx "assign matmul.0 0 1" "$tmp/saved.plan" &&
  grep -qx "output y R(2) on 0 1" "$tmp/saved.plan" && grep -qx "input %w D(0,2) on 0 1" "$tmp/saved.plan" &&
  ok || bad "--save-plan: the cut, the assignment and the placements"
run plan "$tmp/mm.loom" --plan "$tmp/saved.plan" --devices 2
[[ $rc == 0 && $out == "$first" ]] && ok || bad "the saved plan lowers to the same programs and summary"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --save-plan "$tmp/saved.plan"
expect "--save-plan does not overwrite" 1 "" "*already exists*--force*"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --save-plan "$tmp/s2" --dot "$tmp/s2"
expect "--save-plan and --dot on one file" 1 "" "*name the same file*"

# ---- plans that fail: exit 1 ---------------------------------------------------------
printf 'plan devices 2\ntrans matmul.0 split out0 0 2\ntrans add.0 replicate 2\n' >"$tmp/bad.plan"
run plan "$tmp/mm.loom" --plan "$tmp/bad.plan" --devices 2
expect "plan file error at PATH:LINE:COL" 1 "" "loom plan: $tmp/bad.plan:3:7: node 0 is a matmul, not a add"
printf 'plan devices 2\ntrans matmul.0 split out0 0 2\nassign matmul.0#0 0\n' >"$tmp/unplaced.plan"
run plan "$tmp/mm.loom" --plan "$tmp/unplaced.plan" --devices 2
expect "an unplaced sub-op" 1 "" "loom plan: *matmul.0#1*"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 4
expect "devices do not match the file" 1 "" "*the plan is for 2 devices, not 4*"
run plan "$tmp/mm.loom" --plan "$tmp/no_such_plan" --devices 2
expect "neither a file nor a built-in" 1 "" "*no_such_plan*"
run plan "$tmp/missing.loom" --plan "$tmp/dp.plan" --devices 2
expect "a missing model" 1 "" "*missing.loom*"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2 --memory-limit 100
expect "over the memory limit" 1 "" "*memory limit*"

# ---- wrong arguments: exit 2 -----------------------------------------------------------
run plan
expect "no model" 2 "" "*plan needs a MODEL*usage: loom plan*"
run plan "$tmp/mm.loom" --devices 2
expect "no --plan" 2 "" "*plan needs --plan P*"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan"
expect "no --devices" 2 "" "*plan needs --devices N*"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 0
expect "--devices 0" 2 "" "*--devices wants a number in [1, 4096]*"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2 --show 2
expect "--show out of range" 2 "" "*--show wants a device in [0, 1], all or none*"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2 --layers 2
expect "a gpt flag with a file" 2 "" "*--layers applies to the gpt model only*"
run plan "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2 --frob
expect "unknown flag" 2 "" "*unknown flag '--frob'*"
run plan "$tmp/mm.loom" --plan
expect "--plan without a value" 2 "" "*--plan needs a value*"
run plan "$tmp/mm.loom" "$tmp/mm.loom" --plan "$tmp/dp.plan" --devices 2
expect "two models" 2 "" "*unexpected argument*"
run plan gpt --plan "$tmp/dp.plan" --devices 2 --rng auto
expect "gpt: --rng auto is refused" 2 "" "*--rng wants fused, overlap or sequential, got 'auto'*"
run plan gpt --plan "$tmp/dp.plan" --devices 2 --heads 3
expect "gpt: heads must divide d-model" 2 "" "*--heads 3 does not divide --d-model 128*"

# ---- the gpt training step ----------------------------------------------------------------
gpt=(--layers 1 --d-model 16 --heads 2 --context 8 --batch 4)
printf 'plan devices 1\nassign * 0\n' >"$tmp/one.plan"
run plan gpt --plan "$tmp/one.plan" --devices 1 "${gpt[@]}" --show none
expect "gpt on one device" 0 "device*0 *total*"
# a data-parallel plan file for the gpt, saved and read back: the same file
# (whether or not the lowering takes it, the plan is saved first)
cat >"$tmp/gpt_dp.plan" <<'P'
plan devices 2
trans * split %tokens 0 2 else replicate
assign * 0 1
input %tokens D(0,2) on 0 1
input %targets D(0,2) on 0 1
P
run plan gpt --plan "$tmp/gpt_dp.plan" --devices 2 "${gpt[@]}" --show none --save-plan "$tmp/gpt1.plan"
run plan gpt --plan "$tmp/gpt1.plan" --devices 2 "${gpt[@]}" --show none --save-plan "$tmp/gpt2.plan"
[[ -s $tmp/gpt1.plan ]] && grep -qx "trans gather.0 split out0 0 2" "$tmp/gpt1.plan" && ok ||
  bad "gpt: the data-parallel plan is saved with its cuts"
same_bytes "gpt: a saved plan saves back the same" "$tmp/gpt2.plan" "$tmp/gpt1.plan"
run plan gpt --plan dp2 --devices 2 "${gpt[@]}" --show none
if [[ $rc == 1 && $err == *"built-in plans are not in this build"* ]]; then
  echo "note: skipped 'loom plan gpt --plan dp2': the built-in plans are not in this build yet"
else
  expect "gpt dp2" 0 "device*0 *1 *total*"
  check "gpt dp2: all-reduces the gradients" [ "$(field 0 3)" -gt 0 ]
  # a built-in plan saved as a file lowers to the same programs
  run plan gpt --plan dp2 --devices 2 "${gpt[@]}" --save-plan "$tmp/dp2.plan"
  first=${out#*$'\n'}
  run plan gpt --plan "$tmp/dp2.plan" --devices 2 "${gpt[@]}"
  [[ $rc == 0 && -n $first && $out == "$first" ]] && ok || bad "gpt: dp2 saved as a plan file lowers the same"
fi

# ---- the simulator (docs/SIMULATOR.md) ------------------------------------------------
CLUSTERS=$2/../../clusters
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --show none \
  --cluster "$CLUSTERS/dgx-a100-80gb-hdr.txt" --precision bf16 --trace "$tmp/sim.json"
expect "k: simulated" 0 "*simulated on dgx-a100-80gb-hdr (bf16 GEMMs, communication blocking): step *device*compute_ms*comm_ms*idle_ms*peak_GB*wrote $tmp/sim.json*"
[[ $(<"$tmp/sim.json") == *'"name":"all_reduce","cat":"comm"'* && $(<"$tmp/sim.json") == *'"device 1 comm"'* ]] &&
  ok || bad "the trace holds each device's comm lane"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --cluster "$CLUSTERS/dgx-a100-80gb-hdr.txt" \
  --trace "$tmp/sim.json"
expect "--trace is never replaced without --force" 1 "" "*sim.json*"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --trace "$tmp/other.json"
expect "--trace needs --cluster" 2 "" "*--trace, --overlap, --oversubscribe and --precision go with --cluster*"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --cluster "$CLUSTERS/dgx-a100-80gb-hdr.txt" \
  --precision fp8
expect "a precision the cluster lacks" 1 "*" "*gives no fp8 rate*"
run plan "$tmp/mm.loom" --plan "$tmp/k.plan" --devices 2 --cluster "$tmp/none.txt"
expect "a missing cluster file" 1 "" "*none.txt*"

# ---- the automatic planner (docs/PLANNER.md) ------------------------------------------
A100=$CLUSTERS/dgx-a100-80gb-hdr.txt
run plan gpt --search --devices 4 --cluster "$A100" --precision bf16 --top 3 --out "$tmp/won.plan"
expect "search: a winner, the alternatives and the counts" 0 \
  "*winner: *predicted step * ms*rank*spec*step_ms*sim_ms*mem_GB*lost_by*1 *winner*2 *3 *searched * meshes*plans:*estimated*re-ranked by the exact simulator*wrote $tmp/won.plan*"
spec=$(sed -n 's/^builtin "\(.*\)"$/\1/p' "$tmp/won.plan")
[[ $(grep -c . "$tmp/won.plan") -ge 2 ]] && grep -qx "plan devices 4" "$tmp/won.plan" &&
  [[ -n $spec && $out == *"winner: $spec "* ]] && ok || bad "search: --out holds the winner's spec"
# the winner's spec has one row, ranked first
[[ $(awk '$1 == "1" { print $2 }' <<<"$out") == "$spec" ]] && ok || bad "search: rank 1 is the winner"
run plan gpt --plan "$tmp/won.plan" --devices 4 --show none
expect "search: the plan file lowers" 0 "*device*total*"
run plan gpt --search --devices 4 --cluster "$A100" --out "$tmp/won.plan"
expect "search: --out is never replaced without --force" 1 "" "*won.plan*--force*"
run plan gpt --search --devices 4 --cluster "$A100" --out "$tmp/won.plan" --force
expect "search: --force replaces --out" 0 "*wrote $tmp/won.plan*"
run plan gpt --search --devices 4
expect "search without --cluster" 2 "" "*--search needs --cluster FILE*"
run plan gpt --search --devices 4 --cluster "$A100" --plan dp4
expect "search with --plan" 2 "" "*--search finds the plan*"
run plan gpt --plan dp2 --devices 2 --top 3
expect "--top without --search" 2 "" "*--out and --top go with --search*"
# 7 devices: tp 7 divides no 4 heads, pp 7 no 2 layers, dp 7 no batch of 16
run plan gpt --search --devices 7 --cluster "$A100"
expect "search: no factorization" 1 "" "*no dp x tp x pp = 7 devices fits the model*"
run plan gpt --search --devices 4 --cluster "$A100" --memory-limit 1000
expect "search: nothing fits in 1 kB" 1 "" "*no plan fits in 1e-06 GB per device; the smallest need found is *GB (dp*"
# devices past a plan file's 4096: searched, not written
run plan gpt --search --devices 8192 --batch 8192 --cluster "$A100" --out "$tmp/big.plan"
expect "search: --out past 4096 devices" 1 "" "*a plan file holds at most 4096 devices*"
[[ ! -e $tmp/big.plan ]] && ok || bad "search: no file past 4096 devices"
# GPT-3 175B on 1024 A100s: estimates only, pruned; the winner shards the model
run plan gpt --search --devices 1024 --cluster "$A100" --precision bf16 --layers 96 --d-model 12288 \
  --heads 96 --context 2048 --vocab 51200 --batch 1536 --dropout 0
expect "search: gpt-3 175b on 1024 devices" 0 "*winner: *tp* GB per device*cut by the step bound*"
check "search: gpt-3 175b: the bounds cut plans" [ "$(sed -n 's/.*estimated, \([0-9]*\) cut by the step bound.*/\1/p' <<<"$out")" -gt 0 ]
# the tie (docs/PLANNER.md): the main job's GPT on 4 ranks of this machine,
# where ZeRO's sharded optimizer is simulated 1% faster than dp4 but meets
# twice as often; dp4 wins and they lose by their sync points
run plan gpt --search --devices 4 --cluster "$CLUSTERS/this-machine.txt" --oversubscribe
expect "search: within the tie, the fewest comm ops win" 0 "*winner: dp4 (*zero3*sync points +*"

# ---- models at full size, without weights ------------------------------------------
# Planning needs shapes only: GPT-3 175B (96 layers, width 12288) on 8
# tensor-parallel devices plans in well under 3 GB of address space. Each
# device holds 1/8 of the matrices and their two AdamW moments (4 bytes
# each): over 200 GB, which exists only as numbers in the summary. (A
# sanitizer build reserves terabytes of shadow memory and cannot start
# under the limit: there the plans run unbounded.)
limit="ulimit -v 3000000"
(eval "$limit"; "$LOOM" --version) >/dev/null 2>&1 || limit=true
# LOOM_TEST_QUICK (the sanitizer build): the full-size programs (80-96
# layers, lowered per device) take over ten minutes under ASan; the
# Release suite runs them
if [ -n "${LOOM_TEST_QUICK:-}" ]; then
  echo "cli_plan: full-size plans skipped (LOOM_TEST_QUICK)"
else
out=$( (eval "$limit"; "$LOOM" plan gpt --plan tp8 --devices 8 --layers 96 --d-model 12288 \
  --heads 96 --context 2048 --vocab 51200 --batch 1 --dropout 0 --show none) 2>"$tmp/stderr")
rc=$?
err=$(<"$tmp/stderr")
check "gpt-3 175b: planned without its weights" test "$rc" = 0
in0=$(field 0 10)
check "gpt-3 175b: a device holds over 200 GB of state" test "${in0:-0}" -gt 200000000000
# a Llama-2-70B-like width and MLP over dp x tp x pp
out=$( (eval "$limit"; "$LOOM" plan gpt --plan dp2tp4pp2 --devices 16 --layers 80 \
  --d-model 8192 --heads 64 --d-ff 28672 --context 4096 --vocab 32000 --batch 8 --dropout 0 \
  --show none) 2>"$tmp/stderr")
rc=$?
err=$(<"$tmp/stderr")
check "llama-2-70b-like: planned without its weights" test "$rc" = 0
fi
run plan gpt --plan tp2 --devices 2 --layers 2000
expect "--layers past the limit" 2 "" "*--layers wants an integer in [1, 1024]*"

# ---- named full-size configurations (Llama: RMSNorm, SwiGLU, RoPE, GQA) ---------------
H100=$CLUSTERS/dgx-h100-ndr.txt
if [ -z "${LOOM_TEST_QUICK:-}" ]; then
out=$( (eval "$limit"; "$LOOM" plan llama2-70b --plan dp2tp4pp2 --devices 16 --batch 8 \
  --show none) 2>"$tmp/stderr")
rc=$?
err=$(<"$tmp/stderr")
check "llama2-70b: planned without its weights" test "$rc" = 0
fi
run plan llama3-405b --search --devices 16384 --cluster "$H100" --precision bf16 --top 2
expect "search: llama3-405b on 16384 h100s" 0 \
  "search: llama3-405b (llama: 126 layers, d_model 16384, 128 heads, 8 kv heads, d_ff 53248, vocab 128256, context 8192; 405.9 B parameters), batch 2048*winner: *tp8*"
run plan --model llama2-70b --search --devices 64 --cluster "$H100" --precision bf16 --top 2
expect "search: --model llama2-70b on 64 h100s" 0 "*68.98 B parameters*winner: *GB per device*"
run plan gpt --search --devices 4 --cluster "$A100" --arch llama --kv-heads 2 --top 2
expect "search: a small llama" 0 "*llama: 2 layers*2 kv heads*winner:*"
run plan --model llama9 --plan dp2 --devices 2
expect "--model: an unknown name" 2 "" "*--model wants one of gpt3-175b, llama2-70b, llama3-405b*"
run plan gpt --plan dp2 --devices 2 --kv-heads 3
expect "--kv-heads must divide --heads" 2 "" "*--kv-heads 3 does not divide --heads 4*"
run plan gpt --plan dp2 --devices 2 --arch mamba
expect "--arch: an unknown one" 2 "" "*--arch wants gpt or llama*"

finish cli_plan
