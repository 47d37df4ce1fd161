"""How commands are made: ``command_parser`` names a command once and its bad flags fail in one
line; ``demo`` and ``dispatch`` read the same config and release flags (random values)."""

from __future__ import annotations

import argparse
import string

import numpy as np
import pytest

from cgdispatch.__main__ import build_parser
from cgdispatch.cli.errors import command_parser
from cgdispatch.core.generation import GENERATIONS


def test_command_parser_fails_in_one_line(capsys):
    rng = np.random.default_rng()
    name = "".join(rng.choice(list(string.ascii_lowercase), size=int(rng.integers(3, 12))))
    flag = "--" + "".join(rng.choice(list(string.ascii_lowercase), size=8))
    subparsers = argparse.ArgumentParser(prog="cgdispatch").add_subparsers(dest="command")
    parser = command_parser(subparsers, name, help="h", description="d")
    parser.add_argument("--n", type=int)
    assert subparsers.choices[name] is parser
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([flag])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {name}: ")
    assert flag in err and err.endswith(f"(see python -m cgdispatch {name} --help)\n")
    assert parser.parse_args(["--n", "7"]).n == 7


def test_demo_and_dispatch_read_the_same_config_flags():
    rng = np.random.default_rng()
    release = str(rng.choice([g.release for g in GENERATIONS.values()]))
    sizes = ",".join(map(str, sorted(set(rng.integers(1, 512, size=5).tolist()))))
    flags = [
        "--mode", str(rng.choice(["FULL", "PIECEWISE", "FULL_AND_PIECEWISE"])),
        "--sizes", sizes,
        "--max-num-seqs", str(rng.integers(1, 1024)),
        "--max-num-batched-tokens", str(rng.integers(1, 32768)),
        "--num-speculative-tokens", str(rng.integers(0, 5)),
        "--max-loras", str(rng.integers(0, 8)),
        "--vllm-version", release,
        "--decode-sizes", sizes,
        "--prefill-sizes", sizes,
    ]  # fmt: skip
    parser = build_parser()
    demo = vars(parser.parse_args(["demo", *flags]))
    one = vars(parser.parse_args(["dispatch", "5", *flags]))
    names = {f.lstrip("-").replace("-", "_") for f in flags[::2]}
    assert names <= set(demo) & set(one)
    assert {k: demo[k] for k in names} == {k: one[k] for k in names}
    assert demo["sizes"] == sizes and one["vllm_version"] == demo["vllm_version"]
