"""`GraphRunner`: one model step from flat inputs, through dispatch, buffers and graphs.

Per step: dispatch (mode + padded key) -> copy inputs into persistent buffers -> pad
(padding tokens point at the model's dummy KV slot) -> set the forward context -> run the
model callable (graph wrappers inside obey the context) -> slice outputs to the real
tokens. ``capture_all()`` captures every key largest first and reports the cost.

The runner does not schedule requests or manage KV slots: callers give each token's slot
and position. Inputs are not range-checked unless ``debug=True``.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..core.batch import BatchDescriptor
from ..core.config import GraphConfig
from ..core.dispatcher import ready_dispatcher
from ..core.modes import CUDAGraphMode
from .backends import GraphBackend, get_backend
from .context import ForwardContext, set_forward_context, use_forward_context
from .stepbatch import StepBatch, make_decode_batch, make_mixed_batch
from .wrapper import CUDAGraphWrapper

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GraphRunner"]

_NONE, _FULL = CUDAGraphMode.NONE, CUDAGraphMode.FULL


class GraphRunner:
    """Runs a model step by step with the graphs a :class:`GraphConfig` asks for.

    ``model`` is called as ``model(input_ids, positions, slots) -> logits [T, vocab]`` and
    must expose ``attention_cg_support``, ``dummy_slot``, ``num_slots`` and
    ``config.max_seq_len`` / ``config.vocab_size`` (the toy LM does). The config (default:
    ``GraphConfig(cudagraph_mode="FULL")``) is resolved against the model's attention
    support; ``cudagraph_mode`` is the mode actually used. Piecewise modes go through
    ``compile_piecewise`` (torch.compile with the splitting backend of ``piecewise.py``;
    ``compile_pieces=True`` adds inductor). Model
    parameters should not require grad (the runner adds no ``no_grad`` per step).
    """

    def __init__(
        self,
        model: Any,
        config: GraphConfig | None = None,
        *,
        backend: GraphBackend | str | None = None,
        debug: bool = False,
        compile_pieces: bool = False,
    ) -> None:
        config = GraphConfig(cudagraph_mode="FULL") if config is None else config
        if not isinstance(config, GraphConfig):
            raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
        self.model = model
        self.config = config.resolve(model.attention_cg_support)
        self.cudagraph_mode: CUDAGraphMode = self.config.cudagraph_mode
        self.device = torch.device(getattr(model, "device", "cpu"))
        if backend is None and self.device.type != "cuda":
            backend = "cpu"  # a CPU model cannot be captured into CUDA graphs
        asked = backend.name if isinstance(backend, GraphBackend) else backend
        if isinstance(asked, str) and asked.lower() == "cuda" and self.device.type != "cuda":
            raise ValueError(
                f"backend 'cuda' with a model on {self.device} is invalid: a CUDA graph records "
                "CUDA kernels only, so its replays would skip the model and return stale "
                "outputs; move the model to a CUDA device or use backend='cpu'"
            )
        self.backend = get_backend(backend)
        self.debug = debug
        self.compile_pieces = compile_pieces  # piecewise modes: compile pieces with inductor
        self.piecewise_backend: Any = None  # set by compile_piecewise (split report, counters)
        self._capture_enabled = True
        self.dispatcher = ready_dispatcher(self.config)
        # persistent inputs, sized for the largest capture (eager steps above it use their own):
        # one [3, max] buffer so that a packed batch is one copy; rows are ids, positions, slots
        self.max_num_tokens = max(self.dispatcher.max_capture_size, 1)
        self.inputs = torch.zeros(3, self.max_num_tokens, dtype=torch.long, device=self.device)
        self.input_ids, self.positions, self.slots = self.inputs.unbind(0)
        self.slots.fill_(model.dummy_slot)
        self._async_copy = self.device.type == "cuda"
        self._dirty = 0  # rows [0, _dirty) of `slots` may hold real slots from earlier steps
        self._in_views: dict[int, tuple[torch.Tensor, ...]] = {}  # n -> views to copy into
        self._steps: dict[int, list[Any]] = {}  # id(dispatch answer) -> cached step objects
        self.wrappers: list[CUDAGraphWrapper] = []
        self.model_callable = self.build_callable()
        self.capture_report_: pd.DataFrame | None = None

    # ----- the seam for piecewise compilation -------------------------------------------
    def build_callable(self) -> Callable[..., Any]:
        """The callable one step runs: the model, compiled piecewise and/or FULL-wrapped.

        PIECEWISE pieces go inside (``compile_piecewise``); a FULL wrapper goes around the
        whole model when the mode has FULL graphs. Every wrapper shares ``self.backend``.
        """
        inner: Callable[..., Any] = self.model
        if self.cudagraph_mode.requires_piecewise_compilation():
            inner = self.compile_piecewise(inner)
        if self.cudagraph_mode.has_full_cudagraphs():
            full = CUDAGraphWrapper(
                inner,
                _FULL,
                self.backend,
                num_warmups=self.config.cudagraph_num_of_warmups,
                debug=self.debug,
                name="full",
            )
            self.wrappers.append(full)
            return full
        return inner

    def compile_piecewise(self, model: Callable[..., Any]) -> Callable[..., Any]:
        """Split the model at ``config.effective_splitting_ops`` and wrap each piece PIECEWISE.

        One ``torch.compile`` with :class:`~cgdispatch.capture.piecewise.PiecewiseBackend` serves every
        size (the token dimension is marked dynamic on the first call); each graph piece gets
        a PIECEWISE ``CUDAGraphWrapper`` on ``self.backend`` (one pool), kept in
        ``self.wrappers``. ``self.piecewise_backend`` reports the split.
        """
        from .piecewise import PiecewiseBackend, mark_tokens_dynamic

        def wrap(fn: Callable[..., Any], index: int) -> CUDAGraphWrapper:
            wrapper = CUDAGraphWrapper(
                fn,
                CUDAGraphMode.PIECEWISE,
                self.backend,
                num_warmups=self.config.cudagraph_num_of_warmups,
                debug=self.debug,
                name=f"piece_{index}",
            )
            self.wrappers.append(wrapper)
            return wrapper

        self.piecewise_backend = PiecewiseBackend(
            self.config.effective_splitting_ops,
            self.max_num_tokens,
            wrap,
            compile_pieces=self.compile_pieces,
        )
        compiled = torch.compile(
            _private_step(model), backend=self.piecewise_backend, fullgraph=True
        )
        first = [True]

        def run_compiled(*inputs: torch.Tensor) -> Any:
            if first[0]:  # dynamo reads the marks when it compiles, on the first call only
                mark_tokens_dynamic(*inputs)
                first[0] = False
            # one grad mode for every call: dynamo guards on it, and a recompile would split
            # again into new pieces without graphs
            with torch.no_grad():
                return compiled(*inputs)

        return run_compiled

    # ----- one step ------------------------------------------------------------------------
    @property
    def capture_enabled(self) -> bool:
        """Whether a step may capture a new key (off after ``capture_all(lock=True)``)."""
        return self._capture_enabled

    @capture_enabled.setter
    def capture_enabled(self, value: bool) -> None:
        self._capture_enabled = bool(value)
        if self.piecewise_backend is not None:
            self.piecewise_backend.allow_resplit = self._capture_enabled
        self._steps.clear()  # their contexts carry the flag

    def execute(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        uniform_decode: bool = False,
    ) -> torch.Tensor:
        """Run one step and return logits [num_tokens, vocab] of the real tokens.

        ``uniform_decode=True`` declares that every request has exactly q tokens, grouped
        contiguously (q = 1 + speculative tokens). On a graph path the result is a view of
        the graph's output: the replay overwrites this tensor: copy it if you keep it. On
        CUDA any later step may overwrite it, not only one of the same size: all graphs share
        one pool, so a graph's output can sit in blocks another graph uses as scratch (the
        CPU stand-in does not show this; consume or copy the result before the next step).

        On CUDA, CPU inputs are copied with ``non_blocking=True``: from pageable memory the
        copy is staged before this returns, but from pinned memory it may still be reading
        the inputs afterwards, so do not refill a pinned input until the step's output
        has been read (or the stream synchronised).
        """
        n = input_ids.shape[0]
        if positions.shape[0] != n or slots.shape[0] != n or input_ids.dim() != 1:
            raise ValueError(
                f"input_ids {tuple(input_ids.shape)}, positions {tuple(positions.shape)} and "
                f"slots {tuple(slots.shape)} are invalid: pass three 1-D tensors of equal length"
            )
        if self.debug:
            self.check_inputs(input_ids, positions, slots)
        answer = self.dispatcher.dispatch(n, uniform_decode)
        if answer[1].num_tokens > self.max_num_tokens:
            return self._execute_large(answer, input_ids, positions, slots)
        views = self._in_views.get(n) or self._make_in_views(n)
        # one fused call for the three copies (host -> device copies are asynchronous on CUDA)
        torch._foreach_copy_(
            views[:3], (input_ids, positions, slots), non_blocking=self._async_copy
        )
        return self._run(n, answer)

    def execute_packed(self, tokens: torch.Tensor, uniform_decode: bool = False) -> torch.Tensor:
        """``execute`` with inputs packed as int64 [3, num_tokens] (ids, positions, slots).

        One copy fills the buffers instead of three; the result aliases as in ``execute``.
        """
        if tokens.dim() != 2 or tokens.shape[0] != 3:
            raise ValueError(
                f"tokens of shape {tuple(tokens.shape)} is invalid: pack inputs as [3, num_tokens] "
                "(rows: input ids, positions, slots)"
            )
        n = tokens.shape[1]
        if self.debug:
            self.check_inputs(*tokens)
        answer = self.dispatcher.dispatch(n, uniform_decode)
        if answer[1].num_tokens > self.max_num_tokens:
            return self._execute_large(answer, *tokens)
        views = self._in_views.get(n) or self._make_in_views(n)
        if self._async_copy:
            views[3].copy_(tokens, non_blocking=True)
        else:
            views[3].copy_(tokens)
        return self._run(n, answer)

    def execute_batch(self, batch: StepBatch) -> torch.Tensor:
        """``execute_packed`` on a :class:`StepBatch`."""
        return self.execute_packed(batch.tokens, batch.uniform_decode)

    def _make_in_views(self, n: int) -> tuple[torch.Tensor, ...]:
        views = self._in_views[n] = (
            self.input_ids[:n],
            self.positions[:n],
            self.slots[:n],
            self.inputs[:, :n],
        )
        return views

    def _run(self, n: int, answer: tuple[CUDAGraphMode, BatchDescriptor]) -> torch.Tensor:
        """Pad, set the context, run; the real inputs are already in rows [0, n)."""
        if self._dirty > n:  # rows a larger earlier step left with real slots: padding -> dummy
            self.slots[n : self._dirty].fill_(self.model.dummy_slot)
        self._dirty = n
        # per dispatch answer (one tuple per unpadded n): [answer, context, inputs, output slice]
        step = self._steps.get(id(answer))
        if step is None or step[0] is not answer:  # `answer` is kept alive, so ids stay unique
            step = self._steps[id(answer)] = self._make_step(answer)
        with use_forward_context(step[1]):
            out = self.model_callable(*step[2])
        if answer[1].num_tokens == n:
            return out
        view = step[3]
        if view is None or view._base is not out:  # graph outputs persist: reuse the slice
            view = out[:n]
            if answer[0] is not _NONE:
                step[3] = view
        return view

    def _make_step(self, answer: tuple[CUDAGraphMode, BatchDescriptor]) -> list[Any]:
        mode, desc = answer
        padded = desc.num_tokens
        inputs = (self.input_ids[:padded], self.positions[:padded], self.slots[:padded])
        return [answer, ForwardContext(mode, desc, self._capture_enabled), inputs, None]

    def _execute_large(
        self, answer: tuple[CUDAGraphMode, BatchDescriptor], *inputs: torch.Tensor
    ) -> torch.Tensor:
        """A step above the largest capture size: eager, on the caller's tensors."""
        dev = self.device
        with set_forward_context(_NONE, answer[1], allow_capture=self._capture_enabled):
            return self.model_callable(*(t.to(dev) for t in inputs))

    def check_inputs(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> None:
        """Raise ValueError when a token id, position or slot is out of the model's range."""
        cfg = self.model.config
        limits = (
            ("input_ids", input_ids, cfg.vocab_size),
            ("positions", positions, cfg.max_seq_len),
            ("slots", slots, self.model.num_slots),
        )
        for name, values, limit in limits:
            if values.numel() and (int(values.min()) < 0 or int(values.max()) >= limit):
                raise ValueError(
                    f"{name} range [{int(values.min())}, {int(values.max())}] is invalid: "
                    f"values must lie in [0, {limit - 1}]"
                )

    # ----- batches ---------------------------------------------------------------------------
    def make_decode_batch(self, num_tokens: int, seed: int = 0) -> StepBatch:
        """A random uniform-decode batch: num_tokens // q requests of q tokens each.

        A model with its own ``make_decode_batch(num_tokens, q, seed=)`` builds it (the
        Hugging Face adapter puts every request at one position)."""
        q = self.config.uniform_decode_query_len
        own = getattr(self.model, "make_decode_batch", None)
        if own is not None:
            return own(num_tokens, q, seed=seed)
        return make_decode_batch(self.model.config, num_tokens, q, seed=seed)

    def make_mixed_batch(self, num_tokens: int, seed: int = 0) -> StepBatch:
        """A random batch mixing single-token decodes and prefill chunks.

        Raises ValueError for a model with ``supports_mixed_batches = False``."""
        if not getattr(self.model, "supports_mixed_batches", True):
            raise ValueError(
                f"{type(self.model).__name__} does not support mixed batches (prefill chunks): "
                "it serves decode steps only; use make_decode_batch"
            )
        max_reqs = min(self.model.num_slots, self.config.max_num_seqs)
        return make_mixed_batch(self.model.config, num_tokens, seed=seed, max_num_reqs=max_reqs)

    # ----- capture ---------------------------------------------------------------------------
    def capture_all(self, *, progress: bool = True, lock: bool = True) -> pd.DataFrame:
        """Capture every key of ``dispatcher.get_capture_descs()``, largest first.

        Dummy steps run with every token in the dummy KV slot, so capture never writes a
        real request's cache. The garbage collector is frozen meanwhile. With ``lock``,
        capturing is switched off afterwards (an uncaptured key then raises). Returns the
        capture report (also kept as ``capture_report_``): one row per key with mode,
        num_tokens, num_reqs, uniform, num_graphs, capture_s (graph captures only),
        step_s (the whole dummy step incl. warm-ups) and pool_bytes (CUDA; NaN on CPU).
        """
        import pandas as pd
        from tqdm.auto import tqdm

        todo = [(mode, d) for mode, descs in self.dispatcher.get_capture_descs() for d in descs]
        rows = []
        self.capture_enabled = True
        with self.backend.capture_session():
            for mode, desc in tqdm(todo, desc="capture", unit="graph", disable=not progress):
                rows.append(self._capture_one(mode, desc))
        self.capture_enabled = not lock
        frame = pd.DataFrame(
            rows,
            columns=[
                "mode",
                "num_tokens",
                "num_reqs",
                "uniform",
                "num_graphs",
                "capture_s",
                "step_s",
                "pool_bytes",
            ],
        )
        frame.attrs["backend"] = self.backend.name
        frame.attrs["total_pool_bytes"] = (
            self.backend.pool_bytes_total if self.backend.name == "cuda" else None
        )
        self.capture_report_ = frame
        return frame

    def _capture_one(self, mode: CUDAGraphMode, desc: BatchDescriptor) -> dict[str, Any]:
        n = desc.num_tokens
        before = (
            self.backend.num_graphs,
            self.backend.capture_s_total,
            self.backend.pool_bytes_total,
        )
        ids, pos, slots = self.input_ids[:n], self.positions[:n], self.slots[:n]
        slots.fill_(self.model.dummy_slot)  # capture writes K/V into the dummy slot only
        q = self.config.uniform_decode_query_len if desc.uniform else 1
        pos.copy_(torch.arange(n, device=self.device) % q)
        start = time.perf_counter()
        with set_forward_context(mode, desc, allow_capture=True):
            self.model_callable(ids, pos, slots)
        self.backend.synchronize()
        step_s = time.perf_counter() - start
        pool = self.backend.pool_bytes_total - before[2]
        return {
            "mode": str(mode),
            "num_tokens": n,
            "num_reqs": desc.num_reqs,
            "uniform": desc.uniform,
            "num_graphs": self.backend.num_graphs - before[0],
            "capture_s": self.backend.capture_s_total - before[1],
            "step_s": step_s,
            "pool_bytes": pool if self.backend.name == "cuda" else float("nan"),
        }

    @property
    def captured_keys(self) -> list[tuple[CUDAGraphMode, BatchDescriptor]]:
        """(mode, key) of every graph captured so far by the runner's wrappers, in order."""
        return [(w.runtime_mode, d) for w in self.wrappers for d in w.captured_keys]

    def __repr__(self) -> str:
        return (
            f"GraphRunner(mode={self.cudagraph_mode}, backend={self.backend.name}, "
            f"max_num_tokens={self.max_num_tokens}, captured={len(self.captured_keys)})"
        )


_STEP_IDS = itertools.count()


def _private_step(model: Callable[..., Any]) -> Callable[..., Any]:
    """``model(*inputs)`` behind a code object of its own, for one runner's torch.compile.

    Dynamo caches compiled frames per code object, across ``torch.compile`` calls: compiling
    ``model`` itself puts every runner's entry on the one ``forward`` of the model class, so
    the ninth piecewise runner in a process fails with the recompile limit (fullgraph) and
    each cache entry keeps an old runner's wrappers, graphs and CUDA pool alive. A private
    code object takes its cache entry with it when the runner goes.
    """

    def step(*inputs: Any) -> Any:
        return model(*inputs)

    name = f"cgdispatch_step_{next(_STEP_IDS)}"
    names = {"co_name": name, "co_qualname": name} if sys.version_info >= (3, 11) else {}
    step.__code__ = step.__code__.replace(**(names or {"co_name": name}))
    return step
