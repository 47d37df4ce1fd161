import json
import re
import shlex
import warnings

import pytest

from cgdispatch import AttentionCGSupport, CUDAGraphMode, GraphConfig
from cgdispatch.core.ladders import sglang_ladder, tgi_ladder, trtllm_ladder, vllm_max_capture_size

M, A = CUDAGraphMode, AttentionCGSupport


def reference_ladder(max_num_seqs=256, tokens=8192, spec=0):
    """vLLM 0.33's default (vllm/config/vllm.py _set_cudagraph_sizes), computed plainly."""
    q = 1 + spec
    uncapped = min(2 * max_num_seqs * q, 512)
    top = min(uncapped, tokens)
    grid = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    sizes = {s for s in grid if s <= top}
    if tokens <= top:
        sizes.add(tokens)
    if q == 1:
        decode = [max_num_seqs] if max_num_seqs <= uncapped else []
    else:
        counts = [n for n in grid if n <= max_num_seqs] + [max_num_seqs]
        decode = [n * q for n in counts if n * q <= uncapped]
    sizes |= {s for s in decode if s <= tokens}
    return sorted(sizes)


def test_defaults_match_vllm():
    c = GraphConfig()
    assert c.cudagraph_mode is M.FULL_AND_PIECEWISE
    assert len(c.cudagraph_capture_sizes) == 51  # docs/references.md: 51 sizes from 1 to 512
    assert c.cudagraph_capture_sizes == reference_ladder()
    assert c.max_cudagraph_capture_size == 512
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.num_speculative_tokens) == (256, 8192, 0)
    assert c.splitting_ops is None and c.compile_sizes == () and c.max_loras == 0
    assert c.cudagraph_specialize_lora and not c.specialize_active_lora
    assert (
        c.tensor_parallel_size == 1 and not c.sequence_parallel and c.cudagraph_num_of_warmups == 1
    )
    assert c.uniform_decode_query_len == 1


@pytest.mark.parametrize(
    "seqs,tokens,spec",
    [(8, 8192, 0), (64, 8192, 1), (64, 100, 0), (3, 5, 2), (128, 2048, 3), (100, 8192, 0)],
)
def test_default_ladder_follows_scheduler(seqs, tokens, spec):
    c = GraphConfig(max_num_seqs=seqs, max_num_batched_tokens=tokens, num_speculative_tokens=spec)
    assert c.cudagraph_capture_sizes == reference_ladder(seqs, tokens, spec)
    assert c.max_cudagraph_capture_size == c.cudagraph_capture_sizes[-1]
    assert c.uniform_decode_query_len == 1 + spec


def test_user_list_cleaned():
    with pytest.warns(UserWarning, match="exceed max_num_batched_tokens"):
        c = GraphConfig(
            vllm_version="0.33",
            cudagraph_capture_sizes=[16, 4, 4, 1, 9000],
            max_num_seqs=16,
            max_num_batched_tokens=64,
        )
    assert c.cudagraph_capture_sizes == [1, 4, 16]
    assert c.max_cudagraph_capture_size == 16


def test_only_max_given_builds_ladder_to_max():
    c = GraphConfig(vllm_version="0.33", max_cudagraph_capture_size=40)
    assert c.cudagraph_capture_sizes == [1, 2, 4, 8, 16, 24, 32, 40]
    with pytest.warns(UserWarning, match="truncated"):
        c = GraphConfig(
            vllm_version="0.33",
            max_cudagraph_capture_size=40,
            max_num_seqs=16,
            max_num_batched_tokens=20,
        )
    assert c.max_cudagraph_capture_size == 20 and c.cudagraph_capture_sizes[-2:] == [16, 20]
    with pytest.warns(UserWarning, match="not on vLLM's ladder"):
        c = GraphConfig(vllm_version="0.33", max_cudagraph_capture_size=50)
    assert c.max_cudagraph_capture_size == 48


def test_max_and_list_must_agree():
    c = GraphConfig(
        vllm_version="0.33", cudagraph_capture_sizes=[1, 2, 8], max_cudagraph_capture_size=8
    )
    assert c.max_cudagraph_capture_size == 8
    with pytest.raises(ValueError, match=r"max_cudagraph_capture_size=16.*largest.*8"):
        GraphConfig(
            vllm_version="0.33", cudagraph_capture_sizes=[1, 2, 8], max_cudagraph_capture_size=16
        )


