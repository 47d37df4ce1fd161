"""Piecewise CUDA graphs: a ``torch.compile`` backend that splits a model at its attention ops.

The backend receives dynamo's FX graph once (the token dimension is marked dynamic, so one
compile serves every batch size), splits it at the splitting ops with
``torch.fx.passes.split_module``, keeps the attention pieces eager and hands every other
piece to ``wrap_piece`` (the runner passes a PIECEWISE ``CUDAGraphWrapper``). It does not
choose modes or sizes: the wrappers obey the forward context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch.fx.passes.split_module import split_module

from ..core.modes import CUDAGraphMode
from .context import get_forward_context

__all__ = ["PiecewiseBackend", "SplitReport", "is_splitting_op", "mark_tokens_dynamic"]


def _op_name(target: Any) -> str:
    """'ns::name' for torch ops (overload or packet); the function name otherwise."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    qualified = getattr(target, "_qualified_op_name", None)
    if qualified is not None:
        return qualified
    return getattr(target, "__name__", str(target))


def is_splitting_op(node: fx.Node, splitting_ops: Sequence[str]) -> bool:
    """Whether ``node`` calls one of ``splitting_ops`` ('ns::op' or a bare function name)."""
    if node.op != "call_function":
        return False
    name = _op_name(node.target)
    bare = name.split("::")[-1]
    return any(
        op == name or op.split("::")[-1] == bare and "::" not in name for op in splitting_ops
    )


def mark_tokens_dynamic(*tensors: torch.Tensor) -> None:
    """Mark dim 0 (tokens) dynamic so that one compile serves every size, size 1 included.

    Unbacked sizes (torch >= 2.4) are not specialised for 0 and 1; older versions fall back
    to ``mark_dynamic``, which compiles size 1 separately.
    """
    mark = getattr(torch._dynamo.decorators, "mark_unbacked", None)
    for t in tensors:
        if mark is not None:
            mark(t, 0)
        else:  # pragma: no cover - torch < 2.4
            torch._dynamo.mark_dynamic(t, 0)


@dataclass
class SplitReport:
    """What one split produced: pieces in order, which are splitting ops (kept eager)."""

    piece_names: list[str] = field(default_factory=list)
    splitting: list[bool] = field(default_factory=list)

    @property
    def num_pieces(self) -> int:
        return len(self.piece_names)

    @property
    def num_graph_pieces(self) -> int:
        """Pieces that become PIECEWISE graphs (everything but the splitting ops)."""
        return self.splitting.count(False)


