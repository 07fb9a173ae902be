#!/usr/bin/env bash
# Installs dependencies, builds the release preset's examples, and runs the
# main job: train_transformer (a 4-layer transformer decoder trained with
# AdamW to reverse digit sequences on a 2x2 thread mesh, tensor parallel and
# then sequence parallel, each checked against the same training on one
# device and for held-out accuracy), then train_mlp, xshard-plan on a 4x2
# mesh and the sharding tour.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh

cmake --preset release
cmake --build --preset release --target train_transformer train_mlp xshard-plan sharding_tour

run() {
  local exe="$1"
  shift
  if [ ! -x "$exe" ]; then
    echo "main.sh: $exe was not built (is its source in examples/?)" >&2
    exit 1
  fi
  echo "== $exe $*"
  "$exe" "$@"
}

run build/release/examples/train_transformer/train_transformer --layout tp --trace build/release/train_transformer.trace.json
run build/release/examples/train_transformer/train_transformer --layout sp --trace build/release/train_transformer_sp.trace.json
run build/release/examples/train_mlp/train_mlp --trace build/release/train_mlp.trace.json
run build/release/examples/xshard-plan/xshard-plan --mesh "data=4,model=2" --spec "data,None" --shape 8,16
run build/release/examples/sharding_tour/sharding_tour
