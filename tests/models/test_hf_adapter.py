"""HFDecodeLM: decode steps equal HF's own forward, padding is harmless, bad input and
unsupported models raise errors that say the fix; the model registry resolves names."""

import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from cgdispatch.models.hf.adapter import HFDecodeLM  # noqa: E402
from cgdispatch.models.hf.presets import HF_PRESETS, build_hf_model  # noqa: E402
from cgdispatch.models.hf.support import UnsupportedModelError  # noqa: E402
from cgdispatch.models.registry import build_model, model_names  # noqa: E402

PRESETS = ["hf-llama-tiny", "hf-gpt2-tiny"]


@pytest.fixture(scope="module", params=PRESETS)
def model(request):
    m = build_hf_model(request.param, seed=3)
    m.fill_kv_cache_(seed=5)
    return m


def _tiny_llama_config():
    cfg = transformers.LlamaConfig(**dict(HF_PRESETS["hf-llama-tiny"].config))
    cfg._attn_implementation = "sdpa"
    return cfg


def test_lockstep_decode_from_position_0_equals_hf_forward_without_cache(model):
    """Independent reference: HF's full-sequence forward (no cache) on the same tokens."""
    gen = torch.Generator().manual_seed(11)
    num_reqs, steps = 3, 6
    seqs = torch.randint(0, model.config.vocab_size, (num_reqs, steps), generator=gen)
    slots = torch.randperm(model.num_slots, generator=gen)[:num_reqs]
    with torch.no_grad():
        ref = model.hf_model(input_ids=seqs).logits  # [reqs, steps, vocab]
        for p in range(steps):  # cache rows beyond p hold random values: the mask must hide them
            out = model(seqs[:, p], torch.full((num_reqs,), p), slots)
            torch.testing.assert_close(out, ref[:, p], atol=1e-5, rtol=1e-4)


def test_padding_rows_use_the_dummy_slot_and_leave_real_caches_alone(model):
    batch = model.make_decode_batch(5, seed=2)
    snapshot = [c.clone() for c in model.kv_caches()]
    with torch.no_grad():
        ref = model(batch.input_ids, batch.positions, batch.slots).clone()
        ref_caches = [c.clone() for c in model.kv_caches()]
        for c, s in zip(model.kv_caches(), snapshot):
            c.copy_(s)
        gen = torch.Generator().manual_seed(4)
        pad = 3  # padding rows: random ids, stale positions, the dummy slot
        ids = torch.cat(
            [batch.input_ids, torch.randint(0, model.config.vocab_size, (pad,), generator=gen)]
        )
        pos = torch.cat(
            [batch.positions, torch.randint(0, model.config.max_seq_len, (pad,), generator=gen)]
        )
        slots = torch.cat([batch.slots, torch.full((pad,), model.dummy_slot)])
        out = model(ids, pos, slots)[:5]
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    real = slice(0, model.num_slots)
    for c, r, s in zip(model.kv_caches(), ref_caches, snapshot):
        torch.testing.assert_close(c[:, real], r[:, real], atol=1e-6, rtol=1e-5)
        changed = (c[:, real] != s[:, real]).any(dim=(0, 2, 4))  # [slot, position]
        p = int(batch.positions[0])
        assert sorted(changed.any(1).nonzero().flatten().tolist()) == sorted(batch.slots.tolist())
        assert changed.any(0).nonzero().flatten().tolist() == [p]
    for c, s in zip(model.kv_caches(), snapshot):
        c.copy_(s)


def test_make_decode_batch_is_lockstep_in_distinct_slots(model):
    batch = model.make_decode_batch(7, seed=9)
    assert batch.uniform_decode and batch.query_lens == (1,) * 7
    assert batch.slots.unique().numel() == 7 and int(batch.slots.max()) < model.num_slots
    assert (batch.positions == batch.positions[0]).all()
    with pytest.raises(ValueError, match="speculative"):
        model.make_decode_batch(4, 2)
    with pytest.raises(ValueError, match="does not fit"):
        model.make_decode_batch(model.num_slots + 1)


@pytest.mark.parametrize(
    "ids, pos, slots, match",
    [
        ([1, 2], [3, 4], [0, 1], "same position"),
        ([1, 2], [3, 3], [0, 0], "mixed batches"),
        ([1, 2], [3, 3], [0, 99], "slots range"),
        ([1], [999], [0], "position 999"),
    ],
)
def test_bad_steps_raise_value_errors_naming_the_rule(model, ids, pos, slots, match):
    with pytest.raises(ValueError, match=match):
        model(torch.tensor(ids), torch.tensor(pos), torch.tensor(slots))


