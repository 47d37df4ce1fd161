"""The `tune` decision as a dashboard: pick the model, device, traffic, scheduler limits and
vLLM generation, and the verdict (recommendation, deltas against vLLM's default held out,
the flags to paste) and the trade-off figure follow each change.

``make dashboard`` serves it alone as a Voila app (``notebooks/dashboard.ipynb``). Every
figure is a ``model`` figure (the device cost model of a published architecture); the
traffic is a synthetic preset, a shipped production trace or a CSV path.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from ..core.config import GraphConfig
from ..core.generation import GENERATIONS, NEWEST
from ..estimate.device_model import DEVICE_PRESETS
from ..estimate.kv_bytes import kv_bytes_per_token
from ..estimate.startup import startup_for
from ..models.architectures import ARCHITECTURES
from ..plan.tune import tune
from ..plan.tune_result import TuneResult
from ..workload.sources import TRACE_NAMES, workload_requests, workload_trace
from .explorer_handlers import message_html
from .model_cache import cached_cost_model
from .snapshots import Snapshot
from .tune_figures import tradeoff_figure
from .tune_verdict import verdict_lines

__all__ = ["TuneDashboard", "tune_dashboard"]


class TuneDashboard(Snapshot, w.VBox):
    """Controls for what ``python -m cgdispatch tune`` takes, and its verdict, live.

    ``result`` holds the last :class:`~cgdispatch.plan.tune_result.TuneResult` (None after a
    bad entry, whose message replaces the verdict). ``draw=False`` skips the figure.
    """

    def __init__(
        self,
        *,
        model: str = "llama-3.1-8b",
        device: str = "H200",
        trace: str = "sharegpt",
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        vllm_version: str = NEWEST.release,
        num_requests: int = 1000,
        rate_per_s: float = 8.0,
        holdout: float = 0.5,
        draw: bool = True,
    ) -> None:
        super().__init__()
        self.num_requests, self.rate_per_s, self.holdout, self.draw = (
            num_requests,
            rate_per_s,
            holdout,
            draw,
        )
        self.result: TuneResult | None = None
        style = {"description_width": "initial"}
        self.model_box = w.Dropdown(
            options=sorted(ARCHITECTURES), value=model, description="model", style=style
        )
        self.device_box = w.Dropdown(
            options=sorted(DEVICE_PRESETS), value=device, description="device", style=style
        )
        self.trace_box = w.Combobox(
            options=list(TRACE_NAMES), value=trace, description="traffic", ensure_option=False,
            placeholder="preset, production trace or CSV path", style=style,
        )  # fmt: skip
        self.seqs_box = w.BoundedIntText(
            value=max_num_seqs, min=1, max=65_536, description="max_num_seqs", style=style
        )
        self.tokens_box = w.BoundedIntText(
            value=max_num_batched_tokens, min=1, max=2**31 - 1,
            description="max_num_batched_tokens", style=style,
        )  # fmt: skip
        self.version_box = w.ToggleButtons(
            options=list(reversed(GENERATIONS)),  # newest first
            value=vllm_version,
            description="vLLM",
            style=style,
        )
        self.verdict = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="1100px"))
        self.message = w.HTML()
        for box in (self.model_box, self.device_box, self.seqs_box, self.tokens_box):
            box.observe(self._on_change, names="value")
        self.version_box.observe(self._on_change, names="value")
        self.trace_box.observe(self._on_change, names="value")
        self.children = [
            w.HBox([self.model_box, self.device_box, self.version_box]),
            w.HBox([self.trace_box, self.seqs_box, self.tokens_box]),
            self.verdict,
            self.message,
            self.plot,
        ]
        self.update()

    def _on_change(self, change: dict[str, Any]) -> None:
        self.update()

    def update(self) -> None:
        """Re-run ``tune`` for the controls' values; show the verdict, or what is wrong."""
        try:
            self.result = self._tune()
        except ValueError as err:
            self.result = None
            self.verdict.value, self.plot.value = "", b""
            self.message.value = message_html([str(err)])
            return
        self.message.value = ""
        lines = verdict_lines(self.result, model=self.model_box.value, device=self.device_box.value)
        d = self.result.deltas
        attrs = {
            "testid": "tune-verdict",
            "recommendation": self.result.recommendation,
            "vllm-version": self.result.config.vllm_version,
            "max-num-seqs": self.result.config.max_num_seqs,
            "mean-step-pct": repr(float(d["mean_step_pct"])),
            "flags": self.result.flags,
        }
        text = " ".join(f'data-{k}="{html.escape(str(v))}"' for k, v in attrs.items())
        body = html.escape("\n".join(lines))
        self.verdict.value = (
            f"<pre {text} style='font-family:monospace;font-size:12px;white-space:pre'>{body}</pre>"
        )
        if self.draw:
            self.plot.value = tradeoff_figure(self.result)._repr_png_()

    def _tune(self) -> TuneResult:
        trace_name = str(self.trace_box.value).strip()
        if not trace_name:
            raise ValueError("traffic is empty: give a preset, a production trace or a CSV path")
        seqs, tokens = int(self.seqs_box.value), int(self.tokens_box.value)
        config = GraphConfig(
            vllm_version=self.version_box.value, max_num_seqs=seqs, max_num_batched_tokens=tokens
        ).resolve()
        trace, label = workload_trace(
            trace_name, num_requests=self.num_requests, rate_per_s=self.rate_per_s,
            max_num_seqs=seqs, max_num_batched_tokens=tokens,
        )  # fmt: skip
        requests = workload_requests(
            trace_name, num_requests=self.num_requests, rate_per_s=self.rate_per_s
        )
        model = self.model_box.value
        return tune(
            trace,
            config=config,
            cost_model=cached_cost_model(model, self.device_box.value),
            holdout=self.holdout,
            kv_bytes_per_token=kv_bytes_per_token(model),
            trace_label=label,
            requests=requests,
            startup=startup_for(model, self.device_box.value),
        )


def tune_dashboard(**settings: Any) -> TuneDashboard:
    """:class:`TuneDashboard` with ``settings`` (model, device, trace, max_num_seqs,
    max_num_batched_tokens, vllm_version, num_requests, rate_per_s, holdout) as its start."""
    return TuneDashboard(**settings)
