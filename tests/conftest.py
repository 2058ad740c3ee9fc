"""Shared fixtures: small image datasets written to a temp dir in the generic CSV format."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

# Under pytest-xdist (`-n auto`: a worker a core) every worker runs on one thread. torch and FAISS would each
# start a thread a core in every worker: on 2 cores, 2 workers x 2 threads spin against each other, and torch
# on 2 threads is only ~1.2x faster than on 1 anyway. Set before NumPy, torch or FAISS loads its thread pool.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

import numpy as np
import pytest
import yaml
from PIL import Image

import tests.properties  # noqa: F401  # registers the Hypothesis profiles before the plugin loads one


@pytest.fixture(autouse=True)
def one_thread_a_worker() -> None:
    """Under xdist, torch and FAISS back on one thread before each test: `retrieval train` sets a run's
    `train.threads` (the digits demo's 2) for the whole process, which would leave the worker on 2 for the
    tests after it. Only modules already imported are touched: importing torch here would slow the rest."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch, faiss = sys.modules.get("torch"), sys.modules.get("faiss")
        if torch is not None and torch.get_num_threads() != 1:
            torch.set_num_threads(1)
        if faiss is not None and faiss.omp_get_max_threads() != 1:
            faiss.omp_set_num_threads(1)


# timm's own test ResNet (0.37M parameters, 96 features): a real ResNet, 3x faster than resnet10t at 16 px, with
# checkpoints 13x smaller, for the tests that need a network, not a good one (the demos train the real ResNet-18).
TINY_BACKBONE = "test_resnet"


def write_csv_dataset(root: Path, train_classes: int = 4, test_classes: int = 3, per_class: int = 4) -> Path:
    """Class c is a noisy image of one flat colour; train and test classes are disjoint (zero-shot)."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for split, classes in (("train", range(train_classes)), ("test", range(100, 100 + test_classes))):
        for label in classes:
            colour = rng.integers(0, 256, size=3)
            for i in range(per_class):
                pixels = np.clip(colour + rng.normal(0, 20, size=(40, 40, 3)), 0, 255).astype(np.uint8)
                name = f"images/{split}_{label}_{i}.png"
                Image.fromarray(pixels).save(root / name)
                rows.append({"path": name, "label": f"class{label}" if label % 2 else str(label), "split": split})
    path = root / "dataset.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_csv_config(tmp_path: Path, csv_path: Path, loss: dict | None = None) -> Path:
    """`tmp_path/config.yaml`: a 16-d `TINY_BACKBONE` trained 1 epoch on `csv_path` at 32 px on the CPU, with `loss`,
    without plots."""
    config = {
        "model": {"backbone": TINY_BACKBONE, "embedding_dim": 16, "pretrained": False},
        "data": {"name": "csv", "path": str(csv_path), "image_size": 32, "batch_size": 8, "num_workers": 0},
        "loss": loss or {"name": "proxy_nca"},
        "train": {"epochs": 1, "freeze_backbone_epochs": 0, "freeze_bn": False, "device": "cpu", "plots": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def csv_dataset(tmp_path: Path) -> Path:
    return write_csv_dataset(tmp_path / "data")


def add_train_copy_as_test(csv_dataset: Path, name: str, label: int) -> Path:
    """`csv_dataset` plus a byte copy of its first train image listed as a test image `name` of class `label`."""
    import shutil

    images = csv_dataset.parent / "images"
    shutil.copy(images / "train_0_0.png", images / name)
    with csv_dataset.open("a") as handle:
        handle.write(f"images/{name},{label},test\n")
    return csv_dataset


def write_tiny_checkpoint(
    path: Path, seed: int = 0, image_size: int = 32, eval_mode: str | None = None, **model_options
) -> Path:
    """A `retrieval train`-style checkpoint of an untrained `TINY_BACKBONE` embedder (16-d, 32 px): fast to embed with.

    `eval_mode` replaces the config's `augment.eval_mode` (e.g. `center_crop`, the photo recipe's);
    `model_options` are further `ModelConfig` fields, e.g. `flip_average=True`.
    """
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.config import Config, ModelConfig, config_to_dict
    from retrieval.models import Embedder

    torch.manual_seed(seed)
    model_config = ModelConfig(backbone=TINY_BACKBONE, embedding_dim=16, pretrained=False, **model_options)
    config = Config(model=model_config)
    config.data.image_size = image_size
    if eval_mode is not None:
        config.augment.eval_mode = eval_mode
    model = Embedder(**model_config.model_dump())
    Checkpoint(model.state_dict(), model_config, config_to_dict(config), num_classes=0).save(path)
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("checkpoint") / "best.pt")


@pytest.fixture(scope="session")
def other_checkpoint(tmp_path_factory) -> Path:
    """Same architecture as `tiny_checkpoint`, other weights: a checkpoint an index must refuse."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("checkpoint") / "other.pt", seed=1)


