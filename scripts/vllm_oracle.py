"""The vLLM oracle: drive vLLM's real config resolution and CUDA-graph dispatch on CPU.

Run inside a virtualenv that holds torch (CPU) and one vLLM wheel (see ``make oracle``);
cgdispatch is not imported. It writes one JSON fixture per vLLM version:

    python scripts/vllm_oracle.py --out tests/data/vllm_oracle/vllm-0.33.0.json --cases 700

vLLM 0.33 (generation 1, ``vllm/v1/cudagraph_dispatcher.py``) and vLLM 0.34
(generation 2, ``vllm/v1/worker/gpu/cudagraph_utils.py``) are told apart by which of the
two modules exists. The JSON schema is in ``tests/data/vllm_oracle/README.md``.

How vLLM is made to run here (no GPU, no compiled extensions, no weights, offline):
the compiled modules ``vllm._C``, ``vllm._C_stable_libtorch`` and ``vllm.vllm_flash_attn``
are stubs; the current platform is a subclass of vLLM's CUDA platform with a fixed device
capability, which reports "not CUDA" only while the model and dispatcher modules are
imported (their imports probe CUDA kernels); the model registry's cache save is a no-op;
the pipeline-parallel group is a one-rank stand-in; the model is a hand-written tiny
Llama ``config.json`` (``skip_tokenizer_init``). Configs are built through
``EngineArgs(...).create_engine_config()``.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import random
import sys
import tempfile
import time
import types
from typing import Any

# set before vLLM is imported
try:
    from importlib.metadata import version as _dist_version

    if _dist_version("vllm").startswith("0.33."):
        os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")  # 0.33: the V1 runner's path
except Exception:  # noqa: BLE001 - no vLLM installed: --help still works
    pass
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["VLLM_NO_USAGE_STATS"] = "1"
os.environ["VLLM_DO_NOT_TRACK"] = "1"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
MAX_MODEL_LEN = 4096
SUPPORT_LEVELS = ["NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH", "ALWAYS"]
MODES = ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
CAPABILITIES = [(9, 0), (10, 0)]


# ----- making vLLM run on CPU --------------------------------------------------------------
def _stub_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__path__ = []

    def __getattr__(attr: str) -> Any:  # any kernel entry point is a no-op
        if attr.startswith("__"):
            raise AttributeError(attr)
        return lambda *args, **kwargs: None

    module.__getattr__ = __getattr__
    sys.modules[name] = module
    return module


class _OnePipelineRank:
    """Stands in for vLLM's pipeline-parallel group with a single rank."""

    rank_in_group = 0
    world_size = 1
    is_first_rank = True
    is_last_rank = True


_PLATFORM: Any = None


def bootstrap() -> str:
    """Stub, patch and import vLLM; returns its version."""
    global _PLATFORM
    for name in ("vllm._C", "vllm._C_stable_libtorch", "vllm.vllm_flash_attn"):
        _stub_module(name)
    import vllm.platforms as platforms
    from vllm.platforms.cuda import NonNvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability, PlatformEnum

    class OraclePlatform(NonNvmlCudaPlatform):
        capability = DeviceCapability(9, 0)

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return cls.capability

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "NVIDIA H200" if cls.capability.major == 9 else "NVIDIA B200"

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return 141 * 2**30

        @classmethod
        def device_count(cls) -> int:
            return 1

        def get_global_graph_pool(self) -> Any:  # no CUDA memory pool on CPU
            return None

    _PLATFORM = OraclePlatform
    platforms._current_platform = OraclePlatform()
    # imports that probe CUDA kernels see "not CUDA"
    OraclePlatform._enum = PlatformEnum.CPU
    try:
        import vllm.model_executor.models.llama  # noqa: F401

        try:
            import vllm.v1.cudagraph_dispatcher  # noqa: F401  (0.33)
        except ImportError:
            import vllm.v1.worker.gpu.cudagraph_utils  # noqa: F401  (0.34)
    finally:
        OraclePlatform._enum = PlatformEnum.CUDA
    from vllm.model_executor.models import registry

    registry._LazyRegisteredModel._save_modelinfo_to_cache = lambda *a, **k: None
    import vllm.distributed.parallel_state as ps

    ps.get_pp_group = lambda: _OnePipelineRank()
    for name, module in list(sys.modules.items()):  # modules that imported it by name
        if name.startswith("vllm.") and getattr(module, "get_pp_group", None) is not None:
            module.get_pp_group = ps.get_pp_group
    return vllm.__version__