def test_a_step_above_max_batch_size_raises(model):
    n = model.config.max_batch_size + 1
    ids = torch.zeros(n, dtype=torch.long)
    with pytest.raises(ValueError, match="max_batch_size"):
        model(ids, ids.clone(), torch.full((n,), model.dummy_slot))


def test_unsupported_models_say_what_is_missing_and_what_to_do():
    torch.manual_seed(0)
    cases = [
        (transformers.LlamaModel(_tiny_llama_config()), "AutoModelForCausalLM"),
        (torch.nn.Linear(2, 2), "PreTrainedModel"),
    ]
    eager = _tiny_llama_config()
    eager._attn_implementation = "eager"
    cases.append((transformers.LlamaForCausalLM(eager), "attn_implementation='sdpa'"))
    mistral = transformers.MistralConfig(
        **dict(HF_PRESETS["hf-llama-tiny"].config), sliding_window=8
    )
    mistral._attn_implementation = "sdpa"
    cases.append((transformers.MistralForCausalLM(mistral), "sliding"))

    class NoStaticCache(transformers.LlamaForCausalLM):
        _can_compile_fullgraph = False
        _supports_static_cache = False

    cases.append((NoStaticCache(_tiny_llama_config()), "static KV cache"))
    t5 = transformers.T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2
    )
    cases.append((transformers.T5ForConditionalGeneration(t5), "encoder-decoder"))
    for hf_model, match in cases:
        with pytest.raises(UnsupportedModelError, match=match):
            HFDecodeLM(hf_model)
    assert issubclass(UnsupportedModelError, ValueError)


def test_missing_transformers_raises_an_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"cgdispatch\[hf\]"):
        build_hf_model("hf-llama-tiny")


def test_adapter_reports_decode_only_support():
    from cgdispatch.core.modes import AttentionCGSupport

    m = build_hf_model("hf-gpt2-tiny", max_num_tokens=4)
    assert m.attention_cg_support is AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    assert m.supports_mixed_batches is False
    assert m.config.max_batch_size == m.num_slots  # at least every slot, above 4
    assert m.dummy_slot == m.num_slots
    with pytest.raises(ValueError, match="unknown"):
        build_hf_model("hf-nope")
    with pytest.raises(ValueError, match="max_seq_len"):
        HFDecodeLM(m.hf_model, max_seq_len=10_000)
    with pytest.raises(ValueError, match="float64"):
        HFDecodeLM(build_hf_model("hf-gpt2-tiny").hf_model.double())


def test_registry_names_match_the_presets_and_reject_bad_options():
    from cgdispatch.models.architectures import ARCHITECTURES
    from cgdispatch.models.toy import PRESETS as TOY

    assert sorted(model_names()) == sorted([*TOY, *HF_PRESETS, *ARCHITECTURES])
    with pytest.raises(ValueError, match="unknown"):
        build_model("llama-70b")
    with pytest.raises(ValueError, match="toy models"):
        build_model("hf-llama-tiny", attention="uniform")
    with pytest.raises(ValueError, match="do not apply"):
        build_model("hf-llama-tiny", num_experts=4)
    toy = build_model("toy-tiny", attention="uniform", max_num_tokens=8)
    assert toy.config.attention == "uniform"
    hf = build_model("hf-gpt2-tiny", max_num_tokens=40)
    assert isinstance(hf, HFDecodeLM) and hf.config.max_batch_size == 40


def test_support_report_agrees_with_the_adapter():
    import warnings

    from cgdispatch.models.hf.adapter import HFDecodeLM
    from cgdispatch.models.hf.support import support_report, unsupported_examples

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        examples = unsupported_examples()
    examples["tiny llama"] = build_model("hf-llama-tiny").hf_model
    report = support_report(examples).set_index("model")
    for label, hf_model in examples.items():
        try:
            HFDecodeLM(hf_model)
            refused = None
        except UnsupportedModelError as err:
            refused = str(err)
        assert report.loc[label, "supported"] == (refused is None), label
        assert report.loc[label, "reason"] == (refused or ""), label
    reasons = " ".join(report["reason"])
    for words in ("sdpa", "causal-LM head", "static KV cache", "encoder-decoder"):
        assert words in reasons