@pytest.fixture(scope="session")
def checkpoint_factory():
    """`write_tiny_checkpoint`, for tests that need a checkpoint with other model options."""
    return write_tiny_checkpoint


@pytest.fixture(scope="session")
def csv_dataset_factory():
    """`write_csv_dataset` for fixtures of wider scope (conftest modules are not importable by name)."""
    return write_csv_dataset


# The digits demo shrunk to seconds, on the worker's one thread (the demo's own `train.threads`, 2, would take the
# other xdist worker's core too), without plots (a run's figures cost more than its epochs; the tests of the
# figures set train.plots=true). Tests add their epochs, batch size or data.
TINY_DIGITS = (
    f"model.backbone={TINY_BACKBONE}",
    "model.embedding_dim=16",
    "data.image_size=16",
    "train.threads=1",
    "train.plots=false",
)


@pytest.fixture(scope="session")
def one_epoch_digits_run(tmp_path_factory) -> tuple[Path, str]:
    """A finished one-epoch training run of `TINY_DIGITS` in batches of 128 (5 an epoch) and the lines it said as
    it ended (the run directory, the result, the test metrics: what `retrieval train` prints after its progress).

    Trained once for the session, through the library (`tests/train/training.py`): the modules that resume or
    inspect this same run share it, and a test that resumes or damages it works on a copy (`shutil.copytree`).
    """
    from tests.train.training import train

    tiny = [*TINY_DIGITS, "data.batch_size=128"]
    run = tmp_path_factory.mktemp("one_epoch_digits") / "run"
    _, said = train([*tiny, "train.epochs=1"], run)
    return run, said


@pytest.fixture(scope="session")
def parts_dataset(tmp_path_factory) -> Path:
    """42 images of 40 px in a CSV, the one at row 9 unreadable: 6 parts of 8 images for `embed --out DIR/`."""
    csv_path = write_csv_dataset(tmp_path_factory.mktemp("parts_data"), train_classes=4, test_classes=3, per_class=6)
    (csv_path.parent / "images/train_1_3.png").write_bytes(b"not an image")  # row 9, in part 1
    return csv_path


@pytest.fixture(scope="session")
def single_process_parts(tmp_path_factory, tiny_checkpoint, parts_dataset) -> Path:
    """`parts_dataset` embedded by `tiny_checkpoint` in parts of 8 in one process: what every other run must equal."""
    from retrieval.inference.embed_run import EmbedRequest, run_embed

    out = tmp_path_factory.mktemp("single") / "parts"
    request = EmbedRequest(
        tiny_checkpoint, f"{out}/", csv=parts_dataset, part_rows=8, batch_size=5, num_workers=0, device="cpu"
    )
    run_embed(request)
    return out


