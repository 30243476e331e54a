#!/usr/bin/env bash
# The command-line tool end to end: help, version, argument errors, `show`,
# and `run` on tests/data/cli/mlp.loom with outputs compared byte for byte
# against .npy files computed independently (tests/data/cli/README.md).
# Needs only bash, coreutils and the loom binary.
#
# usage: bash tests/cli_basic.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_basic.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_basic.sh LOOM DATA_DIR}/cli
DATA=$(cd "$DATA" && pwd) || exit 1
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"

inputs=(--input "x=$DATA/x.npy" --input "w1=$DATA/w1.npy"
        --input "b1=$DATA/b1.npy" --input "w2=$DATA/w2.npy"
        --input "b2=$DATA/b2.npy")

# ---- help and version ------------------------------------------------------
run --version
[[ $rc == 0 && $out =~ ^loom\ [0-9]+\.[0-9]+\.[0-9]+$ ]] && ok || bad "--version prints 'loom X.Y.Z'"
run --help
expect "--help" 0 "*usage: loom*train*run*show*"
run help
expect "help" 0 "*usage: loom*"
run help run
expect "help run" 0 "*usage: loom run*--input*--out*--backend*--threads*--force*"
run run --help
expect "run --help" 0 "*usage: loom run*"
run show --help
expect "show --help" 0 "*usage: loom show*"
run train --help
[[ $rc == 0 && -n $out$err ]] && ok || bad "train --help"

# ---- wrong arguments: usage on stderr, exit 2 -------------------------------
run
expect "no command" 2 "" "*usage: loom*"
run frobnicate
expect "unknown command" 2 "" "*unknown command 'frobnicate'*usage:*"
run --frob
expect "unknown option" 2 "" "*--frob*"
run help frobnicate
expect "help for an unknown command" 2 "" "*frobnicate*"
run run
expect "run without FILE" 2 "" "*FILE*"
run run "$DATA/mlp.loom" --bogus
expect "run: unknown flag" 2 "" "*unknown flag '--bogus'*"
run run "$DATA/mlp.loom" --out
expect "run: missing value" 2 "" "*--out needs a value*"
run run "$DATA/mlp.loom" --threads many
expect "run: bad number" 2 "" "*--threads*many*"
run run "$DATA/mlp.loom" --threads -3
expect "run: negative threads" 2 "" "*--threads*"
run run "$DATA/mlp.loom" --backend gpu
expect "run: unknown backend" 2 "" "*backend 'gpu'*"
run run "$DATA/mlp.loom" --input x
expect "run: --input without =" 2 "" "*NAME=PATH*"
run run "$DATA/mlp.loom" --input "x=$DATA/x.npy" --input "x=$DATA/x.npy"
expect "run: repeated --input" 2 "" "*twice*"
run run "$DATA/mlp.loom" "$DATA/mlp.loom"
expect "run: two files" 2 "" "*unexpected argument*"
run show
expect "show without FILE" 2 "" "*FILE*"

# ---- failures: "loom: <message>", exit 1 ------------------------------------
run show "$tmp/missing.loom"
expect "show: missing file" 1 "" "loom: *missing.loom*"
run run "$tmp/missing.loom" "${inputs[@]}" --out "$tmp/o0"
expect "run: missing file" 1 "" "loom: *missing.loom*"
run show "$DATA/bad.loom"
expect "show: malformed text IR" 1 "" "loom: *bad.loom:3:25:*"
run run "$DATA/bad.loom" --input "x=$DATA/x.npy" --out "$tmp/o0"
expect "run: malformed text IR" 1 "" "loom: *bad.loom:3:25:*"
run show "$DATA/bad_shape.loom"
expect "show: shape error" 1 "" "loom: *bad_shape.loom:4:*matmul*"
# sizes that overflow 64 bits are errors, not wrapped shapes (issue 8 bug 1)
run show "$DATA/../malformed/pad_overflow.loom"
expect "show: pad overflow" 1 "" "loom: *pad_overflow.loom:3:6: pad: dim 0:*overflows*"
run run "$DATA/../malformed/pad_overflow.loom" --input "x=$DATA/x.npy" --out "$tmp/o0"
expect "run: pad overflow" 1 "" "loom: *pad_overflow.loom:3:6: pad: dim 0:*overflows*"
run compile "$DATA/../malformed/zero_dim_huge_strides.loom"
expect "compile: huge zero-size input" 1 "" "loom: *shape has too many elements*"

