"""tools/bench_audit.py scale: the synthetic audit runs the copy check's graph and finds the copies it plants."""

from __future__ import annotations

import csv

import numpy as np
from PIL import Image

from tests.tools.tool_modules import load_tool

bench_audit = load_tool("bench_audit")


def test_the_scale_audit_times_the_copy_check_and_finds_its_planted_copies():
    result = bench_audit._scale_one(2000, 32, 20)
    assert result["leaks_planted"] == 40
    assert result["leaks_found"] == result["planted_copies_found"] == 40
    assert result["exact_copy_graph"]  # 52,000 descriptors: under the exact limit
    assert 0 < result["copy_index_seconds"] + result["copy_graph_seconds"] < result["seconds"]


def test_the_copy_checks_reading_is_timed_on_real_files():
    assert 0 < bench_audit._copy_reading(images=5, side=32) < 1


def _colour_csv(source, images, splits):
    """A dataset CSV of `images` (RGB arrays), the i-th in split `splits[i % len(splits)]`; its rows' text."""
    (source / "images").mkdir(parents=True)
    rows = []
    for i, pixels in enumerate(images):
        split = splits[i % len(splits)]
        Image.fromarray(pixels).save(source / f"images/{i}.png")
        rows.append(f"images/{i}.png,{split}{i % 7},{split}")
    (source / "dataset.csv").write_text("path,label,split\n" + "\n".join(rows) + "\n")
    return rows


def test_faults_are_planted_in_a_csvs_colour_images_with_its_splits_kept(tmp_path):
    rng = np.random.default_rng(0)
    source = tmp_path / "source"
    images = [rng.integers(0, 256, size=(18, 18, 3), dtype=np.uint8) for _ in range(200)]
    rows = _colour_csv(source, images, ("train", "train", "train", "val", "test"))
    truth = bench_audit.plant_csv(tmp_path / "planted", source / "dataset.csv", seed=0)
    with (tmp_path / "planted" / "dataset.csv").open(newline="") as handle:
        planted = {row["path"]: row for row in csv.DictReader(handle)}
    assert (len(truth["copies"]), len(truth["outliers"]), len(truth["flipped"])) == (4, 2, 6)
    assert len(planted) == 206
    assert all(planted[copy["copy"]]["split"] == "test" for copy in truth["copies"])
    assert all(planted[copy["source"]]["split"] == "train" for copy in truth["copies"])
    original = {f"images/{i:05d}.png": row.split(",")[1] for i, row in enumerate(rows)}
    assert all(planted[path]["label"] != original[path] for path in truth["flipped"])
    assert all(planted[path]["label"].startswith("train") for path in truth["flipped"])
    assert sum(planted[path]["label"] != label for path, label in original.items()) == 6
    image = Image.open(tmp_path / "planted" / truth["outliers"][0])
    assert (image.mode, image.size) == ("RGB", (18, 18))


def test_recoloured_non_copies_are_colourful_training_images_turned_in_hue_under_a_new_label(tmp_path):
    rng = np.random.default_rng(0)
    source = tmp_path / "source"
    images = []
    for i in range(100):
        colour = (200, 40, 40) if i % 2 else (128, 128, 128)  # half of them grey: no hue to turn
        images.append(np.full((16, 16, 3), colour, np.uint8))
        images[-1][4:12, 4:12] = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    _colour_csv(source, images, ("train", "train", "val", "test"))
    without = bench_audit.plant_csv(tmp_path / "without", source / "dataset.csv", seed=0)
    truth = bench_audit.plant_csv(tmp_path / "planted", source / "dataset.csv", seed=0, recoloured=0.05)
    assert without["recoloured"] == [] and len(truth["recoloured"]) == 5
    assert {key: truth[key] for key in ("flipped", "copies", "outliers")} == {
        key: without[key] for key in ("flipped", "copies", "outliers")
    }  # the other faults do not move
    with (tmp_path / "planted" / "dataset.csv").open(newline="") as handle:
        planted = {row["path"]: row for row in csv.DictReader(handle)}
    labels = {row["label"] for row in planted.values()}
    for non_copy in truth["recoloured"]:
        row, source_row = planted[non_copy["path"]], planted[non_copy["source"]]
        assert row["split"] == "test" and source_row["split"] == "train"
        assert row["label"] not in labels - {row["label"]}  # an item of its own
        turned = np.asarray(Image.open(tmp_path / "planted" / non_copy["path"]).convert("HSV"), dtype=int)
        original = np.asarray(Image.open(tmp_path / "planted" / non_copy["source"]).convert("HSV"), dtype=int)
        assert original[..., 1].mean() >= 64  # colourful sources only
        assert np.abs(turned[..., 2] - original[..., 2]).max() <= 2  # the same drawing
        assert (np.abs(turned[..., 0] - original[..., 0]) % 256).min() >= 32  # every hue turned
