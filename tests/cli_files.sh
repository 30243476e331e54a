#!/usr/bin/env bash
# The files the command line reads and writes: outputs are checked before
# the work starts, only regular files are replaced, checkpoints carry a
# checksum, names with control bytes are escaped when printed and refused
# as file names, special files are not read (docs/CLI.md, "Files").
#
# usage: bash tests/cli_files.sh PATH/TO/loom PATH/TO/tests/data
set -u

LOOM=${1:?usage: cli_files.sh LOOM DATA_DIR}
DATA=${2:?usage: cli_files.sh LOOM DATA_DIR}/cli
DATA=$(cd "$DATA" && pwd) || exit 1
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"
export XDG_CACHE_HOME=$tmp/cache

inputs=(--input "x=$DATA/x.npy" --input "w1=$DATA/w1.npy"
        --input "b1=$DATA/b1.npy" --input "w2=$DATA/w2.npy"
        --input "b2=$DATA/b2.npy")
esc=$'\x1b'
bel=$'\x07'
no_control() { [[ $out$err != *"$esc"* && $out$err != *"$bel"* ]]; }

# ---- names with control bytes ------------------------------------------------
printf 'input %%x : f32[2, 4]\noutput "\\x1b]0;X\\x07" = %%x\n' >"$tmp/ctl.loom"
run show "$tmp/ctl.loom"
expect "show: a control-byte name is escaped" 0 '*outputs: \x1b]0;X\x07*'
check "show: no control byte reaches the terminal" no_control
run run "$tmp/ctl.loom" --input "x=$DATA/x.npy" --out "$tmp/o_ctl"
expect "run: a control-byte output name is refused as a file name" 1 "" \
  '*output name '"'"'\x1b]0;X\x07'"'"' cannot be used as a file name*'
check "run: the refusal is escaped" no_control
[[ ! -e $tmp/o_ctl ]] && ok || bad "run: nothing written for a refused name"

# ---- special files are not read ----------------------------------------------
run show /dev/zero
expect "show /dev/zero: refused without reading" 1 "" "*/dev/zero is a character device*"
mkfifo "$tmp/fifo.loom"
out=$(timeout 20 "$LOOM" show "$tmp/fifo.loom" 2>"$tmp/stderr")
rc=$?
err=$(<"$tmp/stderr")
expect "show FIFO: refused, not waited on" 1 "" "*fifo.loom is a FIFO*"

# ---- loom run: outputs checked before the graph runs -------------------------
o="$tmp/out"
mkdir "$o"
mkfifo "$o/total.npy"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$o" --force
expect "run --force onto a FIFO: refused" 1 "" "*total.npy is a FIFO*"
[[ -p $o/total.npy ]] && ok || bad "run: the FIFO is still a FIFO"
[[ ! -e $o/logits.npy ]] && ok || bad "run: refused before any output is written"
rm "$o/total.npy"
printf 'victim' >"$tmp/victim"
ln -s "$tmp/victim" "$o/total.npy"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$o" --force
expect "run --force onto a symlink: refused" 1 "" "*total.npy is a symbolic link*"
[[ -L $o/total.npy && $(<"$tmp/victim") == victim ]] && ok || bad "run: link and victim unchanged"
rm "$o/total.npy"
printf 'keep' >"$o/total.npy"
chmod 0444 "$o/total.npy"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$o" --force
expect "run --force onto a read-only file: refused" 1 "" "*total.npy is read-only*"
[[ $(<"$o/total.npy") == keep ]] && ok || bad "run: the read-only file is unchanged"
rm -f "$o/total.npy"
run run "$DATA/mlp.loom" "${inputs[@]}" --out "$tmp/nodir/deeper"
expect "run --out under a missing directory: refused first" 1 "" "*cannot write*nodir/deeper*nodir*"

# ---- loom train ----------------------------------------------------------------
tiny=(--layers=1 --d-model=16 --heads=2 --context=16 --batch=2 --threads=2)
run train "${tiny[@]}" --steps 2000 --save "$tmp/nodir/ck"
expect "train --save into a missing directory: refused before training" 1 "" \
  "*--save*cannot write*nodir/ck*"