def test_sequence_parallel_drops_sizes_not_divisible_by_tp():
    with pytest.warns(UserWarning, match="tensor_parallel_size=4"):
        c = GraphConfig(
            vllm_version="0.33",
            cudagraph_capture_sizes=[1, 2, 4, 6, 8, 12],
            tensor_parallel_size=4,
            sequence_parallel=True,
        )
    assert c.cudagraph_capture_sizes == [4, 8, 12]
    assert GraphConfig(
        vllm_version="0.33", cudagraph_capture_sizes=[1, 2, 3], tensor_parallel_size=4
    ).cudagraph_capture_sizes == [1, 2, 3]


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(cudagraph_capture_sizes=[], vllm_version="0.33"), "no capture size"),
        (dict(max_cudagraph_capture_size=0), "max_cudagraph_capture_size=0"),
        (dict(cudagraph_capture_sizes=[1, 0]), "capture size 0"),
        (dict(cudagraph_capture_sizes=[1, 2.5]), "2.5"),
        (dict(cudagraph_capture_sizes="1,2"), "list of integers"),
        (dict(max_num_seqs=0), "max_num_seqs=0"),
        (dict(max_num_batched_tokens=-3), "max_num_batched_tokens=-3"),
        (dict(num_speculative_tokens=-1), "num_speculative_tokens=-1"),
        (dict(max_loras=-1), "max_loras=-1"),
        (dict(tensor_parallel_size=0), "tensor_parallel_size=0"),
        (dict(cudagraph_mode="sometimes"), "'sometimes'"),
        (dict(splitting_ops="cgdispatch::attention"), "splitting_ops"),
        (dict(max_num_seqs=64, max_num_batched_tokens=32), "below max_num_seqs=64"),
        (
            dict(
                max_num_seqs=64, max_num_batched_tokens=100, num_speculative_tokens=1, max_loras=2
            ),
            "LoRA with speculative decoding",
        ),
        (
            dict(
                cudagraph_capture_sizes=[2, 6],
                tensor_parallel_size=4,
                sequence_parallel=True,
                vllm_version="0.33",
            ),
            "no capture size",
        ),
    ],
)
def test_bad_values_raise_clear_errors(kwargs, pattern):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=pattern):
            GraphConfig(**kwargs)


def test_none_mode_allows_no_sizes_and_compile_sizes_above_max():
    c = GraphConfig(vllm_version="0.33", cudagraph_mode="none", cudagraph_capture_sizes=[])
    assert c.cudagraph_capture_sizes == [] and c.max_cudagraph_capture_size == 0
    c = GraphConfig(
        vllm_version="0.33", cudagraph_capture_sizes=[1, 2, 4], compile_sizes=(2, 4, 1024)
    )
    assert c.compile_sizes == (2, 4, 1024)


def test_mode_accepts_names_case_insensitive():
    assert GraphConfig(cudagraph_mode="full_decode_only").cudagraph_mode is M.FULL_DECODE_ONLY


# (mode, splitting_ops, attention support, spec tokens) -> resolved mode (or ValueError), vLLM
# 0.33's rules (V1: the configs name the release, the default being the newest) (splitting_ops=[] lowers PIECEWISE parts already at construction)
RESOLVE_CASES = [
    (M.FULL_AND_PIECEWISE, None, A.ALWAYS, 0, M.FULL_AND_PIECEWISE),
    (M.FULL, None, A.ALWAYS, 0, M.FULL),
    (M.PIECEWISE, [], A.ALWAYS, 0, M.NONE),
    (M.FULL_AND_PIECEWISE, [], A.ALWAYS, 0, M.FULL),
    (M.FULL, None, A.UNIFORM_BATCH, 0, M.FULL_AND_PIECEWISE),
    (M.FULL, [], A.UNIFORM_BATCH, 0, M.FULL_DECODE_ONLY),
    (M.FULL_AND_PIECEWISE, [], A.UNIFORM_BATCH, 0, M.FULL_DECODE_ONLY),
    (M.FULL, None, A.UNIFORM_SINGLE_TOKEN_DECODE, 0, M.FULL_AND_PIECEWISE),
    (M.FULL_AND_PIECEWISE, None, A.NEVER, 0, M.PIECEWISE),
    (M.FULL_DECODE_ONLY, [], A.NEVER, 0, M.NONE),
    (M.FULL, [], A.NEVER, 0, ValueError),
    (M.FULL, None, A.NEVER, 0, ValueError),
    (M.FULL_AND_PIECEWISE, ["cgdispatch::attention"], A.UNIFORM_BATCH, 0, M.FULL_AND_PIECEWISE),
    (M.FULL, ["cgdispatch::attention"], A.UNIFORM_BATCH, 0, M.FULL_DECODE_ONLY),
    (M.FULL_AND_PIECEWISE, ["cgdispatch::attention"], A.NEVER, 0, M.NONE),
    (M.FULL_AND_PIECEWISE, None, A.UNIFORM_SINGLE_TOKEN_DECODE, 2, M.PIECEWISE),
    (M.FULL_AND_PIECEWISE, None, A.UNIFORM_BATCH, 2, M.FULL_AND_PIECEWISE),
    (M.FULL_DECODE_ONLY, None, A.UNIFORM_SINGLE_TOKEN_DECODE, 0, M.FULL_DECODE_ONLY),
    (M.PIECEWISE, None, A.NEVER, 0, M.PIECEWISE),
    (M.NONE, None, A.NEVER, 0, M.NONE),
]