# The tiny demo of `tests/cli/test_cli.py` and the resume tests: `TINY_BACKBONE`, 32-d, 16 px, 2 epochs of the digits
# demo, on the demo's own 2 threads (test_cli checks that a run's train.threads holds).
TINY_DEMO = (f"model.backbone={TINY_BACKBONE}", "model.embedding_dim=32", "data.image_size=16", "train.epochs=2")


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory) -> tuple[Path, str]:
    """The run directory of a training run with `TINY_DEMO` and the lines it said as it ended (what `retrieval
    train` prints after its progress), trained once for the session through the library (`tests/train/training.py`).

    Its tests only read the finished run (files, printed lines, checkpoints), or compare a resumed run with it:
    training it once per test would pay the same deterministic run twice.
    """
    from tests.train.training import train

    run = tmp_path_factory.mktemp("tiny_demo") / "run"
    _, said = train(TINY_DEMO, run)
    return run, said


TINY_RERANKER_SETTINGS = (
    "data.val_fraction=0.34",
    "data.num_workers=0",
    "reranker.mine_depth=4",
    "reranker.epochs=1",
    "reranker.batch_size=16",
    "reranker.width=16",
    "reranker.depths=[2,4]",
    "reranker.weights=[0,0.5,1]",
)


@pytest.fixture(scope="session")
def tiny_reranker(tmp_path_factory) -> tuple[Path, Path, Path, str]:
    """A re-ranker (`retrieval reranker`, its default pairs and base) of `write_tiny_checkpoint` on a CSV dataset (6
    training classes of 6 images, a third held out for validation): `(checkpoint, dataset csv, re-ranker dir, the
    lines the command prints)`.

    Trained once a session, through the library (`train_reranker`), with the test images' bytes replaced by garbage
    meanwhile: a re-ranker that read one would fail ("cannot read image").
    """
    from retrieval.reranker.build import RerankerRequest, train_reranker

    root = tmp_path_factory.mktemp("reranker")
    dataset = write_csv_dataset(root / "data", train_classes=6, test_classes=3, per_class=6)
    checkpoint = write_tiny_checkpoint(root / "best.pt")
    test_images = {path: path.read_bytes() for path in (root / "data" / "images").glob("test_*")}
    for path in test_images:
        path.write_bytes(b"not an image")
    overrides = (f"data.path={dataset}", *TINY_RERANKER_SETTINGS)
    try:
        report = train_reranker(RerankerRequest(checkpoint, root / "reranker", overrides=overrides))
    finally:
        for path, content in test_images.items():
            path.write_bytes(content)
    return checkpoint, dataset, root / "reranker", report.text() + "\n"


@pytest.fixture(scope="session")
def tiny_reranker_indexes(tmp_path_factory, tiny_reranker, other_checkpoint) -> tuple[Path, Path, Path]:
    """`(index, re-ranker, other index)` for `index query` and `serve` with `tiny_reranker`: flat indexes of its
    dataset by its checkpoint and by `other_checkpoint`, and a copy of it forced to apply (N=4, w=0.5), whatever
    validation chose, so that the pair model's path runs."""
    import json
    import shutil

    from retrieval.export.encoder_choice import EncoderChoice
    from retrieval.export.index_build import IndexBuildRequest, build_index

    checkpoint, dataset, directory, _ = tiny_reranker
    root = tmp_path_factory.mktemp("reranker_indexes")
    for name, model in (("index", checkpoint), ("other", other_checkpoint)):
        encoder = EncoderChoice(checkpoint=model, device="cpu")  # what `index build --type flat` runs
        build_index(IndexBuildRequest(root / name, encoder, csv=dataset, kind="flat"))
    forced = root / "applied"
    shutil.copytree(directory, forced)
    manifest = json.loads((forced / "manifest.json").read_text())
    manifest.update(depth=4, weight=0.5, base=None)  # over the plain index's own search
    (forced / "manifest.json").write_text(json.dumps(manifest))
    return root / "index", forced, root / "other"


