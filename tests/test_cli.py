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