[[ -z $out ]] && ok || bad "train: nothing trained before the refusal"
run train "${tiny[@]}" --steps 2 --save "$tmp/same" --trace "$tmp/same"
expect "train --save X --trace X: refused" 1 "" "*--save and --trace name the same file*"
run train "${tiny[@]}" --steps 2 --save "$tmp/same" --trace "$tmp/./same"
expect "train --save X --trace ./X (neither there yet): refused" 1 "" "*name the same file*"
printf 'keep' >"$tmp/ro.ck"
chmod 0444 "$tmp/ro.ck"
run train "${tiny[@]}" --steps 2 --save "$tmp/ro.ck" --force
expect "train --save onto a read-only file: refused even with --force" 1 "" "*ro.ck is read-only*"
[[ -z $out && $(<"$tmp/ro.ck") == keep ]] && ok || bad "train: read-only checkpoint kept"
ln -s "$tmp/victim" "$tmp/link.ck"
run train "${tiny[@]}" --steps 2 --save "$tmp/link.ck"
expect "train --save onto a symlink: refused" 1 "" "*link.ck is a symbolic link*"
run train "${tiny[@]}" --steps 2 --trace /dev/null --force
expect "train --trace onto a device: refused" 1 "" "*/dev/null is a character device*"
[[ -c /dev/null ]] && ok || bad "/dev/null is still a device"

ck="$tmp/ck.safetensors"
ln -s "$tmp/victim" "$ck.tmp" # the old fixed temporary name
run train "${tiny[@]}" --steps 2 --save "$ck"
expect "train --save" 0 "*saved*ck.safetensors (step 2)*"
[[ $(<"$tmp/victim") == victim ]] && ok || bad "train --save: a planted CK.tmp symlink is not followed"
grep -q 'loom.data_sha256' "$ck" && ok || bad "the checkpoint carries its checksum"
run train --load "$ck" --threads 2
expect "train --load: a checked checkpoint" 0 "*nothing to train*"
[[ $err != *"no data checksum"* ]] && ok || bad "no note for a checkpoint with a checksum"
# one data byte changed (the last): refused, naming the checksum
cp "$ck" "$tmp/bad.safetensors"
size=$(stat -c %s "$tmp/bad.safetensors")
last=$(od -An -tu1 -j $((size - 1)) "$tmp/bad.safetensors" | tr -d ' ')
printf "\\$(printf %03o $(((last + 1) % 256)))" |
  dd of="$tmp/bad.safetensors" bs=1 seek=$((size - 1)) conv=notrunc status=none
run train --load "$tmp/bad.safetensors"
expect "train --load: a damaged checkpoint is refused" 1 "" "*does not match its checksum*"
# an older checkpoint (no checksum key) loads, with a note
LC_ALL=C sed 's/loom\.data_sha256/loom.data_xxxxxx/' "$ck" >"$tmp/old.safetensors"
run train --load "$tmp/old.safetensors" --threads 2
expect "train --load: an older checkpoint loads with a note" 0 "*nothing to train*" \
  "*note:*old.safetensors has no data checksum*"

# ---- memory checked before the parameters are allocated --------------------
# 64 layers of d_model 4096: 12.9e9 parameters, 144 GiB with AdamW moments
mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
if [[ ${mem_kib:-0} -gt 0 && $mem_kib -lt $((144 * 1024 * 1024)) ]]; then
  run train --layers 64 --d-model 4096 --heads 32 --steps 1
  expect "train: too big for the machine, said before allocating" 1 "" \
    "*parameters with their AdamW moments need 144.05 GiB*more than the machine's*"
fi

# ---- loom bench --trace --------------------------------------------------------
run bench rng --seconds 0.02 --rounds 10 --quiet --trace "$tmp/nodir/t.json"
expect "bench --trace into a missing directory: refused first" 1 "" "*cannot write*nodir/t.json*"
[[ -z $out ]] && ok || bad "bench: nothing measured before the refusal"

finish cli_files
