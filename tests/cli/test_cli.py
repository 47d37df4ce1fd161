import subprocess
import sys

import pytest

from cgdispatch.__main__ import main


def test_demo_runs(capsys):
    assert main(["demo", "--max-num-seqs", "16", "--steps", "500"]) == 0
    out = capsys.readouterr().out
    assert "PIECEWISE" in out and "--compilation-config" in out


def test_dispatch_command_prints_the_dispatchers_answer(capsys):
    argv = ["dispatch", "3", "--uniform", "--max-num-seqs", "8", "--vllm-version", "0.33"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(
        "FULL BatchDescriptor(num_tokens=4, num_reqs=4, uniform=True"
    )


def test_bad_input_is_one_clear_line(capsys):
    assert main(["dispatch", "3", "--sizes", "1,2,x"]) == 2
    err = capsys.readouterr().err
    assert "capture size 'x' is not an integer" in err and "Traceback" not in err
    assert main(["dispatch", "3", "--mode", "sideways"]) == 2


def test_module_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "cgdispatch", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "demo" in out.stdout


def test_bad_counts_are_refused(capsys):
    assert main(["demo", "--steps", "-1"]) == 2
    assert "--steps=-1 is invalid" in capsys.readouterr().err
    # active adapters beyond max_loras used to dispatch eagerly without a word
    assert main(["dispatch", "8", "--active-loras", "3"]) == 2
    assert "--active-loras 3 is invalid with --max-loras 0" in capsys.readouterr().err
    assert main(["dispatch", "8", "--active-loras", "3", "--max-loras", "4"]) == 0


def test_unreadable_trace_files_say_what_is_expected(tmp_path, capsys):
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("num_tokens\n3\n4,5,6,7\n")
    binary = tmp_path / "blob.csv"
    binary.write_bytes(bytes(range(128, 256)))
    for path in (ragged, binary):
        assert main(["plan", "--trace", str(path), "--max-graphs", "4"]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "vLLM --cudagraph-metrics log" in err


# ----- both generations on the command line (the default is the newest, 0.34) -------------
def _gen2_reference(tokens, reqs, uniform, loras, **fields):
    import warnings

    from cgdispatch import CudaGraphManager, GraphConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GraphConfig(vllm_version="0.34", **fields).resolve()
    q = config.uniform_decode_query_len
    return CudaGraphManager(config).dispatch(reqs, tokens, q if uniform else None, loras)


def test_dispatch_defaults_to_generation_2_and_says_so(capsys):
    import random

    rng = random.Random(41)
    for _ in range(12):
        seqs, spec = rng.randint(1, 64), rng.choice([0, 1, 3])
        q, loras = 1 + spec, rng.choice([0, 0, 2])
        uniform = rng.random() < 0.5
        reqs = rng.randint(1, seqs)
        tokens = reqs * q if uniform else rng.randint(reqs, 2048)
        argv = ["dispatch", str(tokens), "--max-num-seqs", str(seqs),
                "--num-speculative-tokens", str(spec), "--max-loras", str(loras),
                "--active-loras", str(loras)]  # fmt: skip
        if uniform:
            argv.append("--uniform")
        else:
            argv += ["--num-reqs", str(reqs)]
        assert main(argv) == 0
        out = capsys.readouterr().out.splitlines()
        want = _gen2_reference(
            tokens, reqs, uniform, loras, max_num_seqs=seqs, num_speculative_tokens=spec,
            max_loras=loras,
        )  # fmt: skip
        mode, fields = out[0].split(" ", 1)
        assert mode == str(want.cg_mode)
        assert fields == (
            f"BatchExecutionDescriptor(cg_mode={want.cg_mode}, num_tokens={want.num_tokens}, "
            f"num_reqs={want.num_reqs}, uniform_token_count={want.uniform_token_count}, "
            f"max_query_len={want.max_query_len}, num_active_loras={want.num_active_loras}, "
            f"num_ubatches={want.num_ubatches})"
        )
        assert out[1].startswith("vLLM 0.34 (generation 2, CudaGraphManager; the newest")


def test_num_reqs_reaches_generation_2(capsys):
    # 3 requests fit a FULL graph of 4 tokens; 5 requests in 4 tokens cannot exist
    base = ["dispatch", "4", "--mode", "FULL", "--sizes", "4,8", "--max-num-seqs", "8"]
    assert main([*base, "--num-reqs", "3"]) == 0
    assert "num_reqs=4" in capsys.readouterr().out
    assert main([*base, "--num-reqs", "5"]) == 2
    assert "num_reqs=5 is invalid with num_tokens=4" in capsys.readouterr().err


def test_generation_2_options_are_refused_for_v1_and_cascade_for_gen2(capsys):
    assert main(["dispatch", "6", "--decode-sizes", "1,2", "--vllm-version", "0.33"]) == 2
    assert "vllm_version='0.34'" in capsys.readouterr().err
    assert main(["dispatch", "6", "--cascade"]) == 2
    assert "no cascade attention" in capsys.readouterr().err
    assert main(["dispatch", "6", "--cascade", "--vllm-version", "0.33"]) == 0


def test_decode_and_prefill_sizes_options(capsys):
    argv = ["dispatch", "6", "--uniform", "--decode-sizes", "1,4,8", "--prefill-sizes", "16,32",
            "--max-num-seqs", "8"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    want = _gen2_reference(
        6, 6, True, 0, max_num_seqs=8, decode_cudagraph_capture_request_sizes=[1, 4, 8],
        prefill_cudagraph_capture_token_sizes=[16, 32],
    )  # fmt: skip
    assert f"num_tokens={want.num_tokens}, num_reqs={want.num_reqs}," in out and want.num_reqs == 8


def test_demo_runs_for_both_generations(capsys):
    assert main(["demo", "--max-num-seqs", "16", "--steps", "500"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vLLM 0.34 (generation 2") and "decode request sizes" in out
    assert "500 random steps" in out and "FULL" in out
    argv = ["demo", "--max-num-seqs", "16", "--steps", "500", "--vllm-version", "0.33"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("vLLM 0.33 (V1") and "capture sizes" in out and "PIECEWISE" in out


def test_help_names_the_default_generation(capsys):
    # in process: test_module_entry_point above runs ``python -m cgdispatch`` itself
    with pytest.raises(SystemExit) as stop:
        main(["dispatch", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--vllm-version" in out and "default 0.34, the newest" in " ".join(out.split())
    assert "cdiv(num_tokens, q)" in " ".join(out.split())
