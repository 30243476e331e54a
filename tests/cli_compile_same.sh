#!/usr/bin/env bash
# `loom compile` prints the same from one run to the next: the choices
# behind it (the RNG placement auto picks for an attention with dropout,
# flash or decomposed attention, the fusion plan) read rates measured once
# and kept in the machine profile, never a fresh timing. gpt_block.loom has
# such an attention. Only the compile time and the kernel cache line (a
# miss, then hits) may differ. Needs only bash, coreutils and loom.
#
# usage: bash tests/cli_compile_same.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_compile_same.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_compile_same.sh LOOM DATA_DIR}
DATA=$(cd "$DATA" && pwd) || exit 1
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"
# (the harness's private cache holds the profile: the first run measures)

RUNS=4 # the placement measured afresh each run flipped in about one run of two

# what a run printed but the summary's two run-dependent lines
summary_of() { grep -v -e '^  compile time ' -e '^  kernel cache ' <<<"$1"; }

for how in "" "--emit program" "--threads 1 --emit program"; do
  first=""
  for ((r = 0; r < RUNS; r++)); do
    run compile "$DATA/gpt_block.loom" $how
    expect "compile ${how:-(summary)}: run $r" 0
    got="$(summary_of "$out")
$(summary_of "$err")"
    if ((r == 0)); then
      first=$got
    elif [[ $got == "$first" ]]; then
      ok
    else
      bad "compile ${how:-(summary)}: run $r prints otherwise than run 0"
      diff <(echo "$first") <(echo "$got") >&2
    fi
  done
done
# the runs made the choice from kept rates (not from a fallback's defaults)
matches "$(cat "$XDG_CACHE_HOME"/loom/machine-*.txt 2>/dev/null)" "*rng_attn_fwd_flops_*" &&
  ok || bad "the RNG placement's rates are in the machine profile"

finish cli_compile_same
