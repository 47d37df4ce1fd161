"""Configs that lie (issue 36, classes 2, 3 and 5): a config.json vLLM could not load, or one
whose fields have the wrong type, absurd sizes or runaway nesting, is one ValueError naming
the file, the field and the rule, before any arithmetic; the TP rules are checked against an
independent transcription of vLLM's own checks on random shapes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cgdispatch.core import validate as v
from cgdispatch.models.published import PUBLISHED_MODELS, model_from_config

BASE = dict(model_type="llama", num_hidden_layers=4, hidden_size=3072, num_attention_heads=24,
            num_key_value_heads=8, intermediate_size=8192, vocab_size=32000,
            max_position_embeddings=4096)  # fmt: skip
MOE = dict(BASE, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2)


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _vllm_loads(heads, kv, inter, vocab, tp):
    """vLLM 0.34.0's checks, transcribed: ModelConfig.verify_with_parallel_config (heads),
    QKVParallelLinear (KV heads: divide(kv, tp) or divide(tp, kv)), the MLP's
    MergedColumnParallelLinear (divide(intermediate, tp)), VocabParallelEmbedding
    (divide(pad_vocab_size(vocab, 64), tp))."""
    try:
        assert heads % tp == 0
        if tp >= kv:
            assert tp % kv == 0
        else:
            assert kv % tp == 0
        assert inter % tp == 0
        padded = ((vocab + 63) // 64) * 64
        assert padded % tp == 0
    except AssertionError:
        return False
    return True


def test_tp_sizes_follow_vllms_sharding_rules_on_random_shapes():
    from cgdispatch.models.shape_rules import valid_tp_sizes

    rng = np.random.default_rng()
    for _ in range(60):
        kv = int(rng.choice([1, 2, 3, 4, 5, 8, 12]))
        heads = kv * int(rng.integers(1, 9))
        head_dim = 2 * int(rng.integers(16, 80))
        cfg = dict(BASE, num_attention_heads=heads, num_key_value_heads=kv,
                   hidden_size=heads * head_dim, intermediate_size=int(rng.integers(64, 9000)),
                   vocab_size=int(rng.integers(1000, 200_000)))  # fmt: skip
        model = model_from_config(cfg)
        tp = int(rng.integers(1, 33))
        expect = _vllm_loads(heads, kv, cfg["intermediate_size"], cfg["vocab_size"], tp)
        if expect:
            model.check_parallel(tp, 1)
        else:
            with pytest.raises(ValueError, match=rf"tensor_parallel_size={tp} .*use a TP size"):
                model.check_parallel(tp, 1)
        ok = [t for t in range(1, 65) if _vllm_loads(heads, kv, cfg["intermediate_size"],
                                                     cfg["vocab_size"], t)]  # fmt: skip
        assert valid_tp_sizes(model) == ok


@pytest.mark.parametrize(
    ("changes", "tp", "field"),
    [
        ({}, 3, "8 KV heads (num_key_value_heads"),  # 24 heads split, 8 KV heads cannot
        ({}, 12, "8 KV heads (num_key_value_heads"),  # nor replicated 12 / 8
        ({"num_attention_heads": 16, "hidden_size": 2048, "intermediate_size": 8191}, 2,
         "intermediate_size=8191"),
        ({"num_attention_heads": 16, "hidden_size": 2048}, 3, "16 attention heads"),
        ({"num_key_value_heads": 3, "intermediate_size": 8193}, 3,
         "vocabulary (32000, padded to 32000"),
        ({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
          "intermediate_size": 1001}, 2, "moe_intermediate_size=1001"),
    ],
)  # fmt: skip
def test_a_tp_size_vllm_cannot_load_is_refused_naming_field_rule_and_fix(
    tmp_path, changes, tp, field
):
    from cgdispatch.models.published import published_model

    path = _write(tmp_path, dict(BASE, **changes))
    with pytest.raises(ValueError) as err:
        published_model(str(path)).check_parallel(tp, 1)
    text = str(err.value)
    assert field in text and "vllm/" in text and "use a TP size of 1" in text


def test_the_registry_and_csv_models_pass_at_the_sizes_they_were_logged_at():
    """Every published model shards at TP 1 and 2 where vLLM would (the rules refuse no
    real run: the logged start-ups' TP sizes all pass, or their rows would not load)."""
    from cgdispatch.models.registry import check_model_tensor_parallel
    from cgdispatch.models.shape_rules import valid_tp_sizes

    for model in PUBLISHED_MODELS.values():
        assert 1 in valid_tp_sizes(model)
    check_model_tensor_parallel("llama-3.1-70b-tp8", None)
    with pytest.raises(ValueError, match="does not divide .*32 attention heads"):
        check_model_tensor_parallel("llama-3.1-8b", 3)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_key_value_heads": 0}, "'num_key_value_heads'=0"),
        ({"model_type": ["llama"]}, "'model_type'=['llama']"),
        ({"quantization_config": {"quant_method": ["fp8"]}}, "quant_method'=['fp8']"),
        ({"layer_types": [{"a": 1}] * 4}, "'layer_types' holds {'a': 1}"),
        ({"hidden_size": 10**40}, "'hidden_size'=<a 41-digit number>"),
        ({"intermediate_size": 10**15}, "'intermediate_size'=1000000000000000"),
        ({"head_dim": 0}, "'head_dim'=0"),
        ({"head_dim": 127}, "'head_dim'=127 is odd"),
        ({"num_key_value_heads": 5}, "not a multiple of 'num_key_value_heads'=5"),
        ({"tie_word_embeddings": "false"}, "'tie_word_embeddings'='false'"),
        ({"_name_or_path": "org/m\nvllm serve evil"}, "'_name_or_path'"),
        ({"max_position_embeddings": v.MAX_MODEL_LEN + 1}, "'max_position_embeddings'"),
    ],
)
def test_a_lying_config_is_one_error_naming_file_and_field(tmp_path, changes, field):
    path = _write(tmp_path, dict(BASE, **changes))
    with pytest.raises(ValueError) as err:
        model_from_config(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_experts_per_token_above_the_experts_is_refused(tmp_path):
    rng = np.random.default_rng()
    experts = int(rng.integers(2, 64))
    path = _write(tmp_path, dict(MOE, num_local_experts=experts,
                                 num_experts_per_tok=experts + int(rng.integers(1, 5))))  # fmt: skip
    with pytest.raises(ValueError, match=rf"'num_experts_per_tok'=\d+ is invalid with {experts}"):
        model_from_config(path)
    model_from_config(_write(tmp_path, dict(MOE, num_local_experts=experts,
                                            num_experts_per_tok=experts)))  # fmt: skip


def test_huge_integers_and_runaway_nesting_are_named_not_tracebacks(tmp_path):
    text = json.dumps(BASE)[:-1] + ', "vocab_size": ' + "7" * 5000 + "}"
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=r"'vocab_size'=<a 5_000-digit number> is invalid"):
        model_from_config(path)
    deep = json.dumps(BASE)[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path = _write(tmp_path, deep)
    with pytest.raises(ValueError, match=rf"{path} nests deeper than {v.MAX_NESTING} levels"):
        model_from_config(path)
    ok = json.dumps(BASE)[:-1] + ', "extra": ' + "[" * 30 + "]" * 30 + "}"  # within the bound
    model_from_config(_write(tmp_path, ok))
    with pytest.raises(ValueError, match=f"config file {tmp_path / 'e.json'} is empty"):
        model_from_config(_write(tmp_path, " \n", "e.json"))


def test_json_depth_matches_the_parsed_depth_on_random_documents():
    """check_json_depth on the text agrees with check_nesting on the parsed value, strings
    holding brackets and escaped quotes included."""
    rng = np.random.default_rng()
    for _ in range(40):
        depth = int(rng.integers(1, 40))
        value: object = 'a\\"[{' if rng.random() < 0.5 else 1
        for _ in range(depth - 1):
            value = {"k]": value} if rng.random() < 0.5 else [value, "}"]
        value = {"top": value}
        text = json.dumps(value)
        if depth > v.MAX_NESTING:  # depth - 1 wrappers and the top object
            with pytest.raises(ValueError, match="nests deeper"):
                v.check_json_depth("doc", text)
            with pytest.raises(ValueError, match="nests deeper"):
                v.check_nesting("doc", json.loads(text))
        else:
            v.check_json_depth("doc", text)
            v.check_nesting("doc", json.loads(text))


def test_max_position_embeddings_is_on_the_model_for_a_default_max_model_len():
    rng = np.random.default_rng()
    context = int(rng.integers(512, 1 << 20))
    assert (
        model_from_config(dict(BASE, max_position_embeddings=context)).max_position_embeddings
        == context
    )
    without = {k: val for k, val in BASE.items() if k != "max_position_embeddings"}
    assert model_from_config(without).max_position_embeddings == 0  # not given
