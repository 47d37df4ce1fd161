import subprocess
import sys

from cgdispatch.__main__ import main


def test_demo_runs(capsys):
    assert main(["demo", "--max-num-seqs", "16", "--steps", "500"]) == 0
    out = capsys.readouterr().out
    assert "PIECEWISE" in out and "--compilation-config" in out


def test_dispatch_command_prints_the_dispatchers_answer(capsys):
    assert main(["dispatch", "3", "--uniform", "--max-num-seqs", "8"]) == 0
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