@pytest.mark.parametrize("mode,ops,support,spec,expected", RESOLVE_CASES)
def test_resolve_lowers_mode(mode, ops, support, spec, expected):
    c = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode=mode,
        splitting_ops=ops,
        num_speculative_tokens=spec,
        max_num_seqs=16,
    )
    if expected is ValueError:
        with pytest.raises(ValueError, match="cudagraph_mode='PIECEWISE'"):
            c.resolve(support)
        return
    resolved = c.resolve(support)
    assert resolved.cudagraph_mode is expected
    if ops != []:
        assert c.cudagraph_mode is mode  # the original is unchanged (frozen)


def test_empty_splitting_ops_lowers_at_construction():
    # vLLM 0.33 set_splitting_ops_for_v1, in VllmConfig.__post_init__; sizes are kept
    c = GraphConfig(
        vllm_version="0.33", cudagraph_mode="PIECEWISE", splitting_ops=[], max_num_seqs=16
    )
    assert c.cudagraph_mode is M.NONE and c.cudagraph_capture_sizes[-1] == 32
    assert GraphConfig(vllm_version="0.33", splitting_ops=[]).cudagraph_mode is M.FULL


def test_compile_sizes_checked_when_keys_are_made():
    from cgdispatch import CudagraphDispatcher

    c = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=[1, 2, 4],
        compile_sizes=(3, "cudagraph_capture_sizes"),
    )
    assert c.compile_sizes == (1, 2, 3, 4)
    with pytest.raises(ValueError, match="compile size 3"):
        CudagraphDispatcher(c).initialize_cudagraph_keys()
    # NONE captures nothing, so nothing is padded
    CudagraphDispatcher(c.replace(cudagraph_mode="NONE")).initialize_cudagraph_keys()


def test_resolve_rounds_sizes_for_spec_decode():
    c = GraphConfig(
        vllm_version="0.33", cudagraph_capture_sizes=[1, 2, 4, 8, 10, 16], num_speculative_tokens=2
    )
    r = c.resolve()
    q = 3
    assert r.cudagraph_capture_sizes == sorted(
        {-(-s // q) * q for s in [1, 2, 4, 8, 10, 16]} - {18}
    )
    assert all(s % q == 0 and s <= 16 for s in r.cudagraph_capture_sizes)
    assert r.max_cudagraph_capture_size == 12
    # PIECEWISE has no FULL decode: sizes untouched
    pw = c.replace(cudagraph_mode="PIECEWISE").resolve()
    assert pw.cudagraph_capture_sizes == [1, 2, 4, 8, 10, 16]
    with pytest.raises(ValueError, match="multiples of q=5"):
        GraphConfig(
            vllm_version="0.33", cudagraph_capture_sizes=[1, 2], num_speculative_tokens=4
        ).resolve()


def test_resolve_is_identity_when_nothing_changes():
    c = GraphConfig(max_num_seqs=4)
    assert c.resolve() is c


def test_vllm_round_trip():
    c = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode="FULL_DECODE_ONLY",
        cudagraph_capture_sizes=[1, 2, 4, 8],
        compile_sizes=(4,),
        splitting_ops=[],
        cudagraph_num_of_warmups=2,
        max_num_seqs=4,
    )
    cc = json.loads(c.to_vllm())
    assert cc["cudagraph_mode"] == "FULL_DECODE_ONLY" and cc["cudagraph_capture_sizes"] == [
        1,
        2,
        4,
        8,
    ]
    back = GraphConfig.from_vllm(c.to_vllm(), max_num_seqs=4, vllm_version="0.33")
    assert back == c
    assert GraphConfig.from_vllm(cc, max_num_seqs=4, vllm_version="0.33") == c


def test_vllm_args_parse_back():
    c = GraphConfig(
        vllm_version="0.33",
        max_num_seqs=32,
        num_speculative_tokens=2,
        max_loras=4,
        tensor_parallel_size=2,
    )
    argv = shlex.split(c.to_vllm_args())
    cc = json.loads(argv[argv.index("--compilation-config") + 1])
    assert cc["cudagraph_capture_sizes"] == c.cudagraph_capture_sizes
    assert argv[argv.index("--max-num-seqs") + 1] == "32"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"num_speculative_tokens": 2}
    assert "--enable-lora" in argv and argv[argv.index("--max-loras") + 1] == "4"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"


