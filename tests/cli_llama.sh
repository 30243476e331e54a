#!/usr/bin/env bash
# `loom train --arch llama`: a short run whose loss falls, its checkpoint
# recording the architecture, a resume, and a --load whose --arch or
# --kv-heads disagree with the checkpoint refused with a message; a GPT
# checkpoint records no architecture keys (as before Llama existed).
#
# usage: bash tests/cli_llama.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_llama.sh LOOM DATA_DIR}
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"

small=(--layers 1 --d-model 32 --heads 4 --context 16 --batch 8 --lr 0.005 --threads 1
       --log-every 10)
# the loss of the last "step" line, and the first
last_loss() { sed -n 's/^step *[0-9]*\/[0-9]*  loss \([0-9.]*\).*/\1/p' <<<"$out" | tail -1; }
first_loss() { sed -n 's/^step *[0-9]*\/[0-9]*  loss \([0-9.]*\).*/\1/p' <<<"$out" | head -1; }

run train --arch llama --kv-heads 2 --steps 40 "${small[@]}" --save "$tmp/llama.ckpt"
expect "train --arch llama" 0 "loom train: llama, 1 layer, d_model 32, 4 heads (2 kv)*saved*"
first=$(first_loss)
last=$(last_loss)
check "llama: the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" \
  'BEGIN { exit !(a > 0 && b > 0 && b < 0.8 * a) }'
grep -q '"arch":"llama"' "$tmp/llama.ckpt" && grep -q '"kv_heads":"2"' "$tmp/llama.ckpt" &&
  grep -q '"mlp":"swiglu"' "$tmp/llama.ckpt" && ok || bad "the checkpoint records the architecture"

run train --load "$tmp/llama.ckpt" --steps 45
expect "resume a llama checkpoint" 0 "loom train: llama, 1 layer*resumed from*at step 40*"
run train --load "$tmp/llama.ckpt" --arch gpt --steps 45
expect "--load: --arch disagrees" 1 "" \
  "loom train: --arch gpt does not match the checkpoint's architecture (llama)*"
run train --load "$tmp/llama.ckpt" --kv-heads 4 --steps 45
expect "--load: --kv-heads disagrees" 1 "" "loom train: --kv-heads 4 does not match the checkpoint's 2*"

run train --steps 2 "${small[@]}" --save "$tmp/gpt.ckpt"
expect "train gpt" 0 "loom train: gpt, 1 layer*"
grep -q '"arch"' "$tmp/gpt.ckpt" && bad "a gpt checkpoint has no architecture keys" || ok
run train --load "$tmp/gpt.ckpt" --arch llama --steps 3
expect "--load: a gpt checkpoint is not llama" 1 "" "*--arch llama does not match*(gpt)*"

run train --arch mamba
expect "--arch: unknown" 2 "" "*--arch wants gpt or llama, got 'mamba'*"
run train --kv-heads 3
expect "--kv-heads must divide --heads" 2 "" "*--kv-heads 3 does not divide --heads 4*"
run train --arch llama --d-model 12 --heads 4
expect "llama: an odd head width" 2 "" "*head width --d-model / --heads = 3 must be even*"

finish cli_llama
