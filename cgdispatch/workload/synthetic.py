"""Synthetic request tables: gamma (Poisson or bursty) arrivals, lognormal lengths.

Length presets are named after public datasets and match their published mean lengths;
everything else about them (spread, clipping) is our choice, so the requests are synthetic
and say nothing about those datasets beyond the means. Output follows
:data:`cgdispatch.workload.trace.REQUEST_COLUMNS` (plus ``lora_id`` when adapters are asked for).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..core.validate import MAX_LORAS, MAX_REQUESTS, MAX_STEPS, check_int

__all__ = [
    "LengthPreset",
    "LENGTH_PRESETS",
    "synthetic_requests",
    "random_batches",
    "lognormal_lengths",
]


@dataclass(frozen=True)
class LengthPreset:
    """Synthetic prompt/output length distribution: lognormal with a given mean, clipped.

    Only the means are published figures; the spreads (sigma of log length) and the clips
    are our choice, so traces made from a preset are synthetic, not the dataset itself.
    """

    prompt_mean: float
    output_mean: float
    prompt_sigma: float = 1.0
    output_sigma: float = 1.0
    max_prompt_tokens: int = 4096
    max_output_tokens: int = 2048


LENGTH_PRESETS: dict[str, LengthPreset] = {
    # ShareGPT: mean input 161, mean output 338 tokens (vLLM paper, SOSP 2023)
    "sharegpt": LengthPreset(161.0, 338.0, prompt_sigma=1.0, output_sigma=0.9),
    # Alpaca: mean input 19, mean output 58 tokens (vLLM paper, SOSP 2023)
    "alpaca": LengthPreset(
        19.0, 58.0, prompt_sigma=0.6, output_sigma=0.8, max_prompt_tokens=512, max_output_tokens=512
    ),
}


def lognormal_lengths(
    rng: np.random.Generator, mean: float, sigma: float, n: int, hi: int
) -> np.ndarray:
    """``n`` token counts, lognormal with mean ``mean`` and log-spread ``sigma``, rounded and
    clipped to [1, ``hi``] (int64)."""
    mu = np.log(mean) - sigma**2 / 2  # E[lognormal] = exp(mu + sigma^2 / 2)
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, hi).astype(np.int64)


def synthetic_requests(
    num_requests: int,
    preset: str | LengthPreset = "sharegpt",
    *,
    rate_per_s: float = 10.0,
    burstiness: float = 1.0,
    lora_fraction: float = 0.0,
    num_loras: int = 0,
    seed: int = 0,
) -> pd.DataFrame:
    """A request table with gamma inter-arrival times and lognormal lengths (synthetic).

    ``burstiness`` is the gamma shape (as in vLLM's serving benchmark): 1 gives Poisson
    arrivals, below 1 bursts, above 1 more regular arrivals; the mean rate is ``rate_per_s``
    either way. ``rate_per_s=inf`` puts every arrival at 0. With ``lora_fraction > 0`` a
    ``lora_id`` column gives that share of requests one of ``num_loras`` adapters (uniform
    choice) and the others -1.
    """
    num_requests = check_int("num_requests", num_requests, 1, MAX_REQUESTS)
    num_loras = check_int("num_loras", num_loras, 0, MAX_LORAS)
    if isinstance(preset, str):
        if preset not in LENGTH_PRESETS:
            raise ValueError(
                f"length preset {preset!r} is unknown: use one of {sorted(LENGTH_PRESETS)}"
            )
        preset = LENGTH_PRESETS[preset]
    if not rate_per_s > 0:
        raise ValueError(
            f"rate_per_s={rate_per_s!r} is invalid: it must be > 0 (inf for all at once)"
        )
    if not burstiness > 0:
        raise ValueError(f"burstiness={burstiness!r} is invalid: it must be > 0 (1 = Poisson)")
    if not 0.0 <= lora_fraction <= 1.0 or (lora_fraction > 0 and num_loras < 1):
        raise ValueError(
            f"lora_fraction={lora_fraction}, num_loras={num_loras} is invalid: the fraction is "
            "in [0, 1] and needs num_loras >= 1 when above 0"
        )
    rng = np.random.default_rng(seed)
    if np.isinf(rate_per_s):
        arrival = np.zeros(num_requests)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), num_requests)
        arrival = np.cumsum(gaps) - gaps[0]
    p = preset
    frame = pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_tokens": lognormal_lengths(
                rng, p.prompt_mean, p.prompt_sigma, num_requests, p.max_prompt_tokens
            ),
            "output_tokens": lognormal_lengths(
                rng, p.output_mean, p.output_sigma, num_requests, p.max_output_tokens
            ),
        }
    )
    if lora_fraction > 0:
        uses = rng.random(num_requests) < lora_fraction
        frame["lora_id"] = np.where(uses, rng.integers(0, num_loras, num_requests), -1)
    return frame


def random_batches(
    config: GraphConfig, steps: int, *, decode_fraction: float = 0.8, seed: int = 0
) -> list[tuple[int, bool]]:
    """Synthetic (num_tokens, uniform_decode) steps: uniform random, not a real workload.

    A ``decode_fraction`` of steps are uniform decodes of 1..max_num_seqs requests (q tokens
    each); the others are mixed batches of 1..max_num_batched_tokens tokens. Use the
    workload module's traces for anything you want to draw conclusions from.
    """
    if not 0.0 <= decode_fraction <= 1.0:
        raise ValueError(f"decode_fraction={decode_fraction} is invalid: it must be in [0, 1]")
    steps = check_int("steps", steps, 0, MAX_STEPS)
    rng = random.Random(seed)
    q, max_reqs, max_tokens = (
        config.uniform_decode_query_len,
        config.max_num_seqs,
        config.max_num_batched_tokens,
    )
    out = []
    for _ in range(steps):
        if rng.random() < decode_fraction:
            out.append((min(rng.randint(1, max_reqs) * q, max_tokens), True))
        else:
            out.append((rng.randint(1, max_tokens), False))
    return out
