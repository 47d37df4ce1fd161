"""A calibration profile: the start-up and step-cost factors of ONE user's setup (model,
GPU, TP size) fitted on that user's own vLLM logs, saved as JSON with a SHA-256 digest.

``python -m cgdispatch calibrate`` fits one (:mod:`~cgdispatch.estimate.setup_fit`);
``tune --calibration NAME_OR_PATH`` loads it. What it changes:

- graph memory x ``pool_factor`` and capture time x ``capture_factor`` (both relative to
  the shipped model, :data:`~cgdispatch.estimate.startup_pricing.CALIBRATION`, its GPU
  architecture's pool factor included);
- non-torch memory := ``non_torch_gib`` (fitted so that the KV budget reproduces the
  logged KV tokens: it also absorbs the model's error on weights and the activation peak);
- every step time x ``step_scale`` when step times were given (bench JSON, gpu_check CSV);
- the bands: each figure's relative band is the largest residual of the runs it was
  fitted on, but at least :data:`FLOORS` and the log's print resolution. With one run the
  residual is zero by construction (the same figures reproduced cannot tell the error),
  so the floor is the band.

One setup is one model, GPU and TP size: :func:`published_id`, :func:`same_model` and
:func:`check_same_setup` tell whether a log, a bench result or a profile belongs to it.

A profile is data, not code: :func:`load_profile` reads it with
:func:`~cgdispatch.estimate.datafile.load_data` (digest checked; a file edited by hand is
refused with the advice to run ``calibrate`` again).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from .datafile import DataFileError, dump_data, load_data
from .devices import DeviceSpec, device_label, device_spec
from .startup_pricing import CALIBRATION, StartupCoefficients
from .uncertainty import ModelErrors
from .vllm_logs import VllmStartupLog

__all__ = [
    "CalibrationProfile",
    "LoggedFile",
    "FLOORS",
    "PROFILE_KIND",
    "profile_path",
    "save_profile",
    "load_profile",
    "published_id",
    "same_model",
    "check_same_setup",
]

PROFILE_KIND = "CalibrationProfile"
# the smallest relative band a calibrated figure carries, however well its runs agree:
# the spread of repeated runs of one setup in the reference data (the two RTX 4090 runs of
# cgdispatch/data/reference_vllm_startups_device_fit.csv, same settings, logged 445,968 and
# 433,456 KV tokens: 2.8%; their pools agree to the 0.01 GiB printed), and for capture
# time and steps the run-to-run noise of timings (a 10% and 5% allowance, not measured here)
# a log whose device memory (torch's total_memory) is this far from the GPU's is of another
_MEMORY_TOLERANCE = 0.05
FLOORS = {"graph_memory": 0.05, "capture": 0.10, "kv_tokens": 0.03, "step_time": 0.05}


@dataclass(frozen=True)
class LoggedFile:
    """One file a profile was fitted on: its path as given, its SHA-256 and its kind."""

    path: str
    sha256: str
    kind: str  # "startup log", "bench json" or "gpu_check csv"


@dataclass(frozen=True)
class CalibrationProfile:
    """The fitted factors of one setup and what they were fitted on (see module doc)."""

    name: str
    model: str  # the published model id the figures are priced for
    device: str  # device_label of the GPU
    architecture: str  # its DeviceSpec.architecture (where the pool factor applies)
    tensor_parallel_size: int
    runs: int  # start-up logs fitted
    files: tuple[LoggedFile, ...]
    pool_factor: float  # logged pool / modelled pool (geometric mean over runs)
    capture_factor: float  # logged capture time / modelled (geometric mean)
    non_torch_gib: float  # non-torch memory that reproduces the logged KV tokens (mean)
    step_scale: float | None  # measured step / modelled step (geometric mean); None: none given
    step_points: int
    # per-run relative residuals (calibrated - logged) / logged, in the runs' order
    graph_memory_residuals: tuple[float, ...]
    capture_residuals: tuple[float, ...]
    kv_tokens_residuals: tuple[float, ...]
    step_residuals: tuple[float, ...]
    # the print resolution of each logged figure relative to it (half its last digit),
    # the largest over the runs: a band narrower than what the log can show means nothing
    resolutions: tuple[tuple[str, float], ...] = ()

    @property
    def label(self) -> str:
        """What every calibrated figure says it is."""
        return f"calibrated on your logs ({self.runs} run{'s' if self.runs != 1 else ''})"

    def check_setup(self, model: str, device: str | DeviceSpec, tensor_parallel_size: int) -> None:
        """ValueError (one line naming both) unless the profile is of this model, GPU and
        TP size."""
        ours = (self.model.lower(), self.device, self.tensor_parallel_size)
        theirs = (model.lower(), device_label(device), tensor_parallel_size)
        if ours != theirs:
            raise ValueError(
                f"calibration profile {self.name!r} is of {self.model} on {self.device} TP"
                f"{self.tensor_parallel_size}, not of {model} on {device_label(device)} TP"
                f"{tensor_parallel_size}: fit one on this setup's logs with `calibrate`"
            )

    def coefficients(self, base: StartupCoefficients = CALIBRATION) -> StartupCoefficients:
        """``base`` with this profile's pool factor (on its GPU architecture), capture
        terms scaled by its capture factor and its non-torch memory."""
        pool = base.pool_factor(_spec_of(self)) * self.pool_factor
        capture = {
            k: getattr(base, k) * self.capture_factor
            for k in ("capture_base_s", "capture_per_node_s", "capture_per_eager",
                      "capture_per_moe_key_s", "capture_per_key_s")
        }  # fmt: skip
        return dataclasses.replace(
            base,
            pool_factors=((self.architecture, pool),),
            pool_factor_runs=self.runs,
            non_torch_single_gib=self.non_torch_gib,
            non_torch_tp_gib=self.non_torch_gib,
            non_torch_pp_gib=self.non_torch_gib,
            **capture,
        )

    def band(self, figure: str) -> float:
        """The relative band of ``figure`` (a :data:`FLOORS` key): the largest residual,
        at least the floor and the logs' print resolution."""
        residuals = {
            "graph_memory": self.graph_memory_residuals,
            "capture": self.capture_residuals,
            "kv_tokens": self.kv_tokens_residuals,
            "step_time": self.step_residuals,
        }[figure]
        worst = max((abs(r) for r in residuals), default=0.0)
        return max(worst, FLOORS[figure], dict(self.resolutions).get(figure, 0.0))

    def errors(self, base: ModelErrors) -> ModelErrors:
        """``base`` with the start-up bands (and the step band, when step times were
        fitted) shrunk to this profile's :meth:`band`."""
        return ModelErrors(
            graph_memory=self.band("graph_memory"),
            capture=self.band("capture"),
            kv_tokens=self.band("kv_tokens"),
            step_time=self.band("step_time") if self.step_scale is not None else base.step_time,
            runs=self.runs,
            ratios=self.step_points if self.step_scale is not None else base.ratios,
            basis=f"{self.label}: largest residual, floors {FLOORS}",
            # measured steps of this server stand for both parts of the step band
            step_kernels=(
                self.band("step_time") if self.step_scale is not None else base.step_kernels
            ),
            kernel_steps=self.step_points if self.step_scale is not None else base.kernel_steps,
            kernel_basis=self.label if self.step_scale is not None else base.kernel_basis,
        )


