#!/usr/bin/env bash
# SIGTERM to one rank of a pipeline- and data-parallel run (`mpirun -np 4 train --pp 2 --dp 2`):
# the job must stop at a step boundary with a complete checkpoint (every rank's piece, written
# before any rank exits) and exit 0, and `train --resume` must then end byte-identical to a run
# that was never stopped.
#
# A scheduler signals every task, but a node's OOM killer or an operator may reach one. The
# ranks agree on stopping through one all-reduce per step (tools/train/trainer.cpp), so a
# signal that reached one pipeline stage of one replica still stops all four ranks after the
# same step; otherwise the other stages would wait for it forever inside the pipeline's
# sends and receives.
#
#   A   the reference, trained without interruption
#   S0  SIGTERM to rank 0 only (first stage of replica 0), then resumed
#   S3  SIGTERM to rank 3 only (last stage of replica 1), then resumed
#
# Usage: pipeline_signal_test.sh TRAIN MAKE_DATASET MPIEXEC WORK_DIR
set -euo pipefail
train=$1 make_dataset=$2 mpiexec=$3 work=$4
source "$(dirname "$0")/train_test_lib.sh"
start_test pipeline_signal_test "$work"
make_corpus "$make_dataset"

export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
mpi() { "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np 4 "$@"; }
# A small GPT (without dropout: the pipeline's GPT has none) with loader workers.
common=(--model gpt --layers 2 --heads 2 --d-model 32 --context 16 --data corpus.h5
        --epochs 2 --batch 8 --microbatches 2 --train-examples 160 --workers 1 --seed 7 --log-every 1 --threads 1
        --dp 2 --pp 2 --checkpoint-every 1000)  # no scheduled checkpoint before the end: a mid-run one is the stop's

mpi "$train" "${common[@]}" --out "$PWD/A" > A.log 2>&1 || { cat A.log; fail "the reference run failed"; }

ranks_in_checkpoint() { find "$1/$(latest_of "$1")" -maxdepth 1 -name 'rank-*' -type d | wc -l; }

# Runs into $1, sends SIGTERM to rank $2 alone after step 3, checks the stop and resumes.
signal_one_rank() {
  local dir=$PWD/$1 rank=$2 rc=0
  mpi "$train" "${common[@]}" --out "$dir" > "$1.log" 2>&1 &
  local job=$!
  for _ in $(seq 1 1200); do
    grep -q '"step":3,' "$dir/metrics.jsonl" 2> /dev/null && break
    sleep 0.05
  done
  local target=""
  for p in $(pgrep -f -- "--out $dir" || true); do
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then target=$p; fi
  done
  [ -n "$target" ] || { kill "$job" 2> /dev/null || true; fail "$1: rank $rank's process not found"; }
  kill -TERM "$target"
  wait "$job" || rc=$?
  [ "$rc" -eq 0 ] || { cat "$1.log"; fail "$1: the job exited $rc after SIGTERM to rank $rank; expected 0"; }
  local stopped
  stopped=$(grep -o 'stopped by a signal after step [0-9]*' "$1.log" | head -1)
  [ -n "$stopped" ] || { cat "$1.log"; fail "$1: no 'stopped by a signal' message"; }
  local at=${stopped##* } saved
  saved=$(latest_of "$dir")
  [ "$((10#${saved#step-}))" -eq "$at" ] || fail "$1: stopped after step $at but the latest checkpoint is $saved"
  [ "$(ranks_in_checkpoint "$dir")" -eq 4 ] || fail "$1: checkpoint $saved does not hold all 4 ranks' pieces"
  echo "$1: SIGTERM to rank $rank: $stopped, checkpoint $saved complete; resuming"
  mpi "$train" --resume "$dir" >> "$1.log" 2>&1 || { cat "$1.log"; fail "$1: the resumed run failed"; }
  local d
  d=$(differences A "$dir")
  [ -z "$d" ] || fail "$1 (SIGTERM to rank $rank, resumed) differs from the uninterrupted run:$d"
  echo "$1: bit-identical to the uninterrupted run"
}

signal_one_rank S0 0
signal_one_rank S3 3
echo "pipeline_signal_test: ok"
