"""Cold ``calibration_table()``: the stage profiles built layer kind by layer kind, against the
full build that profiles every decoder layer (issue 38, item 7).

Each variant runs in a fresh interpreter with an empty ``CGDISPATCH_CACHE_DIR`` (nothing
cached, on disk or in memory), so each pays for its imports and every stage profile the
table needs. The baseline, measured in the same run, is the full build
(``startup_pricing._full_stage_profile`` put in place of ``_build_stage_profile``); both
give the same profiles bit for bit (tests/estimate/test_stage_profile_layers.py), and this
script checks the two tables are equal (their CSV text).
Figures are ``measured (CPU)``: the CPU seconds of the ``calibration_table`` call alone and
of the whole child process (imports included).

Run: ``PYTHONPATH=. python benchmarks/bench_stage_profile.py`` (about 25 CPU s).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import hashlib, json, sys, time
from cgdispatch.estimate import startup_pricing
from cgdispatch.estimate.startup_data import reference_startups
from cgdispatch.estimate.startup_fit import calibration_table

if sys.argv[1] == "full":
    startup_pricing._build_stage_profile = startup_pricing._full_stage_profile
runs = reference_startups()
start = time.process_time()
table = calibration_table(runs)
call_s = time.process_time() - start
digest = hashlib.sha256(table.to_csv().encode()).hexdigest()
print(json.dumps({"call_s": call_s, "rows": len(table), "digest": digest}))
"""


def _cold(variant: str) -> tuple[float, float, int, str]:
    """(CPU s of the calibration_table call, CPU s of the whole child, table rows, the
    table's digest)."""
    root = Path(__file__).resolve().parents[1]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as cache_dir:
        env = {**os.environ, "CGDISPATCH_CACHE_DIR": cache_dir}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, variant],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = json.loads(out.strip().splitlines()[-1])
    return result["call_s"], child, result["rows"], result["digest"]


def main() -> int:
    full_call, full_child, full_rows, full_digest = _cold("full")
    fast_call, fast_child, fast_rows, fast_digest = _cold("fast")
    if full_digest != fast_digest:
        print("the two builds' calibration tables differ: the spliced profile is wrong")
        return 1
    print(f"cold calibration_table() ({fast_rows} runs), measured (CPU), fresh process each:")
    print(f"  full build (every layer):   call {full_call:6.2f} s, process {full_child:6.2f} s")
    print(f"  one layer per kind, spliced: call {fast_call:6.2f} s, process {fast_child:6.2f} s")
    print(
        f"ratio full / fast: call {full_call / fast_call:.2f}x, "
        f"process {full_child / fast_child:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
