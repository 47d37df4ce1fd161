"""`GraphRunner`: one model step from flat inputs, through dispatch, buffers and graphs.

Per step: dispatch (mode + padded key) -> copy inputs into persistent buffers -> pad
(padding tokens point at the model's dummy KV slot) -> set the forward context -> run the
model callable (graph wrappers inside obey the context) -> slice outputs to the real
tokens. ``capture_all()`` captures every key largest first and reports the cost;
``release_graphs()`` (or leaving a ``with GraphRunner(...)`` block) frees graphs, pool and
compiled pieces.

Any generation of vLLM's dispatch (docs/semantics_v2.md): the runner asks the registry for
the config's dispatcher (``make_graph_dispatcher``) and keys graphs by its descriptors:
generation 2's ``CudaGraphManager`` by ``BatchExecutionDescriptor`` (uniform decode graphs
sized by request count, token-keyed graphs on the prefill grid), V1's
``CudagraphDispatcher`` by ``BatchDescriptor``.

The runner does not schedule requests or manage KV slots: callers give each token's slot
and position. Inputs are not range-checked unless ``debug=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..core.config import GraphConfig
from ..core.generation import (
    GraphDispatcher,
    GraphKey,
    capture_keys,
    generation_of,
    make_graph_dispatcher,
)
from ..core.modes import CUDAGraphMode
from .assemble import assemble_step, release_step
from .backends import GraphBackend, get_backend
from .capture_keys import capture_every_key
from .context import ForwardContext, swap_forward_context, use_forward_context
from .model import RunnerModel, check_token_ranges, decode_batch, mixed_batch
from .pool import OutputLifetime
from .prepared import PreparedStep
from .stepbatch import StepBatch
from .wrapper import CUDAGraphWrapper, check_warmups

if TYPE_CHECKING:
    import pandas as pd

    from .piecewise import PiecewiseBackend

__all__ = ["GraphRunner", "RunnerModel", "persistent_tokens"]

_NONE = CUDAGraphMode.NONE


class GraphRunner:
    """Runs a model step by step with the graphs a :class:`GraphConfig` asks for.

    ``model`` satisfies :class:`RunnerModel` (``model(input_ids, positions, slots) ->
    logits [T, vocab]`` plus the properties the runner reads; the toy LM and the Hugging
    Face adapter do). ``weak_outputs`` (default True, as vLLM): a step's result is valid
    until the next graph step of any size; False keeps each graph's output in its own
    memory (valid until the next step of the same padded size) at the cost of one more
    output per graph in the pool. The config (default:
    ``GraphConfig(cudagraph_mode="FULL")``) is resolved against the model's attention
    support; ``cudagraph_mode`` is the mode actually used. Piecewise modes go through one
    ``torch.compile`` with the splitting backend of ``piecewise.py`` (``assemble.py``;
    ``compile_pieces=True`` adds inductor). The config's generation builds the dispatcher
    (``self.dispatcher``); the persistent buffers cover its widest descriptor. Model
    parameters should not require grad (the runner adds no ``no_grad`` per step).
    ``max_num_tokens``: rows of the persistent input buffers (see :func:`persistent_tokens`);
    an eager baseline timed against a graph runner should get the graph runner's, so that
    both copy a step's inputs the same way.
    """

    def __init__(
        self,
        model: RunnerModel,
        config: GraphConfig | None = None,
        *,
        backend: GraphBackend | str | None = None,
        debug: bool = False,
        compile_pieces: bool = False,
        weak_outputs: bool = True,
        max_num_tokens: int | None = None,
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
        self.backend = get_backend(backend, self.device)  # on the model's own device
        if self.cudagraph_mode is not _NONE:  # before any wrapper or compile is built
            check_warmups(self.config.cudagraph_num_of_warmups, self.backend)
        self.debug = debug
        self.compile_pieces = compile_pieces  # piecewise modes: compile pieces with inductor
        # the outputs a step hands back: WEAK as vLLM, GRAPH for the strong-output option
        self.weak_outputs = bool(weak_outputs)
        self.output_lifetime = OutputLifetime.WEAK if weak_outputs else OutputLifetime.GRAPH
        self.piecewise_backend: PiecewiseBackend | None = (
            None  # set by assemble_step (split report)
        )
        self.released = False
        self._capture_enabled = True
        self.dispatcher: GraphDispatcher = make_graph_dispatcher(self.config)
        # the generation's per-step question, without the facade's checks (the hot path)
        self._dispatch = generation_of(self.dispatcher).graphs.step_dispatch(self.dispatcher)
        largest = max((k.num_tokens for k in capture_keys(self.dispatcher)), default=0)
        # persistent inputs (eager steps above them use their own tensors): one [3, max]
        # buffer so that a packed batch is one copy; rows are ids, positions, slots
        self.max_num_tokens = persistent_tokens(self.config, largest, max_num_tokens)
        self.inputs = torch.zeros(3, self.max_num_tokens, dtype=torch.long, device=self.device)
        self.input_ids, self.positions, self.slots = self.inputs.unbind(0)
        self.slots.fill_(model.dummy_slot)
        self._async_copy = self.device.type == "cuda"
        self._dirty = 0  # rows [0, _dirty) of `slots` may hold real slots from earlier steps
        # (id of the answer's descriptor, real token count) -> its prepared step
        self._steps: dict[Any, PreparedStep] = {}
        self.wrappers: list[CUDAGraphWrapper] = []
        self.model_callable = self.build_callable()
        self.capture_report_: pd.DataFrame | None = None

    # ----- the seam for piecewise compilation -------------------------------------------
    def build_callable(self) -> Callable[..., Any]:
        """The callable one step runs: the model, compiled piecewise and/or FULL-wrapped.

        PIECEWISE wrappers go around the pieces between attention calls, a FULL wrapper
        around the whole model when the mode has FULL graphs; all share ``self.backend``
        and are kept in ``self.wrappers`` (``assemble.py``).
        """
        return assemble_step(self)

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
        num_reqs: int | None = None,
    ) -> torch.Tensor:
        """Run one step and return logits [num_tokens, vocab] of the real tokens.

        ``uniform_decode=True`` declares that every request has exactly q tokens, grouped
        contiguously (q = 1 + speculative tokens). ``num_reqs``: the step's request count,
        which generation 2 checks against each graph's (V1 does not read it); None means
        ``cdiv(num_tokens, q)`` for a uniform decode and 1 otherwise
        (``core.generation.default_num_reqs``).

        What the caller may keep: on a graph path the result is a view of a graph's
        output, not a tensor of its own. With weak outputs (the default, as vLLM) it is
        valid until the next step that replays or captures any graph: all graphs share
        one pool, and the next one may reuse the blocks (on CUDA it may; the CPU stand-in
        always does). With ``weak_outputs=False`` it is valid until the next step of the
        same padded size. Copy it (``.clone()``) to keep it longer. An eager step (NONE)
        returns a tensor of its own.

        On CUDA, CPU inputs are copied with ``non_blocking=True``: from pageable memory the
        copy is staged before this returns, but from pinned memory it may still be reading
        the inputs afterwards, so do not refill a pinned input until the step's output
        has been read (or the stream synchronised).
        """
        shape = input_ids.shape
        if positions.shape != shape or slots.shape != shape or len(shape) != 1:
            raise ValueError(
                f"input_ids {tuple(input_ids.shape)}, positions {tuple(positions.shape)} and "
                f"slots {tuple(slots.shape)} are invalid: pass three 1-D tensors of equal length"
            )
        n = shape[0]
        if self.debug:
            self.check_inputs(input_ids, positions, slots)
        # _prepare inlined: the hot path (benchmarks/bench_replay_overhead.py)
        cache_key, answer, mode, key = self._dispatch(n, num_reqs, uniform_decode)
        step = self._steps.get(cache_key)
        if step is None or step.answer is not answer:
            step = self._make_step(n, answer, mode, key, cache_key)
        if step.oversized:
            return self._execute_large(step, input_ids, positions, slots)
        # one fused call for the three copies (host -> device copies are asynchronous on CUDA)
        torch._foreach_copy_(
            step.row_views, (input_ids, positions, slots), non_blocking=self._async_copy
        )
        return self._run(step)

    def execute_packed(
        self, tokens: torch.Tensor, uniform_decode: bool = False, num_reqs: int | None = None
    ) -> torch.Tensor:
        """``execute`` with inputs packed as int64 [3, num_tokens] (ids, positions, slots).

        One copy fills the buffers instead of three; the result may be kept as in ``execute``.
        """
        if tokens.dim() != 2 or tokens.shape[0] != 3:
            raise ValueError(
                f"tokens of shape {tuple(tokens.shape)} is invalid: pack inputs as [3, num_tokens] "
                "(rows: input ids, positions, slots)"
            )
        n = tokens.shape[1]
        if self.debug:
            self.check_inputs(*tokens)
        step = self._prepare(n, uniform_decode, num_reqs)
        if step.oversized:
            return self._execute_large(step, *tokens)
        step.packed_view.copy_(tokens, non_blocking=self._async_copy)
        return self._run(step)

    def execute_batch(self, batch: StepBatch) -> torch.Tensor:
        """``execute_packed`` on a :class:`StepBatch`."""
        return self.execute_packed(batch.tokens, batch.uniform_decode, batch.num_reqs)

    # ----- the shared hot path ---------------------------------------------------------------
    def _prepare(self, n: int, uniform_decode: bool, num_reqs: int | None) -> PreparedStep:
        """Dispatch, and the prepared step of the answer (built on its first use).

        The generation's ``step_dispatch`` hands back the same answer object for the same
        question and a cache key made from it, which finds the step built for it.
        """
        cache_key, answer, mode, key = self._dispatch(n, num_reqs, uniform_decode)
        step = self._steps.get(cache_key)
        if step is None or step.answer is not answer:
            step = self._make_step(n, answer, mode, key, cache_key)
        return step

    def _run(self, step: PreparedStep) -> torch.Tensor:
        """Pad, set the context, run; the real inputs are already in rows [0, n)."""
        n = step.num_tokens
        if self._dirty > n:  # rows a larger earlier step left with real slots: padding -> dummy
            self.slots[n : self._dirty].fill_(self.model.dummy_slot)
        self._dirty = n
        previous = swap_forward_context(step.context)  # no context-manager object per step
        try:
            out = self.model_callable(*step.model_inputs)
        finally:
            swap_forward_context(previous)
        if step.padded_tokens == n:
            return out
        view = step.out_slice
        if view is None or view._base is not out:  # graph outputs persist: reuse the slice
            view = out[:n]
            if step.context.runtime_mode is not _NONE:
                step.out_slice = view
        return view

    def _make_step(
        self, n: int, answer: Any, mode: CUDAGraphMode, desc: GraphKey, cache_key: Any
    ) -> PreparedStep:
        if self.released:
            raise RuntimeError(
                "this GraphRunner was released (release_graphs() or the end of its with-block): "
                "build a new runner to run more steps"
            )
        context = ForwardContext(mode, desc, self._capture_enabled)
        padded = desc.num_tokens
        if padded > self.max_num_tokens:  # not cached: such answers may be built per call
            return PreparedStep(answer, n, padded, True, context)
        step = self._steps[cache_key] = PreparedStep(
            answer,
            n,
            padded,
            False,
            context,
            row_views=(self.input_ids[:n], self.positions[:n], self.slots[:n]),
            packed_view=self.inputs[:, :n],
            model_inputs=(self.input_ids[:padded], self.positions[:padded], self.slots[:padded]),
        )
        return step

    def _execute_large(self, step: PreparedStep, *inputs: torch.Tensor) -> torch.Tensor:
        """A step above the largest capture size: eager, on the caller's tensors."""
        dev = self.device
        with use_forward_context(step.context):
            return self.model_callable(*(t.to(dev) for t in inputs))

    def check_inputs(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> None:
        """Raise ValueError when a token id, position or slot is out of the model's range."""
        check_token_ranges(self.model, input_ids, positions, slots)

    # ----- batches ---------------------------------------------------------------------------
    def make_decode_batch(self, num_tokens: int, seed: int = 0) -> StepBatch:
        """A random uniform-decode batch: num_tokens // q requests of q tokens each."""
        return decode_batch(self.model, num_tokens, self.config.uniform_decode_query_len, seed)

    def make_mixed_batch(self, num_tokens: int, seed: int = 0) -> StepBatch:
        """A random batch mixing single-token decodes and prefill chunks.

        Raises ValueError for a model with ``supports_mixed_batches = False``."""
        return mixed_batch(self.model, num_tokens, self.config.max_num_seqs, seed)

    # ----- capture ---------------------------------------------------------------------------
    def capture_all(self, *, progress: bool = True, lock: bool = True) -> pd.DataFrame:
        """Capture every key of ``dispatcher.get_capture_descs()``, largest first.

        Dummy steps run with every token in the dummy KV slot, so capture never writes a
        real request's cache. The garbage collector is frozen meanwhile. With ``lock``,
        capturing is switched off afterwards (an uncaptured key then raises). Returns the
        capture report (also kept as ``capture_report_``): one row per key with mode,
        num_tokens, num_reqs, uniform, num_graphs, capture_s (graph captures only),
        step_s (the whole dummy step incl. warm-ups), pool_bytes (reserved bytes the graph
        captures added) and device_bytes (the drop in free device memory over them, driver
        memory of the instantiated graphs included) (CUDA; NaN on CPU, where
        ``backend.ledger`` holds the stand-in's pool model).
        """
        self.capture_report_ = capture_every_key(self, progress=progress, lock=lock)
        return self.capture_report_

    @property
    def captured_keys(self) -> list[tuple[CUDAGraphMode, GraphKey]]:
        """(mode, key) of every graph captured so far by the runner's wrappers, in order."""
        return [(w.runtime_mode, d) for w in self.wrappers for d in w.captured_keys]

    # ----- release ---------------------------------------------------------------------------
    def release_graphs(self) -> None:
        """Free every graph, the pool and the compiled pieces; the runner runs no more steps.

        Dynamo's cache entry for this runner's compile goes too, so that a long sweep in one
        process does not grow. A result a step returned earlier keeps its memory on the CPU
        stand-in and points at freed pool memory on CUDA: copy what you keep first.
        """
        if not self.released:
            self.released = True
            self._steps.clear()
            release_step(self)

    def __enter__(self) -> GraphRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_graphs()

    def __repr__(self) -> str:
        return (
            f"GraphRunner(mode={self.cudagraph_mode}, backend={self.backend.name}, "
            f"max_num_tokens={self.max_num_tokens}, captured={len(self.captured_keys)})"
        )


def persistent_tokens(config: GraphConfig, largest_key: int, asked: int | None) -> int:
    """Rows of the runner's persistent input buffers.

    ``asked`` when given (at least the largest captured key); else the largest key, or, for
    a config that captures nothing (NONE), ``max_num_batched_tokens``, as vLLM sizes its
    input buffers for every mode (``vllm/v1/worker/gpu_model_runner.py``:
    ``max_num_tokens = scheduler_config.max_num_batched_tokens``). A step above it takes the
    eager path on the caller's tensors (three copies instead of one packed copy), so an
    eager baseline sized 1 would be slowed at every size above one token.
    """
    if asked is None:
        if largest_key >= 1:
            return largest_key
        return max([config.max_num_batched_tokens, *config.cudagraph_capture_sizes])
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < max(largest_key, 1):
        raise ValueError(
            f"max_num_tokens={asked!r} is invalid: the persistent buffers must hold the "
            f"largest captured key ({largest_key} tokens) and at least 1 token; pass an "
            f"integer >= {max(largest_key, 1)} or None"
        )
    return asked
