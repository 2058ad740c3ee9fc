"""What a non-editable install gets (the demo config, the type hints) and what CI runs before the tests."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built as a wheel, once for this module."""
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
            str(ROOT),
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


def test_ci_lints_and_type_checks_before_the_tests():
    commands = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    order = [commands.index(command) for command in ("ruff check .", "ruff format --check .", "mypy", "pytest")]
    assert order == sorted(order)
