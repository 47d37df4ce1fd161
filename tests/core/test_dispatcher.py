import contextlib
import random
import subprocess
import sys
import warnings

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from reference_dispatchers import brute_dispatch, expected_keys

from cgdispatch import BatchDescriptor, CudagraphDispatcher, CUDAGraphMode, GraphConfig

M = CUDAGraphMode


def make(config):
    d = CudagraphDispatcher(config)
    d.initialize_cudagraph_keys()
    return d


@st.composite
def configs(draw):
    mode = draw(st.sampled_from(list(M)))
    sizes = draw(st.lists(st.integers(1, 96), min_size=1, max_size=12))
    spec = draw(st.integers(0, 3))
    max_loras = draw(st.sampled_from([0, 0, 1, 3, 4]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs = dict(
            cudagraph_mode=mode,
            cudagraph_capture_sizes=sizes,
            max_num_seqs=draw(st.integers(1, 40)),
            max_num_batched_tokens=draw(st.integers(64, 200)),
            num_speculative_tokens=spec,
            max_loras=max_loras,
            cudagraph_specialize_lora=draw(st.booleans()),
            specialize_active_lora=draw(st.booleans()),
            vllm_version="0.33",  # V1's CudagraphDispatcher (the default is the newest)
        )
        try:
            config = GraphConfig(**kwargs)
        except ValueError:  # e.g. every size above max_num_batched_tokens
            reject()
        if draw(st.booleans()):
            with contextlib.suppress(ValueError):
                config = config.resolve()
    return config


@settings(max_examples=150, deadline=None)
@given(configs(), st.data())
def test_matches_brute_force(config, data):
    d = make(config)
    keys = expected_keys(config)
    assert d.cudagraph_keys == keys
    top = config.max_cudagraph_capture_size + 5
    for _ in range(30):
        n = data.draw(st.integers(0, top))
        uniform = data.draw(st.booleans())
        loras = data.draw(st.sampled_from([0, 0, 1, 2, 3, 4, 5]))
        cascade = data.draw(st.booleans())
        got = d.dispatch(
            n, uniform_decode=uniform, num_active_loras=loras, use_cascade_attn=cascade
        )
        want = brute_dispatch(config, keys, n, uniform, loras, exclude_full=cascade)
        assert got == want, (n, uniform, loras, cascade)
        # the invariants: a graph mode always returns a registered key of that mode whose
        # num_tokens is the smallest capture size >= n; NONE returns the unpadded batch
        mode, desc = got
        if mode is M.NONE:
            assert desc == BatchDescriptor(n)
        else:
            assert desc in d.cudagraph_keys[mode]
            assert desc.num_tokens == min(s for s in config.cudagraph_capture_sizes if s >= n)
            assert desc.num_tokens == d.padded_size(n)


@settings(max_examples=60, deadline=None)
@given(configs(), st.randoms(use_true_random=False))
def test_result_independent_of_key_order(config, rnd):
    keys = expected_keys(config)
    a = make(config)
    b = CudagraphDispatcher(config)
    pairs = [(mode, desc) for mode, descs in keys.items() for desc in descs]
    rnd.shuffle(pairs)
    for mode, desc in pairs:
        b.add_cudagraph_key(mode, desc)
    b.keys_initialized = True
    b._invalidate()
    for n in range(config.max_cudagraph_capture_size + 2):
        for uniform in (False, True):
            assert a.dispatch(n, uniform) == b.dispatch(n, uniform)


def test_not_initialized_and_none_mode_are_eager():
    d = CudagraphDispatcher(GraphConfig(vllm_version="0.33", max_num_seqs=8))
    assert d.dispatch(3, True) == (M.NONE, BatchDescriptor(3))
    assert d.get_capture_descs() == []
    n = make(GraphConfig(vllm_version="0.33", cudagraph_mode="NONE"))
    assert n.dispatch(1) == (M.NONE, BatchDescriptor(1)) and n.get_capture_descs() == []


def test_fixed_examples_full_and_piecewise():
    d = make(
        GraphConfig(vllm_version="0.33", max_num_seqs=8, cudagraph_capture_sizes=[1, 2, 4, 8, 16])
    )
    assert d.dispatch(3, uniform_decode=True) == (M.FULL, BatchDescriptor(4, 4, True))
    assert d.dispatch(3) == (M.PIECEWISE, BatchDescriptor(4))
    assert d.dispatch(12, uniform_decode=True) == (
        M.PIECEWISE,
        BatchDescriptor(16),
    )  # > q*max_num_seqs
    assert d.dispatch(17) == (M.NONE, BatchDescriptor(17))
    full = make(
        GraphConfig(
            vllm_version="0.33",
            cudagraph_mode="FULL",
            max_num_seqs=8,
            cudagraph_capture_sizes=[1, 2, 4, 8, 16],
        )
    )
    assert full.dispatch(3, uniform_decode=True) == (M.FULL, BatchDescriptor(4, 4, False))
    assert full.dispatch(9) == (M.FULL, BatchDescriptor(16, 8, False))
    assert full.dispatch(9, use_cascade_attn=True) == (M.NONE, BatchDescriptor(9))


def test_valid_and_invalid_modes():
    d = make(GraphConfig(vllm_version="0.33", max_num_seqs=8, cudagraph_capture_sizes=[1, 2, 4, 8]))
    assert d.dispatch(3, True, invalid_modes={M.FULL}) == (M.PIECEWISE, BatchDescriptor(4))
    assert d.dispatch(3, True, valid_modes={M.FULL}) == (M.FULL, BatchDescriptor(4, 4, True))
    assert d.dispatch(3, False, valid_modes={M.FULL}) == (M.NONE, BatchDescriptor(3))
    assert d.dispatch(3, True, valid_modes={M.NONE}) == (M.NONE, BatchDescriptor(3))
    with pytest.raises(ValueError, match="runtime modes"):
        d.dispatch(3, valid_modes={M.FULL_AND_PIECEWISE})


def test_seed_form_with_descriptor_and_cascade():
    d = make(GraphConfig(vllm_version="0.33", max_num_seqs=8, cudagraph_capture_sizes=[1, 2, 4, 8]))
    assert d.dispatch(BatchDescriptor(3, uniform=True)) == (M.FULL, BatchDescriptor(4, 4, True))
    assert d.dispatch(BatchDescriptor(3, uniform=True), use_cascade_attn=True) == (
        M.PIECEWISE,
        BatchDescriptor(4),
    )


@pytest.mark.parametrize("bad", [-1, 2.5, "3", None, True])
def test_bad_num_tokens(bad):
    d = make(GraphConfig(vllm_version="0.33", max_num_seqs=8))
    with pytest.raises(ValueError, match="num_tokens"):
        d.dispatch(bad)


def test_numpy_ints_accepted():
    np = pytest.importorskip("numpy")
    d = make(GraphConfig(vllm_version="0.33", max_num_seqs=8))
    assert d.dispatch(np.int64(3), True) == d.dispatch(3, True)


def test_piecewise_mode_without_splitting_ops_is_refused():
    # vLLM 0.33 asserts it in CudagraphDispatcher.__init__: every attention op must split
    some = GraphConfig(
        vllm_version="0.33", cudagraph_mode="PIECEWISE", splitting_ops=["cgdispatch::attention"]
    )
    with pytest.raises(ValueError, match="every attention op"):
        CudagraphDispatcher(some)
    # [] already lowered PIECEWISE to NONE at construction
    CudagraphDispatcher(
        GraphConfig(vllm_version="0.33", cudagraph_mode="PIECEWISE", splitting_ops=[])
    )


def test_capture_order_piecewise_first_largest_first():
    config = GraphConfig(
        vllm_version="0.33", max_num_seqs=4, cudagraph_capture_sizes=[1, 2, 4, 8], max_loras=2
    )
    descs = make(config).get_capture_descs()
    assert [m for m, _ in descs] == [M.PIECEWISE, M.FULL]
    for _, keys in descs:
        sizes = [k.num_tokens for k in keys]
        assert sizes == sorted(sizes, reverse=True)
    assert {k for _, ks in descs for k in ks} == set().union(*expected_keys(config).values())


def test_padded_size_table():
    sizes = sorted(random.Random(1).sample(range(1, 300), 20))
    d = CudagraphDispatcher(GraphConfig(vllm_version="0.33", cudagraph_capture_sizes=sizes))
    for n in range(1, sizes[-1] + 1):
        assert d.padded_size(n) == min(s for s in sizes if s >= n)
    assert d.padded_size(sizes[-1] + 7) == sizes[-1] + 7


def test_lora_dispatch():
    config = GraphConfig(
        vllm_version="0.33",
        max_num_seqs=8,
        cudagraph_capture_sizes=[1, 2, 4, 8],
        max_loras=4,
        specialize_active_lora=True,
    )
    d = make(config)
    # vLLM 0.33: captured counts 1, 2, 4, 5 (= max_loras + 1); a count maps up to one
    assert d.dispatch(3, True, num_active_loras=3) == (M.FULL, BatchDescriptor(4, 4, True, True, 4))
    # has_lora without a count finds no graph (vLLM keeps the count 0)
    assert d.dispatch(3, True, has_lora=True) == (M.NONE, BatchDescriptor(3))
    assert d.dispatch(3, False, num_active_loras=1) == (
        M.PIECEWISE,
        BatchDescriptor(4, None, False, True, 1),
    )
    assert d.dispatch(3, False, num_active_loras=5) == (
        M.PIECEWISE,
        BatchDescriptor(4, None, False, True, 5),
    )
    assert d.dispatch(3, False, num_active_loras=6) == (M.NONE, BatchDescriptor(3))
    unspecialised = make(config.replace(cudagraph_specialize_lora=False))
    # one set of graphs labelled max_loras + 1; batches without LoRA run eagerly
    assert unspecialised.dispatch(3, False, num_active_loras=2) == (
        M.PIECEWISE,
        BatchDescriptor(4, None, False, True, 5),
    )
    assert unspecialised.dispatch(3, False) == (M.NONE, BatchDescriptor(3))
    off = make(GraphConfig(vllm_version="0.33", max_num_seqs=8, cudagraph_capture_sizes=[1, 2]))
    assert off.dispatch(1, num_active_loras=1) == (M.NONE, BatchDescriptor(1))


def test_stats_count_calls_and_tokens():
    config = GraphConfig(
        vllm_version="0.33", max_num_seqs=16, cudagraph_capture_sizes=[1, 2, 4, 8, 16]
    )
    d = make(config)
    rng = random.Random(7)
    batches = [(rng.randint(1, 24), rng.random() < 0.5) for _ in range(2000)]
    expect: dict = {}
    for n, u in batches:
        mode, desc = d.dispatch(n, u)
        row = expect.setdefault((str(mode), desc.num_tokens), [0, 0, 0])
        row[0] += 1
        row[1] += n
        row[2] += desc.num_tokens
    frame = d.stats_frame()
    got = {
        (r.runtime_mode, r.padded_size): [r.calls, r.real_tokens, r.padded_tokens]
        for r in frame.itertuples()
    }
    assert got == expect
    assert (frame.padding_tokens == frame.padded_tokens - frame.real_tokens).all()
    assert frame.calls.sum() == len(batches)
    d.reset_stats()
    assert d.stats_frame().empty
    d.record_stats = False
    d.dispatch(3)
    d.dispatch(100)
    assert d.stats_frame().empty


def test_stats_survive_new_keys():
    d = make(GraphConfig(vllm_version="0.33", max_num_seqs=4, cudagraph_capture_sizes=[1, 2, 4]))
    d.dispatch(3)
    d.add_cudagraph_key(M.PIECEWISE, BatchDescriptor(3))
    d.dispatch(3)
    assert d.stats_frame().calls.sum() == 2


def test_importing_dispatcher_does_not_import_torch_or_pandas():
    code = (
        "import sys, cgdispatch, cgdispatch.core.v1.dispatcher;"
        "d = cgdispatch.CudagraphDispatcher(); d.initialize_cudagraph_keys(); d.dispatch(5, True);"
        "print('torch' in sys.modules, 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_full_keys_match_exactly_never_relaxed():
    # docs/semantics.md: the exact descriptor among FULL keys, the relaxed one among PIECEWISE only
    d = make(
        GraphConfig(
            vllm_version="0.33",
            cudagraph_mode="PIECEWISE",
            max_num_seqs=4,
            cudagraph_capture_sizes=[4, 8],
        )
    )
    d.add_cudagraph_key(M.FULL, BatchDescriptor(8))  # num_reqs=None: not an exact key
    assert d.dispatch(5) == (M.PIECEWISE, BatchDescriptor(8))
    d.add_cudagraph_key(M.FULL, BatchDescriptor(8, 4))
    assert d.dispatch(5) == (M.FULL, BatchDescriptor(8, 4))


def test_dispatch_returns_a_named_result_that_unpacks_like_a_pair():
    from cgdispatch.core.v1.dispatcher import DispatchResult

    rng = random.Random(41)
    sizes = sorted(rng.sample(range(1, 64), 6))
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=sizes,
        max_num_seqs=16,
        max_num_batched_tokens=128,
    )
    d = make(config)
    for n in rng.sample(range(0, 129), 30):
        uniform = rng.random() < 0.5
        answer = d.dispatch(n, uniform_decode=uniform)
        assert isinstance(answer, DispatchResult)
        mode, desc = answer  # today's tuple form keeps working
        assert (mode, desc) == (answer.runtime_mode, answer.batch_descriptor) == tuple(answer)
        assert answer == brute_dispatch(config, d.cudagraph_keys, n, uniform)


def test_ready_dispatcher_builds_initialised_dispatchers_and_passes_ready_ones_through():
    from cgdispatch.core.v1.dispatcher import ready_dispatcher

    rng = random.Random(42)
    sizes = sorted(rng.sample(range(1, 40), 5))
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_capture_sizes=sizes,
        max_num_seqs=8,
        max_num_batched_tokens=64,
    )
    d = ready_dispatcher(config, record_stats=False)
    assert d.keys_initialized and not d.record_stats
    assert d.cudagraph_keys == make(config).cudagraph_keys
    assert ready_dispatcher(d) is d
    fresh = CudagraphDispatcher(config)
    assert ready_dispatcher(fresh) is fresh and fresh.keys_initialized
    assert ready_dispatcher().config == GraphConfig(vllm_version="0.33")
    with pytest.raises(ValueError, match="GraphConfig or a CudagraphDispatcher"):
        ready_dispatcher({"cudagraph_mode": "FULL"})


def test_eager_answers_are_built_once_counted_and_still_checked():
    rng = random.Random()  # fresh inputs each run; the seed is in the failure message
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    sizes = sorted(rng.sample(range(1, 300), rng.randint(1, 12)))
    mode = rng.choice([M.PIECEWISE, M.FULL, M.FULL_AND_PIECEWISE, M.FULL_DECODE_ONLY])
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode=mode,
        cudagraph_capture_sizes=sizes,
        max_num_seqs=rng.randint(1, 64),
        max_num_batched_tokens=4096,
    )
    d = make(config)
    keys = expected_keys(config)
    steps = [(rng.randint(1, 2 * sizes[-1] + 10), rng.random() < 0.6) for _ in range(3000)]
    first: dict[int, tuple] = {}
    eager: dict[int, int] = {}
    for n, u in steps:
        got = d.dispatch(n, u)
        assert got == brute_dispatch(config, keys, n, u), (seed, n, u)
        if n > sizes[-1]:
            assert got is first.setdefault(n, got), (seed, n)  # one answer object per count
        if got.runtime_mode is M.NONE:
            eager[n] = eager.get(n, 0) + 1
    rows = d.stats_frame().query("runtime_mode == 'NONE'")
    assert dict(zip(rows.padded_size, rows.calls)) == eager, seed
    d.reset_stats()
    above = sizes[-1] + 1
    d.dispatch(above)
    assert d.stats_frame().calls.tolist() == [1]
    # a count the dispatcher never validated still takes the checked path
    with pytest.raises(ValueError, match="num_tokens"):
        d.dispatch(2**31)
    d.record_stats = False
    assert d.dispatch(above) is d.dispatch(above)
    assert d.stats_frame().calls.tolist() == [1]
