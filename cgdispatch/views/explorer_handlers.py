"""The dispatch explorer's handlers as plain functions, tested without a browser.

``parse_sizes_box`` reads a sizes box, ``build_config`` turns the boxes into a dispatcher
of the base config's generation, ``decision_html`` and ``message_html`` render what the
explorer shows (:mod:`cgdispatch.views.widgets` wires them to controls). A bad entry comes
back as a message, never an exception.
"""

from __future__ import annotations

import html
import re
import warnings
from typing import Any

from ..core.config import GraphConfig
from ..core.generation import (
    GraphDispatcher,
    capture_keys,
    generation_for,
    generation_of,
    make_graph_dispatcher,
)
from ..core.modes import CUDAGraphMode

__all__ = [
    "parse_sizes_box",
    "format_sizes",
    "build_config",
    "decision_html",
    "message_html",
    "largest_size",
    "box_sizes",
    "slider_max",
]

_SPLIT = re.compile(r"[,\s;]+")


NO_SIZES = "none"  # a sizes box's text for an empty list (a plan with no prefill graphs)


def format_sizes(sizes) -> str:  # noqa: ANN001 - any iterable of ints
    """``[1, 2, 4]`` -> ``"1, 2, 4"`` (what the sizes box shows); no size -> ``"none"``, so
    that :func:`parse_sizes_box` reads back exactly ``sizes``."""
    sizes = list(sizes)
    return ", ".join(str(s) for s in sizes) if sizes else NO_SIZES


def parse_sizes_box(
    text: str, config: GraphConfig, *, limit_name: str = "max_num_batched_tokens"
) -> tuple[list[int] | None, str | None]:
    """Parse a capture-sizes box: ``(sorted distinct sizes, None)`` or ``(None, message)``.

    Sizes are integers separated by commas or spaces. ``none`` is an empty list: no graph
    of that ladder (vLLM 0.34 takes it for either of its ladders, and its planner may
    choose it; V1 refuses it, naming mode NONE). An empty box is an error (clear it
    to nothing and there is nothing to capture: pick mode NONE instead). A size below 1 or
    above the config's ``limit_name`` (max_num_batched_tokens for token sizes,
    max_num_seqs for generation 2's decode request sizes) is an error, not silently dropped.
    """
    if text.strip().lower() == NO_SIZES:
        return [], None
    parts = [p for p in _SPLIT.split(text.strip()) if p]
    if not parts:
        return None, (
            "no capture sizes given: enter sizes such as '1, 2, 4, 8', 'none' for no graph of "
            "this kind (vLLM 0.34), or pick mode NONE"
        )
    bad = [p for p in parts if not re.fullmatch(r"[+]?\d+", p)]
    if bad:
        return None, f"capture sizes {bad} are not integers: enter sizes such as '1, 2, 4, 8'"
    sizes = sorted({int(p) for p in parts})
    if sizes[0] < 1:
        return None, "capture size 0 is invalid: sizes must be >= 1"
    limit = getattr(config, limit_name)
    above = [s for s in sizes if s > limit]
    if above:
        return None, (
            f"capture sizes {above} exceed {limit_name}={limit}: no step is that "
            "large, so such graphs would never run; remove them"
        )
    return sizes, None


def build_config(
    base: GraphConfig,
    sizes_text: str,
    mode: str | CUDAGraphMode,
    decode_sizes_text: str | None = None,
) -> tuple[GraphDispatcher | None, list[str]]:
    """``(dispatcher, notes)`` for ``base`` with the box's sizes and ``mode``; ``(None, [error])`` on a bad entry.

    ``base``'s generation decides the dispatcher: V1 (``CudagraphDispatcher``) takes the box
    as ``cudagraph_capture_sizes``; generation 2 (``CudaGraphManager``) as
    ``prefill_cudagraph_capture_token_sizes``, with ``decode_sizes_text`` as
    ``decode_cudagraph_capture_request_sizes`` (None: vLLM's default for the new limits).
    Warnings raised while building the config (e.g. sizes dropped for sequence parallelism)
    come back as notes beside a usable dispatcher.
    """
    shape = generation_of(base).ladder  # one box per ladder of the release's shape
    lists: list[list[int] | None] = []
    for index, (ladder, text) in enumerate(zip(shape.ladders, (sizes_text, decode_sizes_text))):
        if text is None:  # the release's default for that ladder
            lists.append(None)
            continue
        sizes, error = parse_sizes_box(text, base, limit_name=ladder.limit)
        if error:
            return None, [f"{ladder.name}: {error}" if index else error]
        lists.append(sizes)
    changes = shape.changes(lists)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = base.replace(cudagraph_mode=CUDAGraphMode.parse(mode), **changes)
            dispatcher = make_graph_dispatcher(config, record_stats=False)
    except ValueError as err:
        return None, [str(err)]
    return dispatcher, [str(c.message) for c in caught]


