#!/usr/bin/env bash
# Family figures for docs/family.md: pp512/tg128 of synthetic q4 models of the E2B, E4B and
# 26B-A4B shapes (decode against the bandwidth roofline of the bytes a step actually reads:
# the dense matrices, the chosen experts, the per-layer input rows read), and where a decode
# step's time goes.
#   tools/bench_family.sh [LUMEN_BINARY] [SHAPES...]   (default build/lumen; e2b e4b 26b-a4b)
# Makes the synthetic models under $LUMEN_MODELS_DIR (default /work/models) when missing:
# 2.6 GB (E2B), 4.2 GB (E4B) and 14.2 GB (26B-A4B). Run it on a quiet machine; every
# figure also comes with the CPU share the process got.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lumen=${1:-$root/build/lumen}
shift || true
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(e2b e4b 26b-a4b)
models=${LUMEN_MODELS_DIR:-/work/models}
out=${LUMEN_BENCH_OUT:-$root/build/bench-family}
mkdir -p "$models" "$out"
for shape in "${shapes[@]}"; do
  m="$models/synth-$shape-q4.lmp"
  [ -f "$m" ] || "$lumen" convert --synthetic "$root/tools/configs/gemma-4-$shape-shapes.json" "$m" --quant q4
done
"$lumen" bench --machine --json > "$out/machine.json"
cat "$out/machine.json"
for shape in "${shapes[@]}"; do
  m="$models/synth-$shape-q4.lmp"
  "$lumen" bench -m "$m" --limits "$out/machine.json" -p 512 -n 128 --json | tee "$out/bench-$shape.json"
  "$lumen" bench -m "$m" --limits "$out/machine.json" -p 512 -n 128 | tee "$out/bench-$shape.txt"
  LUMEN_PROFILE=1 "$lumen" bench -m "$m" --limits "$out/machine.json" -p 64 -n 16 2>&1 | tee "$out/profile-$shape.txt"
done
