#!/usr/bin/env bash
# Checkpoints that reshard (issue 23, docs/checkpoints.md "Resharding"): a checkpoint that
# `train` saved at one (dp, tp, pp, zero) layout resumes at another with the same model and
# optimizer state, bit for bit.
#
# Every run trains a tiny GPT for one epoch and saves. A resumed run with --epochs 1 trains
# nothing: it loads the checkpoint (resharded) and saves it again, in its own layout, at the same
# step. So, for layouts A and B:
#
#   gathered     A resumed in one process and B-from-A resumed in one process write the same
#                files (the whole state, gathered, equal however it got there)
#   round trip   A -> B -> A writes every rank's files of A again, byte for byte
#   continued    A and B-from-A trained one more epoch: the same losses within float tolerance
#                (the sums over the replicas run in another order)
#
# for dp 4 + zero 1 <-> dp 2 + zero 2 (the optimizer state sharded both ways), tp 2 <-> tp 1,
# dp 2 + pp 2 + zero 2 <-> one process, tp 2 + pp 2 <-> one process, and FSDP's flat shards
# (dp 2 + zero 3 <-> dp 4 + zero 1, dp 4 + zero 3 <-> dp 2 + zero 3: the GPT's head tied to its
# embedding, each layer padded to whole shards); and a run stopped
# mid-epoch at dp 4 continued at dp 2. Negative controls (one rank's piece from a later step) must
# change the gathered state or be refused, and layouts that cannot be mapped (another
# optimizer, another model size) must fail naming both layouts.
#
# Usage: reshard_resume_test.sh TRAIN MAKE_DATASET MPIEXEC WORK_DIR
set -euo pipefail
train=$1 make_dataset=$2 mpiexec=$3 work=$4
source "$(dirname "$0")/train_test_lib.sh"
start_test reshard_resume_test "$work"
make_corpus "$make_dataset"

export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
# run RANKS ARGS...: train on RANKS processes (one without mpirun); the log in the last --out's.log.
run() {
  local np=$1 log=$2
  shift 2
  if [ "$np" = 1 ]; then "$train" "$@" > "$log" 2>&1 || { cat "$log"; fail "train $* failed"; }
  else "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$train" "$@" > "$log" 2>&1 ||
    { cat "$log"; fail "mpirun -np $np train $* failed"; }
  fi
}
common=(--model gpt --layers 2 --heads 2 --d-model 16 --context 8 --data corpus.h5 --train-examples 64 --epochs 1
        --workers 0 --threads 1 --seed 7 --log-every 1 --optimizer adam)
# The layouts, as the flags that make them: every one reads a global batch of 16.
dp4_zero1=(--dp 4 --zero 1 --batch 4 --microbatches 1 --tp 1 --pp 1)
dp2_zero2=(--dp 2 --zero 2 --batch 8 --microbatches 1 --tp 1 --pp 1)
tp2=(--dp 1 --zero 0 --batch 16 --microbatches 1 --tp 2 --pp 1)
dp2_pp2_zero2=(--dp 2 --zero 2 --batch 8 --microbatches 2 --tp 1 --pp 2)
tp2_pp2=(--dp 1 --zero 0 --batch 16 --microbatches 2 --tp 2 --pp 2)
dp2_zero3=(--dp 2 --zero 3 --batch 8 --microbatches 1 --tp 1 --pp 1)
dp4_zero3=(--dp 4 --zero 3 --batch 4 --microbatches 1 --tp 1 --pp 1)
single=(--dp 1 --zero 0 --batch 16 --microbatches 1 --tp 1 --pp 1)

# resume FROM TO RANKS FLAGS...: a copy of run FROM, resumed at FLAGS (no training: --epochs 1).
resume() {
  local from=$1 to=$2 np=$3
  shift 3
  rm -rf "$to"
  cp -r "$from" "$to"
  run "$np" "$to.log" --resume "$to" "$@"
}
resharded() { grep -q "resharded" "$1.log" || { cat "$1.log"; fail "$1: the resume did not reshard"; }; }

# check_layout NAME RANKS_A FLAGS_A... -- RANKS_B FLAGS_B...
check_layout() {
  local name=$1 np_a=$2 d
  shift 2
  local a=() b=()
  while [ "$1" != "--" ]; do a+=("$1"); shift; done
  shift
  local np_b=$1
  shift
  b=("$@")
  run "$np_a" "$name-A.log" "${common[@]}" "${a[@]}" --out "$name-A"
  resume "$name-A" "$name-B" "$np_b" "${b[@]}"          # A -> B
  resharded "$name-B"
  resume "$name-A" "$name-A1" 1 "${single[@]}"          # A -> one process
  resume "$name-B" "$name-B1" 1 "${single[@]}"          # A -> B -> one process
  d=$(differences "$name-A1" "$name-B1")
  [ -z "$d" ] || fail "$name: the state gathered from B differs from the one gathered from A:$d"
  resume "$name-B" "$name-BA" "$np_a" "${a[@]}"         # A -> B -> A
  resharded "$name-BA"
  d=$(differences "$name-A" "$name-BA")
  [ -z "$d" ] || fail "$name: A resharded to B and back differs from A:$d"
  # One more epoch at A and at B-from-A: the same losses, up to the order of the sums.
  resume "$name-A" "$name-A-more" "$np_a" --epochs 2 "${a[@]}"
  resume "$name-B" "$name-B-more" "$np_b" --epochs 2 "${b[@]}"
  local la lb
  la=$(grep -o '"loss":[-0-9.eE+]*' "$name-A-more/metrics.jsonl" | tail -4 | cut -d: -f2 | tr '\n' ' ')
  lb=$(grep -o '"loss":[-0-9.eE+]*' "$name-B-more/metrics.jsonl" | tail -4 | cut -d: -f2 | tr '\n' ' ')
  [ "$(wc -w <<< "$la")" = 4 ] || fail "$name: no losses of the second epoch in $name-A-more/metrics.jsonl"
  awk -v a="$la" -v b="$lb" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != m) exit 1;
    for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-4 * (x[i] < 0 ? -x[i] : x[i])) exit 1 } }' ||
    fail "$name: the losses continued at B ($lb) differ from those continued at A ($la)"
  echo "$name: gathered state bit-identical, round trip bit-identical, continued losses equal ($la)"
}

