#!/usr/bin/env bash
# `loom train` on every backend present gives the cpu backend's losses: a
# tiny GPT with attention and residual dropout for three steps, the same
# seed, on ref, opencl and cuda where they are present (and selected by
# LOOM_TEST_BACKENDS when it is set). Each step's loss must agree with the
# cpu's within 1e-4 relative: the same Philox masks everywhere, and only
# the order of floating-point sums may differ. A backend that is not
# present is reported as skipped, with `loom devices`' reason.
#
# usage: bash tests/cli_train_backends.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_train_backends.sh LOOM DATA_DIR}
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"

flags=(--layers 1 --d-model 32 --heads 2 --context 8 --batch 4 --steps 3
       --dropout 0.1 --seed 7 --log-every 1 --eval-every 0 --threads 1)

# losses OUTPUT: the loss of each step line, one per line.
losses() { sed -n 's/^step *[0-9]*\/[0-9]* *loss \([0-9.]*\).*/\1/p' <<<"$1"; }

selected() { [[ -z ${LOOM_TEST_BACKENDS:-} || ",$LOOM_TEST_BACKENDS," == *",$1,"* ]]; }

run train --backend cpu "${flags[@]}"
expect "train on cpu" 0 "*step      3/3  loss*"
want=$(losses "$out")
[[ $(wc -l <<<"$want") == 3 ]] && ok || bad "three losses from the cpu run: '$want'"

devices=$("$LOOM" devices)
for b in ref opencl cuda; do
  line=$(grep "^  $b " <<<"$devices")
  if ! selected "$b"; then
    echo "cli_train_backends: $b skipped: not in LOOM_TEST_BACKENDS"
    continue
  fi
  if [[ $line == *unavailable* ]]; then
    echo "cli_train_backends: $b skipped: ${line#*unavailable: }"
    continue
  fi
  run train --backend "$b" "${flags[@]}"
  expect "train on $b" 0 "*step      3/3  loss*"
  got=$(losses "$out")
  if paste <(echo "$want") <(echo "$got") |
      awk 'NF != 2 { exit 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) exit 1 }'; then
    ok
  else
    bad "$b losses $(echo $got) differ from cpu's $(echo $want)"
  fi
  echo "cli_train_backends: $b losses $(echo $got), cpu $(echo $want)"
done

finish cli_train_backends
