#!/usr/bin/env bash
# `mpirun -np 2 loom train --plan P` (docs/PARALLEL.md, "Checkpoints" and
# "Faults"): a parallel run's --save writes one checkpoint, on rank 0, in
# the single-device layout; checkpoints move between one device and a plan
# and the losses go on as in an uninterrupted single-device run; a rank
# that dies, ranks started differently and a communication that times out
# end every rank with a message and a non-zero status, within a bound.
#
# usage: bash tests/cli_parallel.sh PATH/TO/loom PATH/TO/tests/data
# Exits 77 (a skip) without mpirun or when LOOM_TEST_MPI=0 (no MPI build).
set -u

LOOM=${1:?usage: cli_parallel.sh LOOM DATA_DIR}
source "$(dirname "${BASH_SOURCE[0]}")/lib/cli_harness.sh"
MPIRUN=${LOOM_MPIRUN:-$(command -v mpirun)}
if [[ ${LOOM_TEST_MPI:-1} == 0 || -z $MPIRUN ]]; then
  echo "cli_parallel: skipped (no MPI build or no mpirun)"
  exit 77
fi
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# a lost message fails a run in 30 s rather than hanging the test
export LOOM_COMM_TIMEOUT=${LOOM_COMM_TIMEOUT:-30}
# dropout on (loom train's default is off), so the plans' RNG paths run
model=(--layers 2 --d-model 32 --heads 4 --context 16 --batch 8 --dropout 0.1 --threads 1 --log-every 1)

# mpi SECONDS ARGS...: mpirun -np 2 under a time limit; sets out, err, rc.
mpi() {
  local limit=$1
  shift
  out=$(timeout "$limit" "$MPIRUN" --oversubscribe --allow-run-as-root -np 2 "$@" 2>"$tmp/stderr")
  rc=$?
  err=$(<"$tmp/stderr")
}

# per_rank CMD: a bash -c script each rank runs, with $r its rank, in
# $tmp/rank$r (so what each rank writes can be told apart).
per_rank() { echo 'r=$OMPI_COMM_WORLD_RANK; cd "'"$tmp"'/rank$r" && '"$1"; }
mkdir "$tmp/rank0" "$tmp/rank1"

# loss_at TEXT STEP: the loss printed for STEP ("step      4/6  loss 5.2066").
loss_at() { awk -v k="$2" '$1 == "step" && $2 ~ ("^" k "/") { print $4 }' <<<"$1"; }

# same_losses DESC TEXT FROM TO: TEXT's losses at steps FROM..TO equal the
# uninterrupted run's, to one unit of the last printed digit (1e-4 on a
# loss near 5: the printed form cannot resolve a relative 1e-5).
same_losses() {
  local desc=$1 text=$2 k a b
  for ((k = $3; k <= $4; k++)); do
    a=$(loss_at "$text" "$k")
    b=$(loss_at "$ref" "$k")
    if [[ -z $a || -z $b ]] || ! awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d <= 1e-4 + 1e-9 && -d <= 1e-4 + 1e-9) }'; then
      bad "$desc: step $k loss '$a', the uninterrupted run's '$b'"
      return
    fi
  done
  ok
}

# header FILE: a safetensors file's JSON header without its data checksum.
header() {
  local n
  n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  tail -c +9 "$1" | head -c "$n" | sed 's/"loom.data_sha256":"[0-9a-f]*"//'
}

# alive PID: the process exists and is not a zombie.
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null)
  [[ -n $st && $st != Z* ]]
}

# ---- checkpoints ---------------------------------------------------------------
run train "${model[@]}" --steps 6
ref=$out
expect "single device, 6 steps" 0 "*step      6/6  loss *"
run train "${model[@]}" --steps 6 --stop-at 3 --save "$tmp/A.st"
expect "single device, 3 of 6 steps, --save A" 0 "*saved $tmp/A.st (step 3)*"
same_losses "single device: steps 1-3 as uninterrupted" "$out" 1 3

# a single-device checkpoint continues under a plan whose state is shards
mpi 300 bash -c "$(per_rank "exec '$LOOM' train ${model[*]} --plan dp2+zero3 --load '$tmp/A.st'")"
expect "dp2+zero3 --load A (one device's checkpoint)" 0 "*resumed from $tmp/A.st at step 3*step      6/6*"
same_losses "dp2+zero3 from A: steps 4-6 as uninterrupted" "$out" 4 6

