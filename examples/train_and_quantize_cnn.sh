#!/usr/bin/env bash
# The main job of the README's Quick start, with the tools built in build/: Debian's
# Fashion-MNIST converted to HDF5, the zoo's small CNN trained on it for two epochs, then
# calibrated to INT8. Each command is printed before it runs, so this reads as a transcript
# of how the tools are used (docs/train.md, docs/quantization.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/tools data=build/datasets run=build/runs/cnn
set -x
"$bin/make_dataset" fashion-mnist --out "$data"
"$bin/train" --model cnn --data "$data/fashion-mnist-train.h5" --val "$data/fashion-mnist-test.h5" \
  --epochs 2 --batch 128 --warmup 100 --out "$run" --force
"$bin/quantize" --model "$run/model.safetensors" --calib "$data/fashion-mnist-train.h5" \
  --method entropy --per-channel --out "$run/model.int8.safetensors" --force
