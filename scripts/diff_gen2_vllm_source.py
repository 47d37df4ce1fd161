"""Differential check of cgdispatch's generation 2 against vLLM 0.34.0's own source.

Not a test (it needs the unzipped wheel): ``pip download --no-deps vllm==0.34.0``, unzip it,
then ``VLLM034_SRC=<dir holding vllm/> PYTHONPATH=. python scripts/diff_gen2_vllm_source.py
[seed] [n_configs]``. It loads vLLM's pure functions and methods (size grids,
``_set_cudagraph_sizes``, ``_split_cudagraph_capture_sizes``,
``resolve_cudagraph_mode_and_sizes``, ``CudaGraphManager._init_candidates`` and ``dispatch``)
from the source files with small stubs (platform capability, logger, parallel config),
runs them on random configs and batches next to cgdispatch, and prints every difference
in resolved fields, refusals, resolved mode, capture descriptors and dispatch answers.
The stub makes cgdispatch's CUDAGraphMode falsy at NONE, as vLLM's is (``__bool__``).
"""

from __future__ import annotations

import ast
import bisect
import enum
import math
import os
import random
import sys
import types
import warnings
from collections import defaultdict
from dataclasses import dataclass, replace
from itertools import groupby, product
from types import SimpleNamespace as NS

from cgdispatch import AttentionCGSupport as A
from cgdispatch import CudaGraphManager, GraphConfig
from cgdispatch import CUDAGraphMode as M
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.core.v2.config import VLLM_ATTENTION_OPS

SRC = os.environ.get("VLLM034_SRC", "/tmp/gen2_vllm") + "/vllm"


def grab(path, names, ns, cls=None):
    with open(f"{SRC}/{path}") as fh:
        tree = ast.parse(fh.read())
    body = tree.body
    if cls:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    for node in body:
        if getattr(node, "name", None) in names:
            node.decorator_list = []
            mod = ast.Module(body=[node], type_ignores=[])
            exec(compile(mod, path, "exec"), ns)
    return ns


class _Log:
    def __init__(self):
        self.msgs = []

    def warning(self, *a):
        self.msgs.append(a[0] % a[1:] if len(a) > 1 else a[0])

    warning_once = info = info_once = debug = warning


