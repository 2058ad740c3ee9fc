"""`evaluate --exclude-leaks` and `retrieval audit` answer "which test images copy a train/val image" alike.

Both run the copy check (`audit.leaks.copy_leaks`); these tests hold them to the same rows on generated images
with planted copies of every kind, at edge ratios, and hold both to the planted truth at the default.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from retrieval.audit.catalogue import read_catalogue
from retrieval.audit.findings import audit_embeddings
from retrieval.audit.leaks import MAX_RATIO
from retrieval.config import AuditConfig, DataConfig
from retrieval.evaluate.leak_check import copied_test_rows
from tests.audit.conftest import NO_HASH


def _picture(rng: np.random.Generator) -> Image.Image:
    """A smooth random colour picture: distinct from every other at thumbnail size, as photos are."""
    small = Image.fromarray(rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8))
    return small.resize((48, 48), Image.Resampling.BICUBIC)


def _jpeg(image: Image.Image) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=60)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


_COPIES = {  # how a planted test image is made from its source
    "jpeg": _jpeg,
    "resized": lambda image: image.resize((34, 34)).resize((48, 48)),
    "cropped": lambda image: image.crop((3, 2, 47, 46)).resize((48, 48)),
    "recoloured": lambda image: ImageEnhance.Color(ImageEnhance.Brightness(image).enhance(1.15)).enhance(0.8),
}


def _planted_dataset(folder: Path, seed: int = 0) -> tuple[Path, set[str]]:
    """6 classes x (8 train, 2 val, 4 test) pictures; 7 test rows that copy a train or val image (each kind of copy,
    a byte-identical file, a copy of a val image), a test row copying another test row (no leak: same split), and
    an unreadable test file. Returns the CSV and the planted leaks' paths."""
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True)
    rows: list[tuple[str, int, str]] = []
    for label in range(6):
        for split, count in (("train", 8), ("val", 2), ("test", 4)):
            for n in range(count):
                name = f"images/{split}_{label}_{n}.png"
                _picture(rng).save(folder / name)
                rows.append((name, label, split))
    leaks = set()
    for number, (kind, make) in enumerate(_COPIES.items()):
        name = f"images/leak_{kind}.png"
        make(Image.open(folder / f"images/train_{number}_3.png").convert("RGB")).save(folder / name)
        rows.append((name, number, "test"))
        leaks.add(name)
    (folder / "images/leak_identical.png").write_bytes((folder / "images/train_5_0.png").read_bytes())
    _jpeg(Image.open(folder / "images/val_4_1.png").convert("RGB")).save(folder / "images/leak_of_val.png")
    _jpeg(Image.open(folder / "images/test_2_0.png").convert("RGB")).save(folder / "images/copy_within_test.png")
    (folder / "images/unreadable.png").write_bytes(b"not an image")
    rows += [("images/leak_identical.png", 5, "test"), ("images/leak_of_val.png", 4, "test")]
    rows += [("images/copy_within_test.png", 2, "test"), ("images/unreadable.png", 1, "test")]
    leaks |= {"images/leak_identical.png", "images/leak_of_val.png"}
    path = folder / "dataset.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "split"])
        writer.writerows(rows)
    return path, {str(folder / name) for name in leaks}


def _evaluate_leaks(dataset: Path, ratio: float) -> set[str]:
    """The test images `retrieval evaluate --exclude-leaks --leak-ratio` leaves out."""
    flagged = copied_test_rows(DataConfig(name="csv", path=str(dataset)), ratio)
    assert flagged is not None
    with dataset.open(newline="") as handle:
        test = [row["path"] for row in csv.DictReader(handle) if row["split"] == "test"]
    return {str(dataset.parent / name) for name, leaked in zip(test, flagged, strict=True) if leaked}


def _audit_leaks(dataset: Path, ratio: float) -> set[str]:
    """The test images `retrieval audit` lists as leaks (embeddings do not decide leaks: random ones will do)."""
    catalogue = read_catalogue(dataset)
    embeddings = np.random.default_rng(0).normal(size=(len(catalogue), 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    findings = audit_embeddings(embeddings, catalogue, AuditConfig(leak_ratio=ratio, checks=NO_HASH), False)
    assert findings.leaks is not None and catalogue.splits is not None
    test = np.array([split == "test" for split in catalogue.splits])
    return {str(catalogue.paths[row]) for row in np.flatnonzero(findings.leaks.leaked & test)}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    return _planted_dataset(tmp_path_factory.mktemp("leaks"))


def test_both_commands_flag_exactly_the_planted_leaks_at_the_default_ratio(planted):
    dataset, leaks = planted
    assert _evaluate_leaks(dataset, MAX_RATIO) == leaks
    assert _audit_leaks(dataset, MAX_RATIO) == leaks


@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.3, 0.7, 0.99])
def test_both_commands_flag_the_same_test_images_at_any_ratio(planted, ratio):
    dataset, _ = planted
    assert _evaluate_leaks(dataset, ratio) == _audit_leaks(dataset, ratio)


def test_more_generous_ratios_flag_more_and_zero_flags_none(planted):
    dataset, leaks = planted
    assert _evaluate_leaks(dataset, 0.0) == set()
    assert leaks <= _evaluate_leaks(dataset, 0.99)


def test_a_test_image_identical_to_two_training_images_is_left_out(tmp_path):
    """Issue 49 #3: with a second identical train file, the identical test image was no leak to either command
    (its ratio to the second partner is 1), so `--exclude-leaks` kept it and Recall@K stayed inflated."""
    dataset, leaks = _planted_dataset(tmp_path)
    images = dataset.parent / "images"
    (images / "train_5_0_twin.png").write_bytes((images / "train_5_0.png").read_bytes())
    with dataset.open("a", newline="") as handle:
        csv.writer(handle).writerow(["images/train_5_0_twin.png", 5, "train"])
    assert str(images / "leak_identical.png") in leaks
    assert _evaluate_leaks(dataset, MAX_RATIO) == leaks
    assert _audit_leaks(dataset, MAX_RATIO) == leaks
