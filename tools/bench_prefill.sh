#!/usr/bin/env bash
# Prefill figures for docs/prefill.md: machine limits, pp512/tg128 of the synthetic 12B and
# 1B-class q4 models, the prefill matmuls alone, and where a prefill step's time goes.
#   tools/bench_prefill.sh [LUMEN_BINARY]        (default build/lumen)
# Makes the synthetic models under /work/models when missing (6.7 GB and 0.54 GB). Run it on a
# quiet machine: every figure is also given per CPU-second, which other load does not change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lumen=${1:-$root/build/lumen}
models=${LUMEN_MODELS_DIR:-/work/models}
out=${LUMEN_BENCH_OUT:-$root/build/bench-prefill}
mkdir -p "$models" "$out"
for shape in 12b 1b-class; do
  m="$models/synth-${shape%-class}-q4.lmp"
  [ -f "$m" ] || "$lumen" convert --synthetic "$root/tools/configs/gemma-4-$shape-shapes.json" "$m" --quant q4
done
"$lumen" bench --machine --json > "$out/machine.json"
cat "$out/machine.json"
for shape in 12b 1b; do
  "$lumen" bench -m "$models/synth-$shape-q4.lmp" --limits "$out/machine.json" --json | tee "$out/bench-$shape.json"
done
"$lumen" bench --prefill-kernels -p 512 | tee "$out/prefill-kernels.txt"
LUMEN_PROFILE=1 "$lumen" bench -m "$models/synth-12b-q4.lmp" --limits "$out/machine.json" -p 512 -n 4 2>&1 |
  tee "$out/profile-12b.txt"
