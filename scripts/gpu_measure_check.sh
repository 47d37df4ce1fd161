#!/usr/bin/env bash
# GPU check for measurement (issue 5), one short run on a CUDA machine:
#   1. the CUDA-marked tests of measure/ and capture/ (CUDA events, graph-pool statistics,
#      weak against strong outputs);
#   2. the gpu-small sweep (toy-small bf16, vLLM ladder vs powers of two);
#   3. the report, which then shows estimated against measured graph memory per key.
# Usage: OUT=/some/dir bash scripts/gpu_measure_check.sh   (default OUT=runs/gpu-check)
# Rows are labelled "measured (<GPU name>)"; copy OUT/gpu-small/results.csv to
# cgdispatch/data/reference_<gpu>.csv with a reference_date column to ship reference data.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-runs/gpu-check}"
PY="${PY:-python}"
"$PY" -m pytest -q -m cuda tests/measure tests/capture
time "$PY" -m cgdispatch sweep --preset gpu-small --out "$OUT/gpu-small" --resume --no-progress
"$PY" -m cgdispatch report "$OUT/gpu-small" --out "$OUT/gpu-small/report" --no-progress
cat "$OUT/gpu-small/report/summary.md"
