#!/usr/bin/env bash
# The faults a long `train` run meets (issue 24), end to end, through LOOM_FAULT_INJECT
# (tools/train/fault_injection.h) so that each hits an exact point on every run:
#
#   A  the reference: trained without interruption
#   B  the 2nd fsync of the checkpoint of step 8 fails with ENOSPC: exit 1 with a message naming
#      the path and "No space left on device"; step 4 stays the latest checkpoint, nothing of the
#      failed save is left; `train --resume B` then ends byte-identical to A
#   C  as B with --on-checkpoint-error continue and EIO at the 1st write: a warning, the run goes
#      on, and the next checkpoint (and the final files) are byte-identical to A's
#   G  as B with --checkpoint-async (the background writer fails; the next step boundary stops)
#   D  a training example whose reading throws: exit 1 naming the sample, the worker and the file
#   E  a training example whose reading never returns, with --loader-timeout 1: exit 1 naming the
#      stuck worker, the sample and the file, well before the test's own time limit
#   H  the --data file truncated after step 5, I: deleted: exit 1 naming the file
#   F  a malformed LOOM_FAULT_INJECT: a non-zero exit and the expected forms
#
# Usage: train_faults_test.sh TRAIN MAKE_DATASET WORK_DIR
set -euo pipefail
train=$1 make_dataset=$2 work=$3
source "$(dirname "$0")/train_test_lib.sh"
start_test train_faults_test "$work"
make_corpus "$make_dataset" 40

export OMP_NUM_THREADS=1
common=(--model gpt --layers 1 --heads 2 --d-model 16 --context 16 --data corpus.h5 --epochs 2 --batch 4
        --workers 2 --seed 3 --log-every 1 --threads 1 --checkpoint-every 4)

# Runs train with the rest of the arguments; sets rc and leaves stdout+stderr in $log.
run() {
  local log_file=$1
  shift
  rc=0
  timeout 300 "$@" > "$log_file" 2>&1 || rc=$?
  log=$(cat "$log_file")
}
expect() {  # expect WHAT TEXT: the log holds TEXT
  grep -qF -- "$2" <<< "$log" || { echo "$log"; fail "$1: the output does not say '$2'"; }
}
final_files_match() {  # the final checkpoint's tensor files of $1 against A's
  local d
  d=$(differences A "$1")
  [ -z "$d" ] || fail "$1: differs from the uninterrupted run:$d"
}

run A.log "$train" "${common[@]}" --out A
[ "$rc" -eq 0 ] || { echo "$log"; fail "the reference run failed"; }

# B: a full disk at the checkpoint of step 8 stops the run; the resume ends identical to A.
LOOM_FAULT_INJECT=io:op=fsync:nth=2:errno=ENOSPC:step=8 run B.log "$train" "${common[@]}" --out B
[ "$rc" -eq 1 ] || { echo "$log"; fail "B: exit code $rc, expected 1"; }
expect B "the checkpoint of step 8 could not be written"
expect B "No space left on device"
expect B "'B/.tmp-step-00000008"
expect B "train --resume B"
[ "$(tr -d '\n' < B/latest)" = step-00000004 ] || fail "B: latest is $(cat B/latest), expected step-00000004"
leftovers=$(cd B && ls -A | grep -E '^\.|tmp' || true)
[ -z "$leftovers" ] || fail "B: the failed save left: $leftovers"
[ ! -e B/step-00000008 ] || fail "B: the failed checkpoint's directory is there"
run B2.log "$train" --resume B
[ "$rc" -eq 0 ] || { echo "$log"; fail "B: the resume failed"; }
expect B "resuming B at step 4"
final_files_match B

# C: with --on-checkpoint-error continue the run warns and trains on.
LOOM_FAULT_INJECT=io:op=write:nth=1:errno=EIO:step=8 run C.log "$train" "${common[@]}" --out C \
  --on-checkpoint-error continue
[ "$rc" -eq 0 ] || { echo "$log"; fail "C: exit code $rc, expected 0"; }
expect C "warning: the checkpoint of step 8 could not be written"
expect C "Input/output error"
expect C "training goes on"
final_files_match C

# G: as B with --checkpoint-async: the background writer's failure stops the run at the next step
# boundary; the resume is byte-identical too.
LOOM_FAULT_INJECT=io:op=write:nth=2:errno=ENOSPC:step=8 run G.log "$train" "${common[@]}" --out G --checkpoint-async
[ "$rc" -eq 1 ] || { echo "$log"; fail "G: exit code $rc, expected 1"; }
expect G "the checkpoint of step 8 could not be written"
expect G "No space left on device"
[ "$(tr -d '\n' < G/latest)" = step-00000004 ] || fail "G: latest is $(cat G/latest), expected step-00000004"
leftovers=$(cd G && ls -A | grep -E '^\.|tmp' || true)
[ -z "$leftovers" ] || fail "G: the failed save left: $leftovers"
run G2.log "$train" --resume G
[ "$rc" -eq 0 ] || { echo "$log"; fail "G: the resume failed"; }
final_files_match G

# D: a training example that throws.
LOOM_FAULT_INJECT=loader:sample=5:throw run D.log "$train" "${common[@]}" --out D
[ "$rc" -eq 1 ] || { echo "$log"; fail "D: exit code $rc, expected 1"; }
expect D "sample 5"
expect D "on worker"
expect D "file 'corpus.h5'"
expect D "reading example 5 fails"

# E: a training example that hangs: the timeout ends the run, which does not hang on exit.
start=$(date +%s)
LOOM_FAULT_INJECT=loader:sample=5:hang run E.log "$train" "${common[@]}" --out E --loader-timeout 1
[ "$rc" -eq 1 ] || { echo "$log"; fail "E: exit code $rc, expected 1 (124: it hung)"; }
expect E "was not ready within 1 s"
expect E "is stuck reading sample 5"
expect E "of file 'corpus.h5'"
[ $(($(date +%s) - start)) -lt 120 ] || fail "E: took $(($(date +%s) - start)) s"

# H, I: the --data file truncated or deleted under the running job: exit 1 naming the file, within
# the few batches the workers had made ahead.
for change in truncate delete; do
  cp corpus.h5 "data-$change.h5"
  LOOM_FAULT_INJECT="data:step=5:$change" run "$change.log" "$train" "${common[@]/corpus.h5/data-$change.h5}" \
    --out "run-$change"
  [ "$rc" -eq 1 ] || { echo "$log"; fail "$change: exit code $rc, expected 1"; }
  expect "$change" "HDF5 file 'data-$change.h5'"
  expect "$change" "while it was open for reading"
  [ "$change" = delete ] && expect "$change" "was deleted" || expect "$change" "changed size from"
done

# F: malformed fault specifications are errors, not silently ignored.
LOOM_FAULT_INJECT=io:op=fsync:nth=two:errno=ENOSPC run F.log "$train" "${common[@]}" --out F
[ "$rc" -ne 0 ] || fail "F: a malformed LOOM_FAULT_INJECT was accepted"
expect F "LOOM_FAULT_INJECT='io:op=fsync:nth=two:errno=ENOSPC': expected"

echo "train_faults_test: all faults ended as expected"