@pytest.fixture(scope="session")
def tiny_reranker_over_dba(tmp_path_factory, tiny_reranker, tiny_reranker_indexes) -> tuple[Path, Path]:
    """`(index, re-ranker)`: a flat index of `tiny_reranker`'s dataset storing `dba:k=2,alpha=0` vectors, and the
    forced copy of the re-ranker (N=4, w=0.5) recorded as chosen over that same augmentation (`reranker.base`)."""
    import json
    import shutil

    from retrieval.export.encoder_choice import EncoderChoice
    from retrieval.export.index_build import IndexBuildRequest, build_index

    checkpoint, dataset, _, _ = tiny_reranker
    root = tmp_path_factory.mktemp("reranker_over_dba")
    encoder = EncoderChoice(checkpoint=checkpoint, device="cpu")
    build_index(IndexBuildRequest(root / "index", encoder, csv=dataset, kind="flat", rerank="dba:k=2,alpha=0"))
    forced = root / "reranker"
    shutil.copytree(tiny_reranker_indexes[1], forced)
    manifest = json.loads((forced / "manifest.json").read_text())
    manifest.update(base="dba:k=2,alpha=0")
    (forced / "manifest.json").write_text(json.dumps(manifest))
    return root / "index", forced


# The export tests' digits images, checkpoint and ONNX export, shared with the command's tests of exports in
# tests/cli (session-scoped here so that one worker makes them once).
@pytest.fixture(scope="session")
def digits_images(tmp_path_factory) -> list[Path]:
    """The 899 digits test images (`tests/export/digits.py`)."""
    from tests.export.digits import digit_files

    return digit_files(tmp_path_factory.mktemp("digits"), "test")


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory, checkpoint_factory) -> Path:
    """`spread_digits_checkpoint`: the tiny untrained `TINY_BACKBONE`, its statistics set on digits training images."""
    from tests.export.digits import spread_digits_checkpoint

    return spread_digits_checkpoint(tmp_path_factory.mktemp("digits_checkpoint"), checkpoint_factory)


@pytest.fixture(scope="session")
def exported(tmp_path_factory, digits_checkpoint) -> Path:
    """The ONNX export of `digits_checkpoint` (`TINY_BACKBONE`, 16-d, 32 px RGB), made by `export_checkpoint` as
    `retrieval export --format onnx` makes it. (tests/vectordb has an `exported` of its own.)"""
    from retrieval.export.onnx_export import export_checkpoint

    out = tmp_path_factory.mktemp("export") / "digits"
    export_checkpoint(digits_checkpoint, out)
    return out


@pytest.fixture(scope="module")
def digits_gallery(tmp_path_factory, digits_images) -> Path:
    """60 digits test images, 6 per label, in one folder per label."""
    import shutil

    folder = tmp_path_factory.mktemp("digits_gallery")
    for path in digits_images[::15]:
        (folder / path.parent.name).mkdir(exist_ok=True)
        shutil.copy(path, folder / path.parent.name / path.name)
    return folder


@pytest.fixture(scope="module")
def onnx_index(tmp_path_factory, exported, digits_gallery) -> Path:
    """A flat index of `digits_gallery` by `exported` (module scope: a module's tests may add to it)."""
    from tests.export.digits import flat_onnx_index

    return flat_onnx_index(tmp_path_factory.mktemp("onnx_index") / "index", exported, digits_gallery)


@pytest.fixture(scope="module")
def ten_digits(tmp_path_factory, digits_images) -> Path:
    """Ten digits test images in one folder."""
    import shutil

    folder = tmp_path_factory.mktemp("ten_digits")
    for path in digits_images[::90]:
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="session")
def gallery(tmp_path_factory, tiny_checkpoint, csv_dataset_factory):
    """The served gallery (an index of `tiny_checkpoint`) of tests/serve and of `serve`'s command tests."""
    from tests.serve.serving import make_gallery

    return make_gallery(tmp_path_factory.mktemp("gallery"), tiny_checkpoint, csv_dataset_factory)
