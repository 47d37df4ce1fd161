import pytest

from cgdispatch import AttentionCGSupport, BatchDescriptor, CUDAGraphMode

M = CUDAGraphMode
# docs/semantics.md's truth table: mode -> (decode, mixed, separate, requires_pw, has_full, valid_runtime)
TABLE = {
    M.NONE: (M.NONE, M.NONE, False, False, False, True),
    M.PIECEWISE: (M.PIECEWISE, M.PIECEWISE, False, True, False, True),
    M.FULL: (M.FULL, M.FULL, False, False, True, True),
    M.FULL_DECODE_ONLY: (M.FULL, M.NONE, True, False, True, False),
    M.FULL_AND_PIECEWISE: (M.FULL, M.PIECEWISE, True, True, True, False),
}


@pytest.mark.parametrize("mode", list(M))
def test_truth_table(mode):
    decode, mixed, separate, needs_pw, has_full, valid = TABLE[mode]
    assert mode.decode_mode() is decode
    assert mode.mixed_mode() is mixed
    assert mode.separate_routine() is separate
    assert mode.requires_piecewise_compilation() is needs_pw
    assert mode.has_piecewise_cudagraphs() is needs_pw
    assert mode.has_full_cudagraphs() is has_full
    assert mode.is_valid_runtime_mode() is valid
    for runtime in (M.NONE, M.PIECEWISE, M.FULL):
        assert mode.has_mode(runtime) is (runtime in (decode, mixed))


def test_values_match_vllm():
    assert [M.NONE.value, M.PIECEWISE.value, M.FULL.value] == [0, 1, 2]
    assert M.FULL_DECODE_ONLY.value == (M.FULL.value, M.NONE.value)
    assert M.FULL_AND_PIECEWISE.value == (M.FULL.value, M.PIECEWISE.value)


@pytest.mark.parametrize("mode", list(M))
def test_names_and_parsing(mode):
    assert str(mode) == mode.name
    assert M[mode.name] is mode
    assert M.parse(mode.name.lower()) is mode
    assert M.parse(f"  {mode.name.title()} ") is mode
    assert M.parse(mode) is mode


def test_parse_error_names_value_and_choices():
    with pytest.raises(ValueError, match=r"'fullish'.*FULL_AND_PIECEWISE"):
        M.parse("fullish")
    with pytest.raises(ValueError, match="runtime mode"):
        M.FULL.has_mode(M.FULL_AND_PIECEWISE)


def test_attention_support_order():
    A = AttentionCGSupport
    assert A.NEVER < A.UNIFORM_SINGLE_TOKEN_DECODE < A.UNIFORM_BATCH < A.ALWAYS
    assert sorted([A.ALWAYS, A.NEVER, A.UNIFORM_BATCH]) == [A.NEVER, A.UNIFORM_BATCH, A.ALWAYS]


def test_batch_descriptor_frozen_hashable_and_relaxed():
    d = BatchDescriptor(8, 8, True, True, 2)
    assert (d.num_reqs, d.uniform, d.has_lora, d.num_active_loras) == (8, True, True, 2)
    relaxed = d.relax_for_mixed_batch_cudagraphs()
    assert relaxed == BatchDescriptor(8, None, False, True, 2) == d.non_uniform
    assert d == BatchDescriptor(8, 8, True, True, 2) and hash(d) == hash(
        BatchDescriptor(8, 8, True, True, 2)
    )
    assert len({d, relaxed, BatchDescriptor(8, 8, True, True, 2)}) == 2
    defaults = BatchDescriptor(5)
    assert (defaults.num_reqs, defaults.uniform, defaults.has_lora, defaults.num_active_loras) == (
        None,
        False,
        False,
        0,
    )
    with pytest.raises(AttributeError):
        d.num_tokens = 3  # type: ignore[misc]


def test_vllm_033_names():
    # vllm/config/compilation.py CUDAGraphMode: the set is a classmethod, the check a method
    assert M.valid_runtime_modes() == frozenset({M.NONE, M.PIECEWISE, M.FULL})
    assert [m.without_piecewise() for m in M] == [
        M.NONE,
        M.NONE,
        M.FULL,
        M.FULL_DECODE_ONLY,
        M.FULL_DECODE_ONLY,
    ]
