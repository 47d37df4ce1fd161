#!/usr/bin/env bash
# GPU check for measurement, one short run on a CUDA machine. Data first, tests last, and
# every step runs even when one before it failed (so one failing CUDA test cannot stop the
# data collection); the exit status is 1 when any step failed.
#   1. scripts/gpu_check.py: replay against eager, speed-ups, graph memory measured as vLLM
#      logs it (free-memory drop) and from the allocator, beside the model's prediction,
#      and its pass/fail rules -> $OUT/gpu_check*.csv;
#   2. the gpu-small sweep (toy-small bf16, vLLM ladder vs powers of two); --strict: a
#      failed point fails the step;
#   3. the report, which then shows estimated against measured graph memory per key;
#   4. the CUDA-marked tests of measure/ and capture/.
# Usage: bash scripts/gpu_measure_check.sh   (OUT=results/gpu and PY=python3 by default)
# Rows are labelled "measured (<GPU name>)"; copy OUT/gpu-small/results.csv to
# cgdispatch/data/reference_<gpu>.csv with a reference_date column to ship reference data.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-results/gpu}"
PY="${PY:-python3}"
mkdir -p "$OUT"
status=0
step() {
    echo "== $*"
    "$@"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAILED (exit $rc): $*" >&2
        status=1
    fi
}
step "$PY" scripts/gpu_check.py --out "$OUT/gpu_check.csv"
step "$PY" -m cgdispatch sweep --preset gpu-small --out "$OUT/gpu-small" --resume --strict \
    --no-progress
step "$PY" -m cgdispatch report "$OUT/gpu-small" --out "$OUT/gpu-small/report" --no-progress
if [ -f "$OUT/gpu-small/report/summary.md" ]; then
    cat "$OUT/gpu-small/report/summary.md"
fi
step "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/measure tests/capture
if [ "$status" -ne 0 ]; then
    echo "gpu_measure_check: a step failed (see FAILED above); data so far is in $OUT" >&2
fi
exit "$status"
