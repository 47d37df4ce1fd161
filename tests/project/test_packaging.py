"""pyproject.toml (pip users) and environment.yml (conda users) must agree."""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONDA_NAMES = {"torch": "pytorch"}  # pip name -> conda-forge / pytorch channel name


def _split(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    assert m, req
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _extras_in_all() -> set[str]:
    """The extras ``cgdispatch[all]`` pulls in: environment.yml mirrors those; an opt-in
    extra left out of ``all`` (``aic``: an 80 MB wheel) is left out of it too."""
    (ref,) = _pyproject()["project"]["optional-dependencies"]["all"]
    return set(re.fullmatch(r"cgdispatch\[(.*)\]", ref).group(1).split(","))


def _pip_requirements() -> dict[str, str]:
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        if name in _extras_in_all():
            reqs += [r for r in extra if not r.startswith("cgdispatch")]
    return dict(_split(r) for r in reqs)


def test_opt_in_extras_only_reuse_extras_of_all():
    """An extra outside ``all`` may name packages of its own, but what it shares with
    ``all`` it takes through an extra of ``all`` (``cgdispatch[parquet]``), so bounds agree."""
    extras = _pyproject()["project"]["optional-dependencies"]
    listed = _pip_requirements()
    for name, reqs in extras.items():
        if name in _extras_in_all() or name == "all":
            continue
        for req in reqs:
            if req.startswith("cgdispatch["):
                assert set(req[len("cgdispatch[") : -1].split(",")) <= _extras_in_all(), req
            else:
                assert _split(req)[0] not in listed, f"{name}: {req} repeats a package of `all`"


def _conda_requirements() -> tuple[dict[str, str], list[str]]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda, pip = {}, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip += dep["pip"]
        else:
            name, spec = _split(dep)
            conda[name] = spec
    return conda, pip


def test_every_pip_requirement_is_in_environment_yml_with_same_bound():
    conda, pip = _conda_requirements()
    pip_specs = dict(_split(r) for r in pip if not r.startswith("-e"))
    for name, spec in _pip_requirements().items():
        conda_name = CONDA_NAMES.get(name, name)
        where = conda if conda_name in conda else pip_specs
        assert conda_name in where or name in where, f"{name} missing from environment.yml"
        assert where.get(conda_name, where.get(name)) == spec, f"{name}: {spec} vs environment.yml"


def test_environment_yml_has_nothing_extra_and_installs_package():
    conda, pip = _conda_requirements()
    wanted = {CONDA_NAMES.get(n, n) for n in _pip_requirements()} | {"python", "pip"}
    assert set(conda) <= wanted, set(conda) - wanted
    assert "-e ." in pip
    assert conda["python"] == ">=" + _pyproject()["project"]["requires-python"].lstrip(">=")
    for must in ("pytorch", "jupyterlab", "ipywidgets", "pandas", "matplotlib", "nbval"):
        assert must in conda


def test_torch_is_never_unpinned_in_install_commands():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_PIN ?= torch==2.13.0" in makefile
    for line in makefile.splitlines():
        if "pip install" in line and "-e" in line:
            assert "$(TORCH_PIN)" in line, line