def set_capability(cap: tuple[int, int]) -> None:
    from vllm.platforms.interface import DeviceCapability

    _PLATFORM.capability = DeviceCapability(*cap)


_MODEL_DIR: str | None = None


def model_dir() -> str:
    global _MODEL_DIR
    if _MODEL_DIR is None:
        _MODEL_DIR = tempfile.mkdtemp(prefix="vllm-oracle-llama-")
        with open(os.path.join(_MODEL_DIR, "config.json"), "w") as f:
            json.dump(TINY_LLAMA, f)
    return _MODEL_DIR


def make_config(engine_args: dict[str, Any], compilation_config: dict[str, Any]) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    kwargs = dict(engine_args)
    spec = kwargs.pop("num_speculative_tokens", 0)
    if spec:
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": spec,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
        }
    return EngineArgs(
        model=model_dir(),
        skip_tokenizer_init=True,
        max_model_len=MAX_MODEL_LEN,
        compilation_config=dict(compilation_config),
        **kwargs,
    ).create_engine_config()


# ----- random inputs ------------------------------------------------------------------------
def random_inputs(rng: random.Random, generation: int = 1) -> dict[str, Any]:
    """One random case in vLLM's own names."""
    small = rng.random() < 0.5
    if small:
        max_num_seqs = rng.choice([1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 48, 64])
        tokens = rng.choice([4, 8, 16, 24, 32, 40, 64, 100, 128, 200, 256, 300, 512, 1000, 2048])
    else:
        max_num_seqs = rng.choice([64, 100, 128, 200, 256, 384, 512, 1024])
        tokens = rng.choice([128, 256, 300, 500, 512, 700, 1024, 2048, 4096, 8192, 16384])
    if rng.random() < 0.8:
        tokens = max(tokens, max_num_seqs)  # vLLM refuses tokens < seqs
    engine_args: dict[str, Any] = {
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": tokens,
        "num_speculative_tokens": rng.choice([0, 0, 1, 2, 3, 4]),
    }
    if rng.random() < 0.35:
        engine_args["enable_lora"] = True
        engine_args["max_loras"] = rng.choice([1, 2, 3, 4, 5, 7, 8])
        engine_args["specialize_active_lora"] = rng.random() < 0.5
    cc: dict[str, Any] = {}
    r = rng.random()
    if r < 0.8:
        cc["cudagraph_mode"] = rng.choice(MODES)
    if rng.random() < 0.35:
        top = rng.choice([8, 32, 64, 128, 300, 600, 1100])
        cc["cudagraph_capture_sizes"] = sorted(
            rng.sample(range(1, top + 1), rng.randint(1, min(8, top)))
        )
    if rng.random() < 0.3:
        if "cudagraph_capture_sizes" in cc and rng.random() < 0.5:
            cc["max_cudagraph_capture_size"] = max(cc["cudagraph_capture_sizes"])
        else:
            cc["max_cudagraph_capture_size"] = rng.choice([1, 3, 8, 17, 64, 100, 256, 300, 1000])
    if rng.random() < 0.25:
        sizes = cc.get("cudagraph_capture_sizes") or [1, 2, 4, 8, 16, 24, 32, 48, 64, 256]
        pick = rng.sample(sizes, min(len(sizes), rng.randint(1, 2)))
        if rng.random() < 0.4:
            pick.append(rng.randint(1, 300))
        if rng.random() < 0.15:
            pick = ["cudagraph_capture_sizes"]
        cc["compile_sizes"] = pick
    r = rng.random()
    if r < 0.12:
        cc["splitting_ops"] = []
    elif r < 0.17:
        cc["splitting_ops"] = ["vllm::unified_attention_with_output"]  # not ALL attention ops
    if "enable_lora" in engine_args and rng.random() < 0.5:
        cc["cudagraph_specialize_lora"] = False
    if generation == 2 and rng.random() < 0.5:
        # generation 2's own size fields (vllm/config/compilation.py, 0.34)
        if rng.random() < 0.7:
            cc.pop("cudagraph_capture_sizes", None)
            cc.pop("max_cudagraph_capture_size", None)
        if rng.random() < 0.35:
            top = rng.choice([16, 64, 300, 1100, 9000])
            k = rng.randint(0, min(8, top))
            cc["prefill_cudagraph_capture_token_sizes"] = sorted(rng.sample(range(1, top + 1), k))
        if rng.random() < 0.35:
            top = rng.choice([4, 16, 64, 300, 1100])
            k = rng.randint(0, min(8, top))
            cc["decode_cudagraph_capture_request_sizes"] = sorted(rng.sample(range(1, top + 1), k))
        if rng.random() < 0.3:
            cc["max_prefill_cudagraph_capture_tokens"] = rng.choice([0, 16, 100, 512, 2048, 8192])
        if rng.random() < 0.3:
            cc["max_decode_cudagraph_capture_requests"] = rng.choice([0, 1, 8, 64, 300])
        if rng.random() < 0.3:
            cc["max_decode_cudagraph_capture_tokens"] = rng.choice([1, 16, 128, 1000, 8192])
    return {
        "engine_args": engine_args,
        "compilation_config": cc,
        "device_capability": list(rng.choice(CAPABILITIES)),
        "attention_cg_support": rng.choice(SUPPORT_LEVELS),
    }


