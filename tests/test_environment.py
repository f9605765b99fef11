"""environment.yml (conda) stays in step with pyproject.toml (pip) and the lock (locks/)."""

import pathlib
import re

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONDA_NAMES = {"torch": "pytorch"}


def _split(req: str) -> tuple[str, str]:
    req = req.split(";")[0].strip()
    name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0)
    return name.lower().replace("-", "_"), req[len(name) :].replace(" ", "")


def _locked() -> dict[str, str]:
    text = (ROOT / "locks" / "linux-x86_64-py3.11.txt").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", text, re.MULTILINE)
    return {n.lower().replace("-", "_"): v for n, v in pins}


def test_every_dependency_is_in_environment_yml_at_the_locked_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {}
    for dep in env["dependencies"]:
        if isinstance(dep, str):
            name, spec = _split(dep)
            conda[name] = spec
    locked = _locked()
    names = [
        _split(r)[0]
        for r in project["dependencies"] + project["optional-dependencies"]["test"]
    ]
    for name in names:
        if name == "triton":  # Linux-only: comes from PyPI through `pip: -e .[test]`
            continue
        cname = CONDA_NAMES.get(name, name)
        assert cname in conda, f"{name} missing from environment.yml"
        if name == "torch":
            assert locked[name] == "2.13.0" and conda[cname].startswith("=2.13.0=cpu")
        else:
            assert conda[cname] == f"=={locked[name]}", (
                f"{name}: locked {locked[name]!r} vs environment.yml {conda[cname]!r}"
            )
    pip_section = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    assert any(line.startswith("-e .[test]") for line in pip_section)


def test_torch_is_pinned_to_the_cpu_wheel_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["dependencies"]
    triton = [d for d in project["dependencies"] if d.startswith("triton")]
    assert triton and "sys_platform == 'linux'" in triton[0]


def test_binder_environment_matches_except_the_editable_install():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    binder = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    assert [d for d in env["dependencies"] if isinstance(d, str)] == [
        d for d in binder["dependencies"] if isinstance(d, str)
    ]
    pip = next(d for d in binder["dependencies"] if isinstance(d, dict))["pip"]
    assert not any(
        line.startswith("-e") for line in pip
    )  # repo2docker builds before the repository is copied
    assert pip == [f"triton=={_locked()['triton']}"]
    assert "pip install --no-deps -e ." in (ROOT / "binder" / "postBuild").read_text()
