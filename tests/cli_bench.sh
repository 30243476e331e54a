#!/usr/bin/env bash
# `loom bench` end to end at --size small: the JSON lines carry the keys of
# issue 3 (a machine line first, then one line per mode), the table prints,
# and wrong arguments exit 2 with a usage message. Timings are never
# checked (machines are noisy). Needs only bash, coreutils and grep.
#
# usage: bash tests/cli_bench.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_bench.sh LOOM DATA_DIR}
passed=0
failed=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loom_bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# A private kernel cache, so the test neither reads nor fills the user's.
export XDG_CACHE_HOME=$tmp/cache

run() {
  out=$("$LOOM" "$@" 2>"$tmp/stderr")
  rc=$?
  err=$(<"$tmp/stderr")
}

ok() { passed=$((passed + 1)); }

bad() {
  failed=$((failed + 1))
  echo "FAIL: $1" >&2
  echo "  rc=$rc" >&2
  echo "  stdout: ${out:0:3000}" >&2
  echo "  stderr: ${err:0:3000}" >&2
}

check() { # check NAME COMMAND...: passes if the command succeeds
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}

# has_keys LINE KEY...: every "KEY": appears in LINE, and LINE is one object
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
run bench --list
check "--list exits 0" test "$rc" -eq 0
for w in layernorm_fwd layernorm_bwd softmax_fwd softmax_bwd bias_gelu \
  bias_dropout_residual_ln cross_entropy adamw bert_layer gpt2_block; do
  check "--list names $w" test "${out#*$w}" != "$out"
done
run bench --help
check "--help exits 0" test "$rc" -eq 0
check "--help prints usage" test "${out#*usage: loom bench}" != "$out"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
