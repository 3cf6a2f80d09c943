#!/usr/bin/env bash
# Prefill figures for docs/prefill.md: machine limits, pp512/tg128 of the synthetic 12B and
# 1B-class q4 models, the prefill matmuls alone, and where a prefill step's time goes.
#   tools/bench_prefill.sh [LUMEN_BINARY]        (default build/lumen)
# Environment: LUMEN_MODELS_DIR (default /work/models; the synthetic models are made there when
# missing: 6.7 GB and 0.54 GB), LUMEN_BENCH_SHAPES (default "12b 1b"), LUMEN_BENCH_ARGS (extra
# `lumen bench` arguments, e.g. "-p 128" for a quick look), LUMEN_BENCH_OUT (results).
# Run it on a quiet machine; every figure also comes per CPU-second, which other load changes less.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lumen=${1:-$root/build/lumen}
models=${LUMEN_MODELS_DIR:-/work/models}
shapes=${LUMEN_BENCH_SHAPES:-12b 1b}
args=${LUMEN_BENCH_ARGS:-}
out=${LUMEN_BENCH_OUT:-$root/build/bench-prefill}
mkdir -p "$models" "$out"
config() { case $1 in 12b) echo gemma-4-12b-shapes.json ;; 1b) echo gemma-4-1b-class-shapes.json ;; esac; }
for s in $shapes; do
  m="$models/synth-$s-q4.lmp"
  [ -f "$m" ] || "$lumen" convert --synthetic "$root/tools/configs/$(config "$s")" "$m" --quant q4
done
"$lumen" bench --machine --json > "$out/machine.json"
cat "$out/machine.json"
for s in $shapes; do
  # shellcheck disable=SC2086
  "$lumen" bench -m "$models/synth-$s-q4.lmp" --limits "$out/machine.json" $args | tee "$out/bench-$s.txt"
  # shellcheck disable=SC2086
  LUMEN_PROFILE=1 "$lumen" bench -m "$models/synth-$s-q4.lmp" --limits "$out/machine.json" $args -n 2 2>&1 |
    sed -n '/prefill steps/,/^model/p' | tee "$out/profile-$s.txt"
done
# shellcheck disable=SC2086
"$lumen" bench --prefill-kernels $args | tee "$out/prefill-kernels.txt"