# ---- show --------------------------------------------------------------------
run show "$DATA/mlp.loom"
expect "show: text IR" 0 "*param %w1 : f32[4, 8]*%logits : f32[2, 3] = linear(%a, %w2, %b2)*output total = %total*"
expect "show: op counts" 0 "*ops (6 nodes):*linear*2*"
expect "show: value types" 0 "*%positive : bool[2, 3]*%total : f32[]*"
expect "show: inputs and parameters" 0 "*1 data, 4 params*parameter elements: 67*"
expect "show: primitive op counts" 0 "*after decompose*add*2*matmul*2*"
[[ $out != *"after decompose"*linear* ]] && ok || bad "show: no composite left after decompose"

# ---- ops ---------------------------------------------------------------------
run ops
expect "ops: the op table" 0 "| op | class |*| \`matmul\` | gemm | 2 | 1 | \`trans_a\` = false, \`trans_b\` = false | yes |*| \`adamw\` | composite | 5 | 3 |*"
rows=0
while IFS= read -r line; do [[ $line == "| \`"* ]] && rows=$((rows + 1)); done <<<"$out"
[[ $rows -ge 70 ]] && ok || bad "ops: one row per op (got $rows)"
# the class listed last in the op table's enum is listed too
expect "ops: pooling (the window class)" 0 "*| \`max_pool\` | window | 1 | 1 |*| \`avg_pool_grad\` | window | 2 | 1 |*"
run ops extra
expect "ops: extra argument" 2 "" "*unexpected argument 'extra'*"

# ---- run -----------------------------------------------------------------------
for backend in ref cpu; do
  o="$tmp/out_$backend"
  run run "$DATA/mlp.loom" "${inputs[@]}" --out "$o" --backend "$backend" --threads 2
  expect "run --backend $backend" 0 "*logits: f32[2, 3]*-5.5, 6.25, 0.75*positive: bool[2, 3]*total: f32[]*-0.125*"
  for name in logits positive total; do
    same_bytes "run --backend $backend: $name" "$o/$name.npy" "$DATA/expected_$name.npy"
  done
done

# --flag=value spelling.
run run "$DATA/mlp.loom" "--input=x=$DATA/x.npy" "${inputs[@]:2}" "--out=$tmp/eq" --backend=ref
expect "run: --flag=value" 0 "*logits*"
same_bytes "run: --flag=value" "$tmp/eq/logits.npy" "$DATA/expected_logits.npy"

# Existing outputs are never overwritten without --force, and the refusal
# comes before anything is written.
o="$tmp/out_cpu"
rm -f "$o/logits.npy" "$o/positive.npy"
printf 'keep me' >"$o/total.npy"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$o"
expect "run: refuses to overwrite" 1 "" "loom: *total.npy already exists*--force*"
[[ $(<"$o/total.npy") == "keep me" ]] && ok || bad "run: a refused file is unchanged"
[[ ! -e $o/logits.npy ]] && ok || bad "run: a refused run writes no output"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$o" --force
expect "run --force" 0 "*total*"
same_bytes "run --force: total" "$o/total.npy" "$DATA/expected_total.npy"

# The default output directory is the current one.
mkdir "$tmp/cwd"
out=$(cd "$tmp/cwd" && "$LOOM" run "$DATA/mlp.loom" "${inputs[@]}" 2>"$tmp/stderr")
rc=$?
err=$(<"$tmp/stderr")
expect "run: default --out" 0 "*logits*"
same_bytes "run: default --out" "$tmp/cwd/logits.npy" "$DATA/expected_logits.npy"

# Input errors name the input.
run run "$DATA/mlp.loom" --input "x=$DATA/x.npy" --out "$tmp/o1"
expect "run: missing inputs" 1 "" "loom: *w1*b1*w2*b2*"
run run "$DATA/mlp.loom" "${inputs[@]}" --input "q=$DATA/x.npy" --out "$tmp/o1"
expect "run: unknown input name" 1 "" "loom: *'q'*"
run run "$DATA/mlp.loom" --input "x=$DATA/x_f64.npy" "${inputs[@]:2}" --out "$tmp/o1"
expect "run: wrong input dtype" 1 "" "loom: *'x'*f64*f32*"
run run "$DATA/mlp.loom" --input "x=$DATA/w1.npy" "${inputs[@]:2}" --out "$tmp/o1"
expect "run: wrong input shape" 1 "" "loom: *'x'*f32[4, 8]*f32[2, 4]*"
run run "$DATA/mlp.loom" --input "x=$DATA/mlp.loom" "${inputs[@]:2}" --out "$tmp/o1"
expect "run: input not a .npy" 1 "" "loom: *'x'*mlp.loom*"
run run "$DATA/mlp.loom" --input "x=$tmp/none.npy" "${inputs[@]:2}" --out "$tmp/o1"
expect "run: input file missing" 1 "" "loom: *none.npy*"
[[ ! -e $tmp/o1 ]] && ok || bad "run: a failed run creates no output directory"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$DATA/mlp.loom"
expect "run: --out is a file" 1 "" "loom: *not a directory*"

finish cli_basic
