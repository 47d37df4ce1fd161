"""The scheduler settings a replay of vLLM's scheduler obeys (vLLM's names), checked on
construction, and :func:`scheduler_limits`, the one place a person's settings (a
:class:`~cgdispatch.core.config.GraphConfig`, flags) become them.

Below the replay (:mod:`~cgdispatch.workload.replay`, :mod:`~cgdispatch.workload.exact_run`),
which reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..core.generation import check_version, default_release, full_release
from ..core.release_table import parse_release, release_defaults
from ..core.validate import (
    MAX_BLOCK_SIZE,
    MAX_LORAS,
    MAX_MODEL_LEN,
    MAX_NUM_SEQS,
    MAX_SPECULATIVE_TOKENS,
    MAX_STEP_TOKENS,
    check_bool,
    check_int,
)
from ..core.warn import warn_user
from .vllm_rules import scheduler_rules

if TYPE_CHECKING:
    from ..core.config import GraphConfig

__all__ = ["LIMIT_BOUNDS", "SchedulerLimits", "scheduler_limits", "kv_cache_blocks"]

_OPTIONAL = frozenset({"max_loras", "max_model_len", "num_gpu_blocks"})
# (limit, least, most) of each integer limit, checked on construction (None allowed where
# _OPTIONAL); the CLI holds its flags of these names to the same bounds
LIMIT_BOUNDS: tuple[tuple[str, int, int], ...] = (
    ("max_num_seqs", 1, MAX_NUM_SEQS),
    ("max_num_batched_tokens", 1, MAX_STEP_TOKENS),
    ("num_speculative_tokens", 0, MAX_SPECULATIVE_TOKENS),
    ("long_prefill_token_threshold", 0, MAX_STEP_TOKENS),
    ("block_size", 1, MAX_BLOCK_SIZE),
    ("max_loras", 1, MAX_LORAS),
    ("max_model_len", 2, MAX_MODEL_LEN),
    ("num_gpu_blocks", 2, MAX_STEP_TOKENS),
    ("hash_block_size", 1, MAX_STEP_TOKENS),
)


@dataclass(frozen=True)
class SchedulerLimits:
    """The scheduler settings the replay of vLLM's scheduler obeys (vLLM's names)."""

    max_num_seqs: int = 256  # requests per step
    max_num_batched_tokens: int = 8192  # tokens per step
    num_speculative_tokens: int = 0  # a decode schedules q = 1 + this tokens
    spec_acceptance_rate: float = 0.7  # each draft token accepted with this probability
    enable_chunked_prefill: bool = True  # prompts split to fit the step's token budget
    max_loras: int | None = None  # adapters per step (None: no limit)
    # vLLM's scheduler of this release (a registered one; its Generation holds what differs);
    # None: the newest (core.generation.default_release), resolved on construction
    vllm_version: str | None = None
    long_prefill_token_threshold: int = 0  # prompt tokens per request per step (0: no cap)
    max_model_len: int | None = None  # a request ends at this many tokens (None: no limit)
    block_size: int = 16  # tokens per KV-cache block
    num_gpu_blocks: int | None = (
        None  # vLLM's num_gpu_blocks, null block included (None: unlimited)
    )
    async_scheduling: bool | None = None  # None: the release's default (0.34: on)
    # vLLM's automatic prefix caching (on by default, as in vLLM V1); vLLM's own scheduler
    # only: the older model ignores it. Prefix identity comes from the request table's
    # hash_ids / prompt_token_ids column (steps.HASH_IDS_COLUMN), else every prompt is unique
    enable_prefix_caching: bool = True
    hash_block_size: int = 512  # prompt tokens per entry of a request's hash_ids
    # the whole vLLM release ("0.11.0") whose own defaults apply (async scheduling), of
    # which vllm_version is the generation; None: vllm_version's as given (a whole release
    # passed there is kept here), resolved on construction
    release: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name, minimum, bound in LIMIT_BOUNDS:
            value = getattr(self, name)
            if value is not None or name not in _OPTIONAL:
                set_(self, name, check_int(name, value, minimum, bound))
        if self.q > self.max_num_batched_tokens:
            raise ValueError(
                f"1 + num_speculative_tokens = {self.q} exceeds max_num_batched_tokens="
                f"{self.max_num_batched_tokens}"
            )
        if not 0.0 <= self.spec_acceptance_rate <= 1.0:
            raise ValueError(
                f"spec_acceptance_rate={self.spec_acceptance_rate} is invalid: it must be in [0, 1]"
            )
        set_(
            self,
            "enable_chunked_prefill",
            check_bool("enable_chunked_prefill", self.enable_chunked_prefill),
        )
        set_(
            self,
            "enable_prefix_caching",
            check_bool("enable_prefix_caching", self.enable_prefix_caching),
        )
        if self.async_scheduling is not None:
            set_(self, "async_scheduling", check_bool("async_scheduling", self.async_scheduling))
        # ValueError naming the known releases; None: the newest, decided in one function
        given = self.vllm_version
        if self.release is not None:
            release = full_release(self.release)
            if given is not None and check_version(given) != check_version(release):
                raise ValueError(
                    f"release={self.release!r} is not of vllm_version={given!r}: it "
                    f"dispatches as generation {check_version(release)}; pass one of them, "
                    "or a release of that generation"
                )
            given = release
        set_(self, "release", full_release(given))
        set_(self, "vllm_version", check_version(given) or default_release())
        rules = scheduler_rules(self.vllm_version)
        if self.enable_chunked_prefill or not rules.long_prefill_needs_chunked:
            _warn_padded_cut(self.num_speculative_tokens, self.long_prefill_token_threshold)

    @property
    def q(self) -> int:
        return 1 + self.num_speculative_tokens

    @property
    def is_async(self) -> bool:
        """Whether the engine loop is async (the release's default when not set)."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        rules = scheduler_rules(self.vllm_version)
        if self.num_speculative_tokens and not rules.async_with_drafts:
            return False  # 0.33: async scheduling is turned off for (ngram) drafts
        return _async_by_default(self.release, rules.async_by_default)


def _warn_padded_cut(k: int, lpt: int) -> None:
    """Warn when vLLM can stop on these settings: with drafts on, its scheduler pads a
    request it admits with one token left to compute (a one-token prompt, or a prompt
    cached but for its last token) to ``1 + k`` tokens and then fails an assertion when
    ``long_prefill_token_threshold`` cuts it shorter (``vllm/v1/core/sched/scheduler.py``,
    0.33.0 and 0.34.0). vLLM takes the settings; the replay refuses the step where it
    would stop (:mod:`~cgdispatch.workload.vllm_scheduler`). Called where the release
    applies the threshold (0.34: with chunked prefill only)."""
    if k and 0 < lpt < 1 + k:
        warn_user(
            f"long_prefill_token_threshold={lpt} is below 1 + num_speculative_tokens = "
            f"{1 + k}: vLLM 0.33 and 0.34 stop on a failed assertion when they admit a "
            f"request with one token left to compute (a one-token prompt, or a prompt "
            f"cached but for its last token) while another is scheduled, pad it to {1 + k} "
            f"tokens and cut it to {lpt}; the replay refuses that step. Set "
            f"long_prefill_token_threshold to 0 or to at least {1 + k}"
        )


def _async_by_default(release: str, generation_default: bool) -> bool:
    """Whether ``release`` schedules asynchronously when the user leaves it unset: the
    release table's rule (:data:`~cgdispatch.core.release_table.RELEASE_RULES`: off up to
    0.13, on from 0.14, ``vllm/config/scheduler.py`` and ``vllm/config/vllm.py``); a
    registered release the table cannot read (a test's) takes its generation's."""
    try:
        parse_release(release)
    except ValueError:
        return generation_default
    return release_defaults(release).async_scheduling


_FIELDS = tuple(f.name for f in fields(SchedulerLimits))


def scheduler_limits(config: GraphConfig | None = None, /, **settings: Any) -> SchedulerLimits:
    """The scheduler limits of a person's settings: the one place they are built.

    ``config``'s scheduler fields first (its release, ``max_num_seqs``,
    ``max_num_batched_tokens``, ``num_speculative_tokens``, ``max_loras``; 0 adapters: no
    limit), then ``settings`` (any :class:`SchedulerLimits` field by name: chunking,
    ``max_model_len``, ``block_size``, ``num_gpu_blocks``, async scheduling, ...) over them; a
    setting given as None keeps the config's value or the field's default. Without either,
    vLLM's defaults for the newest release. ``python -m cgdispatch tune`` and ``plan``, the
    dashboards, the sweeps and the notebooks build their limits here and pass the one value
    along, so the trace a plan is made on and the replay it is judged on obey the same limits.
    """
    unknown = sorted(set(settings) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"scheduler setting(s) {unknown} are unknown: SchedulerLimits has {list(_FIELDS)}; "
            "pass those names (vLLM's)"
        )
    values: dict[str, Any] = {}
    if config is not None:
        if not hasattr(config, "max_num_batched_tokens") or not hasattr(config, "vllm_version"):
            raise ValueError(
                f"config={type(config).__name__} is not a GraphConfig: pass a "
                "cgdispatch.GraphConfig (or None and the settings by name)"
            )
        values = {
            "vllm_version": config.vllm_version,
            "release": config.release,  # the whole release: its own defaults
            "max_num_seqs": config.max_num_seqs,
            "max_num_batched_tokens": config.max_num_batched_tokens,
            "num_speculative_tokens": config.num_speculative_tokens,
            "max_loras": config.max_loras or None,
        }
    if settings.get("vllm_version") is not None and settings.get("release") is None:
        values.pop("release", None)  # another release named: its own, not the config's
    values.update({k: v for k, v in settings.items() if v is not None})
    return SchedulerLimits(**values)


def kv_cache_blocks(kv_cache_tokens: float, block_size: int = 16) -> int:
    """vLLM's ``num_gpu_blocks`` for a KV cache of ``kv_cache_tokens`` tokens: whole blocks of
    ``block_size`` tokens plus vLLM's null block (``vllm/v1/core/block_pool.py``), at least 2."""
    tokens = float(kv_cache_tokens)
    if not tokens >= 0 or tokens == float("inf"):
        raise ValueError(
            f"kv_cache_tokens={kv_cache_tokens!r} is invalid: give a finite token count >= 0"
        )
    size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    return max(2, int(tokens // size) + 1)
