# Shared by the shell tests that run `train` under mpirun and compare run directories
# (kill_resume_test.sh, pipeline_signal_test.sh). Source it; it defines functions only.

# corpus.txt and corpus.h5 in the current directory: a small deterministic text (about 2,600
# characters) as a token dataset. $1: the make_dataset binary.
make_corpus() {
  for i in $(seq 1 60); do
    echo "verse $i: and the loom wove $((i * 7 % 13)) threads of $((i * 3 % 11)) colours."
  done > corpus.txt
  "$1" text --input corpus.txt --out corpus.h5 > /dev/null
}

# The name of the latest checkpoint of run directory $1 (step-NNNNNNNN).
latest_of() { tr -d '\n' < "$1/latest"; }

# Every rank's final checkpoint files of run $2 against those of the reference run $1; prints
# the differing ones (nothing when all are byte-identical).
differences() {
  local ref=$1 run=$2 step_ref step_run diff=""
  step_ref=$(latest_of "$ref")
  step_run=$(latest_of "$run")
  [ "$step_ref" = "$step_run" ] || { echo "final checkpoint $step_run, the reference's $step_ref"; return; }
  for f in "$ref/$step_ref"/rank-*/*.safetensors; do
    local g="$run/${f#"$ref"/}"
    [ -f "$g" ] || { diff="$diff ${f#"$ref"/}(missing)"; continue; }
    cmp -s "$f" "$g" || diff="$diff ${f#"$ref"/}"
  done
  echo "$diff"
}