def cdiv(a, b):
    return -(-a // b)


ns = dict(
    bisect=bisect,
    math=math,
    CUDAGraphMode=CUDAGraphMode,
    cdiv=cdiv,
    logger=_Log(),
    Callable=__import__("typing").Callable,
    Iterable=__import__("typing").Iterable,
    Mapping=__import__("typing").Mapping,
    Sequence=__import__("typing").Sequence,
    Hashable=__import__("typing").Hashable,
    __builtins__=__builtins__,
)
grab(
    "config/compilation.py",
    {
        "decode_cudagraph_capture_shapes",
        "decode_cudagraph_capture_max_tokens",
        "_walk_grid",
        "prefill_cudagraph_capture_grid",
        "varlen_decode_cudagraph_capture_grid",
        "decode_cudagraph_capture_grid",
    },
    ns,
)
cc_ns = dict(ns)
grab(
    "config/compilation.py",
    {"resolve_cudagraph_mode_and_sizes", "splitting_ops_contain_attention"},
    cc_ns,
    cls="CompilationConfig",
)
vc_ns = dict(ns)
grab(
    "config/vllm.py",
    {
        "_set_cudagraph_sizes",
        "_split_cudagraph_capture_sizes",
        "get_varlen_decode_cudagraph_token_sizes",
        "get_draft_decode_cudagraph_request_sizes",
        "_validate_adaptive_verification",
    },
    vc_ns,
    cls="VllmConfig",
)
lora_ns = dict(ns)
grab("lora/utils.py", {"get_captured_lora_counts"}, lora_ns)
grab("v1/worker/gpu/lora_utils.py", {"get_lora_capture_cases"}, lora_ns)
cg_ns = dict(
    ns,
    dataclass=dataclass,
    replace=replace,
    groupby=groupby,
    product=product,
    defaultdict=defaultdict,
)
grab("v1/worker/gpu/cudagraph_utils.py", {"BatchExecutionDescriptor", "_is_compatible"}, cg_ns)
# re-run dataclass decorator for BatchExecutionDescriptor
cg_ns["BatchExecutionDescriptor"] = dataclass(frozen=True)(cg_ns["BatchExecutionDescriptor"])
mgr_ns = dict(cg_ns)
grab(
    "v1/worker/gpu/cudagraph_utils.py",
    {
        "_build_lora_dispatch_map",
        "_resolve_effective_loras",
        "_maybe_ubatch_twin",
        "_init_candidates",
        "dispatch",
    },
    mgr_ns,
    cls="CudaGraphManager",
)
mgr_ns["get_num_ubatches"] = lambda pc: (
    (2 if pc.enable_dbo else pc.ubatch_size) if (pc.enable_dbo or pc.ubatch_size > 1) else 1
)
mgr_ns["check_ubatch_thresholds"] = lambda pc, n, uniform_decode: (
    (pc.enable_dbo or pc.ubatch_size > 1) and n >= pc.dbo_decode_token_threshold
)


M.__bool__ = lambda self: self is not M.NONE
CAP = [None]
plat = types.ModuleType("vllm.platforms")
plat.current_platform = NS(
    is_device_capability_family=lambda fam: CAP[0] is not None and CAP[0][0] == fam // 10
)
back = types.ModuleType("vllm.v1.attention.backend")
back.AttentionCGSupport = A
for name in ("vllm", "vllm.v1", "vllm.v1.attention"):
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["vllm.platforms"] = plat
sys.modules["vllm.v1.attention.backend"] = back


class CompilationMode(enum.IntEnum):
    NONE = 0
    VLLM_COMPILE = 3


cc_ns["CompilationMode"] = CompilationMode


class FakeCC:
    _attention_ops = list(VLLM_ATTENTION_OPS)
    resolve_cudagraph_mode_and_sizes = cc_ns["resolve_cudagraph_mode_and_sizes"]
    splitting_ops_contain_attention = cc_ns["splitting_ops_contain_attention"]

    def post_init_cudagraph_sizes(self):
        self.cudagraph_capture_sizes.sort()


class FakeVllm:
    _set_cudagraph_sizes = vc_ns["_set_cudagraph_sizes"]
    _split_cudagraph_capture_sizes = vc_ns["_split_cudagraph_capture_sizes"]
    get_varlen_decode_cudagraph_token_sizes = vc_ns["get_varlen_decode_cudagraph_token_sizes"]
    get_draft_decode_cudagraph_request_sizes = vc_ns["get_draft_decode_cudagraph_request_sizes"]
    _validate_adaptive_verification = vc_ns["_validate_adaptive_verification"]

    def get_decode_cudagraph_query_lens(self, q):
        return {q: self.scheduler_config.max_num_seqs}


vc_ns["decode_cudagraph_capture_grid"] = ns["decode_cudagraph_capture_grid"]


def vllm_resolve(kw):
    CAP[0] = kw.get("device_capability")
    # engine-level refusals (SchedulerConfig.verify_max_model_len, EngineArgs LoRA + spec)
    seqs, tokens = kw.get("max_num_seqs", 256), kw.get("max_num_batched_tokens", 8192)
    if tokens < seqs:
        raise ValueError("max_num_batched_tokens < max_num_seqs")
    spec = kw.get("num_speculative_tokens", 0)
    if kw.get("max_loras") and spec and tokens < seqs * (1 + spec):
        raise ValueError("Consider increasing max_num_batched_tokens")
    cc = FakeCC()
    cc.cudagraph_mode = M.parse(kw.get("cudagraph_mode", "FULL_AND_PIECEWISE"))
    for f in (
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
        "prefill_cudagraph_capture_token_sizes",
        "max_prefill_cudagraph_capture_tokens",
        "decode_cudagraph_capture_request_sizes",
        "max_decode_cudagraph_capture_requests",
        "max_decode_cudagraph_capture_tokens",
    ):
        v = kw.get(f)
        setattr(cc, f, list(v) if isinstance(v, list) else v)
    cc.splitting_ops = kw.get("splitting_ops")
    cc.mode = CompilationMode.VLLM_COMPILE
    cc.use_inductor_graph_partition = False
    cc.cudagraph_specialize_lora = kw.get("cudagraph_specialize_lora", True)
    v = FakeVllm()
    v.compilation_config = cc
    v.model_config = NS(enforce_eager=False)
    nspec = kw.get("num_speculative_tokens", 0)
    v.scheduler_config = NS(
        max_num_seqs=kw.get("max_num_seqs", 256),
        max_num_batched_tokens=kw.get("max_num_batched_tokens", 8192),
    )
    v.num_speculative_tokens = nspec
    v.uniform_decode_query_len = 1 + nspec
    v.performance_mode = kw.get("performance_mode", "balanced")
    v.speculative_config = (
        None
        if not nspec
        else NS(
            enable_adaptive_verification=kw.get("enable_adaptive_verification", False),
            method=kw.get("speculative_method"),
            use_multi_module_mtp=lambda: False,
            use_gemma4_mtp=lambda: False,
        )
    )
    v.parallel_config = NS(
        data_parallel_size=kw.get("data_parallel_size", 1),
        enable_dbo=kw.get("enable_dbo", False),
        ubatch_size=kw.get("ubatch_size", 0),
        dbo_decode_token_threshold=kw.get("dbo_decode_token_threshold", 32),
        pipeline_parallel_size=1,
    )
    v.cache_config = NS(use_kda_recoverssm=False)
    if cc.cudagraph_mode != M.NONE:
        v._set_cudagraph_sizes()
    else:
        cc.max_cudagraph_capture_size = 0
        cc.cudagraph_capture_sizes = []
    v.lora_config = object() if kw.get("max_loras") else None
    v._validate_adaptive_verification()
    if cc.splitting_ops == []:  # set_splitting_ops_for_v1, after the sizes
        mode = cc.cudagraph_mode
        cc.cudagraph_mode = {M.PIECEWISE: M.NONE, M.FULL_AND_PIECEWISE: M.FULL}.get(mode, mode)
    return v


def vllm_manager(v, mode, support):
    cc = v.compilation_config
    if cc.splitting_ops == []:
        mode = {M.PIECEWISE: M.NONE, M.FULL_AND_PIECEWISE: M.FULL}.get(mode, mode)
    elif cc.splitting_ops is None:
        cc.splitting_ops = list(cc._attention_ops)
    cc.cudagraph_mode = mode
    if (
        v.speculative_config is not None
        and v.speculative_config.enable_adaptive_verification
        and mode.has_full_cudagraphs()
    ):
        cc.cudagraph_mode = (
            M.FULL_DECODE_ONLY if mode == M.FULL_DECODE_ONLY else M.FULL_AND_PIECEWISE
        )
    mode = cc.resolve_cudagraph_mode_and_sizes(support, "x", v.uniform_decode_query_len)
    m = NS()
    g = mgr_ns
    for name in (
        "_build_lora_dispatch_map",
        "_resolve_effective_loras",
        "_maybe_ubatch_twin",
        "_init_candidates",
        "dispatch",
    ):
        setattr(m, name, types.MethodType(g[name], m))
    m.vllm_config = v
    m.max_num_reqs = v.scheduler_config.max_num_seqs
    m.compilation_config = cc
    m.cudagraph_mode = mode
    m.decode_max_reqs = {v.uniform_decode_query_len: m.max_num_reqs}
    m.decode_query_len = v.uniform_decode_query_len
    m.varlen_decode = bool(
        v.speculative_config and v.speculative_config.enable_adaptive_verification
    )
    pc = v.parallel_config
    m.ubatch_runner = (
        object() if ((pc.enable_dbo or pc.ubatch_size > 1) and pc.data_parallel_size > 1) else None
    )
    m.decode_request_sizes = None
    return m, mode


def run(seed, n=300):
    rng = random.Random(seed)
    bad = 0
    for _ in range(n):
        kw = dict(
            cudagraph_mode=rng.choice(list(M)).name,
            max_num_seqs=rng.randint(1, 300),
            max_num_batched_tokens=rng.choice(
                [rng.randint(1, 600), rng.randint(1, 10000), 8192, 2048]
            ),
            num_speculative_tokens=rng.choice([0, 0, 1, 2, 3, 7]),
            max_loras=rng.choice([0, 0, 1, 3, 4, 8]),
            specialize_active_lora=rng.random() < 0.5,
            cudagraph_specialize_lora=rng.random() < 0.7,
            device_capability=rng.choice([None, (9, 0), (10, 0)]),
            performance_mode=rng.choice(["balanced", "interactivity"]),
            splitting_ops=rng.choice([None, None, []]),
            data_parallel_size=rng.choice([1, 2]),
            enable_dbo=rng.random() < 0.3,
            dbo_decode_token_threshold=rng.choice([0, 32, 64]),
        )
        if kw["num_speculative_tokens"]:
            kw["speculative_method"] = rng.choice([None, "eagle", "mtp"])
            if (
                kw["max_loras"] == 0
                and rng.random() < 0.3
                and M.parse(kw["cudagraph_mode"]).has_full_cudagraphs()
            ):
                kw["enable_adaptive_verification"] = True
        r = rng.random()
        if r < 0.2:
            kw["cudagraph_capture_sizes"] = sorted(rng.sample(range(1, 700), rng.randint(1, 8)))
        elif r < 0.3:
            kw["max_cudagraph_capture_size"] = rng.randint(1, 1100)
        if rng.random() < 0.3:
            kw["prefill_cudagraph_capture_token_sizes"] = rng.sample(
                range(0, 3000), rng.randint(0, 6)
            )
        if rng.random() < 0.2:
            kw["max_prefill_cudagraph_capture_tokens"] = rng.randint(0, 9000)
        if rng.random() < 0.3:
            kw["decode_cudagraph_capture_request_sizes"] = rng.sample(
                range(0, 300), rng.randint(0, 6)
            )
        if rng.random() < 0.2:
            kw["max_decode_cudagraph_capture_requests"] = rng.randint(0, 300)
        if rng.random() < 0.2:
            kw["max_decode_cudagraph_capture_tokens"] = rng.randint(1, 9000)
        support = rng.choice(list(A))
        # vLLM
        try:
            v = vllm_resolve(dict(kw))
            verr = None
        except (ValueError, AssertionError) as e:
            verr = type(e).__name__
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mine = GraphConfig(vllm_version="0.34", **kw)
                merr = None
        except ValueError as e:
            merr = str(e)
        if verr or merr:
            if bool(verr) != bool(merr):
                bad += 1
                print("ERRDIFF", kw, verr, merr)
            continue
        cc = v.compilation_config
        for f in (
            "cudagraph_mode",
            "cudagraph_capture_sizes",
            "max_cudagraph_capture_size",
            "prefill_cudagraph_capture_token_sizes",
            "max_prefill_cudagraph_capture_tokens",
            "decode_cudagraph_capture_request_sizes",
            "max_decode_cudagraph_capture_requests",
            "max_decode_cudagraph_capture_tokens",
        ):
            if getattr(cc, f) != getattr(mine, f):
                bad += 1
                print("FIELD", f, getattr(cc, f), getattr(mine, f), kw)
                break
        else:
            try:
                m, vmode = vllm_manager(v, cc.cudagraph_mode, support)
                verr = None
            except (ValueError, AssertionError) as e:
                verr = str(e)
            try:
                res = mine.resolve(support)
                merr = None
            except ValueError as e:
                merr = str(e)
            if verr or merr:
                if bool(verr) != bool(merr):
                    bad += 1
                    print("RESERR", kw, support, verr, merr)
                continue
            if vmode != res.cudagraph_mode:
                bad += 1
                print("MODE", vmode, res.cudagraph_mode, kw, support)
                continue
            m.lora_capture_cases = lora_ns["get_lora_capture_cases"](
                NS(max_loras=kw["max_loras"], specialize_active_lora=kw["specialize_active_lora"])
                if kw["max_loras"]
                else None,
                NS(cudagraph_specialize_lora=kw["cudagraph_specialize_lora"]),
            )
            m._lora_dispatch_map, m._max_lora_case = m._build_lora_dispatch_map()
            m._candidates = {}
            m._decode_descs = {}
            m._capture_descs = {}
            m._graphs_captured = True
            m._init_candidates()
            mm = CudaGraphManager(res)

            def conv(d):
                return tuple(
                    getattr(d, f)
                    for f in (
                        "cg_mode",
                        "num_tokens",
                        "num_reqs",
                        "uniform_token_count",
                        "max_query_len",
                        "num_active_loras",
                        "num_ubatches",
                    )
                )

            theirs = {k: [conv(d) for d in vs] for k, vs in m._capture_descs.items()}
            ours = {k: [conv(d) for d in vs] for k, vs in mm.capture_descs.items()}
            if theirs != ours:
                bad += 1
                print(
                    "DESCS",
                    kw,
                    support,
                    {k: len(x) for k, x in theirs.items()},
                    {k: len(x) for k, x in ours.items()},
                )
                continue
            q = res.uniform_decode_query_len
            for _ in range(200):
                nt = rng.randint(0, min(res.max_num_batched_tokens, 3000))
                nr = rng.randint(1, max(1, min(nt, res.max_num_seqs)))
                u = rng.choice([None, q, 1, 2])
                if u == q and rng.random() < 0.7:
                    nr = rng.randint(1, res.max_num_seqs)
                    nt = nr * q
                args = (
                    nr,
                    nt,
                    u,
                    rng.choice([0, 0, 1, 2, 3, 5, 9]),
                    rng.choice([None, None, q, q + 1]),
                    rng.choice([1, 1, 2]),
                )
                a, b = conv(m.dispatch(*args)), conv(mm.dispatch(*args))
                if a != b:
                    bad += 1
                    print("DISPATCH", kw, args, a, b)
                    break
    return bad


if __name__ == "__main__":
    print(
        "bad:",
        run(
            int(sys.argv[1]) if len(sys.argv) > 1 else 0,
            int(sys.argv[2]) if len(sys.argv) > 2 else 300,
        ),
    )
