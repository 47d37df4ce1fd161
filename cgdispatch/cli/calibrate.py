"""``python -m cgdispatch calibrate LOG...``: fit the start-up and step costs to one setup's
own vLLM logs and save the fit as a named profile that ``tune --calibration`` applies.

LOG files, told apart by content: vLLM start-up logs (at least one), ``vllm bench serve``
result JSONs and ``scripts/gpu_check.py`` step-time CSVs (step times: the step scale).
The logic is :func:`cgdispatch.estimate.setup_fit.fit_setup`; this module reads the files,
checks they are of one setup, prints the fit and saves the profile.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .errors import command_parser
from .model_args import DEVICES

_DEFAULT_CONTEXT_LEN = 512  # tune's default --context-len: the step scale is fitted at it


def _read(paths: list[str]) -> tuple[list, list]:
    """(start-up runs, step files) from the files on the command line."""
    from ..estimate.setup_fit import LoggedRun, file_sha256
    from ..estimate.setup_profile import LoggedFile
    from ..estimate.step_measurements import is_bench_json, read_bench_json, read_step_csv
    from ..estimate.vllm_logs import read_startup_log

    runs, steps = [], []
    for path in paths:
        digest = file_sha256(path)
        if path.endswith(".json"):
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            if not is_bench_json(data):
                raise ValueError(
                    f"{path} is not a `vllm bench serve` result (no median_itl_ms or "
                    "median_tpot_ms): give start-up logs, bench result JSONs or gpu_check CSVs"
                )
            steps.append((LoggedFile(path, digest, "bench json"), read_bench_json(path)))
        elif path.endswith(".csv"):
            points, gpu = read_step_csv(path)
            steps.append((LoggedFile(path, digest, "gpu_check csv"), (points, gpu)))
        else:
            try:
                runs.append(LoggedRun(path, digest, read_startup_log(path)))
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
    if not runs:
        raise ValueError(
            "no vLLM start-up log among the files: calibrate needs at least one (the server's "
            "log from its start, with its 'Graph capturing finished' line)"
        )
    return runs, steps


def _setup(args: argparse.Namespace, runs: list) -> tuple[str, Any, int, dict[str, str]]:
    """(model id, device, TP size, whose) of the setup: the flags, else the first log."""
    from ..estimate.devices import load_device_spec
    from ..estimate.setup_profile import published_id

    first = runs[0]
    if args.model is not None:
        model = published_id(args.model)
    else:
        try:
            model = published_id(first.log.model or "")
        except ValueError:
            raise ValueError(
                f"{first.path} names the model {first.log.model!r}, which has no published "
                "config here: give --model (a Hugging Face id, registry name or config.json)"
            ) from None
    if args.device_spec:
        device = load_device_spec(args.device_spec)
    elif args.device is not None:
        device = args.device
    elif first.log.device is not None:
        device = first.log.device
    else:
        raise ValueError(
            f"{first.path} prints no GPU name (vLLM logs rarely do): give --device "
            f"(one of {', '.join(DEVICES)}) or --device-spec"
        )
    tp = args.tensor_parallel_size or first.log.tensor_parallel_size
    log = f"the first log, {first.path}"
    whose = {
        "model": "--model" if args.model is not None else log,
        "device": "--device" if args.device or args.device_spec else log,
        "tp": "--tensor-parallel-size" if args.tensor_parallel_size else log,
    }
    return model, device, tp, whose


def run_calibrate(args: argparse.Namespace) -> int:
    from ..core.cache import profiles_dir
    from ..estimate.device_model import device_cost_model
    from ..estimate.devices import device_label
    from ..estimate.setup_fit import fit_setup
    from ..estimate.setup_profile import check_same_setup, profile_path, same_model, save_profile
    from ..estimate.step_measurements import decode_mode
    from ..estimate.vllm_logs import gpu_preset
    from ..models.registry import tensor_parallel_flag

    runs, files = _read(args.logs)
    model, device, tp, whose = _setup(args, runs)
    for run in runs:
        check_same_setup(run.path, run.log, model, device, tp, whose)
    seqs, mode = runs[0].log.max_num_seqs, decode_mode(runs[0].log.cudagraph_mode)
    steps = []
    for file, content in files:
        if file.kind == "bench json":
            if content.model_id and not same_model(content.model_id, model):
                raise ValueError(
                    f"{file.path} benchmarks {content.model_id}, not {model} ({whose['model']}): give "
                    "the bench results of this setup"
                )
            steps.append((file, [content.step_point(seqs, mode)]))
        else:
            points, gpu = content
            preset = gpu_preset(gpu)[1] if gpu else None
            if preset is not None and preset != device_label(device):
                raise ValueError(
                    f"{file.path} was measured on {gpu}, not {device_label(device)} ({whose['device']}): "
                    "give the step times of this setup's GPU"
                )
            steps.append((file, points))
    name = args.name or "-".join(
        "".join(c if c.isalnum() or c in "-._" else "-" for c in part)
        for part in (model.split("/")[-1], device_label(device), f"tp{tp}")
    )
    out = Path(args.out) if args.out else profile_path(name, profiles_dir())
    profile, rows = fit_setup(
        name, model, device, runs, steps=steps,
        cost_model=lambda: device_cost_model(
            model, device, context_len=args.context_len,
            tensor_parallel_size=tensor_parallel_flag(model, tp),
        ),
    )  # fmt: skip
    save_profile(profile, out)
    if args.json:
        print(json.dumps({"profile": str(out), **profile_summary(profile), "fit": rows}))
        return 0
    use = str(out) if args.out else name
    print("\n".join(report_lines(profile, rows, out, use)))
    return 0


def profile_summary(profile: Any) -> dict[str, Any]:
    """The profile's fitted numbers and bands as plain JSON values."""
    import dataclasses

    out = dataclasses.asdict(profile)
    out["files"] = [dataclasses.asdict(f) for f in profile.files]
    out["bands"] = {k: profile.band(k) for k in ("graph_memory", "capture", "kv_tokens",
                                                  "step_time")}  # fmt: skip
    out["resolutions"] = dict(profile.resolutions)
    return out


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def report_lines(profile: Any, rows: list[dict[str, Any]], path: Path, use: str) -> list[str]:
    """What ``calibrate`` prints: each run logged / model / calibrated, the fitted numbers,
    the residuals and the bands ``tune --calibration`` will use, and where it was saved."""
    lines = [
        f"{profile.model} on {profile.device} TP{profile.tensor_parallel_size}: {profile.label}",
        f"{'run':<40}{'graph GiB log/model/cal':>26}{'capture s':>22}{'KV tokens':>34}",
    ]
    for r in rows:
        if "graph_memory_gib" not in r:
            lines.append(
                f"{r['run'][:40]:<40} step {r['step_ms']:.3f} ms log, {r['step_ms_model']:.3f} "
                f"model, {r['step_ms_calibrated']:.3f} calibrated"
            )
            continue
        lines.append(
            f"{r['run'][:40]:<40}{_fmt(r['graph_memory_gib'], '.2f'):>10}"
            f"{r['graph_memory_gib_model']:>8.2f}{r['graph_memory_gib_calibrated']:>8.2f}"
            f"{_fmt(r['capture_s'], '.1f'):>8}{r['capture_s_model']:>7.1f}"
            f"{r['capture_s_calibrated']:>7.1f}{_fmt(r['kv_cache_tokens'], ','):>12}"
            f"{r['kv_cache_tokens_model']:>11,}{r['kv_cache_tokens_calibrated']:>11,}"
        )
    step = "none given" if profile.step_scale is None else f"x{profile.step_scale:.3f}"
    lines.append(
        f"fitted: graph pool x{profile.pool_factor:.3f}, capture time "
        f"x{profile.capture_factor:.3f}, non-torch memory {profile.non_torch_gib:.2f} GiB, "
        f"step time {step}"
    )
    if profile.runs == 1:
        lines.append(
            "one run: its residuals are zero by construction (the fit reproduces the figures "
            "it was fitted on), so they cannot tell the error; tune uses the floor bands"
        )
    else:
        worst = {
            k: max((abs(x) for x in v), default=0.0)
            for k, v in (
                ("graph memory", profile.graph_memory_residuals),
                ("capture", profile.capture_residuals),
                ("KV tokens", profile.kv_tokens_residuals),
            )
        }
        lines.append("largest residual over the runs: " + ", ".join(
            f"{k} {100 * v:.1f}%" for k, v in worst.items()))  # fmt: skip
    bands = ", ".join(
        f"{k} \u00b1{100 * profile.band(k):.0f}%"
        for k in ("graph_memory", "capture", "kv_tokens", "step_time")
        if k != "step_time" or profile.step_scale is not None
    )
    lines.append(f"bands tune --calibration will use: {bands}")
    lines.append(f"saved profile {profile.name!r}: {path} (use: tune --calibration {use})")
    return lines


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    calibrate = command_parser(
        subparsers,
        "calibrate",
        help="fit graph memory, capture time, KV tokens and step times to your vLLM logs",
        description="Fit the start-up model (graph pool, capture time, non-torch memory) "
        "and, given bench results or gpu_check step times, the step-time scale to the logs "
        "of ONE setup (model, GPU, TP size); save the fit as a profile for tune "
        "--calibration.",
    )
    calibrate.add_argument(
        "logs", nargs="+", metavar="LOG",
        help="vLLM start-up logs of one setup (at least one), and optionally `vllm bench "
        "serve` result JSONs and scripts/gpu_check.py step-time CSVs",
    )  # fmt: skip
    calibrate.add_argument(
        "--model", default=None,
        help="the model (Hugging Face id, registry name or config.json; default: the first "
        "log's)",
    )  # fmt: skip
    calibrate.add_argument(
        "--device", choices=DEVICES, default=None, metavar="DEVICE",
        help=f"GPU preset, one of {', '.join(DEVICES)} (default: the GPU the first "
        "log names; most name none)",
    )  # fmt: skip
    calibrate.add_argument(
        "--device-spec",
        default=None,
        metavar="FILE.json",
        help="a GPU not in the presets (DeviceSpec fields as JSON)",
    )
    calibrate.add_argument("--tensor-parallel-size", type=int, default=None,
                           help="default: the first log's")  # fmt: skip
    calibrate.add_argument(
        "--name", default=None,
        help="profile name (default MODEL-DEVICE-tpN), saved in the cache folder's profiles/",
    )  # fmt: skip
    calibrate.add_argument("--out", default=None, help="save the profile here instead")
    calibrate.add_argument(
        "--context-len", type=int, default=_DEFAULT_CONTEXT_LEN,
        help="KV positions per token of the cost model the step scale is fitted against "
        "(tune's --context-len; default %(default)s)",
    )  # fmt: skip
    calibrate.add_argument("--json", action="store_true", help="print one JSON object")
    calibrate.set_defaults(func=run_calibrate)