def _error(stage: str, err: BaseException) -> dict[str, str]:
    return {"stage": stage, "type": type(err).__name__, "message": str(err)}


def _config_fields(cfg: Any) -> dict[str, Any]:
    cc = cfg.compilation_config
    fields = {
        "cudagraph_mode": cc.cudagraph_mode.name,
        "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes),
        "max_cudagraph_capture_size": cc.max_cudagraph_capture_size,
        "compile_sizes": sorted(int(s) for s in (cc.compile_sizes or [])),
        "splitting_ops_contain_attention": cc.splitting_ops_contain_attention(),
        "splitting_ops_empty": cc.splitting_ops == [],
        "max_num_seqs": cfg.scheduler_config.max_num_seqs,
        "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
        "num_speculative_tokens": cfg.num_speculative_tokens,
        "max_loras": cfg.lora_config.max_loras if cfg.lora_config is not None else None,
        "specialize_active_lora": (
            cfg.lora_config.specialize_active_lora if cfg.lora_config is not None else None
        ),
        "cudagraph_specialize_lora": cc.cudagraph_specialize_lora,
    }
    for name in GEN2_FIELDS:
        if hasattr(cc, name):
            value = getattr(cc, name)
            fields[name] = list(value) if isinstance(value, (list, tuple)) else value
    return fields


GEN2_FIELDS = (
    "prefill_cudagraph_capture_token_sizes",
    "decode_cudagraph_capture_request_sizes",
    "max_prefill_cudagraph_capture_tokens",
    "max_decode_cudagraph_capture_requests",
    "max_decode_cudagraph_capture_tokens",
)


def _bd(d: Any) -> list[Any]:
    """A BatchDescriptor as [num_tokens, num_reqs, uniform, has_lora, num_active_loras]."""
    return [d.num_tokens, d.num_reqs, bool(d.uniform), bool(d.has_lora), d.num_active_loras]