# a plan's --save: rank 0 gathers and writes one file; rank 1, whose
# directory has no sub/, writes nothing and does not object to the path
mkdir "$tmp/rank0/sub"
mpi 300 bash -c "$(per_rank "exec '$LOOM' train ${model[*]} --plan tp2 --steps 6 --stop-at 3 --save sub/B.st")"
expect "tp2 --save B on rank 0 only" 0 "*saved sub/B.st (step 3)*"
same_losses "tp2: steps 1-3 as uninterrupted" "$out" 1 3
files0=$(cd "$tmp/rank0" && find . -type f | sort | tr '\n' ' ')
files1=$(cd "$tmp/rank1" && find . | tr '\n' ' ')
[[ $files0 == "./sub/B.st " ]] && ok || bad "tp2 --save: rank 0 wrote only sub/B.st (found: $files0)"
[[ $files1 == ". " ]] && ok || bad "tp2 --save: rank 1 wrote nothing (found: $files1)"
[[ $(header "$tmp/rank0/sub/B.st") == "$(header "$tmp/A.st")" ]] && ok ||
  bad "B has a one-device checkpoint's header (tensors, shapes, metadata)"
[[ $(wc -c <"$tmp/rank0/sub/B.st") == $(wc -c <"$tmp/A.st") ]] && ok || bad "B is as long as A"

# a plan's checkpoint continues on one device
run train "${model[@]}" --load "$tmp/rank0/sub/B.st"
expect "single device --load B (tp2's checkpoint)" 0 "*resumed from*B.st at step 3*step      6/6*"
same_losses "single device from B: steps 4-6 as uninterrupted" "$out" 4 6

# every rank reads --load itself: a rank given another file is refused
run train "${model[@]}" --steps 6 --stop-at 3 --seed 2 --save "$tmp/C.st"
expect "single device, seed 2, --save C" 0
mpi 120 bash -c "$(per_rank "f=A; [ \$r = 1 ] && f=C; exec '$LOOM' train ${model[*]} --plan dp2 --seed 1 --load '$tmp/'\$f.st")"
expect "ranks loading different checkpoints: refused" 1 "*" \
  "*--load: rank 1 read another checkpoint than rank 0*aborts the job*"

# --trace under a plan: each rank its own timeline, rank 1's named .rank1;
# an existing one is kept without --force
mpi 300 "$LOOM" train "${model[@]}" --plan pp2 --steps 5 --trace "$tmp/t.json"
expect "--trace under pp2" 0 "*wrote the timeline of steps 2-4 to $tmp/t.json*"
for f in "$tmp/t.json" "$tmp/t.rank1.json"; do
  grep -q '"traceEvents"' "$f" 2>/dev/null && grep -q '"comm"' "$f" && ok || bad "--trace under pp2: $f is a timeline with comm"
done
cp "$tmp/t.rank1.json" "$tmp/kept.json"
mpi 120 "$LOOM" train "${model[@]}" --plan pp2 --steps 5 --trace "$tmp/t.json"
expect "--trace under pp2 again: refused" 1 "" "*--trace*exists*--force*"
cmp -s "$tmp/t.rank1.json" "$tmp/kept.json" && ok || bad "--trace refused: rank 1's file kept"

