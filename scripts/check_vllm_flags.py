"""Do `tune`'s flags paste into `vllm serve` as they are? vLLM's own argument parser says.

Reads the JSON of ``python -m cgdispatch tune ... --json`` (its ``flags`` and planned
``sizes``), parses the flags with vLLM's ``FlexibleArgumentParser`` and
``EngineArgs.add_cli_args`` (what ``vllm serve`` builds on), builds the engine config
(``EngineArgs.from_cli_args(...).create_engine_config()``, on CPU with the oracle's
platform stand-in and a tiny local model config) and checks that vLLM resolves the
capture sizes the verdict promised. Runs in the virtualenv ``make oracle`` builds:

    .oracle/vllm-0.34.0/bin/python scripts/check_vllm_flags.py tune.json

Exit status 0 when vLLM takes the flags and resolves the planned sizes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_oracle as base  # noqa: E402  (sets vLLM's environment before it is imported)


def resolved_sizes(flags: str) -> dict[str, Any]:
    """vLLM's resolved capture sizes for ``vllm serve MODEL <flags>``."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", base.model_dir(), *shlex.split(flags)])
    args.skip_tokenizer_init = True
    cfg = EngineArgs.from_cli_args(args).create_engine_config()
    cc = cfg.compilation_config
    out = {"cudagraph_mode": str(cc.cudagraph_mode)}
    for name in (
        "cudagraph_capture_sizes",
        "prefill_cudagraph_capture_token_sizes",
        "decode_cudagraph_capture_request_sizes",
    ):
        value = getattr(cc, name, None)
        if value is not None:
            out[name] = sorted(int(x) for x in value)
    out["max_num_seqs"] = cfg.scheduler_config.max_num_seqs
    out["max_num_batched_tokens"] = cfg.scheduler_config.max_num_batched_tokens
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tune_json", help="the output of python -m cgdispatch tune ... --json")
    args = parser.parse_args(argv)
    with open(args.tune_json) as f:
        result = json.load(f)
    version = base.bootstrap()
    got = resolved_sizes(result["flags"])
    print(f"vLLM {version} parsed: vllm serve MODEL {result['flags']}")
    print(json.dumps(got))
    want = result["sizes"]["planned" if result["recommendation"] == "planned" else "vllm default"]
    problems = []
    if result["recommendation"] == "planned":
        if isinstance(want, dict):  # vLLM 0.34: prefill token sizes and decode request sizes
            pairs = tuple(want.items())
        else:
            pairs = (("cudagraph_capture_sizes", want),)
        for name, sizes in pairs:
            if sizes is not None and got.get(name) != sorted(sizes):
                problems.append(f"{name}: vLLM resolved {got.get(name)}, tune planned {sizes}")
    print("OK: vLLM takes the flags and resolves the planned sizes" if not problems else "")
    for problem in problems:
        print("MISMATCH:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
