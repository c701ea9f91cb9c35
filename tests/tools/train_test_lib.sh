# Shared by the shell tests that run `train` and compare run directories (kill_resume_test.sh,
# pipeline_signal_test.sh, train_faults_test.sh). Source it; it defines functions only.

# Starts test $1 in the empty directory $2 (made anew): fail() then ends it with a message
# naming the test.
start_test() {
  test_name=$1
  rm -rf "$2"
  mkdir -p "$2"
  cd "$2"
}
fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }

# corpus.txt and corpus.h5 in the current directory: a small deterministic text of $2 lines
# (default 60: about 2,600 characters) as a token dataset. $1: the make_dataset binary.
make_corpus() {
  for i in $(seq 1 "${2:-60}"); do
    echo "verse $i: and the loom wove $((i * 7 % 13)) threads of $((i * 3 % 11)) colours."
  done > corpus.txt
  "$1" text --input corpus.txt --out corpus.h5 > /dev/null
}

# The name of the latest checkpoint of run directory $1 (step-NNNNNNNN).
latest_of() { tr -d '\n' < "$1/latest"; }

# The tensor files of the final checkpoint of run $2 (every rank's, under mpirun) against those
# of the reference run $1; prints the differing ones (nothing when all are byte-identical).
differences() {
  local ref=$1 run=$2 step_ref step_run diff="" f
  step_ref=$(latest_of "$ref")
  step_run=$(latest_of "$run")
  [ "$step_ref" = "$step_run" ] || { echo "final checkpoint $step_run, the reference's $step_ref"; return; }
  while IFS= read -r f; do
    local g="$run/${f#"$ref"/}"
    [ -f "$g" ] || { diff="$diff ${f#"$ref"/}(missing)"; continue; }
    cmp -s "$f" "$g" || diff="$diff ${f#"$ref"/}"
  done < <(find "$ref/$step_ref" -name '*.safetensors' | sort)
  echo "$diff"
}