def decision_html(decision: dict[str, Any], cost_source: str = "model") -> str:
    """The decision box: mode, padded size, num_reqs, key, reason and predicted time."""
    e = html.escape
    mode, padded = decision["runtime_mode"], decision["padded_size"]
    if mode == "NONE":
        reqs = "n/a (eager: no graph key)"
    else:
        reqs = "any (PIECEWISE key)" if decision["num_reqs"] is None else decision["num_reqs"]
    generation = generation_for(decision.get("vllm_version"))
    version = generation.release
    rows = [
        ("vLLM", e(f"{version} ({generation.name})")),
        ("runtime mode", f'<b data-testid="decision-mode">{e(mode)}</b>'),
        (
            "padded size",
            f'<b data-testid="decision-padded">{padded}</b> tokens '
            f"({decision['padding_tokens']} padding)",
        ),
        ("num_reqs", f"{e(str(reqs))} (batch: {decision.get('batch_reqs')} requests)"),
        ("key", f"<code>{e(decision['key'])}</code>"),
        ("why", e(decision["reason"])),
    ]
    if decision.get("predicted_ms") is not None:
        rows.append(("predicted step", f"{decision['predicted_ms']:.3f} ms ({e(cost_source)})"))
    body = "".join(f"<tr><td style='padding-right:1em'>{k}</td><td>{v}</td></tr>" for k, v in rows)
    attrs = (
        f'data-testid="dispatch-decision" data-runtime-mode="{e(mode)}" data-padded-size="{padded}" '
        f'data-num-tokens="{decision["num_tokens"]}" data-uniform="{str(decision["uniform_decode"]).lower()}" '
        f'data-loras="{decision["active_loras"]}" data-cascade="{str(decision["cascade"]).lower()}" '
        f'data-vllm-version="{e(version)}" data-num-reqs="{e(str(decision["num_reqs"]))}"'
    )
    return f"<div {attrs}><table>{body}</table></div>"


def message_html(messages: list[str], kind: str = "error") -> str:
    """Messages as a coloured block (``data-testid="dispatch-message"``); empty for none."""
    if not messages:
        return ""
    color = "#b00020" if kind == "error" else "#8a6d00"
    items = "<br>".join(html.escape(m) for m in messages)
    return f'<div data-testid="dispatch-message" data-kind="{kind}" style="color:{color}">{items}</div>'


def largest_size(dispatcher: GraphDispatcher) -> int:
    """The largest capture size (the token list's largest, or the widest graph)."""
    shape = generation_of(dispatcher).ladder
    return shape.largest_tokens(dispatcher.config, capture_keys(dispatcher))


def box_sizes(config: GraphConfig) -> tuple[str, str]:
    """What the sizes boxes show for a config: (token sizes, decode request sizes); the
    second is empty for a shape of one ladder."""
    texts = [format_sizes(sizes) for sizes in generation_of(config).ladder.sizes(config)]
    return texts[0], (texts[1] if len(texts) > 1 else "")


def slider_max(dispatcher: GraphDispatcher) -> int:
    """Slider range: twice the largest capture size (to show the eager region), within limits."""
    largest = largest_size(dispatcher)
    return min(dispatcher.config.max_num_batched_tokens, max(2 * largest, largest + 16, 16))