def _engine_config(inputs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The case's record and vLLM's engine config (None, with the refusal recorded, when
    ``create_engine_config`` refuses): the first stage of both generations."""
    out: dict[str, Any] = {"inputs": inputs}
    set_capability(tuple(inputs["device_capability"]))
    try:
        cfg = make_config(inputs["engine_args"], inputs["compilation_config"])
    except Exception as err:  # noqa: BLE001 - a refusal is an answer
        out["refusal"] = _error("create_engine_config", err)
        return out, None
    out["config"] = _config_fields(cfg)
    return out, cfg


# ----- generation 1 (vLLM 0.33) ---------------------------------------------------------------
def gen1_case(inputs: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    from vllm.config import CUDAGraphMode
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    out, cfg = _engine_config(inputs)
    if cfg is None:
        return out
    q = 1 + cfg.num_speculative_tokens
    support = AttentionCGSupport[inputs["attention_cg_support"]]
    cc = cfg.compilation_config
    try:
        mode = cc.resolve_cudagraph_mode_and_sizes(
            support, "OracleBackend", q, use_v2_model_runner=False
        )
        out["resolved"] = {
            "cudagraph_mode": mode.name,
            "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes),
            "max_cudagraph_capture_size": cc.max_cudagraph_capture_size,
        }
        dispatcher = CudagraphDispatcher(cfg)
        dispatcher.initialize_cudagraph_keys(mode, q)
    except Exception as err:  # noqa: BLE001
        out["refusal"] = _error("resolve" if "resolved" not in out else "dispatcher", err)
        return out
    out["capture_descs"] = [
        [m.name, [_bd(d) for d in ds]] for m, ds in dispatcher.get_capture_descs()
    ]
    max_size = cc.max_cudagraph_capture_size or 0
    max_loras = cfg.lora_config.max_loras if cfg.lora_config is not None else 0
    calls = []
    for _ in range(30):
        uniform = rng.random() < 0.4
        if uniform:
            num_tokens = q * rng.randint(
                1, max(1, min(cfg.scheduler_config.max_num_seqs, (max_size + 8) // q))
            )
        else:
            num_tokens = rng.randint(1, max_size + 8)
        num_active = rng.randint(0, max_loras) if max_loras else 0
        args: dict[str, Any] = {
            "num_tokens": num_tokens,
            "uniform_decode": uniform,
            "has_lora": num_active > 0,
            "num_active_loras": num_active,
        }
        r = rng.random()
        if r < 0.1:
            args["invalid_modes"] = ["FULL"]
        elif r < 0.15:
            args["valid_modes"] = ["NONE", "PIECEWISE"]
        elif r < 0.2:
            args["valid_modes"] = ["NONE", "FULL"]
        call: dict[str, Any] = {"args": args}
        try:
            kw = dict(args)
            for key in ("valid_modes", "invalid_modes"):
                if key in kw:
                    kw[key] = {CUDAGraphMode[m] for m in kw[key]}
            m, d = dispatcher.dispatch(**kw)
            call["mode"] = m.name
            call["batch_descriptor"] = _bd(d)
        except Exception as err:  # noqa: BLE001
            call["error"] = {"type": type(err).__name__, "message": str(err)}
        calls.append(call)
    out["dispatch"] = calls
    return out


# ----- driver -------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="fixture path (JSON)")
    parser.add_argument("--cases", type=int, default=700)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--probe", action="store_true", help="import vLLM and build one config")
    args = parser.parse_args(argv)
    t0 = time.time()
    version = bootstrap()
    if args.probe:
        make_config({"max_num_seqs": 8, "max_num_batched_tokens": 256}, {})
        print(f"vLLM {version}: one config built in {time.time() - t0:.1f} s")
        return 0
    try:
        import vllm.v1.cudagraph_dispatcher  # noqa: F401

        generation, case_fn = 1, gen1_case
    except ImportError:
        generation, case_fn = 2, gen2_case
    rng = random.Random(args.seed)
    cases = []
    for i in range(args.cases):
        inputs = random_inputs(rng, generation)
        case = case_fn(inputs, random.Random(rng.getrandbits(64)))
        cases.append({"id": i, **case})
    # no run time in the fixture: it differs on every run, and `make oracle` must leave the
    # checkout as it found it when vLLM's answers are unchanged (printed below instead)
    doc = {
        "schema": 1,
        "vllm_version": version,
        "generation": generation,
        "seed": args.seed,
        "num_cases": len(cases),
        "model_config": TINY_LLAMA,
        "max_model_len": MAX_MODEL_LEN,
        "batch_descriptor_fields": (
            ["num_tokens", "num_reqs", "uniform", "has_lora", "num_active_loras"]
            if generation == 1
            else GEN2_DESC_FIELDS
        ),
        "cases": cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(
        f"vLLM {version} (generation {generation}): {len(cases)} cases -> {args.out} "
        f"in {time.time() - t0:.1f} s"
    )
    return 0


def _bed(d: Any) -> list[Any]:
    """A BatchExecutionDescriptor as an array in GEN2_DESC_FIELDS order, mode as a name."""
    return [
        d.cg_mode.name,
        d.num_tokens,
        d.num_reqs,
        d.uniform_token_count,
        d.max_query_len,
        d.num_active_loras,
        d.num_ubatches,
    ]


GEN2_DESC_FIELDS = [
    "cg_mode",
    "num_tokens",
    "num_reqs",
    "uniform_token_count",
    "max_query_len",
    "num_active_loras",
    "num_ubatches",
]


def gen2_case(inputs: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    import torch
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager
    from vllm.v1.worker.gpu.lora_utils import get_lora_capture_cases

    out, cfg = _engine_config(inputs)
    if cfg is None:
        return out
    q = 1 + cfg.num_speculative_tokens
    support = AttentionCGSupport[inputs["attention_cg_support"]]
    cc = cfg.compilation_config
    max_num_seqs = cfg.scheduler_config.max_num_seqs
    try:
        mode = cc.resolve_cudagraph_mode_and_sizes(
            support,
            "OracleBackend",
            q,
            max_num_reqs=max_num_seqs,
            piecewise_capture_available=True,
        )
        resolved = {
            "cudagraph_mode": mode.name,
            "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes or []),
            "max_cudagraph_capture_size": cc.max_cudagraph_capture_size,
        }
        for name in GEN2_FIELDS:
            value = getattr(cc, name)
            resolved[name] = list(value) if isinstance(value, (list, tuple)) else value
        out["resolved"] = resolved
        query_lens = cfg.get_decode_cudagraph_query_lens(q)
        lora_cases = get_lora_capture_cases(cfg.lora_config, cc)
        out["manager"] = {
            "decode_query_lens": {str(k): v for k, v in query_lens.items()},
            "lora_capture_cases": list(lora_cases),
        }
        manager = CudaGraphManager(
            cfg, torch.device("cpu"), mode, query_lens, lora_capture_cases=lora_cases
        )
    except Exception as err:  # noqa: BLE001
        out["refusal"] = _error("resolve" if "resolved" not in out else "manager", err)
        return out
    from vllm.config import CUDAGraphMode

    out["capture_descs"] = [
        [m.name, [_bed(d) for d in manager._capture_descs[m]]]
        for m in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)
        if m in manager._capture_descs
    ]
    manager._graphs_captured = True  # as after capture(): dispatch answers from the tables
    prefill = cc.prefill_cudagraph_capture_token_sizes or []
    top = max([*prefill, q * max_num_seqs, 8])
    max_loras = cfg.lora_config.max_loras if cfg.lora_config is not None else 0
    calls = []
    for _ in range(30):
        r = rng.random()
        if r < 0.45:  # uniform decode
            num_reqs = rng.randint(1, max_num_seqs + 2)
            num_tokens = num_reqs * q
            uniform, max_q = q, q
        else:  # mixed / prefill
            num_tokens = rng.randint(1, top + 8)
            num_reqs = rng.randint(1, max(1, min(num_tokens, max_num_seqs)))
            uniform = None
            max_q = num_tokens - num_reqs + 1
            if rng.random() < 0.15 and num_tokens % num_reqs == 0:
                uniform = num_tokens // num_reqs
                max_q = uniform
        args = {
            "num_reqs": num_reqs,
            "num_tokens": num_tokens,
            "uniform_token_count": uniform,
            "num_active_loras": rng.randint(0, max_loras + 1) if max_loras else 0,
            "max_query_len": max_q,
            "num_ubatches": 1,
        }
        call: dict[str, Any] = {"args": args}
        try:
            call["descriptor"] = _bed(manager.dispatch(**args))
        except Exception as err:  # noqa: BLE001
            call["error"] = {"type": type(err).__name__, "message": str(err)}
        calls.append(call)
    out["dispatch"] = calls
    return out


if __name__ == "__main__":
    sys.exit(main())
