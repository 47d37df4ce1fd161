"""Checks of user values shared by the modules (pure Python: no torch, no pandas).

Every count a user gives has an upper bound here, checked before anything is allocated in
proportion to it; :data:`BOUNDS` lists them with their reasons (the README's table is
tested against it).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "check_int",
    "check_bool",
    "check_device",
    "check_nesting",
    "check_size_list",
    "as_index",
    "BOUNDS",
    "MAX_STEP_TOKENS",
    "MAX_REQUEST_TOKENS",
    "MAX_STEPS",
    "MAX_REQUESTS",
    "MAX_NUM_SEQS",
    "MAX_CAPTURE_SIZE",
    "MAX_CAPTURE_SIZES",
    "MAX_LORAS",
    "MAX_SPECULATIVE_TOKENS",
    "MAX_PARALLEL",
    "MAX_WARMUPS",
    "MAX_REPEATS",
    "MAX_INPUT_SETS",
    "MAX_NESTING",
    "MAX_BLOCK_SIZE",
    "MAX_MODEL_LEN",
    "DENSE_TABLE_LIMIT",
]

# Upper bounds on counts a user types, so that a slip (10**12) is refused at once instead of
# looping for days or asking for terabytes. Each is far above any real deployment.
MAX_STEP_TOKENS = 2**31 - 1  # tokens in one step: GPU kernels index a step's tokens with int32
MAX_REQUEST_TOKENS = 100_000_000  # prompt or output of one request: 10x the longest context
# a released model accepts (10M tokens)
MAX_STEPS = 10_000_000  # steps one command simulates or dispatches: a day of a busy engine
# (8.6M steps at 100 steps/s), about 700 MB as a step trace
MAX_REQUESTS = 10_000_000  # requests in one trace: ten times the 1M-request benchmark
MAX_NUM_SEQS = 65_536  # max_num_seqs: 64x vLLM's largest default (1024)
MAX_CAPTURE_SIZE = 2**20  # tokens of the largest graph: 128x vLLM's default step budget
MAX_CAPTURE_SIZES = 65_536  # sizes in one capture list: vLLM's own ladder at the largest size
MAX_LORAS = 1_024  # max_loras: adapters resident at once, 4x vLLM's LoRA tests' largest
MAX_SPECULATIVE_TOKENS = 128  # drafts per request per step: published methods use <= 10
MAX_PARALLEL = 4_096  # tensor or data parallel ranks
MAX_WARMUPS = 1_000  # eager runs before a capture or a timing
MAX_REPEATS = 100_000  # timed runs per sweep point: a day at ~1 s a step
MAX_INPUT_SETS = 1_000  # distinct random inputs per sweep point (each is a set of tensors)
MAX_BLOCK_SIZE = 1_024  # tokens per KV-cache block: vLLM's attention kernels take up to 256
MAX_MODEL_LEN = 2 * MAX_REQUEST_TOKENS  # a prompt and its output
MAX_NESTING = 32  # depth of a vLLM JSON or spec file (vLLM's configs nest 3 deep)
# the dispatchers precompute every count up to this many tokens; above it they bisect
DENSE_TABLE_LIMIT = 32_768

BOUNDS: dict[str, tuple[int, str]] = {
    "tokens in a step (num_tokens, max_num_batched_tokens)": (
        MAX_STEP_TOKENS,
        "GPU kernels index a step's tokens with int32",
    ),
    "tokens in a request (prompt, output)": (
        MAX_REQUEST_TOKENS,
        "10x the longest context a released model takes",
    ),
    "steps in a trace or simulation": (MAX_STEPS, "a day of a busy engine"),
    "requests in a trace": (MAX_REQUESTS, "10x the 1M-request benchmark"),
    "max_num_seqs": (MAX_NUM_SEQS, "64x vLLM's largest default"),
    "largest capture size (tokens of one graph)": (
        MAX_CAPTURE_SIZE,
        "128x vLLM's default step budget",
    ),
    "capture sizes in one list": (MAX_CAPTURE_SIZES, "vLLM's ladder at the largest size"),
    "max_loras": (MAX_LORAS, "adapters resident at once"),
    "block_size (KV tokens per block)": (MAX_BLOCK_SIZE, "vLLM's kernels take up to 256"),
    "max_model_len": (MAX_MODEL_LEN, "a longest prompt and a longest output"),
    "num_speculative_tokens": (MAX_SPECULATIVE_TOKENS, "published methods draft <= 10"),
    "tensor / data parallel size": (MAX_PARALLEL, "ranks of one deployment"),
    "warm-up runs": (MAX_WARMUPS, "eager runs before a capture or a timing"),
    "repeats per sweep point": (MAX_REPEATS, "a day at ~1 s a step"),
    "input sets per sweep point": (MAX_INPUT_SETS, "each holds its own tensors"),
    "nesting of a vLLM JSON or spec file": (MAX_NESTING, "vLLM's configs nest 3 deep"),
}


def as_index(value: Any) -> int | None:
    """``value`` as a Python int when it is an integer (numpy's too; bool is not), else None."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, int):
        return int(value)
    if hasattr(value, "__index__") and type(value).__module__ == "numpy":
        return value.__index__()
    return None


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """``value`` as a Python int if it is an integer (numpy's too; bool is not) in
    [``minimum``, ``maximum``], else ValueError naming the value, the rule and the bound."""
    number = as_index(value)
    if number is None or number < minimum:
        raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= {minimum}")
    if maximum is not None and number > maximum:
        raise ValueError(
            f"{name}={value!r} is invalid: it must be at most {maximum:_} "
            "(a sane upper bound; see cgdispatch.core.validate.BOUNDS)"
        )
    return number


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (numpy's too), else ValueError: ``"no"`` is not False."""
    if type(value).__name__ not in ("bool", "bool_"):
        raise ValueError(f"{name}={value!r} is invalid: it must be True or False")
    return bool(value)


def check_device(name: str, value: Any) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``, else ValueError: the devices cgdispatch runs on."""
    import re

    if not isinstance(value, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", value):
        raise ValueError(f"{name}={value!r} is invalid: use 'cpu' or 'cuda' ('cuda:N' for one GPU)")
    return value


def check_nesting(name: str, value: Any, limit: int = MAX_NESTING) -> Any:
    """``value`` if its dicts and lists nest at most ``limit`` deep, else ValueError.

    Walks with an explicit stack, so a hostile document cannot raise RecursionError here.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth > limit:
                raise ValueError(
                    f"{name} nests deeper than {limit} levels: a vLLM config or spec file is "
                    "a few levels deep; check the file for a runaway structure"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def check_size_list(name: str, sizes: Any) -> list[int]:
    """``sizes`` as a list of ints, each in [1, MAX_CAPTURE_SIZE], at most MAX_CAPTURE_SIZES
    of them (numpy ints accepted), else ValueError naming the list and the rule."""
    if isinstance(sizes, (str, bytes, dict)) or not hasattr(sizes, "__len__"):
        raise ValueError(
            f"{name}={sizes!r} is invalid: give a list of integers >= 1, e.g. [1, 2, 4, 8], "
            "or None for the default"
        )
    if len(sizes) > MAX_CAPTURE_SIZES:
        raise ValueError(
            f"{name} has {len(sizes):_} sizes: at most {MAX_CAPTURE_SIZES:_} "
            "(each is a graph to capture; cgdispatch.core.validate.BOUNDS)"
        )
    out = []
    for size in sizes:
        number = as_index(size)
        if number is None or not 1 <= number <= MAX_CAPTURE_SIZE:
            raise ValueError(
                f"capture size {size!r} in {name} is invalid: it must be an integer from 1 to "
                f"{MAX_CAPTURE_SIZE:_} (cgdispatch.core.validate.BOUNDS)"
            )
        out.append(number)
    return out
