"""The `tune` decision as a dashboard: one control for each setting ``python -m cgdispatch
tune`` takes, built from :class:`~cgdispatch.plan.tune_run.TuneSettings` (the settings the
CLI parses its flags into), so a new setting gets a control here as it gets a flag there:
model (a preset, or a config.json path or folder), device (a preset or a spec file),
tensor-parallel size, traffic (preset, shipped trace or file; rate, requests, seed, a
client's concurrency, tokens per hash id), scheduler limits, max_model_len, prefix caching,
cudagraph mode, vLLM release (any from 0.8 on), objective, max graphs, holdout, graph memory
and capture budgets, context length, gpu_memory_utilization, replicas and balance, a
``calibrate`` profile. The verdict (recommendation, deltas against vLLM's default held out,
the flags to paste) and the trade-off figure follow each change; it opens on
``TuneSettings()``, the README's `tune` command.

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

import dataclasses
import errno
import html
from pathlib import Path
from typing import Any

import ipywidgets as w

from ..core import validate as bounds
from ..core.generation import GENERATIONS, default_release, normalize_release
from ..core.modes import CUDAGraphMode
from ..estimate.device_model import DEVICE_PRESETS
from ..estimate.devices import DeviceSpec, device_label, load_device_spec
from ..estimate.startup import DoesNotFitError
from ..models.architectures import ARCHITECTURES
from ..models.registry import tensor_parallel_size_for
from ..plan.tune_result import OBJECTIVES, TuneResult
from ..plan.tune_run import TuneSettings, tune_for
from ..workload.limits import LIMIT_BOUNDS
from ..workload.replicas import BALANCES
from ..workload.sources import TRACE_NAMES
from ..workload.trace_source import trace_text
from .explorer_handlers import message_html
from .snapshots import Snapshot
from .tune_figures import tradeoff_figure
from .tune_headline import tune_command
from .tune_verdict import verdict_lines

__all__ = ["TuneDashboard", "tune_dashboard"]

# the verdict's lines wrap at spaces, never mid-word (the `vllm serve` JSON, one long word,
# scrolls); the line height is set here, or the widget's 28 px line height double-spaces it
_VERDICT_STYLE = (
    "font-family:monospace;font-size:12px;line-height:1.4;margin:0;white-space:pre-wrap;"
    "overflow-wrap:normal;word-break:normal;overflow-x:auto"
)
_COMMAND_STYLE = "font-size:12px;color:#555;margin-top:4px;overflow-wrap:anywhere"
_STALE_CSS = "<style>.cg-stale{opacity:0.4}</style>"  # the verdict while it is recomputed


class TuneDashboard(Snapshot, w.VBox):
    """Controls for what ``python -m cgdispatch tune`` takes, and its verdict, live.

    The form is built from :class:`~cgdispatch.plan.tune_run.TuneSettings`, the settings
    the CLI parses its flags into: one control per field (``controls``, keyed by the field's
    name; a field with no control of its own gets one from its type), plus a config.json
    path and a device-spec file beside the model and device. ``settings()`` reads the form
    back as a ``TuneSettings``; ``load(settings)`` fills it with one recompute.

    ``result`` holds the last :class:`~cgdispatch.plan.tune_result.TuneResult` (None after a
    bad entry, whose message replaces the verdict); ``runs`` counts the recomputes.
    ``draw=False`` skips the figure. The start is ``settings`` (default ``TuneSettings()``:
    the README's `tune` command) with ``fields`` (TuneSettings field names) over it.
    """

    def __init__(
        self,
        settings: TuneSettings | None = None,
        *,
        model_path: str = "",  # a config.json or its folder; "" = the model control's
        device_spec: str = "",  # a DeviceSpec JSON (tune --device-spec); "" = the device's
        draw: bool = True,
        **fields: Any,
    ) -> None:
        start = _start(settings, fields)
        super().__init__()
        self.draw = draw
        self.result: TuneResult | None = None
        self._settings: TuneSettings | None = None  # the last run's, named by its verdict
        self.runs = 0  # recomputes so far, shown as data-run (the browser tests count them)
        self._quiet = False  # True while load() fills the form: one recompute after
        self.controls: dict[str, w.Widget] = {
            f.name: _control(f.name, f.type) for f in dataclasses.fields(TuneSettings)
        }
        self.model_path_box = _text_box("config.json", "path to a config.json or its folder "
                                        "(tune --model PATH); empty: the model above")  # fmt: skip
        self.device_spec_box = _text_box("device spec", "path to a DeviceSpec JSON (tune "
                                         "--device-spec); empty: the device above")  # fmt: skip
        c = self.controls  # the names the tests and the notebook have always used
        self.model_box, self.device_box, self.tp_box = c["model"], c["device"], c[_TP]
        self.trace_box, self.version_box = c["trace"], c["vllm_version"]
        self.seqs_box, self.tokens_box = c["max_num_seqs"], c["max_num_batched_tokens"]
        self.rate_box, self.requests_box = c["rate_per_s"], c["num_requests"]
        self.objective_box, self.graphs_box = c["objective"], c["max_graphs"]
        self.holdout_box, self.calibration_box = c["holdout"], c["calibration"]
        self.replicas_box, self.balance_box = c["replicas"], c["balance"]
        self.busy = w.HTML()
        self.verdict = w.HTML(layout=w.Layout(width="100%"))
        # hidden while it holds no figure: an empty Image shows a broken-image icon
        self.plot = w.Image(format="png", layout=w.Layout(max_width="1100px", display="none"))
        self.message = w.HTML()
        self._fill(start, model_path=model_path, device_spec=device_spec)
        self.model_box.observe(self._on_model, names="value")
        for name, box in self.controls.items():
            if name != "model":
                box.observe(self._on_change, names="value")
        self.model_path_box.observe(self._on_change, names="value")
        self.device_spec_box.observe(self._on_change, names="value")
        boxes = {**c, "model_path": self.model_path_box, "device_spec": self.device_spec_box}
        placed = {name for row in _ROWS for name in row}
        rest = tuple(name for name in c if name not in placed)  # a new field's control
        wrap = {"flex_flow": "row wrap"}  # a row too wide for the window wraps, never clips
        rows = [
            w.HBox([boxes[name] for name in row], layout=w.Layout(**wrap))
            for row in (*_ROWS, rest)
            if row
        ]
        self.children = [*rows, w.HTML(_STALE_CSS), self.busy, self.verdict, self.message,
                         self.plot]  # fmt: skip
        self.update()

    def _fill(self, settings: TuneSettings, *, model_path: str = "", device_spec: str = "") -> None:
        """Every control set from ``settings``, no recompute (the observers are quiet)."""
        self._quiet = True
        try:
            model = settings.model
            if model_path or not Path(model).exists():
                _choose(self.model_box, model, model)
                self.model_path_box.value = model_path
            else:  # a config.json path (tune --model PATH) goes to its own box
                self.model_path_box.value = model
            device = settings.device
            label = device.name if isinstance(device, DeviceSpec) else device
            _choose(self.device_box, label, device)
            self.device_spec_box.value = device_spec
            for name, box in self.controls.items():
                if name not in ("model", "device"):
                    _write(name, box, getattr(settings, name), settings)
        finally:
            self._quiet = False

    def load(self, settings: TuneSettings, *, run: bool = True) -> None:
        """Fill the form from ``settings`` (as the CLI parsed them) and recompute once
        (``run=False``: not at all)."""
        if not isinstance(settings, TuneSettings):
            raise ValueError(
                f"settings={settings!r} is invalid: pass a cgdispatch.plan.tune_run.TuneSettings"
            )
        self._fill(settings)
        if run:
            self.update()

    def _on_change(self, change: dict[str, Any]) -> None:
        if not self._quiet:
            self.update()

    def _on_model(self, change: dict[str, Any]) -> None:
        """A new model runs at its own TP size: one recompute, by the TP box's observer
        when the size changes."""
        if self._quiet:
            return
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
                "(the gpu_memory_utilization control)"
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
        spec = str(self.device_spec_box.value).strip()
        command = tune_command(settings, device_spec=spec)
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
            "command": command,  # the verdict's inputs, as the CLI takes them
        }
        text = " ".join(f'data-{k}="{html.escape(str(v))}"' for k, v in attrs.items())
        # a break opportunity after each comma: the `--compilation-config` JSON, one word of
        # ~250 characters, wraps between its fields instead of mid-word or off the right edge
        body = html.escape("\n".join(lines)).replace(",", ",<wbr>")
        self.result = result
        self.message.value = ""
        self.verdict.value = (
            f"<pre {text} style='{_VERDICT_STYLE}'>{body}</pre><div style='{_COMMAND_STYLE}'>"
            f"the same from a shell: <code>{html.escape(command)}</code></div>"
        )
        self.plot.value = png
        self.plot.layout.display = None if png else "none"

    def _show_error(self, text: str) -> None:
        self.result = None
        self.verdict.value, self.plot.value = "", b""
        self.plot.layout.display = "none"
        self.message.value = f'<div data-run="{self.runs}">{message_html([text])}</div>'

    def _tune(self) -> TuneResult:
        settings = self.settings()
        self._settings = settings  # what the verdict names
        return tune_for(settings)

    def settings(self) -> TuneSettings:
        """The form as :class:`TuneSettings` (a config.json path or a device spec file wins
        over the model or device control); ValueError naming the control and the rule for a
        value ``tune`` would refuse (the CLI's checks)."""
        values = {name: _read(name, box) for name, box in self.controls.items()}
        if not values["trace"]:
            raise ValueError("traffic is empty: give a preset, a production trace or a CSV path")
        path = str(self.model_path_box.value).strip()
        if path:
            if not Path(path).exists():
                raise ValueError(
                    f"config.json {path!r}: no such file or folder: give the path of a "
                    "decoder's config.json or of the folder holding it, or empty the box"
                )
            values["model"] = path
        spec = str(self.device_spec_box.value).strip()
        if spec:
            try:
                values["device"] = load_device_spec(spec)
            except OSError as err:
                raise ValueError(
                    f"device spec {spec!r} cannot be read ({err.strerror or err}): give the "
                    "path of a DeviceSpec JSON (as tune --device-spec), or empty the box"
                ) from err
        _check_values(values)
        return TuneSettings(**values)


_AUTO_OBJECTIVE = "default"  # tune's own: p99-ttft with requests, step for a trace of steps
_TP = "tensor_parallel_size"
_MIB = float(1 << 20)
_STYLE = {"description_width": "initial"}

# the form's rows, by TuneSettings field ("model_path", "device_spec": the file boxes); a
# field in no row (one added to TuneSettings later) gets a row of its own at the end
_ROWS: tuple[tuple[str, ...], ...] = (
    ("model", "device", _TP, "vllm_version"),
    ("model_path", "device_spec"),
    ("trace", "rate_per_s", "num_requests", "seed", "max_concurrency", "hash_block_size"),
    ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "enable_prefix_caching"),
    ("objective", "max_graphs", "holdout", "memory_budget_bytes", "capture_budget_s"),
    ("cudagraph_mode", "context_len", "gpu_memory_utilization"),
    ("replicas", "balance"),
    ("calibration",),
)
# a control's label where it is not the field's name (the CLI's flag without its dashes)
_LABELS = {
    "trace": "traffic",
    "vllm_version": "vLLM",
    "rate_per_s": "rate (req/s)",
    "num_requests": "requests",
    "max_graphs": "max graphs",
    "memory_budget_bytes": "graph memory budget (MiB)",
    "capture_budget_s": "capture budget (s)",
    "enable_prefix_caching": "prefix caching",
}
# what an empty box of an optional setting means
_EMPTY = {
    "max_model_len": "empty: vLLM's pick",
    "max_concurrency": "empty: open loop (arrival times)",
    "memory_budget_bytes": "empty: no budget",
    "capture_budget_s": "empty: no budget",
    "calibration": "calibrate profile (name or path); empty: shipped model",
}
# integer settings checked here as the CLI checks its flags (least, most): the scheduler's
# by its own table (LIMIT_BOUNDS); max_num_seqs and the token budget, TP and replicas are
# checked, and named, by tune itself
_LIMIT = {name: (least, most) for name, least, most in LIMIT_BOUNDS}
_INT_BOUNDS = {
    "seed": (0, 2**63 - 1),
    "context_len": (1, bounds.MAX_MODEL_LEN),
    "max_model_len": _LIMIT["max_model_len"],
    "max_concurrency": (1, bounds.MAX_REQUESTS),
    "hash_block_size": _LIMIT["hash_block_size"],
}


def _kind(annotation: Any) -> tuple[str, bool]:
    """A TuneSettings field's base type name (int, float, str, bool) and whether it may be
    None, from its annotation (a string: the module uses postponed annotations)."""
    text = str(annotation)
    parts = [p.strip() for p in text.split("|")]
    base = next((p for p in parts if p in ("int", "float", "str", "bool")), "str")
    return base, "None" in parts


def _start(settings: TuneSettings | None, fields: dict[str, Any]) -> TuneSettings:
    """``settings`` (default ``TuneSettings()``) with ``fields`` over it; ValueError naming
    a field TuneSettings does not have."""
    names = [f.name for f in dataclasses.fields(TuneSettings)]
    unknown = sorted(set(fields) - set(names))
    if unknown:
        raise ValueError(
            f"{unknown} are not tune settings: give TuneSettings fields ({', '.join(names)}), "
            "model_path, device_spec or draw"
        )
    if fields.get("vllm_version", "") is None:  # None: the newest, TuneSettings' default
        fields = {k: v for k, v in fields.items() if k != "vllm_version"}
    base = TuneSettings() if settings is None else settings
    if not isinstance(base, TuneSettings):
        raise ValueError(f"settings={settings!r} is invalid: pass a TuneSettings or None")
    return dataclasses.replace(base, **fields)


def _text_box(label: str, placeholder: str) -> w.Text:
    """A text box read on Enter or on leaving it."""
    return w.Text(description=label, placeholder=placeholder, continuous_update=False, style=_STYLE)


def _control(name: str, annotation: Any) -> w.Widget:
    """The control for TuneSettings field ``name``: its own for the choices, else one from
    its type (an optional number is a text box whose empty value is None)."""
    label = _LABELS.get(name, name)
    if name == "model":
        return w.Dropdown(options=sorted(ARCHITECTURES), description=label, style=_STYLE)
    if name == "device":
        presets = [(n, n) for n in sorted(DEVICE_PRESETS)]
        return w.Dropdown(options=presets, description=label, style=_STYLE)
    if name == "trace":
        return w.Combobox(
            options=list(TRACE_NAMES), description=label, ensure_option=False,
            placeholder="preset, production trace or CSV path", continuous_update=False,
            style=_STYLE,
        )  # fmt: skip
    if name == "vllm_version":  # the generations offered, any release from 0.8 typed
        return w.Combobox(
            options=list(reversed(GENERATIONS)), description=label, ensure_option=False,
            placeholder="a release from 0.8 on (0.10.1.1, ...)", continuous_update=False,
            style=_STYLE,
        )  # fmt: skip
    if name == "cudagraph_mode":
        modes = [m.name for m in CUDAGraphMode]
        return w.Dropdown(options=modes, description=label, style=_STYLE)
    if name == "objective":
        options = [_AUTO_OBJECTIVE, *OBJECTIVES]
        return w.Dropdown(options=options, description=label, style=_STYLE)
    if name == "balance":
        return w.Dropdown(options=list(BALANCES), description=label, style=_STYLE)
    base, optional = _kind(annotation)
    if base == "bool":
        return w.Checkbox(description=label, indent=False)
    # None is the model's own TP size or the planner's default: both shown as their number
    if (optional or base == "str") and name not in (_TP, "max_graphs"):
        return _text_box(label, _EMPTY.get(name, "empty: tune's default"))
    # unbounded: a bounded box would turn 0 into 1 silently; tune says what is wrong
    box = w.IntText if base == "int" else w.FloatText
    return box(description=label, continuous_update=False, style=_STYLE)


def _choose(box: w.Dropdown, label: str, value: Any) -> None:
    """Select ``value`` in ``box``, adding it as ``label`` when it is not an option."""
    pairs = [o if isinstance(o, tuple) else (o, o) for o in box.options]
    if all(v is not value and v != value for _, v in pairs):
        box.options = [*pairs, (label, value)]
    box.value = value


def _write(name: str, box: w.Widget, value: Any, settings: TuneSettings) -> None:
    """Show setting ``name`` = ``value`` in its control."""
    from ..plan.tune import DEFAULT_GRAPHS

    if name == _TP:
        value = tensor_parallel_size_for(settings.model, value)
    elif name == "vllm_version":
        value = str(value) if value is not None else default_release()
    elif name == "objective":
        value = value or _AUTO_OBJECTIVE
    elif name == "max_graphs":
        value = DEFAULT_GRAPHS if value is None else value
    elif name == "cudagraph_mode":
        value = CUDAGraphMode.parse(value).name
    elif name == "trace":
        value = trace_text(value)
    elif name == "memory_budget_bytes":
        value = "" if value is None else repr(value / _MIB)
    elif isinstance(box, w.Dropdown):
        _choose(box, str(value), value)
        return
    elif isinstance(box, w.Text) and not isinstance(box, w.Combobox):
        value = "" if value is None else str(value)
    box.value = value


def _number(name: str, text: str, base: str) -> int | float:
    """``text`` as the ``base`` number a setting takes; ValueError naming the control."""
    label = _LABELS.get(name, name)
    try:
        return int(text) if base == "int" else float(text)
    except ValueError:
        kind = "an integer" if base == "int" else "a number"
        raise ValueError(
            f"{label}={text!r} is invalid: give {kind}, or empty the box for the default"
        ) from None


def _read(name: str, box: w.Widget) -> Any:
    """Setting ``name`` as its control holds it (not yet checked against tune's rules)."""
    if name == "objective":
        return None if box.value == _AUTO_OBJECTIVE else box.value
    if name == "vllm_version":
        return _release(str(box.value).strip())
    if name == "trace":
        return str(box.value).strip()
    if isinstance(box, (w.Dropdown, w.IntText, w.FloatText)):
        return box.value
    if isinstance(box, w.Checkbox):
        return bool(box.value)
    text = str(box.value).strip()
    annotation = {f.name: f.type for f in dataclasses.fields(TuneSettings)}[name]
    base, optional = _kind(annotation)
    if base == "str":
        return text or None if optional else text
    if not text:
        return None
    number = _number(name, text, base)
    return number * _MIB if name == "memory_budget_bytes" else number


def _release(text: str) -> str:
    """The vLLM control's release, normalised as the CLI's ``--vllm-version`` (any release
    from 0.8 on); ValueError naming it."""
    if not text:
        raise ValueError("vLLM is empty: give a release from 0.8 on (0.34, 0.10.1.1, ...)")
    try:
        return normalize_release(text)
    except ValueError as err:
        raise ValueError(f"vLLM={text!r}: {err}") from None


def _check_values(values: dict[str, Any]) -> None:
    """ValueError naming the control and the rule for a value the CLI refuses."""
    rate, count = float(values["rate_per_s"]), int(values["num_requests"])
    if not rate > 0:
        raise ValueError(f"rate={rate:g} is invalid: give requests per second > 0")
    if count < 1:
        raise ValueError(f"requests={count} is invalid: give at least 1 request")
    bounds.check_int("requests", count, 1, bounds.MAX_REQUESTS)
    holdout, graphs = float(values["holdout"]), int(values["max_graphs"])
    if not 0 < holdout < 1:
        raise ValueError(
            f"holdout={holdout:g} is invalid: give the held-out share, 0 < holdout < 1"
        )
    if graphs < 1:
        raise ValueError(f"max graphs={graphs} is invalid: give at least 1 graph to plan")
    bounds.check_int("max graphs", graphs, 1, bounds.MAX_CAPTURE_SIZES)
    for name, (least, most) in _INT_BOUNDS.items():
        if values.get(name) is not None:
            bounds.check_int(_LABELS.get(name, name), values[name], least, most)
    utilization = float(values["gpu_memory_utilization"])
    if not 0 < utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization={utilization:g} is invalid: give a fraction in (0, 1], "
            "as vLLM's flag"
        )
    for name in ("memory_budget_bytes", "capture_budget_s"):
        value = values.get(name)
        if value is not None and not value > 0:
            shown = value / _MIB if name == "memory_budget_bytes" else value
            raise ValueError(
                f"{_LABELS[name]}={shown:g} is invalid: give a budget > 0, or empty the box"
            )


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


def tune_dashboard(settings: TuneSettings | None = None, **fields: Any) -> TuneDashboard:
    """:class:`TuneDashboard` starting at ``settings`` (default ``TuneSettings()``, the
    README's `tune` command) with ``fields`` over it: any TuneSettings field (model, device,
    tensor_parallel_size, trace, num_requests, rate_per_s, max_num_seqs, max_model_len, ...),
    model_path, device_spec or draw."""
    return TuneDashboard(settings, **fields)
