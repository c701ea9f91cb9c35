#!/usr/bin/env bash
# Kill-and-resume under `mpirun -np 2 train --dp 2` (issue 11): a run that loses a rank and is
# resumed must end bit-identical to one that never stopped.
#
#   A  the reference: trained without interruption
#   B  rank 1 SIGKILLed mid-epoch, between two checkpoints (LOOM_FAULT_INJECT, so the point is
#      exact on every run), then `train --resume`
#   C  rank 1 SIGKILLed right after the last step of epoch 1 (before its validation and the next
#      epoch's shuffle), between two checkpoints, then resumed
#   D  both ranks sent SIGTERM (as a scheduler does): the job saves at the step boundary and
#      exits 0; then resumed
#   E  as B, with --checkpoint-async (checkpoints written by a background thread and committed a
#      few steps later, so the kill comes a whole interval later than B's: the first checkpoint
#      is surely committed by then, the second may or may not be)
#   N  the negative control: as B, but the checkpoint's random-generator state is replaced by
#      another one before resuming (as if it had not been restored): the comparison must fail
#
# The model is a small GPT with dropout (so the random generator is used at every step) and
# two loader workers per rank. "Bit-identical" means every tensor file of every rank's final
# checkpoint (model, optimizer, schedule, rng, loader) has the same bytes as A's.
#
# Usage: kill_resume_test.sh TRAIN MAKE_DATASET MPIEXEC WORK_DIR
set -euo pipefail
train=$1 make_dataset=$2 mpiexec=$3 work=$4
source "$(dirname "$0")/train_test_lib.sh"
start_test kill_resume_test "$work"
make_corpus "$make_dataset"

export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
mpi() { "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$@"; }
common=(--model gpt --layers 2 --heads 2 --d-model 32 --context 16 --dropout 0.2 --data corpus.h5
        --epochs 3 --batch 4 --workers 2 --seed 7 --log-every 1 --threads 1 --dp 2)

# The reference run, and the geometry the kill points are chosen from.
mpi "$train" "${common[@]}" --checkpoint-every 1000 --out A > A.log 2>&1 || { cat A.log; fail "the reference run failed"; }
steps_per_epoch=$(sed -n 's/.* \([0-9]*\) steps per epoch.*/\1/p' A.log | head -1)
[ -n "$steps_per_epoch" ] && [ "$steps_per_epoch" -ge 8 ] || fail "unexpected steps per epoch '$steps_per_epoch'"
# A checkpoint interval that puts neither kill point on a checkpoint.
for every in 5 7 9 11; do
  mid=$((every + every / 2 + 1))
  if [ $((steps_per_epoch % every)) -ne 0 ] && [ $((mid % every)) -ne 0 ] && [ "$mid" -lt "$steps_per_epoch" ]; then break; fi
done
echo "steps per epoch $steps_per_epoch, checkpoint every $every; kills after step $mid (mid-epoch) and $steps_per_epoch (epoch end)"
# The reference again with that interval: the final checkpoints are compared file by file.
rm -rf A
mpi "$train" "${common[@]}" --checkpoint-every "$every" --out A > A.log 2>&1 || { cat A.log; fail "the reference run failed"; }

# Kills rank 1 after step $2 into run directory $1, checks how the job ended, resumes it.
# $3: "corrupt-rng" (the negative control) or "-"; further arguments go to the first run.
kill_and_resume() {
  local dir=$1 step=$2 mode=${3:--} rc=0
  shift 3 2> /dev/null || shift $#
  LOOM_FAULT_INJECT="kill:rank=1:step=$step" mpi "$train" "${common[@]}" --checkpoint-every "$every" --out "$dir" \
    "$@" > "$dir.log" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || { cat "$dir.log"; fail "$dir: the job exited 0 although rank 1 was killed"; }
  grep -q "rank 1 .*exited on signal 9" "$dir.log" || { cat "$dir.log"; fail "$dir: mpirun did not name the killed rank"; }
  local saved
  saved=$(latest_of "$dir")
  saved=$((10#${saved#step-}))
  [ "$saved" -lt "$step" ] || fail "$dir: the last checkpoint ($saved) is not before the kill ($step)"
  echo "$dir: rank 1 killed after step $step; resuming from step $saved"
  if [ "$mode" = "corrupt-rng" ]; then
    local latest
    latest=$(latest_of "$dir")
    for r in rank-00000 rank-00001; do cp "A/$(latest_of A)/$r/rng.safetensors" "$dir/$latest/$r/rng.safetensors"; done
  fi
  mpi "$train" --resume "$dir" >> "$dir.log" 2>&1 || { cat "$dir.log"; fail "$dir: the resumed run failed"; }
}

kill_and_resume B "$mid"
d=$(differences A B)
[ -z "$d" ] || fail "B (killed mid-epoch, resumed) differs from the uninterrupted run:$d"
echo "B: bit-identical to the uninterrupted run"

kill_and_resume C "$steps_per_epoch"
d=$(differences A C)
[ -z "$d" ] || fail "C (killed at the epoch boundary, resumed) differs from the uninterrupted run:$d"
echo "C: bit-identical to the uninterrupted run"

# D: SIGTERM to both ranks while they train; the job must save where it stopped and exit 0.
mpi "$train" "${common[@]}" --checkpoint-every "$every" --out "$PWD/D" > D.log 2>&1 &
job=$!
for _ in $(seq 1 600); do
  grep -q '"step":3,' D/metrics.jsonl 2> /dev/null && break
  sleep 0.05
done
pids=$(pgrep -f -- "--out $PWD/D" | grep -v "^$job$" || true)
ranks=""
for p in $pids; do
  if grep -q "OMPI_COMM_WORLD_RANK" "/proc/$p/environ" 2> /dev/null; then ranks="$ranks $p"; fi
done
[ -n "$ranks" ] || fail "D: no rank process found to signal"
kill -TERM $ranks
rc=0
wait "$job" || rc=$?
[ "$rc" -eq 0 ] || { cat D.log; fail "D: the job exited $rc after SIGTERM; expected 0"; }
grep -q "stopped by a signal after step" D.log || { cat D.log; fail "D: no 'stopped by a signal' message"; }
echo "D: $(grep -o 'stopped by a signal after step [0-9]*' D.log | head -1); resuming"
mpi "$train" --resume "$PWD/D" >> D.log 2>&1 || { cat D.log; fail "D: the resumed run failed"; }
d=$(differences A "$PWD/D")
[ -z "$d" ] || fail "D (SIGTERM, resumed) differs from the uninterrupted run:$d"
echo "D: bit-identical to the uninterrupted run"

kill_and_resume E $((mid + every)) - --checkpoint-async
d=$(differences A E)
[ -z "$d" ] || fail "E (asynchronous checkpoints, killed mid-epoch, resumed) differs from the uninterrupted run:$d"
echo "E: bit-identical to the uninterrupted run"

# N: the negative control must differ, or the comparison above proves nothing.
kill_and_resume N "$mid" corrupt-rng
d=$(differences A N)
[ -n "$d" ] || fail "N: a run resumed with the wrong random-generator state matched the reference: the comparison cannot tell"
echo "N (negative control, wrong rng state): differs as it must:$d"
echo "kill_resume_test: ok"
