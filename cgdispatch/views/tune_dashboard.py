"""The `tune` decision as a dashboard: pick the model (a preset or a config.json path), device
(a preset or a spec file), tensor-parallel size, traffic (preset, file, rate, requests),
scheduler limits, vLLM generation, objective, max graphs, holdout, a ``calibrate`` profile and
the replicas the traffic is split across (``tune --replicas``/``--balance``: the verdict is
then one replica's), and the verdict (recommendation, deltas against vLLM's default held out,
the flags to paste) and the trade-off figure follow each change.

``make dashboard`` serves it alone as a Voila app (``notebooks/dashboard.ipynb``). Every
figure is a ``model`` figure (the device cost model of a published architecture); the
traffic is a synthetic preset, a shipped production trace or a CSV path. The
``tensor_parallel_size`` control is ``tune --tensor-parallel-size`` (figures are one
GPU's); it starts at, and a model change resets it to, the model's own size: a registry TP
preset's (``llama-3.1-70b-tp8``: 8), else 1.

A recompute takes from a fraction of a second to tens of seconds, so each shows a busy line
(``data-testid="tune-busy"``, class ``cg-busy``) and dims the verdict until it is done; the
traffic box recomputes on Enter or leaving the box, not per keystroke. A bad entry (a
missing, unreadable or over-long traffic path, a file that is no trace, a limit below 1, a
TP size the model cannot take, a model that does not fit its GPUs, a rate or holdout
``tune`` refuses, a config.json or device spec that cannot be read) shows its message where
the verdict was and hides the figure: nothing raises out of a control's callback. Every
recompute is counted in ``runs``, shown as ``data-run``.
"""

from __future__ import annotations

import errno
import html
from pathlib import Path
from typing import Any

import ipywidgets as w

from ..core.generation import GENERATIONS, check_version, default_release
from ..estimate.device_model import DEVICE_PRESETS
from ..estimate.devices import DeviceSpec, device_label, load_device_spec
from ..estimate.startup import DoesNotFitError
from ..models.architectures import ARCHITECTURES
from ..models.registry import tensor_parallel_size_for
from ..plan.tune_result import OBJECTIVES, TuneResult
from ..plan.tune_run import TuneSettings, tune_for
from ..workload.replicas import BALANCES
from ..workload.sources import TRACE_NAMES
from .explorer_handlers import message_html
from .snapshots import Snapshot
from .tune_figures import tradeoff_figure
from .tune_verdict import verdict_lines

__all__ = ["TuneDashboard", "tune_dashboard"]

# the verdict's lines wrap at spaces, never mid-word (the `vllm serve` JSON, one long word,
# scrolls); the line height is set here, or the widget's 28 px line height double-spaces it
_VERDICT_STYLE = (
    "font-family:monospace;font-size:12px;line-height:1.4;margin:0;white-space:pre-wrap;"
    "overflow-wrap:normal;word-break:normal;overflow-x:auto"
)
_STALE_CSS = "<style>.cg-stale{opacity:0.4}</style>"  # the verdict while it is recomputed