def test_from_vllm_errors_and_ignored_keys():
    with pytest.raises(ValueError, match="not valid JSON"):
        GraphConfig.from_vllm("{cudagraph_mode: FULL")
    with pytest.raises(ValueError, match="unknown field"):
        GraphConfig.from_vllm({}, max_num_seq=3)
    c = GraphConfig.from_vllm({"level": 3, "cudagraph_mode": "piecewise"})
    assert c.cudagraph_mode is M.PIECEWISE
    with pytest.warns(UserWarning, match="not used"):
        GraphConfig.from_vllm({"some_future_key": 1})


def test_replace_rederives_default_ladder():
    c = GraphConfig(vllm_version="0.33", max_num_seqs=4)
    assert c.replace(max_num_seqs=8).cudagraph_capture_sizes == reference_ladder(8)
    user = GraphConfig(vllm_version="0.33", cudagraph_capture_sizes=[1, 3])
    assert user.replace(max_num_seqs=8).cudagraph_capture_sizes == [1, 3]


def test_lora_cases():
    assert GraphConfig(vllm_version="0.33").lora_cases() == [0]
    # vLLM 0.33 get_captured_lora_counts counts the no-adapter slot: up to max_loras + 1
    assert GraphConfig(vllm_version="0.33", max_loras=4).lora_cases() == [0, 5]
    assert GraphConfig(
        vllm_version="0.33", max_loras=6, specialize_active_lora=True
    ).lora_cases() == [0, 1, 2, 4, 7]
    assert GraphConfig(
        vllm_version="0.33", max_loras=4, specialize_active_lora=True
    ).lora_cases() == [0, 1, 2, 4, 5]
    assert GraphConfig(
        vllm_version="0.33", max_loras=4, cudagraph_specialize_lora=False
    ).lora_cases() == [5]


def test_engine_ladders_match_references():
    sg = sglang_ladder(512)
    assert sg[:6] == [1, 2, 4, 8, 12, 16] and 272 in sg and 264 not in sg and sg[-1] == 512
    assert trtllm_ladder() == [1, 2, 4] + list(range(8, 129, 8))
    assert trtllm_ladder(300) == [1, 2, 4] + list(range(8, 129, 8)) + [192, 256, 300]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: tgi_ladder(0), "max_size=0"),
        (lambda: tgi_ladder(-3), "max_size=-3"),
        (lambda: vllm_max_capture_size(0), "max_num_seqs=0"),
        (lambda: vllm_max_capture_size(8, num_speculative_tokens=-1), "num_speculative_tokens=-1"),
    ],
)
def test_ladder_helpers_refuse_bad_counts(call, match):
    # tgi_ladder(0) returned [0] and vllm_max_capture_size(0) returned 0: not a ladder
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("number,text", [(0.34, "0.34"), (0.33, "0.33")])
def test_vllm_version_as_a_float_is_its_release_string(number, text):
    """papermill's ``-p vllm_version 0.34`` passes a float: the same config as the string."""
    import random

    rng = random.Random(text)
    seqs = rng.randrange(2, 64)
    fields = {"max_num_seqs": seqs, "max_num_batched_tokens": seqs * rng.randrange(2, 16)}
    from_float = GraphConfig(vllm_version=number, **fields)
    from_text = GraphConfig(vllm_version=text, **fields)
    assert from_float.vllm_version == text and isinstance(from_float.vllm_version, str)
    assert from_float == from_text
    from cgdispatch.core.generation import capture_keys

    assert capture_keys(from_float) == capture_keys(from_text)


@pytest.mark.parametrize("bad", [0.35, 0.3, 34, True, "0.340", "v0.34"])
def test_other_vllm_versions_are_refused(bad):
    # each message names the value and the rule: dotted numbers, 0.8 to 0.34 (issue 35)
    rule = r"(older than vLLM 0\.8|newer than vLLM 0\.34|dotted numbers)"
    with pytest.raises(ValueError, match=r"vllm_version=" + re.escape(repr(bad)) + ".*" + rule):
        GraphConfig(vllm_version=bad)


def test_the_signature_lists_the_public_fields_and_construction_checks_them():
    """GraphConfig is built through its rules (a metaclass), yet help() shows its fields,
    and positional, unknown or repeated arguments behave as for a dataclass."""
    import dataclasses
    import inspect

    public = [f.name for f in dataclasses.fields(GraphConfig) if not f.name.startswith("_")]
    assert list(inspect.signature(GraphConfig).parameters) == public
    assert GraphConfig("FULL").cudagraph_mode is GraphConfig(cudagraph_mode="FULL").cudagraph_mode
    with pytest.raises(TypeError, match="unexpected keyword argument 'sizes'"):
        GraphConfig(sizes=[1, 2])
    with pytest.raises(TypeError, match="_asked"):
        GraphConfig(_asked=([1], 1))
    with pytest.raises(TypeError, match="multiple values"):
        GraphConfig("FULL", cudagraph_mode="NONE")
