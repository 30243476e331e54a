#!/usr/bin/env bash
# Fusion from the command line: `loom compile` on every tests/data/*.loom
# with each --emit and --dump-after, its summary and the kernel cache;
# `loom run --fusion M` equal to `--fusion eager` byte for byte (the inputs
# of tests/data/cli are exact in f32, see its README), and wrong fusion
# arguments exiting 2. Needs only bash, coreutils and the loom binary.
#
# usage: bash tests/cli_fusion.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_fusion.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_fusion.sh LOOM DATA_DIR}
DATA=$(cd "$DATA" && pwd) || exit 1
CLI=$DATA/cli
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"
# A private kernel cache: the first compile of a program misses, the next hits.
export XDG_CACHE_HOME=$tmp/cache

summary="*fusion *primitive ops*memory ops*kernels*GEMMs*eager nodes*modeled bytes*peak bytes*compile time*kernel cache*"

# ---- compile: every data file, every artifact ---------------------------------
for f in "$DATA"/*.loom; do
  name=$(basename "$f")
  run compile "$f"
  expect "compile $name" 0 "$summary" ""
  run compile "$f" --emit c
  expect "compile $name --emit c" 0 "*" "$summary"
  if matches "$err" "*kernels         0*"; then
    expect "compile $name --emit c: no kernels" 0 "*no generated kernels*"
  else
    expect "compile $name --emit c: C source" 0 "*void *(void *const *args, void *workspace, int32_t n_threads)*"
  fi
  # (the plan reads a measured launch cost, so two processes may plan
  # differently: the listings are checked for shape, not compared)
  n_kernels=$(sed -n 's/^  kernels *//p' <<<"$err")
  for how in "--emit kernels" "--dump-after lower"; do
    run compile "$f" $how
    expect "compile $name $how" 0 "*" "$summary"
    if [[ $n_kernels != 0 ]]; then
      expect "compile $name $how: kernel IR" 0 "kernel k*a0: *e0 = *"
    fi
  done
  for how in "--emit program" "--dump-after fuse"; do
    run compile "$f" $how
    expect "compile $name $how" 0 "# fusion stitch: *step 0: *" "$summary"
  done
  # the decomposed text IR parses again and has no composite left
  run compile "$f" --dump-after decompose --fusion eager
  expect "compile $name --dump-after decompose" 0 "*output *" "$summary"
  printf '%s\n' "$out" >"$tmp/decomposed.loom"
  run show "$tmp/decomposed.loom"
  expect "compile $name: the decompose dump is valid text IR" 0 "*after decompose*"
  for comp in layer_norm softmax gelu linear attention cross_entropy adamw; do
    [[ $(<"$tmp/decomposed.loom") != *"= $comp("* ]] && ok || bad "$name: $comp left after decompose"
  done
done

# the summary numbers for one graph, in every mode
for m in none loop stitch eager; do
  run compile "$DATA/gpt_block.loom" --fusion "$m"
  expect "compile --fusion $m" 0 "*gpt_block.loom: fusion $m*primitive ops*"
done
run compile "$DATA/gpt_block.loom" --fusion eager
expect "compile --fusion eager: no kernels" 0 "*kernels         0*kernel cache    -*"

# the kernel cache: a fresh program misses, the same one again hits
run compile "$CLI/mlp.loom" --fusion loop --threads 1
expect "compile: cold" 0 "*kernel cache    *"
if ! matches "$out" "*kernels         0*"; then
  # (a plan may flip with the measured launch cost: allow one more try)
  for try in 1 2; do
    run compile "$CLI/mlp.loom" --fusion loop --threads 1
    matches "$out" "*kernel cache    hit*" && break
  done
  expect "compile: warm cache" 0 "*kernel cache    hit*"
fi

