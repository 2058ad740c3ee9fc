"""What a non-editable install gets (the demo config, the type hints, its dependencies) and what CI runs."""

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built as a wheel, once for this module, from a copy of what it packages: a build writes
    `build/` and `retrieval.egg-info/` beside its sources, and two pytest-xdist workers would write them at once."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "retrieval", source / "retrieval", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("retrieval-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_ships_the_demo_config(wheel):
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("retrieval/resources/digits_demo.yaml").decode()
    assert shipped == (ROOT / "configs" / "digits_demo.yaml").read_text()


@pytest.mark.slow
def test_the_wheel_ships_the_py_typed_marker(wheel):
    """PEP 561: without `py.typed`, a user's type checker ignores the package's annotations."""
    with zipfile.ZipFile(wheel) as archive:
        assert "retrieval/py.typed" in archive.namelist()


def _ci_commands() -> list[str]:
    return [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]


def test_ci_lints_and_type_checks_before_the_tests():
    commands = _ci_commands()
    order = [commands.index(command) for command in ("ruff check .", "ruff format --check .", "mypy", "pytest")]
    assert order == sorted(order)


# The `train` extra's distributions: none of them may be a requirement of the base install.
TRAINING = {"torch", "torchvision", "timm", "pytorch-metric-learning", "scikit-learn", "scipy", "matplotlib"}


def _requirements(wheel: Path) -> dict[str, set[str]]:
    """The wheel's Requires-Dist names by extra ("" for the base install), as pip reads them."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    found: dict[str, set[str]] = {}
    for line in lines:
        if line.startswith("Requires-Dist: "):
            requirement = line.removeprefix("Requires-Dist: ")
            extra = re.search(r"""extra == ["']([\w-]+)["']""", requirement)
            name = re.match(r"[A-Za-z0-9_.-]+(\[[^\]]*\])?", requirement)
            assert name is not None, line
            found.setdefault(extra[1] if extra else "", set()).add(name[0].lower())
    return found


def test_the_base_install_and_the_serve_extra_need_no_torch(wheel):
    """`pip install "retrieval[serve]"` serves an ONNX export: neither it nor the base pulls in the training stack."""
    requirements = _requirements(wheel)
    assert requirements[""] & TRAINING == set()
    assert requirements["serve"] & TRAINING == set()
    assert {"fastapi", "uvicorn", "onnxruntime"} <= requirements["serve"]
    assert TRAINING <= requirements["train"]


def test_the_dev_extra_of_the_readme_install_has_training_and_serving(wheel):
    """`pip install -e ".[dev]"` (README, CONTRIBUTING, CI) must still install all a user needs to train and serve."""
    (self_reference,) = [name for name in _requirements(wheel)["dev"] if name.startswith("retrieval[")]
    assert {"train", "serve", "onnx"} <= set(self_reference.removeprefix("retrieval[").rstrip("]").split(","))


def test_ci_serves_from_a_serve_only_environment_after_the_tests():
    commands = _ci_commands()
    install = commands.index('.venv-serve/bin/python -m pip install -q ".[serve]"')
    check = commands.index("python tools/check_serve_without_torch.py --serve-venv .venv-serve")
    assert commands.index("pytest") < install < check