class TuneDashboard(Snapshot, w.VBox):
    """Controls for what ``python -m cgdispatch tune`` takes, and its verdict, live.

    ``result`` holds the last :class:`~cgdispatch.plan.tune_result.TuneResult` (None after a
    bad entry, whose message replaces the verdict); ``runs`` counts the recomputes.
    ``draw=False`` skips the figure.
    """

    def __init__(
        self,
        *,
        model: str = "llama-3.1-8b",  # or a path to a decoder's config.json
        device: str | DeviceSpec = "H200",
        tensor_parallel_size: int | None = None,  # None: the model's own, else 1
        trace: str = "sharegpt",
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        vllm_version: str | None = None,
        num_requests: int = 1000,
        rate_per_s: float = 8.0,
        holdout: float = 0.5,
        calibration: str | None = None,  # a `calibrate` profile's name or path
        replicas: int = 1,  # tune --replicas: the verdict is one replica's
        balance: str = "round-robin",  # tune --balance
        objective: str | None = None,  # None: p99-ttft with requests, step for steps
        max_graphs: int | None = None,  # None: the planner's default (plan.tune)
        model_path: str = "",  # a config.json or its folder; "" = the model control's
        device_spec: str = "",  # a DeviceSpec JSON (tune --device-spec); "" = the device's
        draw: bool = True,
    ) -> None:
        super().__init__()
        self.draw = draw
        self.result: TuneResult | None = None
        self._settings: TuneSettings | None = None  # the last run's, named by its verdict
        self.runs = 0  # recomputes so far, shown as data-run (the browser tests count them)
        style = {"description_width": "initial"}
        self._engine_controls(model, device, tensor_parallel_size, trace, max_num_seqs,
                              max_num_batched_tokens, style)  # fmt: skip
        # tune --replicas and --balance; unbounded too: 0 replicas is named, not clamped
        self.replicas_box = w.IntText(value=replicas, description="replicas", style=style)
        self.balance_box = w.Dropdown(
            options=list(BALANCES), value=balance, description="balance", style=style
        )
        self.version_box = w.ToggleButtons(
            options=list(reversed(GENERATIONS)),  # newest first
            value=check_version(vllm_version) or default_release(),  # None: the newest
            description="vLLM",
            style=style,
        )
        # tune --calibration: empty for the shipped models; read on Enter or leaving the box
        self.calibration_box = w.Text(
            value=calibration or "", description="calibration", continuous_update=False,
            placeholder="calibrate profile (name or path); empty: shipped model", style=style,
        )  # fmt: skip
        self.busy = w.HTML()
        self.verdict = w.HTML(layout=w.Layout(width="100%"))
        # hidden while it holds no figure: an empty Image shows a broken-image icon
        self.plot = w.Image(format="png", layout=w.Layout(max_width="1100px", display="none"))
        self.message = w.HTML()
        self.model_box.observe(self._on_model, names="value")
        for box in (self.device_box, self.tp_box, self.seqs_box, self.tokens_box,
                    self.replicas_box, self.balance_box):  # fmt: skip
            box.observe(self._on_change, names="value")
        self.version_box.observe(self._on_change, names="value")
        self.trace_box.observe(self._on_change, names="value")
        self.calibration_box.observe(self._on_change, names="value")
        flags = self._flag_controls(
            num_requests=num_requests, rate_per_s=rate_per_s, holdout=holdout,
            objective=objective, max_graphs=max_graphs, model_path=model_path,
            device_spec=device_spec, style=style,
        )  # fmt: skip
        self.children = [
            w.HBox([self.model_box, self.device_box, self.tp_box, self.version_box]),
            w.HBox([self.trace_box, self.seqs_box, self.tokens_box]),
            *flags,
            w.HBox([self.replicas_box, self.balance_box]),
            self.calibration_box,
            w.HTML(_STALE_CSS),
            self.busy,
            self.verdict,
            self.message,
            self.plot,
        ]
        self.update()

    def _engine_controls(
        self,
        model: str,
        device: str | DeviceSpec,
        tensor_parallel_size: int | None,
        trace: str,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        style: dict[str, str],
    ) -> None:
        """The model, device, traffic, limit and TP controls, unobserved."""
        self.model_box = w.Dropdown(
            options=sorted({*ARCHITECTURES, model}), value=model, description="model", style=style
        )
        devices = [(name, name) for name in sorted(DEVICE_PRESETS)]
        if isinstance(device, DeviceSpec):  # a GPU from a spec joins the presets
            devices.append((device.name, device))
        self.device_box = w.Dropdown(
            options=devices, value=device, description="device", style=style
        )
        self.trace_box = w.Combobox(
            options=list(TRACE_NAMES), value=trace, description="traffic", ensure_option=False,
            placeholder="preset, production trace or CSV path", continuous_update=False,
            style=style,
        )  # fmt: skip
        # unbounded: a bounded box would turn 0 into 1 silently; GraphConfig says what is wrong
        self.seqs_box = w.IntText(value=max_num_seqs, description="max_num_seqs", style=style)
        self.tokens_box = w.IntText(
            value=max_num_batched_tokens, description="max_num_batched_tokens", style=style
        )
        self.tp_box = w.IntText(  # unbounded too: 0 is named, not clamped
            value=tensor_parallel_size_for(model, tensor_parallel_size),
            description="tensor_parallel_size",
            style=style,
        )

    def _on_change(self, change: dict[str, Any]) -> None:
        self.update()

    def _on_model(self, change: dict[str, Any]) -> None:
        """A new model runs at its own TP size: one recompute, by the TP box's observer
        when the size changes."""
        own = tensor_parallel_size_for(change["new"])
        if self.tp_box.value != own:
            self.tp_box.value = own
        else:
            self.update()

    def update(self) -> None:
        """Re-run ``tune`` for the controls' values; show the verdict, or what is wrong.

        The busy line goes out to the browser before the work starts (each widget change is
        sent as it is made) and is cleared after, whatever happened."""
        self.runs += 1
        self.busy.value = (
            f'<div class="cg-busy" data-testid="tune-busy" data-run="{self.runs}" '
            'style="color:#555;font-style:italic">computing\u2026 (the verdict below is for '
            "the previous settings)</div>"
        )
        self.verdict.add_class("cg-stale")
        try:
            self._show(self._tune())
        except DoesNotFitError as err:  # its advice names tune's flags: name the control here
            self._show_error(
                f"{err.reason}: use more GPUs (raise the tensor_parallel_size control above "
                f"{err.tensor_parallel_size}, to a size that divides the model's attention "
                "heads), a smaller or quantized model, or a higher gpu_memory_utilization "
                "(tune --gpu-memory-utilization; no control here)"
            )
        except (ValueError, OSError) as err:
            self._show_error(_entry_message(err, str(self.trace_box.value).strip()))
        except Exception as err:  # noqa: BLE001 - a callback must not leave a stale verdict
            self._show_error(f"tune failed ({type(err).__name__}: {err}); please report it")
        finally:
            self.verdict.remove_class("cg-stale")
            self.busy.value = ""

    def _show(self, result: TuneResult) -> None:
        png = tradeoff_figure(result)._repr_png_() if self.draw else b""
        settings = self._settings
        # the serve line names what vLLM loads (tune_verdict.serve_target): a config.json's
        # _name_or_path, its checkpoint folder, or a placeholder it says to replace
        lines = verdict_lines(result, model=settings.model, device=device_label(settings.device))
        d = result.deltas
        attrs = {
            "testid": "tune-verdict",
            "run": self.runs,
            "recommendation": result.recommendation,
            "vllm-version": result.config.vllm_version,
            "max-num-seqs": result.config.max_num_seqs,
            "tensor-parallel-size": result.config.tensor_parallel_size,
            "mean-step-pct": repr(float(d["mean_step_pct"])),
            "flags": result.flags,
            "replicas": result.replicas,
            "balance": result.balance,
            "overloaded": result.overload is not None,
            "replicas-needed": result.replicas_needed,
        }
        text = " ".join(f'data-{k}="{html.escape(str(v))}"' for k, v in attrs.items())
        # a break opportunity after each comma: the `--compilation-config` JSON, one word of
        # ~250 characters, wraps between its fields instead of mid-word or off the right edge
        body = html.escape("\n".join(lines)).replace(",", ",<wbr>")
        self.result = result
        self.message.value = ""
        self.verdict.value = f"<pre {text} style='{_VERDICT_STYLE}'>{body}</pre>"
        self.plot.value = png
        self.plot.layout.display = None if png else "none"

    def _show_error(self, text: str) -> None:
        self.result = None
        self.verdict.value, self.plot.value = "", b""
        self.plot.layout.display = "none"
        self.message.value = f'<div data-run="{self.runs}">{message_html([text])}</div>'

    def _tune(self) -> TuneResult:
        trace_name = str(self.trace_box.value).strip()
        if not trace_name:
            raise ValueError("traffic is empty: give a preset, a production trace or a CSV path")
        fields = {
            "model": self.model_box.value,
            "device": self.device_box.value,
            "tensor_parallel_size": int(self.tp_box.value),
            "trace": trace_name,
            "vllm_version": self.version_box.value,
            "max_num_seqs": int(self.seqs_box.value),
            "max_num_batched_tokens": int(self.tokens_box.value),
            "calibration": str(self.calibration_box.value).strip() or None,
            "replicas": int(self.replicas_box.value),
            "balance": str(self.balance_box.value),
        }
        settings = TuneSettings(**(fields | self._flag_settings()))  # a path or spec wins
        self._settings = settings  # what the verdict names
        return tune_for(settings)

    # --- tune's other flags (issue 37): a config.json path, a device-spec file, request
    # rate and count, objective, max graphs and holdout. Built and read in these two methods
    # only, so that other controls can be added beside them without touching them.

    def _flag_controls(
        self,
        *,
        num_requests: int,
        rate_per_s: float,
        holdout: float,
        objective: str | None,
        max_graphs: int | None,
        model_path: str,
        device_spec: str,
        style: dict[str, str],
    ) -> list[w.Widget]:
        """The controls for ``tune``'s other flags, observed; returns their rows."""
        from ..plan.tune import DEFAULT_GRAPHS

        text = {"continuous_update": False, "style": style}  # read on Enter or leaving
        self.model_path_box = w.Text(
            value=model_path, description="config.json", placeholder="path to a config.json "
            "or its folder (tune --model PATH); empty: the model above", **text,
        )  # fmt: skip
        self.device_spec_box = w.Text(
            value=device_spec, description="device spec", placeholder="path to a DeviceSpec "
            "JSON (tune --device-spec); empty: the device above", **text,
        )  # fmt: skip
        # unbounded, as the limits: a bad value is named, not clamped
        self.rate_box = w.FloatText(value=rate_per_s, description="rate (req/s)", **text)
        self.requests_box = w.IntText(value=num_requests, description="requests", **text)
        self.objective_box = w.Dropdown(
            options=[(_AUTO_OBJECTIVE, _AUTO_OBJECTIVE), *((o, o) for o in OBJECTIVES)],
            value=objective or _AUTO_OBJECTIVE, description="objective", style=style,
        )  # fmt: skip
        self.graphs_box = w.IntText(
            value=DEFAULT_GRAPHS if max_graphs is None else max_graphs,
            description="max graphs", **text,
        )  # fmt: skip
        self.holdout_box = w.FloatText(value=holdout, description="holdout", **text)
        boxes = (self.model_path_box, self.device_spec_box, self.rate_box, self.requests_box,
                 self.objective_box, self.graphs_box, self.holdout_box)  # fmt: skip
        for box in boxes:
            box.observe(self._on_change, names="value")
        return [
            w.HBox([self.model_path_box, self.device_spec_box]),
            w.HBox(
                [
                    self.rate_box,
                    self.requests_box,
                    self.objective_box,
                    self.graphs_box,
                    self.holdout_box,
                ]
            ),  # fmt: skip
        ]

    def _flag_settings(self) -> dict[str, Any]:
        """:class:`TuneSettings` fields from :meth:`_flag_controls`; ValueError naming the
        control and the rule for a value ``tune`` would refuse (the CLI's checks)."""
        settings: dict[str, Any] = {}
        path = str(self.model_path_box.value).strip()
        if path:
            if not Path(path).exists():
                raise ValueError(
                    f"config.json {path!r}: no such file or folder: give the path of a "
                    "decoder's config.json or of the folder holding it, or empty the box"
                )
            settings["model"] = path
        spec = str(self.device_spec_box.value).strip()
        if spec:
            try:
                settings["device"] = load_device_spec(spec)
            except OSError as err:
                raise ValueError(
                    f"device spec {spec!r} cannot be read ({err.strerror or err}): give the "
                    "path of a DeviceSpec JSON (as tune --device-spec), or empty the box"
                ) from err
        rate, count = float(self.rate_box.value), int(self.requests_box.value)
        if not rate > 0:
            raise ValueError(f"rate={rate:g} is invalid: give requests per second > 0")
        if count < 1:
            raise ValueError(f"requests={count} is invalid: give at least 1 request")
        holdout, graphs = float(self.holdout_box.value), int(self.graphs_box.value)
        if not 0 < holdout < 1:
            raise ValueError(
                f"holdout={holdout:g} is invalid: give the held-out share, 0 < holdout < 1"
            )
        if graphs < 1:
            raise ValueError(f"max graphs={graphs} is invalid: give at least 1 graph to plan")
        objective = self.objective_box.value
        return settings | {
            "rate_per_s": rate,
            "num_requests": count,
            "holdout": holdout,
            "max_graphs": graphs,
            "objective": None if objective == _AUTO_OBJECTIVE else objective,
        }


_AUTO_OBJECTIVE = "default"  # tune's own: p99-ttft with requests, step for a trace of steps


def _entry_message(err: ValueError | OSError, traffic: str) -> str:
    """What the dashboard shows for ``err``: a ValueError's own message (it names the value
    and the rule), an OSError's reason with the traffic path (shortened) and what to give."""
    if not isinstance(err, OSError):
        return str(err)
    shown = traffic if len(traffic) <= 80 else f"{traffic[:40]}\u2026{traffic[-30:]}"
    reason = err.strerror or str(err)
    if err.errno == errno.ENAMETOOLONG:
        reason += f": {len(traffic)} characters"
    return (
        f"traffic {shown!r} cannot be read ({reason}): give a "
        f"preset or production trace ({', '.join(TRACE_NAMES)}) or the path of a CSV or log"
    )


def tune_dashboard(**settings: Any) -> TuneDashboard:
    """:class:`TuneDashboard` with ``settings`` (model, device, tensor_parallel_size, trace,
    max_num_seqs, max_num_batched_tokens, vllm_version, num_requests, rate_per_s, holdout,
    calibration, objective, max_graphs, model_path, device_spec, replicas, balance) as its
    start."""
    return TuneDashboard(**settings)