# ---- faults ---------------------------------------------------------------------
# ranks started with different flags: every rank stops at the setup check
for diff in "--seed 1:--seed 2" "--plan dp2:--plan tp2" "--layers 2 --plan dp2:--layers 3 --plan dp2"; do
  a=${diff%%:*} b=${diff#*:}
  [[ $a == *--plan* ]] || { a+=" --plan dp2"; b+=" --plan dp2"; }
  mpi 120 bash -c "$(per_rank "f='$a'; [ \$r = 1 ] && f='$b'; exec '$LOOM' train ${model[*]} --steps 6 \$f")"
  expect "rank 1 with '$b', rank 0 with '$a': refused" 1 "*" \
    "*rank 1 was started with another plan, model or schedule than rank 0*aborts the job*"
done

# a rank that fails before MPI starts (a wrong flag): mpirun ends the job
mpi 120 bash -c "$(per_rank "f=; [ \$r = 1 ] && f='--layers 0'; exec '$LOOM' train ${model[*]} --plan dp2 --steps 6 \$f")"
[[ $rc != 0 && $rc != 124 ]] && ok || bad "rank 1 with --layers 0: the job fails, not hangs"
matches "$err" "*--layers wants an integer in [1, 64], got '0'*" && ok || bad "rank 1 with --layers 0: its message"

# --save into a directory that does not exist: rank 0 (the writer) refuses
# before training and its abort ends rank 1, which does not check the path
mpi 120 bash -c "$(per_rank "exec '$LOOM' train ${model[*]} --plan dp2 --steps 6 --save nodir/X.st")"
expect "--save unwritable: refused, the job ends" 1 "" "*--save: cannot write nodir/X.st*rank 0 aborts the job*"
[[ $(grep -c "^loom train: --save: cannot write" <<<"$err") == 1 ]] && ok || bad "--save unwritable: only rank 0 checked it"

# start_job TIMEOUT_ENV: mpirun in the background (pids in rank$r/pid), back
# when rank 0 has printed its first step.
start_job() {
  rm -f "$tmp"/rank?/pid
  env "$@" timeout 120 "$MPIRUN" --oversubscribe --allow-run-as-root -np 2 bash -c \
    "$(per_rank "echo \$\$ >pid; exec '$LOOM' train ${model[*]} --plan dp2 --steps 1000000")" \
    >"$tmp/job.out" 2>"$tmp/job.err" &
  job=$!
  for ((i = 0; i < 1200; i++)); do
    grep -q '^step ' "$tmp/job.out" 2>/dev/null && [[ -s $tmp/rank1/pid ]] && break
    sleep 0.1
  done
  pid0=$(<"$tmp/rank0/pid") pid1=$(<"$tmp/rank1/pid")
}

# end_job DESC MAX_SECONDS: waits for the job; it must have failed (not
# been timed out) within MAX_SECONDS of the fault, every rank gone.
end_job() {
  wait "$job"
  rc=$?
  local took=$((SECONDS - t0))
  out=$(<"$tmp/job.out") err=$(<"$tmp/job.err")
  [[ $rc != 0 && $rc != 124 && $took -le $2 ]] && ok || bad "$1: ended non-zero within $2 s (took $took s)"
  sleep 0.5
  if alive "$pid0" || alive "$pid1"; then
    bad "$1: every rank ended"
    kill -CONT "$pid0" "$pid1" 2>/dev/null
    kill -9 "$pid0" "$pid1" 2>/dev/null
  else
    ok
  fi
}

# a rank that dies mid-run: mpirun ends the other one and says which died
start_job LOOM_COMM_TIMEOUT=60
t0=$SECONDS
kill -9 "$pid1"
end_job "rank 1 killed" 20
matches "$err" "*rank 1*exited on signal 9*" && ok || bad "rank 1 killed: stderr names the rank and the signal"

# a rank that stops answering: rank 0's wait times out and aborts the job
start_job LOOM_COMM_TIMEOUT=3
t0=$SECONDS
kill -STOP "$pid1"
end_job "rank 1 stopped, LOOM_COMM_TIMEOUT=3" 20
matches "$err" "*rank 1 (tag*timed out after 3 s (LOOM_COMM_TIMEOUT)*rank 0 aborts the job*" && ok ||
  bad "rank 1 stopped: stderr says what timed out"

# ---- loom bench simulator: one plan, one bracketed run ---------------------------------
# (the prediction beside the measured step, and how many runs were set
# aside as the machine drifted; no timing is checked)
export LOOM_BENCH_PLANS=dp2
run bench simulator --size small --runs 1 --json --quiet
unset LOOM_BENCH_PLANS
check "bench simulator exits 0" test "$rc" -eq 0
check "... one line, for dp2 alone" test "$(grep -c '"bench":"simulator"' <<<"$out")" -eq 1
check "... with the measured and predicted step and the runs set aside" \
  grep -Eq '"plan":"dp2","ranks":2,"measured_s":0\.[0-9]+,"predicted_s":0\.[0-9]+,.*"set_aside":[0-3],"drifted_kept":[01]}' <<<"$out"

finish cli_parallel
