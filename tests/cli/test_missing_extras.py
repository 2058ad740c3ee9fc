"""A command whose extra is not installed ends with one line naming the extra, and exit code 2.

`pip install "retrieval[serve]"` has no torch: `train`, `evaluate`, `embed`, `export` and a
checkpoint's `index build` must say to install `retrieval[train]`, not print a traceback. A missing
package is simulated by `sys.modules[name] = None` in a fresh interpreter (an import of it then
raises `ModuleNotFoundError`), never by uninstalling it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # every test starts a fresh interpreter

ROOT = Path(__file__).resolve().parents[2]
TRAINING = "torch,torchvision,timm,pytorch_metric_learning,sklearn,scipy,matplotlib,safetensors"
SERVING = "fastapi,starlette,uvicorn,multipart,python_multipart"
_RUN_WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from retrieval.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _run_without(blocked: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RETRIEVAL_DEBUG", None)
    command = [sys.executable, "-c", _RUN_WITHOUT, blocked, *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ["train"],
        ["evaluate", "--checkpoint", "best.pt"],
        ["evaluate", "--backbone", "resnet10t"],
        ["embed", "--checkpoint", "best.pt", "--images", "images", "--out", "embeddings.npy"],
        ["export", "--checkpoint", "best.pt", "--format", "onnx", "--out", "onnx"],
        ["index", "build", "--checkpoint", "best.pt", "--images", "images", "--out", "index"],
    ],
    ids=" ".join,
)
def test_a_command_that_needs_torch_without_it_names_the_train_extra(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "best.pt").write_bytes(b"not read: torch is missing first")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"listed before torch loads, never read")
    done = _run_without(TRAINING, args, tmp_path)
    command = " ".join(["retrieval", *args[: 2 if args[0] == "index" else 1]])
    expected = f"error: {command} needs the training dependencies: pip install 'retrieval[train]'"
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, expected), done.stderr
    assert "Traceback" not in done.stderr


def test_an_index_from_embedding_files_builds_without_the_training_dependencies(tmp_path: Path) -> None:
    """No model is involved: the `[serve]` install builds it."""
    np.save(tmp_path / "rows.npy", np.random.default_rng(0).random((50, 8), dtype=np.float32))
    done = _run_without(TRAINING, ["index", "build", "--embeddings", "rows.npy", "--out", "index"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "vectors: 50" in done.stdout and (tmp_path / "index" / "manifest.json").is_file()


def test_serve_without_the_web_stack_names_the_serve_extra(tmp_path: Path) -> None:
    done = _run_without(SERVING, ["serve", "--index", str(tmp_path)], tmp_path)
    expected = "error: retrieval serve needs the serving dependencies: pip install 'retrieval[serve]'"
    assert (done.returncode, done.stderr.strip().splitlines()) == (2, [expected])


def test_a_missing_package_no_extra_provides_is_not_hidden(tmp_path: Path) -> None:
    """Only the extras' packages become the one-line message: a base dependency missing is a broken install."""
    done = _run_without("faiss", ["index", "query", "--index", str(tmp_path), "--image", "x.png"], tmp_path)
    assert done.returncode == 1
    assert "ModuleNotFoundError: import of faiss halted" in done.stderr
