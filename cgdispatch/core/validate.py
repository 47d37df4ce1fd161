"""Checks of user values shared by the modules (pure Python: no torch, no pandas).

Every count a user gives has an upper bound here, checked before anything is allocated in
proportion to it; :data:`BOUNDS` lists them with their reasons (the README's table is
tested against it).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = [
    "check_int",
    "check_bool",
    "check_device",
    "check_nesting",
    "check_json_depth",
    "check_text",
    "read_json_file",
    "BadNumber",
    "check_list_length",
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
    "MAX_LAYERS",
    "MAX_MODEL_WIDTH",
    "MAX_HEADS",
    "MAX_VOCAB",
    "MAX_EXPERTS",
    "MAX_DEVICE_RATE",
    "MAX_DEVICE_MEMORY",
    "MAX_DEVICE_US",
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
# a model's config.json (models/config_json.py, models/shape_rules.py): far above released
# models, low enough that the meta-tensor model and the byte counts stay small integers
MAX_LAYERS = 1_024  # num_hidden_layers: 8x the deepest released decoder (Llama 3.1 405B: 126)
MAX_MODEL_WIDTH = 1_048_576  # hidden, intermediate and expert sizes, head_dim, LoRA ranks:
# 19x the widest released MLP (Llama 3.1 405B's intermediate_size 53,248)
MAX_HEADS = 4_096  # attention or KV heads: 32x the most a released model has (128)
MAX_VOCAB = 16_777_216  # vocab_size: 64x the largest released vocabulary (262,144)
MAX_EXPERTS = 16_384  # routed experts: 32x the most a released model routes (512)
# a device spec (estimate/devices.py DeviceSpec, --device-spec)
MAX_DEVICE_RATE = 10**18  # FLOP/s or bytes/s: 200x a B200's dense fp8 rate (4.5e15 FLOP/s)
MAX_DEVICE_MEMORY = 2**44  # bytes of one GPU (16 TiB): 60x the largest GPU's (288 GB)
MAX_DEVICE_US = 1_000_000  # a launch or per-step host cost in microseconds: one second
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
    "layers of a model (num_hidden_layers)": (MAX_LAYERS, "8x the deepest released decoder"),
    "width of a model (hidden, intermediate and expert sizes, head_dim, LoRA ranks)": (
        MAX_MODEL_WIDTH,
        "19x the widest released MLP",
    ),
    "attention or KV heads of a model": (MAX_HEADS, "32x the most a released model has"),
    "vocab_size": (MAX_VOCAB, "64x the largest released vocabulary"),
    "routed experts of a model": (MAX_EXPERTS, "32x the most a released model routes"),
    "a device's FLOP/s or bytes/s": (MAX_DEVICE_RATE, "200x a B200's dense fp8 FLOP/s"),
    "a device's memory_bytes": (MAX_DEVICE_MEMORY, "60x the largest GPU's memory"),
    "a device's launch and step costs (us)": (MAX_DEVICE_US, "one second per launch"),
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


def check_list_length(name: str, sizes: Any, fix: str) -> None:
    """ValueError unless ``sizes`` is a list-like (not text nor a dict) of at most
    MAX_CAPTURE_SIZES items; ``fix`` says what to give instead of a value that is not one."""
    if isinstance(sizes, (str, bytes, dict)) or not hasattr(sizes, "__len__"):
        raise ValueError(f"{name}={sizes!r} is invalid: {fix}")
    if len(sizes) > MAX_CAPTURE_SIZES:
        raise ValueError(
            f"{name} has {len(sizes):_} sizes: at most {MAX_CAPTURE_SIZES:_} "
            "(each is a graph to capture; cgdispatch.core.validate.BOUNDS)"
        )


def check_size_list(name: str, sizes: Any) -> list[int]:
    """``sizes`` as a list of ints, each in [1, MAX_CAPTURE_SIZE], at most MAX_CAPTURE_SIZES
    of them (numpy ints accepted), else ValueError naming the list and the rule."""
    check_list_length(
        name, sizes, "give a list of integers >= 1, e.g. [1, 2, 4, 8], or None for the default"
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_text(name: str, value: Any, *, max_chars: int = 1_000) -> str:
    """``value`` if it is a non-empty string of at most ``max_chars`` characters with no
    control character (a newline in a device or model name would start a line of its own in
    the verdict, e.g. a forged ``vllm serve`` line), else ValueError naming it."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}={value!r} is invalid: give a non-empty text")
    bad = _CONTROL.search(value)
    if bad is not None:
        raise ValueError(
            f"{name}={value!r} is invalid: it holds the control character "
            f"{bad.group()!r}; names are printed on one line: remove it"
        )
    if len(value) > max_chars:
        raise ValueError(f"{name} has {len(value):_} characters: at most {max_chars:_}")
    return value


class BadNumber:
    """A number :func:`read_json_file` would not turn into a Python number: an integer of
    more than :data:`_MAX_DIGITS` digits, a float out of range (``1e999``), ``NaN`` or
    ``Infinity``. It stands where the number was, so the check of that field names it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        if len(self.text) > 24:
            return f"<a {len(self.text):_}-digit number>"
        return self.text


_MAX_DIGITS = 40  # longer integers are BadNumber: every bound here has fewer than 20 digits
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def check_json_depth(name: str, text: str, limit: int = MAX_NESTING) -> None:
    """ValueError when the JSON ``text`` nests its objects and arrays deeper than ``limit``,
    found before parsing (Python's parser raises RecursionError on ~100,000 levels)."""
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub('""', text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                raise ValueError(
                    f"{name} nests deeper than {limit} levels: a vLLM config or spec file is "
                    "a few levels deep; check the file for a runaway structure"
                )
        else:
            depth -= 1


def read_json_file(path: Any, what: str) -> Any:
    """The JSON value in the file at ``path``, or ValueError naming ``what`` (the file and
    the flag that gave it): a missing, empty, truncated, non-UTF-8 or too deeply nested
    file. Numbers Python would lose or refuse (``NaN``, ``Infinity``, ``1e999``, integers
    of more than 40 digits) come back as :class:`BadNumber`, for the field's check to name."""
    from pathlib import Path

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{what} cannot be read: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{what} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not text.strip():
        raise ValueError(f"{what} is empty: it must hold one JSON object")
    check_json_depth(what, text)

    def number(kind: type) -> Any:
        def parse(token: str) -> Any:
            if kind is int and len(token.lstrip("-")) > _MAX_DIGITS:
                return BadNumber(token)
            value = kind(token)
            return value if kind is int or math.isfinite(value) else BadNumber(token)

        return parse

    try:
        return json.loads(
            text, parse_int=number(int), parse_float=number(float), parse_constant=BadNumber
        )
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{what} is not JSON ({err.msg}: line {err.lineno}, column {err.colno}): "
            "check that the file is complete"
        ) from None
