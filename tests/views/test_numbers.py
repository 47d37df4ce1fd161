"""Numbers for people (issue 37): every duration, byte count and count is read back and
checked against the value it came from, on fresh random magnitudes from 1e-4 to 1e10."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cgdispatch.views.numbers import band, count, duration, duration_s, format_in, nbytes, number

TIME = {"ms": 1.0, "s": 1e3, "min": 60e3, "h": 3600e3}
BYTES = {"B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}
SHOWN = re.compile(r"^(?P<sign>[+-]?)(?P<num>\d{1,3}(,\d{3})*(\.\d+)?) (?P<unit>\S+)$")


def magnitudes(n: int = 400) -> np.ndarray:
    rng = np.random.default_rng()
    values = 10.0 ** rng.uniform(-4, 10, n) * rng.choice([-1.0, 1.0], n)
    return np.concatenate([values, rng.choice([1, 10, 100, 1000, 60, 3600], 40) * 1.0])


def read_back(text: str, units: dict[str, float]) -> tuple[float, float, str, str]:
    """(value, shown number, unit, number text) of ``text``, by a rule of its own."""
    m = SHOWN.match(text)
    assert m, f"{text!r} is not '<number> <unit>' in fixed notation"
    num = float(m["num"].replace(",", ""))
    sign = -1.0 if m["sign"] == "-" else 1.0
    return sign * num * units[m["unit"]], num, m["unit"], m["num"]


def decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize(("fmt", "units"), [(duration, TIME), (nbytes, BYTES)])
def test_a_figure_reads_back_as_its_value_in_the_largest_unit_it_fills(fmt, units) -> None:
    scales = sorted(units.values())
    for value in magnitudes():
        text = fmt(value)
        got, num, unit, digits = read_back(text, units)
        assert "e" not in digits.lower()
        # rounding to the shown decimals is the only error
        assert abs(got - value) <= 0.5 * 10.0 ** -decimals(digits) * units[unit] * (1 + 1e-9)
        # the unit: the largest one the value fills (a value below the smallest keeps it)
        scale = units[unit]
        bigger = [s for s in scales if s > scale]
        if scale != scales[0]:
            assert num >= 1.0
        if bigger:
            assert num * scale < bigger[0] * (1 + 1e-9), text
        # three significant digits below 100 of a unit, whole units from 100
        if num >= 100:
            assert decimals(digits) == 0
        elif num >= 1:
            assert len(digits.replace(",", "").replace(".", "").lstrip("0")) == 3, text


def test_the_issues_numbers_read_as_a_person_writes_them() -> None:
    rng = np.random.default_rng()
    assert duration(1610.0) == "1.61 s" and band(1610.0, "ms") == "\u00b11.61 s"
    assert nbytes(2.949193e08) == "281 MiB"
    hours = float(rng.uniform(1.5, 9.5))
    shown = duration(hours * 3600e3)
    assert shown.endswith(" h") and abs(float(shown[:-2]) - hours) <= 0.005
    assert duration_s(hours * 3600) == shown


def test_counts_and_signs() -> None:
    rng = np.random.default_rng()
    for value in rng.integers(-(10**9), 10**9, 200):
        text = count(float(value), sign=True)
        assert int(text.replace(",", "")) == value and (value < 0 or text.startswith("+"))
        assert all(len(group) == 3 for group in text.lstrip("+-").split(",")[1:])
    for value in magnitudes(100):
        assert duration(value, sign=True)[0] in "+-"
        assert float(number(value).replace(",", "")) == pytest.approx(value, rel=5e-3)


def test_undefined_figures_and_unknown_units() -> None:
    assert duration(float("nan")) == "n/a" and nbytes(float("inf")) == "n/a"
    assert format_in(12.0, "tokens") == "12 tokens"
    with pytest.raises(ValueError, match="unit='parsecs' is invalid"):
        format_in(1.0, "parsecs")


def test_verdict_lines_wrap_at_spaces_and_the_serve_command_still_pastes() -> None:
    import shlex

    from cgdispatch.views.tune_verdict import wrap_line

    rng = np.random.default_rng()
    words = ["".join(rng.choice(list("abcdefgh"), int(rng.integers(1, 12)))) for _ in range(60)]
    line = " ".join(words)
    width = int(rng.integers(30, 90))
    pieces = wrap_line(line, width)
    assert all(len(p) <= width for p in pieces)
    assert " ".join(p.strip() for p in pieces).split() == words  # no word broken or lost
    flags = '--compilation-config \'{"cudagraph_mode": "FULL", "sizes": [1, 2]}\' --max-num-seqs 64'
    serve = f"vllm serve org/model {flags}"
    wrapped = wrap_line(serve, 40)
    assert len(wrapped) == 3 and all(p.endswith(" \\") for p in wrapped[:-1])
    joined = "".join(p.removesuffix("\\") for p in wrapped)
    assert shlex.split(joined) == shlex.split(serve)
    with pytest.raises(ValueError, match="width=5 is invalid"):
        wrap_line(line, 5)


def test_a_readable_table_says_each_column_in_its_unit() -> None:
    import pandas as pd

    from cgdispatch.views.numbers import readable_table

    rng = np.random.default_rng()
    n = 20
    frame = pd.DataFrame({
        "ladder": [f"l{i}" for i in range(n)],
        "p99_ttft_ms": 10.0 ** rng.uniform(-1, 8, n),
        "capture_s": 10.0 ** rng.uniform(-2, 4, n),
        "graph_memory_bytes": 10.0 ** rng.uniform(3, 11, n),
        "kv_cache_tokens": rng.integers(0, 10**7, n).astype(float),
        "num_graphs": rng.integers(1, 600, n),
        "throughput_req_s": rng.uniform(0, 50, n),
        "padded_token_ratio": rng.uniform(0, 1, n),
    })  # fmt: skip
    shown = readable_table(frame)
    assert list(shown.columns) == list(frame.columns) and (shown["ladder"] == frame["ladder"]).all()
    for text, value in zip(shown["p99_ttft_ms"], frame["p99_ttft_ms"]):
        assert read_back(text, TIME)[0] == pytest.approx(value, rel=5e-3)
    for text, value in zip(shown["capture_s"], frame["capture_s"]):
        assert read_back(text, TIME)[0] == pytest.approx(value * 1e3, rel=5e-3)
    for text, value in zip(shown["graph_memory_bytes"], frame["graph_memory_bytes"]):
        assert read_back(text, BYTES)[0] == pytest.approx(value, rel=5e-3)
    for column in ("kv_cache_tokens", "num_graphs"):
        assert [int(t.replace(",", "")) for t in shown[column]] == frame[column].astype(
            int
        ).tolist()
    assert not shown.map(lambda t: "e+" in str(t) or "e-" in str(t)).any().any()