class _StaticOutput:
    """Runs a splitting (attention) piece eagerly and keeps its output at a fixed address.

    The next piece's graph reads the attention output by address, so in PIECEWISE mode the
    result is copied into a persistent buffer (one per output, sized for the largest
    capture) and a view of it is returned. Other modes, and sizes above the buffer, return
    the piece's own output: no graph reads it there.
    """

    def __init__(self, fn: Callable[..., Any], max_num_tokens: int) -> None:
        self.fn = fn
        self.max_num_tokens = max_num_tokens
        self.buffers: dict[int, torch.Tensor] = {}

    def __call__(self, *args: Any) -> Any:
        out = self.fn(*args)
        ctx = get_forward_context()
        if ctx is None or ctx.runtime_mode is not CUDAGraphMode.PIECEWISE:
            return out
        if isinstance(out, torch.Tensor):
            return self._static(0, out)
        if isinstance(out, (tuple, list)):
            return type(out)(
                self._static(i, t) if isinstance(t, torch.Tensor) else t for i, t in enumerate(out)
            )
        return out

    def _static(self, index: int, t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0 or t.shape[0] > self.max_num_tokens:
            return t
        buf = self.buffers.get(index)
        if (
            buf is None
            or buf.shape[1:] != t.shape[1:]
            or buf.dtype != t.dtype
            or buf.device != t.device
        ):
            buf = self.buffers[index] = torch.empty(
                (self.max_num_tokens, *t.shape[1:]), dtype=t.dtype, device=t.device
            )
        view = buf[: t.shape[0]]
        view.copy_(t)
        return view


class PiecewiseBackend:
    """``torch.compile(model, backend=PiecewiseBackend(...))``: split once, wrap each piece.

    ``wrap_piece(fn, index, last)`` returns the callable that replaces graph piece ``index``
    (e.g. a PIECEWISE CUDAGraphWrapper); ``last`` is True for the final graph piece, whose
    outputs vLLM makes weak (no later piece reads them). None keeps pieces plain. With
    ``compile_pieces=True`` each graph piece is first compiled by inductor.
    ``num_splits`` counts how often dynamo handed over a graph (1 when one compile serves
    every size).
    """

    def __init__(
        self,
        splitting_ops: Sequence[str],
        max_num_tokens: int,
        wrap_piece: Callable[[Callable[..., Any], int, bool], Callable[..., Any]] | None = None,
        *,
        compile_pieces: bool = False,
    ) -> None:
        if not splitting_ops:
            raise ValueError(
                "splitting_ops is empty: a piecewise backend needs at least one op to split at "
                "(e.g. ['cgdispatch::attention']); use a FULL or NONE mode for no splitting"
            )
        self.splitting_ops = list(splitting_ops)
        self.max_num_tokens = max_num_tokens
        self.wrap_piece = wrap_piece
        self.compile_pieces = compile_pieces
        self.num_splits = 0
        # False once the runner locked capture: a recompile would make pieces without graphs
        self.allow_resplit = True
        self.report = SplitReport()
        self.graph_pieces: list[Callable[..., Any]] = []  # the wrapped graph pieces, in order
        self.split_gm: fx.GraphModule | None = None

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        if self.num_splits and not self.allow_resplit:
            raise RuntimeError(
                "torch.compile recompiled the model after its graphs were captured (a dynamo "
                "guard failed, e.g. another grad mode, a changed module attribute or a newly "
                "registered model class); the new pieces would have no graphs. Run "
                "capture_all() again, or set runner.capture_enabled = True to capture lazily"
            )
        self.num_splits += 1
        piece_of: dict[fx.Node, int] = {}
        piece, splitting_pieces = 0, set()
        for node in gm.graph.nodes:
            if is_splitting_op(node, self.splitting_ops):
                piece += 1
                piece_of[node] = piece
                splitting_pieces.add(piece)
                piece += 1
            else:
                piece_of[node] = piece
        if not splitting_pieces:
            raise ValueError(
                f"no splitting op {self.splitting_ops} was found in the compiled graph: check "
                "GraphConfig.splitting_ops names the model's attention op ('ns::op')"
            )
        split = split_module(gm, None, lambda n: piece_of[n], keep_original_order=True)
        report = SplitReport()
        self.graph_pieces = []
        num_graph_pieces = sum(
            1
            for node in split.graph.nodes
            if node.op == "call_module"
            and int(node.target.rsplit("_", 1)[1]) not in splitting_pieces
        )
        for node in split.graph.nodes:
            if node.op != "call_module":
                continue
            sub = getattr(split, node.target)
            is_split = int(node.target.rsplit("_", 1)[1]) in splitting_pieces
            report.piece_names.append(node.target)
            report.splitting.append(is_split)
            if is_split:
                fn: Callable[..., Any] = _StaticOutput(sub, self.max_num_tokens)
            else:
                fn = self._compile(sub) if self.compile_pieces else sub
                if self.wrap_piece is not None:
                    index = len(self.graph_pieces)
                    fn = self.wrap_piece(fn, index, index == num_graph_pieces - 1)
                self.graph_pieces.append(fn)
            # setattr refuses a plain callable on a Module; the instance dict wins lookup
            split.__dict__[node.target] = fn
        self.report = report
        self.split_gm = split
        return split

    def release(self) -> None:
        """Drop the split graph and its pieces (their graphs are the wrappers' to free)."""
        self.graph_pieces = []
        self.split_gm = None
        self.wrap_piece = None

    @staticmethod
    def _compile(sub: fx.GraphModule) -> Callable[..., Any]:
        """Compile one piece with inductor, from the fake example values dynamo recorded."""
        from torch._inductor.compile_fx import compile_fx

        examples = [
            n.meta.get("example_value", n.meta.get("val"))
            for n in sub.graph.nodes
            if n.op == "placeholder"
        ]
        with torch._guards.tracing(None):
            return compile_fx(sub, examples)