check_layout dp4_zero1-dp2_zero2 4 "${dp4_zero1[@]}" -- 2 "${dp2_zero2[@]}"
check_layout tp2-single 2 "${tp2[@]}" -- 1 "${single[@]}"
check_layout dp2_pp2_zero2-single 4 "${dp2_pp2_zero2[@]}" -- 1 "${single[@]}"
check_layout tp2_pp2-single 4 "${tp2_pp2[@]}" -- 1 "${single[@]}"
check_layout dp2_zero3-dp4_zero1 2 "${dp2_zero3[@]}" -- 4 "${dp4_zero1[@]}"
check_layout dp4_zero3-dp2_zero3 4 "${dp4_zero3[@]}" -- 2 "${dp2_zero3[@]}"

# Mid-epoch: stopped after 2 of the epoch's 4 steps at dp 4, resumed at dp 2 (the same global
# batch): the loader continues at the same example, so steps 3 and 4 lose what the uninterrupted
# dp 4 run's did.
run 4 M.log "${common[@]}" "${dp4_zero1[@]}" --max-steps 2 --out M
resume M M2 2 "${dp2_zero2[@]}"
resharded M2
losses() { grep -o '"loss":[-0-9.eE+]*' "$1/metrics.jsonl" | sed -n "$2" | cut -d: -f2 | tr '\n' ' '; }
la=$(losses dp4_zero1-dp2_zero2-A 3,4p)
lb=$(losses M2 3,4p)
awk -v a="$la" -v b="$lb" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != 2 || m != 2) exit 1;
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-4 * (x[i] < 0 ? -x[i] : x[i])) exit 1 } }' ||
  fail "M: steps 3 and 4 resumed mid-epoch at dp 2 lose $lb, the uninterrupted dp 4 run $la"
echo "M (mid-epoch, dp 4 -> dp 2): steps 3 and 4 lose $lb, as the uninterrupted run ($la)"

# The negative controls. Tensor rank 1's piece of the model replaced by its piece one epoch later
# (the same shapes, so it loads) must change the gathered state, or the comparisons above prove
# nothing; a ZeRO shard of the optimizer state one epoch later must be refused (its step count
# disagrees with the other shards').
later() { echo "$1-A-more/$(latest_of "$1-A-more")/rank-0000$2/$3.safetensors"; }
rm -rf N
cp -r tp2-single-A N
cp "$(later tp2-single 1 model)" "N/$(latest_of N)/rank-00001/model.safetensors"
resume N N1 1 "${single[@]}"
d=$(differences tp2-single-A1 N1)
[ -n "$d" ] || fail "N: a later tensor-parallel piece gathered to the same state: the comparison cannot tell"
echo "N (negative control, a later tensor-parallel piece): differs as it must:$d"
rm -rf N_zero
cp -r dp4_zero1-dp2_zero2-A N_zero
cp "$(later dp4_zero1-dp2_zero2 0 optimizer)" "N_zero/$(latest_of N_zero)/rank-00000/optimizer.safetensors"
if "$train" --resume N_zero "${single[@]}" > N_zero.log 2>&1; then fail "N_zero: a later ZeRO shard was resharded"; fi
grep -q "step counts of .* disagree" N_zero.log || { cat N_zero.log; fail "N_zero: not refused for its step count"; }
echo "N_zero (negative control, a later ZeRO shard): refused, $(grep -o 'the optimizer step counts.*on saving rank [0-9]*' N_zero.log | head -1)"

# Layouts that cannot be mapped: the error names both layouts and the reason.
expect_error() {
  local name=$1 reason=$2
  shift 2
  rm -rf "$name"
  cp -r dp4_zero1-dp2_zero2-A "$name"
  if "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$train" --resume "$name" "${dp2_zero2[@]}" \
    "$@" > "$name.log" 2>&1; then
    cat "$name.log"
    fail "$name: resuming with $* succeeded"
  fi
  grep -q '"dp":4.*"zero":1}, this one is {"dp":2.*"zero":2}.*cannot be resharded.*'"$reason" "$name.log" ||
    { cat "$name.log"; fail "$name: the error does not name both layouts and '$reason'"; }
  echo "$name: $(grep -o 'cannot be resharded.*' "$name.log" | head -1)"
}
expect_error E_optimizer "this job --optimizer sgd" --optimizer sgd
expect_error E_model "does not fit" --d-model 32
echo "reshard_resume_test: ok"
