"""The one cache (cgdispatch.core.cache): memory in front of one disk folder, one switch that
turns every cache off, keys from content, atomic writes that leave nothing behind on a full
disk, and a cache that still works with no home folder."""

from __future__ import annotations

import errno
import os
import pwd
import warnings
from pathlib import Path

import numpy as np
import pytest

from cgdispatch.core import cache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh cache folder, caching on, no older variables, memory emptied."""
    for name in ("CGDISPATCH_CACHE", "CGDISPATCH_RESULT_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_said", set())  # each test sees its own once-only warnings
    cache.clear_memory()
    yield tmp_path / "cache"
    cache.clear_memory()


def _arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = int(rng.integers(1, 200))
    return {
        "ints": rng.integers(-(1 << 40), 1 << 40, n),
        "floats": rng.normal(size=n),
        "flags": rng.random(n) < 0.5,
    }


class Builder:
    """A build function that counts its calls and returns fresh copies of one value."""

    def __init__(self, value: dict[str, np.ndarray]) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> dict[str, np.ndarray]:
        self.calls += 1
        return {k: v.copy() for k, v in self.value.items()}


def _equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype
        np.testing.assert_array_equal(a[name], b[name])


def test_memory_then_disk_then_build(folder):
    rng = np.random.default_rng()
    value = _arrays(rng)
    build = Builder(value)
    key = cache.digest(str(rng.integers(1 << 62)))
    cold = cache.cached_arrays("unit", key, build)
    assert build.calls == 1 and len(list(folder.glob("unit-*.npz"))) == 1
    _equal(cold, value)
    with pytest.raises(ValueError, match="read-only"):
        cold["ints"][:] = 0  # shared arrays: a caller cannot change what others get
    warm = cache.cached_arrays("unit", key, build)
    assert build.calls == 1
    _equal(warm, value)
    for path in folder.glob("unit-*.npz"):  # memory answers without the file
        path.rename(path.with_suffix(".moved"))
    _equal(cache.cached_arrays("unit", key, build), value)
    assert build.calls == 1
    for path in folder.glob("unit-*.moved"):
        path.rename(path.with_suffix(".npz"))
    cache.clear_memory()  # a new process: read from disk, not built
    _equal(cache.cached_arrays("unit", key, build), value)
    assert build.calls == 1
    cache.cached_arrays("unit", cache.digest(key, "other"), build)  # another key builds
    assert build.calls == 2


def test_memory_holds_at_most_its_bytes(folder):
    rng = np.random.default_rng()
    n = int(rng.integers(1000, 5000))
    builds = {i: Builder({"a": rng.normal(size=n)}) for i in range(4)}
    budget = 2 * n * 8 + 100  # two of these results

    def ask(i: int) -> dict[str, np.ndarray]:
        return cache.cached_arrays("weigh", f"k{i}", builds[i], memory_bytes=budget)

    for i in range(4):
        ask(i)
    for path in folder.glob("weigh-*.npz"):
        path.unlink()  # from now on only memory (or a build) can answer
    for i in (2, 3, 0):  # the last two stayed; the first was evicted and is built again
        _equal(ask(i), builds[i].value)
    assert [builds[i].calls for i in range(4)] == [2, 1, 1, 1]
    big = Builder({"a": rng.normal(size=4 * n)})  # heavier than the whole budget
    cache.cached_arrays("weigh", "big", big, memory_bytes=budget)
    for path in folder.glob("weigh-*.npz"):
        path.unlink()
    cache.cached_arrays("weigh", "big", big, memory_bytes=budget)
    assert big.calls == 2


def test_the_switch_turns_memory_and_disk_off(folder, monkeypatch):
    value = _arrays(np.random.default_rng())
    build = Builder(value)
    calls = []

    @cache.memo(maxsize=8)
    def lookup(x: int) -> int:
        calls.append(x)
        return x * 3

    for off in ("0", "off", "FALSE", "no"):
        monkeypatch.setenv("CGDISPATCH_CACHE", off)
        assert not cache.enabled()
        before = build.calls
        _equal(cache.cached_arrays("unit", "k", build), value)
        _equal(cache.cached_arrays("unit", "k", build), value)
        assert build.calls == before + 2
        assert lookup(7) == lookup(7) == 21
        assert cache.local_memo(4)(len) is len  # a per-object memo is the function itself
    assert not folder.exists() or not list(folder.iterdir())
    assert len(calls) == 8
    monkeypatch.setenv("CGDISPATCH_CACHE", "1")
    assert cache.enabled()
    assert lookup(7) == lookup(7) == 21
    assert len(calls) == 9  # on: remembered


def test_the_older_variables_still_work_with_one_message(folder, monkeypatch, tmp_path):
    monkeypatch.setenv("CGDISPATCH_RESULT_CACHE", "0")
    with pytest.warns(UserWarning, match="CGDISPATCH_CACHE=0"):
        assert not cache.enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not cache.enabled()  # said once
    monkeypatch.delenv("CGDISPATCH_RESULT_CACHE")
    monkeypatch.delenv("CGDISPATCH_CACHE_DIR")
    old = tmp_path / "old-style"
    monkeypatch.setenv("CGDISPATCH_CACHE", str(old))  # the folder, as before
    with pytest.warns(UserWarning, match="CGDISPATCH_CACHE_DIR"):
        assert cache.cache_dir() == old
    assert cache.enabled()
    cache.cached_arrays("unit", "k", Builder(_arrays(np.random.default_rng())))
    assert list(old.glob("unit-*.npz"))


def _damages(raw: bytes) -> dict[str, bytes]:
    """Ways a cache file gets damaged (its layout: magic line, key line, checksum line,
    payload)."""
    key, rest = raw[len(cache._MAGIC) :].split(b"\n", 1)
    flipped = bytearray(raw)
    flipped[-len(raw) // 4] ^= 0xFF  # a byte of the payload
    return {
        "garbage": b"not a cache file",
        "empty": b"",
        "truncated": raw[: len(raw) // 2],
        "payload edited": bytes(flipped),
        "another key": cache._MAGIC + b"0" * len(key) + b"\n" + rest,
        "pickle": b"\x80\x04\x95" + raw[:10],
    }


def test_a_damaged_file_warns_and_is_rebuilt(folder):
    value = _arrays(np.random.default_rng())
    build = Builder(value)
    cache.cached_arrays("unit", "k", build)
    (path,) = folder.glob("unit-*.npz")
    good = path.read_bytes()
    for name, damaged in _damages(good).items():
        cache.clear_memory()
        path.write_bytes(damaged)
        with pytest.warns(UserWarning, match="damaged.*rebuilding it"):
            again = cache.cached_arrays("unit", "k", build)
        _equal(again, value)
        assert path.read_bytes() == good, name  # rebuilt and stored again


def _full_disk(monkeypatch, fail_on: str) -> None:
    """Writes into the cache folder fail as a full disk does: part of the bytes, then ENOSPC
    (``fail_on='write'``), or the rename fails (``fail_on='replace'``)."""
    real_fdopen, real_replace = os.fdopen, os.replace

    class Filling:
        def __init__(self, f):  # noqa: ANN001
            self.f = f

        def __enter__(self):  # noqa: ANN204
            return self

        def __exit__(self, *exc):  # noqa: ANN002, ANN204
            self.f.close()

        def write(self, data: bytes) -> int:
            self.f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        return Filling(real_fdopen(fd, *args, **kwargs))

    def replace(src, dst):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOSPC, "No space left on device")

    if fail_on == "write":
        monkeypatch.setattr(cache.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(cache.os, "replace", replace)
    assert real_replace is not None


@pytest.mark.parametrize("fail_on", ["write", "replace"])
def test_a_full_disk_leaves_no_temporary_file_and_says_so_once(folder, monkeypatch, fail_on):
    rng = np.random.default_rng()
    folder.mkdir(parents=True)
    _full_disk(monkeypatch, fail_on)
    values = [_arrays(rng) for _ in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, value in enumerate(values):
            _equal(cache.cached_arrays("unit", f"key {i}", Builder(value)), value)
    said = [w for w in caught if "cannot be written" in str(w.message)]
    assert len(said) == 1 and "No space left" in str(said[0].message)
    assert list(folder.iterdir()) == []  # no tmp*.tmp, no partial entry


def test_no_home_folder_falls_back_to_a_private_temporary_folder(tmp_path, monkeypatch):
    """HOME unset and a uid with no passwd entry (Path.home() raises): the cache goes to a
    folder of this uid under the temporary folder, said once; nothing crashes."""
    for name in ("CGDISPATCH_CACHE", "CGDISPATCH_CACHE_DIR", "CGDISPATCH_RESULT_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(cache, "_said", set())

    def no_entry(uid):  # noqa: ANN001, ANN202
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises((RuntimeError, KeyError)):
        Path.home()  # the case of issue 36 item 6
    monkeypatch.setattr(cache.tempfile, "tempdir", str(tmp_path))
    cache.clear_memory()
    value = _arrays(np.random.default_rng())
    with pytest.warns(UserWarning, match="no home folder"):
        _equal(cache.cached_arrays("unit", "k", Builder(value)), value)
    private = tmp_path / f"cgdispatch-cache-{os.getuid()}"
    assert cache.cache_dir() == private and list(private.glob("unit-*.npz"))
    assert private.stat().st_mode & 0o077 == 0

    # a folder of that name open to others is not trusted: memory only, said once
    monkeypatch.setattr(cache, "_said", set())
    other = tmp_path / "other"
    other.mkdir()
    (other / f"cgdispatch-cache-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(other / f"cgdispatch-cache-{os.getuid()}", 0o777)
    monkeypatch.setattr(cache.tempfile, "tempdir", str(other))
    cache.clear_memory()
    with pytest.warns(UserWarning, match="not cached on disk"):
        _equal(cache.cached_arrays("unit", "k", Builder(value)), value)
    assert cache.cache_dir() is None
    assert not list((other / f"cgdispatch-cache-{os.getuid()}").iterdir())
    with pytest.raises(ValueError, match="CGDISPATCH_CACHE_DIR"):
        cache.profiles_dir()


def test_source_digest_is_the_resolved_path_and_the_bytes(tmp_path, monkeypatch):
    rng = np.random.default_rng()
    texts = [f'{{"n": {rng.integers(1 << 40)}}}' for _ in range(2)]
    for name, text in zip("ab", texts, strict=True):
        (tmp_path / name / "mdl").mkdir(parents=True)
        (tmp_path / name / "mdl" / "config.json").write_text(text)
    digests = []
    for name in "ab":
        monkeypatch.chdir(tmp_path / name)
        digests.append(cache.source_digest("mdl"))  # the folder: its config.json
        assert cache.source_digest("mdl/config.json") == digests[-1]
        assert cache.source_digest(Path("mdl")) == digests[-1]
    assert digests[0] != digests[1]
    # the same bytes in another folder: another model all the same (its absolute identity)
    (tmp_path / "b" / "mdl" / "config.json").write_text(texts[0])
    assert cache.source_digest("mdl") != digests[0]
    before = cache.source_digest("mdl")
    (tmp_path / "b" / "mdl" / "config.json").write_text(texts[0] + " ")
    assert cache.source_digest("mdl") != before  # an edit is another key
    assert cache.source_digest("llama-3.1-8b") == "value 'llama-3.1-8b'"


def test_a_memo_keyed_by_content_reads_an_edited_file_afresh(tmp_path, folder):
    rng = np.random.default_rng()
    path = tmp_path / "table.txt"
    reads = []

    @cache.memo(maxsize=4, key=lambda p: cache.source_digest(p))
    def total(p: Path) -> int:
        reads.append(p)
        return sum(map(int, Path(p).read_text().split()))

    for _ in range(3):
        numbers = rng.integers(0, 1000, int(rng.integers(1, 20)))
        path.write_text(" ".join(map(str, numbers)))
        assert total(path) == total(path) == int(numbers.sum())
    assert len(reads) == 3  # each content read once


def test_digest_separates_its_parts_and_kinds_are_checked():
    rng = np.random.default_rng()
    a = "".join(map(chr, rng.integers(97, 123, 8)))
    assert cache.digest(a[:3], a[3:]) != cache.digest(a[:4], a[4:])
    values = rng.integers(0, 100, 5)
    assert cache.digest(values) != cache.digest(values.astype(np.int32))
    assert cache.digest(values) == cache.digest(values.copy())
    with pytest.raises(ValueError, match="kind='a/b' is invalid"):
        cache.cached("a/b", "k", lambda: 1)


def _entry_name(rng: np.random.Generator, kind: str, suffix: str) -> str:
    return f"{kind}-{''.join(rng.choice(list('0123456789abcdef'), 32))}.{suffix}"


def test_prune_removes_old_formats_then_least_recently_used_entries(tmp_path, monkeypatch):
    """Against a brute-force choice: sort the entries by age and drop the oldest until the
    rest fit 80% of the budget; legacy names and stale temporary files always go; a user's
    own files, another folder and fresh temporary files stay."""
    rng = np.random.default_rng()
    folder = tmp_path / "cache"
    (folder / "profiles").mkdir(parents=True)
    (folder / "profiles" / "mine.json").write_text("{}")
    keep_always = [folder / "notes.txt", folder / ".fresh.npz.x1.tmp"]
    for path in keep_always:
        path.write_text("user data")
    legacy = [
        folder / "startup-ff866625ec9b83c0e197f986-f487c06b576c9c8b.json",
        folder / "cost-model-llama-3.1-8b-H200-1024-0123456789abcdef.json",
        folder / ".latency-x.npz.abc.tmp",
        folder / "tmpa1b2c3.tmp",
    ]
    now = 1_700_000_000.0
    for path in legacy:
        path.write_text("old")
        os.utime(path, (now - 7200, now - 7200))
    os.utime(keep_always[1], (now + 10, now + 10))
    entries = []
    for i in range(int(rng.integers(8, 30))):
        kind = str(rng.choice(["cost-model", "steps", "latency", "stage-profile"]))
        path = folder / _entry_name(rng, kind, "npz" if kind in ("steps", "latency") else "json")
        size = int(rng.integers(100, 5000))
        path.write_bytes(rng.bytes(size))
        age = now - 1000 * i - float(rng.random())
        os.utime(path, (age, age))
        entries.append((age, size, path))
    total = sum(size for _, size, _ in entries)
    budget = int(total * rng.uniform(0.3, 0.95))
    expected_gone, left = [], total
    for _, size, path in sorted(entries):
        if left <= budget * 0.8:
            break
        expected_gone.append(path)
        left -= size

    monkeypatch.setattr(cache.time, "time", lambda: now + 20)
    removed = cache.prune(folder, budget)

    assert sorted(removed) == sorted(legacy + expected_gone)
    assert all(not p.exists() for p in removed)
    survivors = {p for _, _, p in entries} - set(expected_gone)
    assert all(p.exists() for p in survivors)
    assert sum(p.stat().st_size for p in survivors) <= budget * 0.8
    assert all(p.exists() for p in keep_always) and (folder / "profiles" / "mine.json").exists()


def test_a_hit_keeps_an_entry_and_a_write_prunes_the_folder_once(folder, monkeypatch):
    """Two entries with the older one read again: a budget that holds one keeps the one just
    read, and the write that follows prunes (once per process and folder)."""
    rng = np.random.default_rng()
    monkeypatch.setattr(cache, "_pruned", set())
    first, second = _arrays(rng), _arrays(rng)
    cache.cached_arrays("steps", "first", Builder(first))
    cache.cached_arrays("steps", "second", Builder(second))
    files = {p.name: p for p in folder.iterdir()}
    assert len(files) == 2
    for path in files.values():  # both old, the first written the older
        os.utime(path, (1_000_000.0, 1_000_000.0))
    cache.clear_memory()
    build = Builder(first)
    _equal(cache.cached_arrays("steps", "first", build), first)  # a hit from disk
    assert build.calls == 0
    read = max(files.values(), key=lambda p: p.stat().st_mtime)
    biggest = max(p.stat().st_size for p in files.values())
    removed = cache.prune(folder, int(biggest / 0.8) + 1)
    assert [p.name for p in removed] == [n for n in files if files[n] != read]
    assert read.exists()

    monkeypatch.setattr(cache, "_pruned", set())
    monkeypatch.setenv("CGDISPATCH_CACHE_MAX_MB", str(1 / (1 << 20)))  # one byte: prune all
    cache.cached_arrays("steps", "third", Builder(_arrays(rng)))
    assert not any(folder.iterdir())
    cache.cached_arrays("steps", "fourth", Builder(_arrays(rng)))  # pruned once: stays
    assert len(list(folder.iterdir())) == 1


@pytest.mark.parametrize("value", ["0", "-5", "lots", "inf", "nan"])
def test_a_bad_budget_names_the_variable_and_the_fix(value, folder, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE_MAX_MB", value)
    with pytest.raises(ValueError, match="CGDISPATCH_CACHE_MAX_MB.*positive number"):
        cache.max_bytes()
    monkeypatch.setattr(cache, "_pruned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.cached(
            "cost-model", "k", lambda: {"a": 1}, encode=lambda v: b"{}", decode=lambda b: {}
        )
    assert any("is not pruned" in str(w.message) for w in caught)
    assert len(list(folder.iterdir())) == 1  # the result is still stored