def published_id(model: str) -> str:
    """The published Hugging Face id behind ``model`` (a registry name such as
    ``llama-3.1-8b``, an id, or a config.json path); ValueError when there is none."""
    from ..models.arch_spec import ARCHITECTURES
    from ..models.published import published_model

    spec = ARCHITECTURES.get(model)
    if spec is not None and spec.published:
        return spec.published
    return published_model(model).model


def _tokens(name: str) -> set[str]:
    last = re.split(r"[/\\]", name.rstrip("/\\"))[-1]
    return {t for t in re.split(r"[^0-9a-z]+", last.lower().replace("___", ".")) if t}


def same_model(logged: str, *names: str) -> bool:
    """Whether a log's model name (an id or a local checkpoint path) names the same model as
    one of ``names``: the words of the shorter last path component all appear in the
    longer's (``/models/Qwen2___5-3B`` is ``Qwen/Qwen2.5-3B-Instruct``; Llama-3.1-8B is
    not Llama-3.1-70B)."""
    words = _tokens(logged)
    for name in names:
        other = _tokens(name)
        if words and other and (words <= other or other <= words):
            return True
    return False


def check_same_setup(
    path: str,
    log: VllmStartupLog,
    model: str,
    device: str | DeviceSpec,
    tp: int,
    whose: dict[str, str] | None = None,
) -> None:
    """ValueError (one line naming both) unless ``log`` is a start-up of ``model`` on
    ``device`` at TP ``tp``. ``whose`` says where each of ``"model"``, ``"device"`` and
    ``"tp"`` comes from (``"--model"``, ``"the first log, x.log"``), for the message."""
    whose = whose or {}
    if log.model and not same_model(log.model, model):
        raise ValueError(
            f"{path} is a log of {log.model}, not of {model} ({whose.get('model', 'given')}): calibrate one setup "
            "at a time (same model, GPU and TP size)"
        )
    if log.device and log.device != device_label(device):
        raise ValueError(
            f"{path} is a log of a {log.gpu_name} ({log.device}), not of {device_label(device)} "
            f"({whose.get('device', 'given')}): calibrate one setup at a time (same model, GPU and TP size)"
        )
    memory_gib = device_spec(device).memory_bytes / (1 << 30)
    if log.total_memory_gib and abs(log.total_memory_gib / memory_gib - 1) > _MEMORY_TOLERANCE:
        raise ValueError(
            f"{path} is a log of a GPU with {log.total_memory_gib:.2f} GiB, not of "
            f"{device_label(device)} ({memory_gib:.2f} GiB; {whose.get('device', 'given')}): "
            "calibrate one setup at a time (same model, GPU and TP size)"
        )
    if log.tensor_parallel_size != tp:
        raise ValueError(
            f"{path} is a log of TP{log.tensor_parallel_size}, not TP{tp} ({whose.get('tp', 'given')}): "
            "calibrate one setup at a time (same model, GPU and TP size)"
        )