# ---- compile: wrong arguments exit 2, failures 1 ---------------------------------
run compile
expect "compile without FILE" 2 "" "*FILE*"
run compile "$DATA/mlp.loom" --fusion fast
expect "compile --fusion fast" 2 "" "*unknown fusion mode 'fast' (known: stitch, loop, none, eager)*"
run compile "$DATA/mlp.loom" --fusion
expect "compile --fusion without value" 2 "" "*needs a value*"
run compile "$DATA/mlp.loom" --emit asm
expect "compile --emit asm" 2 "" "*--emit wants c, kernels or program*"
run compile "$DATA/mlp.loom" --dump-after parse
expect "compile --dump-after parse" 2 "" "*decompose, fuse or lower*"
run compile "$DATA/mlp.loom" --emit c --fusion eager
expect "compile --emit c --fusion eager" 2 "" "*other than eager*"
run compile "$DATA/mlp.loom" --frob
expect "compile --frob" 2 "" "*unknown flag*"
run compile "$DATA/mlp.loom" "$DATA/mlp.loom"
expect "compile: two files" 2 "" "*unexpected argument*"
run compile --help
expect "compile --help" 0 "*usage: loom compile*--emit*--dump-after*"
run help compile
expect "help compile" 0 "*usage: loom compile*"
run compile "$tmp/missing.loom"
expect "compile: missing file" 1 "" "loom: *missing.loom*"
run compile "$CLI/bad.loom"
expect "compile: malformed text IR" 1 "" "loom: *bad.loom:3:25:*"

# ---- run --fusion: every mode gives the eager bytes ------------------------------
inputs=(--input "x=$CLI/x.npy" --input "w1=$CLI/w1.npy" --input "b1=$CLI/b1.npy"
        --input "w2=$CLI/w2.npy" --input "b2=$CLI/b2.npy")
for m in eager none loop stitch; do
  run run "$CLI/mlp.loom" "${inputs[@]}" --out "$tmp/run_$m" --fusion "$m"
  expect "run --fusion $m" 0 "*logits: f32[2, 3]*-5.5, 6.25, 0.75*total: f32[]*-0.125*" ""
  for name in logits positive total; do
    same_bytes "run --fusion $m: $name" "$tmp/run_$m/$name.npy" "$tmp/run_eager/$name.npy"
    same_bytes "run --fusion $m: $name (expected)" "$tmp/run_$m/$name.npy" "$CLI/expected_$name.npy"
  done
done
run run "$CLI/mlp.loom" "${inputs[@]}" --out "$tmp/run_ref" --backend ref --fusion loop
expect "run --backend ref --fusion loop (ignored)" 0 "*logits*"
run run "$CLI/mlp.loom" "${inputs[@]}" --out "$tmp/run_bad" --fusion fast
expect "run --fusion fast" 2 "" "*unknown fusion mode 'fast' (known: stitch, loop, none, eager)*"
run run "$CLI/mlp.loom" "${inputs[@]}" --out "$tmp/run_bad" --fusion
expect "run --fusion without value" 2 "" "*needs a value*"
[[ ! -e $tmp/run_bad ]] && ok || bad "run: a usage error writes nothing"

# no C compiler: a warning on stderr, eager results
LOOM_CC=/nonexistent/loom-cc run run "$CLI/mlp.loom" "${inputs[@]}" --out "$tmp/run_nocc" --fusion stitch
expect "run without a compiler" 0 "*logits*" "*warning*"
same_bytes "run without a compiler: logits" "$tmp/run_nocc/logits.npy" "$CLI/expected_logits.npy"

# ---- train --fusion -----------------------------------------------------------------
run train --fusion fast
expect "train --fusion fast" 2 "" "*--fusion wants one of stitch, loop, none, eager, got 'fast'*"
run train --attention magic
expect "train --attention magic" 2 "" "*--attention wants one of flash, decomposed, auto, got 'magic'*"
run train --rng later
expect "train --rng later" 2 "" "*--rng wants one of auto, fused, overlap, sequential, got 'later'*"
# every mode is in --help, with its line from the one table (include/loom.h)
run train --help
expect "train --help: modes" 0 "*stitch: stitching fusion (default)*eager: no code generation*flash: fused flash-attention*decomposed: its primitives*auto: a performance model picks*sequential: a bitmask made just before attention*"
for cmd in run compile; do
  run "$cmd" --help
  expect "$cmd --help: fusion modes" 0 "*stitch: stitching fusion (default)*loop: XLA-style*none: generated code*eager: no code generation*"
done
run train --layers 1 --d-model 16 --heads 2 --context 8 --batch 2 --steps 2 --log-every 1 --fusion loop --threads 1
expect "train --fusion loop" 0 "*fusion loop: * kernels*peak * MiB*step      2/2*" ""

finish cli_fusion
