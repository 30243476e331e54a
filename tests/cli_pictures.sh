#!/usr/bin/env bash
# Pictures from the command line: `loom compile --dot/--svg/--png` (one
# cluster per step of the fused program, checked against the program's own
# listing) and `loom bench --plot` (one bar per timed workload and mode,
# Loom's and the peers'), their refusals and errors. Rendering is checked
# when Graphviz is installed; without it the clear error is.
#
# usage: bash tests/cli_pictures.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_pictures.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_pictures.sh LOOM DATA_DIR}
DATA=$(cd "$DATA" && pwd) || exit 1
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"

count() { grep -c -- "$1" "$2"; }

# ---- compile --dot: a cluster per step, its kinds, kept values dashed ----------
for f in gpt_block mlp adamw_step; do
  for mode in stitch loop; do
    run compile "$DATA/$f.loom" --fusion $mode --dot "$tmp/$f.$mode.dot"
    expect "compile $f --fusion $mode --dot" 0 "*fusion $mode*" ""
    # (two processes may plan differently, as the plan reads a measured
    # launch cost: the picture is checked against its own summary line)
    steps=$(sed -n 's/.*kernels, \([0-9]*\) steps, modeled.*/\1/p' "$tmp/$f.$mode.dot")
    kernels=$(sed -n 's/.*fusion [a-z]*: \([0-9]*\) kernels,.*/\1/p' "$tmp/$f.$mode.dot")
    check "$f $mode: starts as a digraph" grep -q '^digraph program {' "$tmp/$f.$mode.dot"
    clusters=$(count 'subgraph cluster_' "$tmp/$f.$mode.dot")
    check "$f $mode: one cluster per step ($clusters clusters, $steps steps)" test "$clusters" = "$steps"
    kernel_labels=$(grep -c 'label="step [0-9]*: \(kernel\|gemm + epilogue\)' "$tmp/$f.$mode.dot")
    check "$f $mode: every kernel drawn ($kernel_labels of $kernels)" test "$kernel_labels" = "$kernels"
    gemm_clusters=$(count 'label="step [0-9]*: gemm' "$tmp/$f.$mode.dot")
    gemm_nodes=$(count 'matmul.*penwidth=2' "$tmp/$f.$mode.dot")
    check "$f $mode: a cluster per gemm ($gemm_clusters, $gemm_nodes matmuls)" test "$gemm_clusters" = "$gemm_nodes"
    check "$f $mode: braces balance" test "$(tr -cd '{' <"$tmp/$f.$mode.dot" | wc -c)" = "$(tr -cd '}' <"$tmp/$f.$mode.dot" | wc -c)"
  done
done
# the stitched GPT block keeps values inside kernels: those edges are dashed
check "gpt_block stitch: in-kernel values drawn dashed" grep -q 'style=dashed, color=' "$tmp/gpt_block.stitch.dot"
check "gpt_block stitch: a gemm with its epilogue" grep -q 'gemm + epilogue on' "$tmp/gpt_block.stitch.dot"

# refusals: an existing file is kept; eager has no program to draw
echo "keep me" >"$tmp/kept.dot"
run compile "$DATA/mlp.loom" --dot "$tmp/kept.dot"
expect "compile --dot onto an existing file" 1 "" "*already exists (use --force to overwrite)*"
check "the existing file is untouched" grep -qx "keep me" "$tmp/kept.dot"
run compile "$DATA/mlp.loom" --dot "$tmp/kept.dot" --force
expect "compile --dot --force" 0 "*"
check "--force replaced it" grep -q '^digraph' "$tmp/kept.dot"
run compile "$DATA/mlp.loom" --fusion eager --dot "$tmp/eager.dot"
expect "compile --fusion eager --dot" 2 "" "*needs a fusion mode other than eager*"
run compile "$DATA/mlp.loom" --dot
expect "compile --dot without a file" 2 "" "*--dot needs a file name*"

# ---- --svg / --png through Graphviz, or its clear absence -------------------------
if command -v dot >/dev/null 2>&1; then
  run compile "$DATA/gpt_block.loom" --svg "$tmp/g.svg" --png "$tmp/g.png"
  expect "compile --svg --png" 0 "*"
  check "the svg is SVG" grep -q '<svg' "$tmp/g.svg"
  check "the png is PNG" test "$(head -c 8 "$tmp/g.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a"
else
  echo "cli_pictures: Graphviz is not installed; checking its error instead of rendering"
fi
# with no Graphviz on PATH: a clear error, no file, before any work
run_nopath() { out=$(PATH=/nonexistent "$LOOM" "$@" 2>"$tmp/stderr"); rc=$?; err=$(<"$tmp/stderr"); }
run_nopath compile "$DATA/mlp.loom" --svg "$tmp/none.svg"
expect "compile --svg without Graphviz" 1 "" "*needs Graphviz's 'dot' program*"
check "no svg written without Graphviz" test ! -e "$tmp/none.svg"

# ---- bench --plot: bars from the peers' JSON lines and from a real run -------------
cat >"$tmp/peer.jsonl" <<'EOF'
peer bench, prose lines are skipped
{"machine": {"framework": "torch", "triad_gbps": 10.0}}
{"workload": "softmax_fwd", "mode": "torch_eager", "median_s": 0.0009}
{"workload": "softmax_fwd", "mode": "torch_compile", "median_s": 0.0005}
{"workload": "layernorm_bwd", "mode": "torch_eager", "median_s": 0.004}
{"workload": "layernorm_bwd", "mode": "torch_compile", "error": "no compiler"}
EOF
run bench --plot "$tmp/p.svg" --peer "$tmp/peer.jsonl" --plot-only --quiet
expect "bench --plot-only" 0 ""
# one rect is the white background
check "three bars for three timed lines" test "$(grep -o '<rect' "$tmp/p.svg" | wc -l)" = 4
check "a bar's label carries its time" grep -q '>900 us<' "$tmp/p.svg"
if command -v xmllint >/dev/null 2>&1; then check "the chart is well-formed XML" xmllint --noout "$tmp/p.svg"; fi

run bench softmax_fwd --size small --runs 1 --modes loop,stitch --quiet --plot "$tmp/r.svg" --peer "$tmp/peer.jsonl"
expect "bench --plot with a run" 0 "*softmax_fwd*"
check "loop, stitch and the three peer bars" test "$(grep -o '<rect' "$tmp/r.svg" | wc -l)" = 6
check "the peer's time as a ratio to stitch's" grep -q "torch_eager.*stitch's time" "$tmp/r.svg"

echo '{"workload": "x", "mode": "y", "median_s": 1' >"$tmp/broken.jsonl"
run bench --plot "$tmp/b.svg" --peer "$tmp/broken.jsonl" --plot-only
expect "a broken peer line" 1 "" "*broken.jsonl:1: not a JSON line of a bench*"
check "no chart from a broken peer file" test ! -e "$tmp/b.svg"
echo 'nothing timed here' >"$tmp/empty.jsonl"
run bench --plot "$tmp/b.svg" --peer "$tmp/empty.jsonl" --plot-only
expect "a peer file with no timings" 1 "" "*no timed workloads in it*"
run bench --peer "$tmp/peer.jsonl"
expect "--peer without --plot" 2 "" "*--peer needs --plot FILE*"
run bench --plot "$tmp/b.svg" --plot-only
expect "--plot-only without --peer" 2 "" "*give at least one*"
run bench --plot "$tmp/p.svg" --peer "$tmp/peer.jsonl" --plot-only
expect "--plot onto an existing file" 1 "" "*already exists (use --force to overwrite)*"

finish cli_pictures