def _spec_of(profile: CalibrationProfile) -> DeviceSpec:
    from .devices import DEVICE_PRESETS

    spec = DEVICE_PRESETS.get(profile.device)
    if spec is not None:
        return spec
    # a GPU without a preset (--device-spec): only its architecture matters here
    return dataclasses.replace(device_spec("H100"), name=profile.device,
                               architecture=profile.architecture)  # fmt: skip


def profile_path(name_or_path: str | Path, profiles_dir: Path) -> Path:
    """The file of a profile: ``name_or_path`` itself when it is an existing file or ends
    in ``.json``, else ``profiles_dir / NAME.json``."""
    path = Path(name_or_path)
    if path.is_file() or path.suffix == ".json" or len(path.parts) > 1:
        return path
    name = str(name_or_path)
    if not name or not all(c.isalnum() or c in "-._" for c in name):
        raise ValueError(
            f"calibration profile name {name!r} is invalid: use letters, digits, '-', '.' "
            "and '_', or give a path to a profile's .json file"
        )
    return profiles_dir / f"{name}.json"


def save_profile(profile: CalibrationProfile, path: Path) -> Path:
    """Write ``profile`` to ``path`` (JSON with a digest, replaced atomically)."""
    dump_data(profile, path, kind=PROFILE_KIND)
    return path


def load_profile(name_or_path: str | Path, profiles_dir: Path) -> CalibrationProfile:
    """The profile saved under this name (in ``profiles_dir``) or at this path. A missing
    profile and a damaged or edited one are ValueErrors naming the file and the fix."""
    path = profile_path(name_or_path, profiles_dir)
    try:
        profile = load_data(path, kind=PROFILE_KIND, classes=(CalibrationProfile, LoggedFile))
    except FileNotFoundError:
        raise ValueError(
            f"calibration profile {str(name_or_path)!r}: no file {path}; fit one with "
            "`python -m cgdispatch calibrate LOG... --name NAME`"
        ) from None
    except DataFileError as e:
        raise ValueError(
            f"calibration profile {path} is damaged ({e}): run `calibrate` on its logs again"
        ) from None
    if not isinstance(profile, CalibrationProfile):
        raise ValueError(f"{path} holds no calibration profile: run `calibrate` again")
    return profile
