"""Every vLLM release from 0.8 on: its dispatch generation and its defaults, in one table.

The generation registry (:mod:`cgdispatch.core.generation`) holds the dispatchers
cgdispatch models (V1's ``CudagraphDispatcher`` as vLLM 0.33 has it, generation 2's
``CudaGraphManager`` from 0.34). People run every release in between and before; this
module maps any release string (``"0.10.1.1"``, ``"0.11.2"``, ``"0.26.1"``, ``"0.34.0"``)
to its generation and to the defaults that release starts with:

- the default capture-size list (``cudagraph_capture_sizes`` when none is given),
- the default ``max_num_seqs`` and ``max_num_batched_tokens`` by GPU (``vllm serve``'s and
  the ``LLM`` class's),
- the default ``cudagraph_mode``, whether scheduling is asynchronous by default,
- whether the memory profile estimates graph memory and whether it subtracts that
  estimate from the KV-cache budget,
- how the profile run's sampler warm-up applies top-k/top-p (its peak memory) and whether
  the MoE forward's buffers outlive it,
- the start-up log lines it prints about graphs.

:data:`RELEASE_RULES` is the one table: each :class:`ReleaseRule` says from which release a
value holds, and names the vLLM file and release it was read from (``pip download
--no-deps vllm==X``; the release before it was read too and differs). A release takes, for
each field, the value of the newest rule at or below it. :func:`release_defaults` answers
for one release. Nothing here dispatches: the generation does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .ladders import vllm_ladder

__all__ = [
    "OLDEST_RELEASE",
    "NEWEST_RELEASE",
    "RELEASE_RULES",
    "ReleaseRule",
    "ReleaseDefaults",
    "parse_release",
    "release_defaults",
    "release_rules",
]

OLDEST_RELEASE = (0, 8)  # the oldest release modelled: V1's engine is the default from 0.8.0
NEWEST_RELEASE = (0, 34)  # the newest release read (its patch releases too)

_GIB = 1024**3


@dataclass(frozen=True)
class ReleaseRule:
    """From release ``first`` on (until a newer rule of the same ``field``), ``field`` is
    ``value``; ``source`` names the vLLM file and release it was read in."""

    field: str
    first: tuple[int, ...]
    value: Any
    source: str

    @property
    def first_release(self) -> str:
        return ".".join(str(p) for p in self.first)


# batch-size tiers: (rule, device name, memory bytes, compute capability) -> (API server
# max_num_seqs, max_num_batched_tokens, LLM class max_num_seqs, max_num_batched_tokens)
def _tier_by_name_seqs_fixed(name: str, memory: float, cc: tuple[int, int] | None) -> tuple:
    big = "h100" in name or "h200" in name
    return (1024, 8192, 1024, 16384) if big else (1024, 2048, 1024, 8192)


def _tier_by_name(name: str, memory: float, cc: tuple[int, int] | None) -> tuple:
    big = "h100" in name or "h200" in name
    return (1024, 8192, 1024, 16384) if big else (256, 2048, 256, 8192)


def _tier_by_memory(name: str, memory: float, cc: tuple[int, int] | None) -> tuple:
    return (1024, 8192, 1024, 16384) if memory >= 70 * _GIB else (256, 2048, 256, 8192)


def _tier_not_a100(name: str, memory: float, cc: tuple[int, int] | None) -> tuple:
    big = memory >= 70 * _GIB and "a100" not in name
    return (1024, 8192, 1024, 16384) if big else (256, 2048, 256, 8192)


def _tier_160(name: str, memory: float, cc: tuple[int, int] | None) -> tuple:
    if memory >= 160 * _GIB:
        return (1024, 16384, 1024, 16384)
    return _tier_not_a100(name, memory, cc)


def _tier_not_gb10(name: str, memory: float, cc: tuple[int, int] | None) -> tuple:
    gb10 = cc == (12, 1) or "gb10" in name
    if memory >= 160 * _GIB and not gb10:
        return (1024, 16384, 1024, 16384)
    if memory >= 70 * _GIB and "a100" not in name and not gb10:
        return (1024, 8192, 1024, 16384)
    return (256, 2048, 256, 8192)


# capture-size ladders: (rule, max_num_seqs, max_num_batched_tokens, blackwell) -> sizes
def _step8(top: int, tokens: int) -> list[int]:
    return [s for s in [1, 2, 4, *range(8, top + 1, 8)] if s <= tokens]


def _ladder_fixed_512(seqs: int, tokens: int, blackwell: bool) -> list[int]:
    return _step8(512, tokens)


def _ladder_twice_seqs(seqs: int, tokens: int, blackwell: bool) -> list[int]:
    return _step8(min(2 * seqs, 512), tokens)


def _step16(top: int) -> list[int]:
    sizes = [s for s in (1, 2, 4) if s <= top]
    return sizes + [*range(8, min(top + 1, 256), 8), *range(256, top + 1, 16)]


def _ladder_step16(seqs: int, tokens: int, blackwell: bool) -> list[int]:
    return _step16(min(2 * seqs, 512, tokens))


def _ladder_sm100(seqs: int, tokens: int, blackwell: bool) -> list[int]:
    return _step16(min(2 * seqs, 1024 if blackwell else 512, tokens))


def _ladder_with_tokens(seqs: int, tokens: int, blackwell: bool) -> list[int]:
    top = min(2 * seqs, 1024 if blackwell else 512, tokens)
    sizes = _step16(top)
    return sorted({*sizes, tokens}) if tokens <= top else sizes


def _ladder_with_seqs(seqs: int, tokens: int, blackwell: bool) -> list[int]:
    # vLLM 0.31's rule is the one cgdispatch's V1 models (0.33): uniform-decode sizes too
    return vllm_ladder(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        device_capability=(10, 0) if blackwell else None,
    )


_ARG_UTILS = "vllm/engine/arg_utils.py"
# the one table: field, first release, value, where it was read (file, release)
RELEASE_RULES: tuple[ReleaseRule, ...] = (
    # dispatch generation: V1's runner and dispatcher up to 0.33 (before 0.10.1 its
    # cudagraph_batch_sizes padding, which CudagraphDispatcher's PIECEWISE answers equal),
    # generation 2's CudaGraphManager from 0.34
    ReleaseRule("generation", (0, 8), "0.33", "vllm/v1/worker/gpu_model_runner.py (0.8.0)"),
    ReleaseRule("generation", (0, 34), "0.34", "vllm/v1/worker/gpu/cudagraph_utils.py (0.34.0)"),
    # default batch limits by GPU (vllm serve; the LLM class in the same rule)
    ReleaseRule(
        "batch_tier",
        (0, 8),
        _tier_by_name_seqs_fixed,
        f"{_ARG_UTILS} _set_default_args_v1 (0.8.0): max_num_seqs 1024; "
        "max_num_batched_tokens 8192 on h100/h200 by name, else 2048",
    ),
    ReleaseRule(
        "batch_tier",
        (0, 8, 4),
        _tier_by_name,
        f"{_ARG_UTILS} (0.8.4): 1024 seqs / 8192 tokens on h100/h200 by name, else 256 / 2048",
    ),
    ReleaseRule(
        "batch_tier",
        (0, 8, 5),
        _tier_by_memory,
        f"{_ARG_UTILS} (0.8.5): 1024 / 8192 on GPUs of >= 70 GiB, else 256 / 2048",
    ),
    ReleaseRule(
        "batch_tier",
        (0, 9),
        _tier_not_a100,
        f"{_ARG_UTILS} (0.9.0): >= 70 GiB and not an A100 (PR #17885), else 256 / 2048",
    ),
    ReleaseRule(
        "batch_tier",
        (0, 28),
        _tier_160,
        f"{_ARG_UTILS} (0.28.0): >= 160 GiB (B200, B300) 1024 / 16384",
    ),
    ReleaseRule(
        "batch_tier",
        (0, 33),
        _tier_not_gb10,
        f"{_ARG_UTILS} (0.33.0): GB10 (DGX Spark, cc 12.1) kept on the small tier",
    ),
    # default capture sizes (no speculative decoding), all cut at max_num_batched_tokens
    ReleaseRule(
        "ladder",
        (0, 8),
        _ladder_fixed_512,
        "vllm/config.py VllmConfig._set_cudagraph_sizes (0.8.0; 0.9.2: "
        "SchedulerConfig.cuda_graph_sizes=[512]): [1, 2, 4] + range(8, 513, 8)",
    ),
    ReleaseRule(
        "ladder",
        (0, 10),
        _ladder_twice_seqs,
        "vllm/config.py SchedulerConfig.__post_init__ (0.10.0): cuda_graph_sizes = "
        "[min(2 * max_num_seqs, 512)], then [1, 2, 4] + range(8, max + 1, 8)",
    ),
    ReleaseRule(
        "ladder",
        (0, 11, 1),
        _ladder_step16,
        "vllm/config/vllm.py _set_cudagraph_sizes (0.11.1): [1, 2, 4] + range(8, 256, 8) + "
        "range(256, max + 1, 16), max = min(2 * max_num_seqs, 512, max_num_batched_tokens)",
    ),
    ReleaseRule(
        "ladder",
        (0, 19),
        _ladder_sm100,
        "vllm/config/vllm.py _set_cudagraph_sizes (0.19.0): default max 1024 on SM100",
    ),
    ReleaseRule(
        "ladder",
        (0, 21),
        _ladder_with_tokens,
        "vllm/config/vllm.py _set_cudagraph_sizes (0.21.0): max_num_batched_tokens added "
        "when it is <= the max",
    ),
    ReleaseRule(
        "ladder",
        (0, 31),
        _ladder_with_seqs,
        "vllm/config/vllm.py _set_cudagraph_sizes (0.31.0): max_num_seqs added as a "
        "uniform-decode size without speculative decoding too (0.29.0 and 0.30.0 add them "
        "only with it); cgdispatch.core.ladders.vllm_ladder (0.33)",
    ),
    # model classes that raise the default max capture size (before the ladder rule applies)
    ReleaseRule("model_capture_max", (0, 8), {}, "vllm/model_executor/models/config.py (0.10.0)"),
    ReleaseRule(
        "model_capture_max",
        (0, 10, 1),
        {"gpt_oss": 1024},
        "vllm/model_executor/models/config.py GptOssForCausalLMConfig (0.10.1.1: "
        "[1, 2, 4] + range(8, 256, 8) + range(256, 1025, 16); 0.13.0: "
        "max_cudagraph_capture_size = 1024)",
    ),
    # default mode
    ReleaseRule(
        "cudagraph_mode",
        (0, 8),
        "PIECEWISE",
        "vllm/config.py CompilationConfig.full_cuda_graph=False (0.9.2); "
        "vllm/config/__init__.py (0.10.1.1): PIECEWISE when unset",
    ),
    ReleaseRule(
        "cudagraph_mode",
        (0, 11),
        "FULL_AND_PIECEWISE",
        "vllm/config/__init__.py VllmConfig.__post_init__ (0.11.0): FULL_AND_PIECEWISE when unset",
    ),
    # asynchronous scheduling when the user leaves it unset
    ReleaseRule(
        "async_scheduling",
        (0, 8),
        False,
        "vllm/config/scheduler.py async_scheduling: bool = False (0.13.0; 0.8.0 to 0.13.0 "
        "schedule synchronously unless --async-scheduling is given)",
    ),
    ReleaseRule(
        "async_scheduling",
        (0, 14),
        True,
        "vllm/config/scheduler.py async_scheduling=Field(default=None), "
        "vllm/config/vllm.py VllmConfig.__post_init__ sets True (0.14.0; False with pipeline "
        "parallelism or non-EAGLE drafts)",
    ),
    # the memory profile's graph estimate: made and logged, then taken from the KV budget
    ReleaseRule("estimates_graph_memory", (0, 8), False, "vllm/v1/worker/gpu_worker.py (0.17.0)"),
    ReleaseRule(
        "estimates_graph_memory",
        (0, 18),
        True,
        "vllm/v1/worker/gpu_model_runner.py profile_cudagraph_memory (0.18.0)",
    ),
    ReleaseRule(
        "subtracts_graph_estimate",
        (0, 8),
        False,
        "vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default '0' (0.18.0, 0.19.0)",
    ),
    ReleaseRule(
        "subtracts_graph_estimate",
        (0, 20),
        True,
        "vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default '1', "
        "vllm/v1/worker/gpu_worker.py determine_available_memory (0.20.0; its log line "
        "says 'default since v0.21.0')",
    ),
    # how the profile run's sampler warm-up (gpu_model_runner._dummy_sampler_run: top-k and
    # top-p on max_num_seqs rows of the whole vocabulary) applies top-k/top-p, which sets its
    # peak memory: "sort" (torch sort), "flashinfer" or "triton" (in place). "flashinfer or
    # sort": FlashInfer where it is installed (the vllm[flashinfer] extra, not a plain pip
    # install: vLLM's METADATA of 0.10.1.1 and 0.11.0), the sort otherwise
    ReleaseRule(
        "topk_topp_sampler",
        (0, 8),
        "sort",
        "vllm/v1/sample/ops/topk_topp_sampler.py TopKTopPSampler (0.8.0, 0.8.5): FlashInfer "
        ">= 0.2.3 disabled ('not backward compatible'), forward_native's apply_top_k_top_p "
        "(logits.sort, then scatter)",
    ),
    ReleaseRule(
        "topk_topp_sampler",
        (0, 9),
        "flashinfer or sort",
        "vllm/v1/sample/ops/topk_topp_sampler.py TopKTopPSampler (0.9.0, 0.9.2, 0.10.0 to "
        "0.11.0): FlashInfer >= 0.2.3 when importable (V1 reads VLLM_USE_FLASHINFER_SAMPLER "
        "unset as on), else forward_native's apply_top_k_top_p (logits.sort, then scatter)",
    ),
    ReleaseRule(
        "topk_topp_sampler",
        (0, 12),
        "sort",
        "vllm/v1/sample/ops/topk_topp_sampler.py (0.12.0 to 0.16.0): FlashInfer only with "
        "VLLM_USE_FLASHINFER_SAMPLER=1, else apply_top_k_top_p's sort",
    ),
    ReleaseRule(
        "topk_topp_sampler",
        (0, 17),
        "triton",
        "vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p (0.17.0): "
        "apply_top_k_top_p_triton, in place, for >= 8 rows (the sort below 8; read to 0.33.0)",
    ),
    ReleaseRule(
        "topk_topp_sampler",
        (0, 34),
        "model runner v2",
        "vllm/v1/worker/gpu/model_runner.py _dummy_sampler_run (0.34.0): generation 2's own "
        "sampler, two passes; its bytes are not counted here (the fitted 0.19 runs' kept)",
    ),
    # whether the MoE forward's buffers outlive it: from 0.14 unquantized MoE runs through
    # FusedMoEModularKernel, whose workspace (vllm/v1/worker/workspace.py) persists, so the
    # profile's peak holds it and the sampler warm-up together; before, fused_experts
    # allocates its caches per call and frees them before the sampler warm-up
    ReleaseRule(
        "moe_buffers_persist",
        (0, 8),
        False,
        "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py forward_cuda "
        "calls fused_experts (0.10.2, 0.11.0, 0.13.0); fused_moe.py fused_experts_impl "
        "allocates cache13 per call",
    ),
    ReleaseRule(
        "moe_buffers_persist",
        (0, 14),
        True,
        "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py (0.14.0): "
        "self.kernel = FusedMoEModularKernel(..., TritonExperts), workspace from "
        "vllm/v1/worker/workspace.py current_workspace_manager",
    ),
    # the capture progress line
    ReleaseRule(
        "capture_log",
        (0, 8),
        "Graph capturing finished in %.0f secs, took %.2f GiB",
        "vllm/v1/worker/gpu_model_runner.py (0.8.0)",
    ),
    ReleaseRule(
        "capture_log",
        (0, 9, 2),
        "Capturing CUDA graph shapes",
        "vllm/v1/worker/gpu_model_runner.py tqdm desc (0.9.2; 0.9.1 prints none)",
    ),
    ReleaseRule(
        "capture_log",
        (0, 10, 1),
        "Capturing CUDA graphs ({mode}, {kind})",
        "vllm/v1/worker/gpu_model_runner.py tqdm desc (0.10.1.1; 0.10.0 prints the shapes line)",
    ),
    ReleaseRule(
        "capture_log",
        (0, 34),
        "Capturing CUDA graphs ({mode})",
        "vllm/v1/worker/gpu/cudagraph_utils.py tqdm desc (0.34.0)",
    ),
)

_FIELDS = (
    "generation",
    "batch_tier",
    "ladder",
    "model_capture_max",
    "cudagraph_mode",
    "async_scheduling",
    "estimates_graph_memory",
    "subtracts_graph_estimate",
    "topk_topp_sampler",
    "moe_buffers_persist",
    "capture_log",
)

_PATTERN = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?$")


def parse_release(version: Any) -> tuple[int, ...]:
    """A release string (``"0.10.1.1"``, ``"0.11"``, ``"0.26.1"``) or a float naming one
    (``0.34``) as a tuple of ints; ValueError naming the value, the rule and the fix."""
    text = repr(version) if isinstance(version, float) else version
    fix = "pass the release as a string of dotted numbers, e.g. '0.10.1.1', '0.19' or '0.34.0'"
    if not isinstance(text, str):
        raise ValueError(f"vllm_version={version!r} is invalid: {fix}")
    match = _PATTERN.match(text.strip())
    if match is None:
        raise ValueError(
            f"vllm_version={version!r} is not a vLLM release: it must be dotted numbers "
            f"(major.minor[.patch[.post]]); {fix}"
        )
    parts = tuple(int(p) for p in match.groups() if p is not None)
    if parts < OLDEST_RELEASE:
        oldest = ".".join(map(str, OLDEST_RELEASE))
        hint = (
            " (a float 0.10 reads as 0.1: pass '0.10' as a string)"
            if isinstance(version, float)
            else ""
        )
        raise ValueError(
            f"vllm_version={version!r} is older than vLLM {oldest}, the oldest release "
            f"modelled (V1's engine){hint}: use {oldest} or later"
        )
    if parts[:2] > NEWEST_RELEASE:
        newest = ".".join(map(str, NEWEST_RELEASE))
        raise ValueError(
            f"vllm_version={version!r} is unknown: newer than vLLM {newest}, the newest "
            f"release whose source was read; use a release from 0.8 to '{newest}' "
            f"({newest}.x)"
        )
    return parts


def release_rules(version: Any) -> dict[str, ReleaseRule]:
    """The rule of every field that holds for ``version`` (the newest at or below it)."""
    parts = parse_release(version)
    out: dict[str, ReleaseRule] = {}
    for rule in RELEASE_RULES:
        if rule.first <= parts and (rule.field not in out or out[rule.field].first <= rule.first):
            out[rule.field] = rule
    return out


@dataclass(frozen=True)
class ReleaseDefaults:
    """What one vLLM release starts with when the user sets nothing (vLLM's source)."""

    release: str  # as given, normalised ("0.10.1.1")
    parts: tuple[int, ...]
    generation: str  # the registered generation that dispatches it ("0.33" or "0.34")
    cudagraph_mode: str
    async_scheduling: bool
    estimates_graph_memory: bool  # the memory profile estimates (and logs) graph memory
    subtracts_graph_estimate: bool  # ... and takes the estimate from the KV budget
    topk_topp_sampler: str  # the sampler warm-up's top-k/top-p: see sampler_path()
    moe_buffers_persist: bool  # the MoE forward's workspace outlives it (profile peak)
    capture_log: str  # the line its capture prints (tqdm description or finish line)
    rules: tuple[ReleaseRule, ...]  # the rule of each field, with its source

    def batch_limits(
        self,
        device_name: str,
        memory_bytes: float,
        *,
        api_server: bool = True,
        device_capability: tuple[int, int] | None = None,
    ) -> tuple[int, int]:
        """Default ``(max_num_seqs, max_num_batched_tokens)`` on a GPU (its name as torch
        reports it or a preset name, and its memory): ``vllm serve``'s, or the ``LLM``
        class's (``api_server=False``)."""
        tier = self._rule("batch_tier").value(
            str(device_name).lower(), float(memory_bytes), device_capability
        )
        return (tier[0], tier[1]) if api_server else (tier[2], tier[3])

    def capture_sizes(
        self,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        *,
        blackwell: bool = False,
        model_type: str | None = None,
    ) -> list[int]:
        """The default capture sizes, ascending (no speculative decoding), for these
        scheduler limits (``blackwell``: a data-centre Blackwell GPU, SM100;
        ``model_type``: the checkpoint's, for the models whose vLLM config class raises
        the max, ``gpt_oss``)."""
        limits = (
            ("max_num_seqs", max_num_seqs),
            ("max_num_batched_tokens", max_num_batched_tokens),
        )
        for name, value in limits:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= 1")
        tokens = max_num_batched_tokens
        top = self._rule("model_capture_max").value.get(model_type)
        if top is None:
            return list(self._rule("ladder").value(max_num_seqs, tokens, blackwell))
        if self.parts >= (0, 31):
            return vllm_ladder(top, max_num_seqs=max_num_seqs, max_num_batched_tokens=tokens)
        sizes = _step16(min(top, tokens))
        if self.parts >= (0, 21) and tokens <= top:
            sizes = sorted({*sizes, tokens})
        return sizes

    def sampler_path(self, rows: int, *, flashinfer_installed: bool = False) -> str:
        """How this release's sampler warm-up applies top-k and top-p on ``rows`` rows
        (``max_num_seqs``, at most ``max_num_batched_tokens``): ``"sort"``,
        ``"flashinfer"``, ``"triton"`` or ``"model runner v2"`` (0.34 on); ``flashinfer_installed``: FlashInfer is importable
        (the ``vllm[flashinfer]`` extra or vLLM's Docker image), which releases 0.9 to 0.11
        then use."""
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows={rows!r} is invalid: the sampler warms up >= 1 row")
        rule = self.topk_topp_sampler
        if rule == "flashinfer or sort":
            return "flashinfer" if flashinfer_installed else "sort"
        if rule == "triton":
            return "triton" if rows >= 8 else "sort"
        return rule

    def _rule(self, field: str) -> ReleaseRule:
        return next(r for r in self.rules if r.field == field)

    def describe(self) -> str:
        return f"vLLM {self.release}"


def release_defaults(version: Any) -> ReleaseDefaults:
    """The defaults of one vLLM release from 0.8 on (``"0.10.1.1"``, ``"0.21.0"``,
    ``0.34``): ValueError for a string that is not a release or is older than 0.8."""
    parts = parse_release(version)
    rules = release_rules(version)
    release = ".".join(str(p) for p in parts)
    return ReleaseDefaults(
        release=release,
        parts=parts,
        generation=rules["generation"].value,
        cudagraph_mode=rules["cudagraph_mode"].value,
        async_scheduling=rules["async_scheduling"].value,
        estimates_graph_memory=rules["estimates_graph_memory"].value,
        subtracts_graph_estimate=rules["subtracts_graph_estimate"].value,
        topk_topp_sampler=rules["topk_topp_sampler"].value,
        moe_buffers_persist=rules["moe_buffers_persist"].value,
        capture_log=rules["capture_log"].value,
        rules=tuple(rules[f] for f in _FIELDS),
    )
