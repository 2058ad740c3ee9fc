"""`--help`, `--version` and mistakes in the arguments answer at once: none of the heavy libraries is imported first.

Each command imports its library (torch, timm, FAISS, the web stack) when it runs, not when the parser
is built. Every check runs `python -m retrieval ...` as a new interpreter would (a fork of one that has
imported only what `python -m retrieval` imports before it parses: `command_runner.py`), so modules other
tests imported cannot hide an import.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.command_runner import CommandRunner

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

HEAVY = (
    "torch",
    "timm",
    "torchvision",
    "faiss",
    "fastapi",
    "uvicorn",
    "onnxruntime",
    "sklearn",
    "matplotlib",
    "pyarrow",
)
COMMANDS = ("train", "pretrain", "evaluate", "embed", "export", "sweep", "compare", "data", "index", "serve", "audit")
INDEX_ACTIONS = ("build", "query", "add", "remove", "compact", "eval", "export", "train", "merge")
# A bound that cannot flake on a loaded machine: the heavy imports alone take several seconds of CPU.
CPU_SECONDS = 2.0


@pytest.fixture(scope="module")
def run_command() -> Iterator[CommandRunner]:
    """`run_command(ARGS, cwd)`: what `python -m retrieval ARGS` does in a new interpreter (`command_runner.py`)."""
    runner = CommandRunner()
    assert sorted(runner.server_modules & set(HEAVY)) == []  # each case starts without them
    yield runner
    runner.close()


@pytest.mark.parametrize(
    "args",
    [["--version"], ["--help"]]
    + [[command, "--help"] for command in COMMANDS]
    + [["index", action, "--help"] for action in INDEX_ACTIONS],
    ids=" ".join,
)
def test_help_and_version_import_no_heavy_library(args: list[str], run_command: CommandRunner) -> None:
    done = run_command(args)
    names = done.modules
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()  # it did answer
    assert sorted(names & set(HEAVY)) == []


def test_help_takes_little_cpu() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    script = (
        "import resource, subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'retrieval', '--help'], check=True, capture_output=True)\n"
        "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(usage.ru_utime + usage.ru_stime)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < CPU_SECONDS


def test_a_bad_argument_is_refused_before_any_heavy_import(run_command: CommandRunner) -> None:
    done = run_command(["index", "build", "--type", "nonsense", "--out", "x"])
    names = done.modules
    assert done.returncode == 2
    assert "invalid choice: 'nonsense'" in done.stderr
    assert sorted(names & set(HEAVY)) == []


# Issue 48's list of mistakes, each with its one-line error: `mistake_folder` makes the files they name, and
# `tools/mistake_timings.py` times them (before and after the checks moved ahead of PyTorch).
MISTAKES: list[tuple[list[str], str]] = [
    (["train", "--config", "missing.yaml"], "config file not found: missing.yaml"),
    (["train", "--set", "train.epochs"], "--set expects section.key=value"),
    (["train", "--set", "trian.epochs=3"], "unknown config section(s) ['trian']"),
    (["train", "--set", "model.backbon=resnet18"], "did you mean model.backbone?"),
    (["train", "--set", "train.epochs=0"], "train.epochs must be an integer >= 1"),
    (["train", "--resume", "missing-run"], "checkpoint not found: missing-run"),
    (["evaluate", "--checkpoint", "missing.pt"], "checkpoint not found: missing.pt"),
    (["evaluate", "--backbone", "resnet18", "--set", "data.batch_size=1"], "data.batch_size must be"),
    (["index", "query", "--index", "missing-index", "--image", "x.png"], "index directory not found"),
    # What the paths and the files' headers tell (issue 48's list): answered before PyTorch too.
    (["train", "--set", "data.name=csv", "--set", "data.path=missing.csv"], "dataset CSV not found: missing.csv"),
    (["train", "--set", "data.name=csv", "--set", "data.path=nosplit.csv"], "nosplit.csv lacks column(s) split"),
    (["train", "--set", "loss.name=anchr"], "unknown loss.name 'anchr'"),
    # Sections train does not read itself are still its config's, checked as early.
    (["train", "--set", "reranker.pairs_from=nope"], "reranker.pairs_from"),
    (["train", "--set", "reranker.mine_depth=0"], "reranker.mine_depth"),
    (["train", "--set", "audit.k=0"], "audit.k"),
    (["train", "--set", "reranker.base=dba:k=0"], "reranker.base"),
    (["pretrain", "--images", "missing", "--output-dir", "o"], "image folder not found: missing"),
    (["pretrain", "--images", "empty", "--output-dir", "o"], "no images to index in empty"),
    (["pretrain", "--images", "notimages", "--output-dir", "o"], "no images to index in notimages"),
    (["pretrain", "--csv", "train.csv", "--split", "val", "--output-dir", "o"], "(split=val)"),
    (["pretrain", "--resume", "notarun", "--output-dir", "o"], "no pretraining checkpoint at notarun"),
    (["pretrain", "--images", "notimages", "--set", "pretrain.epochs=0", "--output-dir", "o"], "pretrain.epochs"),
    (["audit", "--checkpoint", "missing.pt", "--csv", "train.csv", "--out", "r"], "checkpoint not found"),
    (["audit", "--checkpoint", "missing.pt", "--csv", "missing.csv", "--out", "r"], "CSV not found: missing.csv"),
    (["audit", "--csv", "train.csv", "--out", "r"], "--csv needs --checkpoint CKPT or --model EXPORT_DIR"),
    (["index", "build", "--checkpoint", "missing.pt", "--csv", "train.csv", "--out", "i"], "checkpoint not found"),
    (["index", "query", "--index", ".", "--image", "missing.png"], "is not a retrieval index"),
    (["index", "build", "--model", "x", "--csv", "train.csv", "--split", "val", "--out", "i"], "(split=val)"),
    (["embed", "--checkpoint", "missing.pt", "--csv", "train.csv", "--out", "e.npz"], "checkpoint not found"),
    (["embed", "--checkpoint", "missing.pt", "--images", "empty", "--out", "e.npz"], "no images to index in empty"),
    (["export", "--checkpoint", "missing.pt", "--format", "onnx", "--out", "x"], "checkpoint not found"),
    # A re-ranking spec each command reads as its library does: the method, its place (build or query), its values.
    (["evaluate", "--backbone", "resnet18", "--rerank", "rocchio"], "unknown re-ranking method 'rocchio'"),
    (["evaluate", "--backbone", "resnet18", "--rerank", "dba:k=0"], "re-ranking dba: k must be a whole number"),
    (["index", "build", "--checkpoint", "m.pt", "--csv", "train.csv", "--out", "i", "--rerank", "qe"], "qe re-ranks"),
    (["index", "query", "--index", ".", "--image", "x.png", "--rerank", "dba"], "dba re-ranks the stored vectors"),
    (["serve", "--index", ".", "--rerank", "qe:k=two"], "re-ranking qe: k='two' is not a whole number"),
    (
        ["index", "build", "--checkpoint", "best.pt", "--csv", "train.csv", "--out", "i", "--reranker", "nope"],
        "nope does not",
    ),
]


def mistake_folder(folder: Path) -> Path:
    """`folder` with what the mistakes name: an empty folder, one of no images, a CSV without split, a one-row CSV
    and a checkpoint file."""
    (folder / "empty").mkdir()
    (folder / "notimages").mkdir()
    (folder / "notimages" / "notes.txt").write_text("not an image")
    (folder / "nosplit.csv").write_text("path,label\na.png,1\n")
    (folder / "train.csv").write_text("path,label,split\na.png,1,train\n")
    (folder / "best.pt").touch()  # a checkpoint is only looked for before PyTorch loads
    return folder


@pytest.mark.parametrize(
    ("args", "message"), MISTAKES, ids=lambda value: " ".join(value) if isinstance(value, list) else ""
)
def test_a_mistake_in_the_arguments_or_the_config_is_refused_before_pytorch_loads(
    args: list[str], message: str, tmp_path: Path, run_command: CommandRunner
) -> None:
    """The one-line error comes in an instant: no "loading PyTorch" line, no torch or timm imported first."""
    done = run_command(args, cwd=mistake_folder(tmp_path))
    names = done.modules
    errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert (done.returncode, done.stdout) == (2, "")
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], errors
    assert sorted(names & {"torch", "timm", "torchvision"}) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["audit", "--checkpoint", "missing.pt", "--csv", "missing.csv", "--out", "taken"], "taken is a file"),
        (["audit", "--model", "missing", "--csv", "missing.csv", "--out", "taken/report"], "under the file"),
        (["index", "build", "--checkpoint", "missing.pt", "--csv", "x.csv", "--out", "taken"], "--out taken is a file"),
        (["index", "build", "--embeddings", "missing.npy", "--out", "taken"], "--out taken is a file"),
        (["index", "train", "--embeddings", "missing.npy", "--out", "taken"], "--out taken is a file"),
        (["index", "merge", "missing", "--out", "taken"], "--out taken is a file"),
        (
            ["embed", "--checkpoint", "missing.pt", "--csv", "x.csv", "--out", "taken/x.npz"],
            "its folder taken is a file",
        ),
        (["embed", "--checkpoint", "missing.pt", "--csv", "x.csv", "--out", "taken/"], "--out taken/ is a file"),
        (["export", "--checkpoint", "missing.pt", "--format", "onnx", "--out", "taken"], "--out taken is a file"),
        (["data", "longtail", "--csv", "x.csv", "--imbalance", "2", "--out", "taken/x.csv"], "its folder taken is a"),
        (["train", "--output-dir", "taken"], "--output-dir taken is a file"),
        (["pretrain", "--images", "missing", "--output-dir", "taken"], "--output-dir taken is a file"),
        (["sweep", "--grid", "train.lr=0.1", "--output-dir", "taken"], "--output-dir taken is a file"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_an_output_folder_that_a_file_occupies_is_refused_before_pytorch_loads(
    args: list[str], message: str, tmp_path: Path, run_command: CommandRunner
) -> None:
    """Used to be a traceback after the whole run (audit, train, sweep), an error after it (embed, export) or the
    file replaced by an index (index build): now one line at once, and the file is left as it was."""
    (tmp_path / "taken").write_text("mine")
    done = run_command(args, cwd=tmp_path)
    names = done.modules
    errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert (done.returncode, done.stdout) == (2, "")
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], errors
    assert sorted(names & {"torch", "timm", "torchvision"}) == []
    assert (tmp_path / "taken").read_text() == "mine"


def test_a_missing_query_image_of_a_checkpoint_index_is_refused_before_pytorch_loads(
    tmp_path: Path, tiny_checkpoint: Path, csv_dataset_factory, run_command: CommandRunner
) -> None:
    """`index query --image missing.png` of an index built with a checkpoint used to load its model first."""
    from retrieval.cli.main import main

    csv_path = csv_dataset_factory(tmp_path / "data", train_classes=1, test_classes=1, per_class=2)
    build = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path)]
    assert main([*build, "--out", str(tmp_path / "index"), "--type", "flat", "--num-workers", "0"]) == 0
    done = run_command(["index", "query", "--index", "index", "--image", "missing.png"], cwd=tmp_path)
    names = done.modules
    errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert (done.returncode, done.stdout) == (2, "")
    assert errors == [
        "error: query image not found: missing.png; pass image files with --image, or a folder with --images"
    ]
    assert sorted(names & {"torch", "timm", "torchvision"}) == []
