"""The audit measured on planted faults, and its scale: `plant`, `score` and `scale` (docs/audit.md).

`plant` writes a Fashion-MNIST subset (Debian's `dataset-fashion-mnist`) with known faults: 5% of
the training labels flipped to another class, near-copies of 2% as many training images added as
test rows (re-encoded JPEG, resized, a small crop or a colour shift, in turn) and 1% out-of-domain
images (scikit-learn's handwritten digits, upscaled), with `truth.json` naming each; `plant --csv`
plants the same faults in a dataset CSV's images, its splits kept (the colour set: the emoji maker's).

`score` runs the audit pipeline on several embeddings of the planted CSV (a trained checkpoint,
the same architecture untrained, raw pixels) and cleanlab's own default path (`Datalab.find_issues`
on features of the untrained network or on pixels, its own kNN and label model), and reports each
finding's precision at the planted count (= recall there: the top-n by the method's score against
the n planted rows) and the precision and recall of what each method flags by its own rule. Each
finding is scored on the rows not planted as another fault (an out-of-domain image's random label
is not a label error to find).

`scale` times the audit of synthetic clustered embeddings (FAISS kNN graph + cleanlab scoring),
each size in a fresh process for its peak memory.

    python tools/bench_audit.py plant --out /data/audit_fmnist --train 6000 --val 1000 --test 2000
    python tools/bench_audit.py score --csv /data/audit_fmnist/dataset.csv --checkpoint runs/a/checkpoints/best.pt
    python tools/bench_audit.py scale --sizes 10000,100000,1000000
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from make_fashion_mnist import IDX_DIR, read_idx  # noqa: E402

from retrieval.config import AUDIT_CHECKS, AuditConfig  # noqa: E402
from retrieval.runtime.files import write_text  # noqa: E402

__all__ = ["main"]

_NO_HASH = [check for check in AUDIT_CHECKS if check != "exact_duplicates"]  # no file is read twice
_CLASSES = ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")


def _copy_of(image: Image.Image, kind: int, rng: np.random.Generator) -> Image.Image:
    """A near-copy: JPEG re-encoded, resized down to 5/7 and up, a crop of up to 1/9 of the side resized back, or a
    brightness shift."""
    size = image.size
    if kind == 0:
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=int(rng.integers(60, 85)))
        return Image.open(io.BytesIO(buffer.getvalue())).convert(image.mode)
    if kind == 1:
        small = (max(1, size[0] * 5 // 7), max(1, size[1] * 5 // 7))
        return image.resize(small, Image.BILINEAR).resize(size, Image.BILINEAR)
    if kind == 2:
        cut = max(1, size[0] // 9)
        left, top = (int(v) for v in rng.integers(0, cut, size=2))
        return image.crop((left, top, left + size[0] - cut, top + size[1] - cut)).resize(size, Image.BILINEAR)
    pixels = np.asarray(image, dtype=np.float32) * float(rng.uniform(0.8, 0.9)) + float(rng.uniform(10, 25))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _recoloured(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """The same drawing in other colours: every hue turned by a quarter to three quarters of the circle."""
    hue, saturation, value = image.convert("RGB").convert("HSV").split()
    turned = (np.asarray(hue, dtype=np.int64) + int(rng.integers(64, 193))) % 256
    return Image.merge("HSV", (Image.fromarray(turned.astype(np.uint8)), saturation, value)).convert("RGB")


def _colourful(image: Image.Image) -> bool:
    """Whether a hue turn shows: a mean saturation of at least a quarter (a grey drawing stays what it is)."""
    return bool(np.asarray(image.convert("RGB").convert("HSV"), dtype=np.float32)[..., 1].mean() >= 64)


_Source = tuple[Callable[[], Image.Image], str, str, str]  # the image (read when written), label, split, file name


def plant(out: Path, train: int, val: int, test: int, seed: int) -> dict[str, Any]:
    """A Fashion-MNIST subset with planted faults: write images/, dataset.csv and truth.json; return the truth."""
    rng = np.random.default_rng(seed)
    train_images = read_idx(IDX_DIR / "train-images-idx3-ubyte.gz")
    train_labels = read_idx(IDX_DIR / "train-labels-idx1-ubyte.gz")
    test_images = read_idx(IDX_DIR / "t10k-images-idx3-ubyte.gz")
    test_labels = read_idx(IDX_DIR / "t10k-labels-idx1-ubyte.gz")
    chosen = rng.permutation(len(train_images))[: train + val]
    picked_test = rng.permutation(len(test_images))[:test]
    sources: list[_Source] = []
    for number, index in enumerate(chosen):
        split = "train" if number < train else "val"
        image = functools.partial(Image.fromarray, train_images[index])
        sources.append((image, _CLASSES[train_labels[index]], split, f"{split}_{index}"))
    for index in picked_test:
        image = functools.partial(Image.fromarray, test_images[index])
        sources.append((image, _CLASSES[test_labels[index]], "test", f"test_{index}"))
    return _plant_faults(out, sources, list(_CLASSES), rng, seed)


def plant_csv(out: Path, dataset: Path, seed: int, recoloured: float = 0.0) -> dict[str, Any]:
    """The same faults planted in a dataset CSV's images, its splits kept (a colour set: the emoji maker's).

    `recoloured`: a share of the rows added as recoloured non-copies (see `_plant_faults`).
    """
    from retrieval.images import load_image

    with dataset.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    sources: list[_Source] = [
        (functools.partial(load_image, dataset.parent / row["path"], "RGB"), row["label"], row["split"], f"{i:05d}")
        for i, row in enumerate(rows)
    ]
    classes = sorted({source[1] for source in sources if source[2] == "train"})
    return _plant_faults(out, sources, classes, np.random.default_rng(seed), seed, recoloured)


def _plant_faults(
    out: Path, sources: list[_Source], classes: list[str], rng: np.random.Generator, seed: int, recoloured: float = 0.0
) -> dict[str, Any]:
    """Write `sources` with 2% of their count as near-copies of training images added as test rows, 1% out-of-domain
    images (scikit-learn's digits, random labels of `classes` and splits) and 5% of the training labels moved to
    another of `classes`; images/, dataset.csv, truth.json.

    `recoloured`: that share of the count again as recoloured non-copies: colourful training images with every hue
    turned, added as test rows of a new item each (a blue icon and a green one of another name: not a leak).
    """
    from sklearn.datasets import load_digits

    (out / "images").mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str]] = []

    def add(image: Image.Image, label: str, split: str, name: str) -> str:
        path = f"images/{name}.png"
        image.save(out / path)
        rows.append({"path": path, "label": label, "split": split})
        return path

    written = [add(image(), label, split, name) for image, label, split, name in sources]
    train_sources = [i for i, (_, _, split, _) in enumerate(sources) if split == "train"]
    copies = []
    for number, position in enumerate(rng.permutation(len(train_sources))[: round(0.02 * len(sources))]):
        image, label, _, name = sources[train_sources[position]]
        kind = ("jpeg", "resize", "crop", "colour")[number % 4]
        path = add(_copy_of(image(), number % 4, rng), label, "test", f"copy_{name}")
        copies.append({"copy": path, "source": written[train_sources[position]], "kind": kind})
    first = sources[0][0]()
    counts = {split: sum(source[2] == split for source in sources) for split in ("train", "val", "test")}
    share = np.array(list(counts.values()), dtype=np.float64) / len(sources)
    digits = load_digits()
    outliers = []
    for number in range(round(0.01 * len(sources))):
        digit = Image.fromarray((digits.images[number] * 255 / 16).astype(np.uint8)).resize(first.size, Image.BILINEAR)
        split = str(rng.choice(list(counts), p=share))
        label = classes[int(rng.integers(len(classes)))]
        outliers.append(add(digit.convert(first.mode), label, split, f"ood_{number}"))
    flipped = []
    for i in rng.permutation(train_sources)[: round(0.05 * len(train_sources))]:
        label = classes.index(rows[i]["label"])
        rows[i]["label"] = classes[(label + int(rng.integers(1, len(classes)))) % len(classes)]
        flipped.append(rows[i]["path"])
    # Last, so that the other faults are the same with and without them for a seed.
    non_copies: list[dict[str, str]] = []
    for position in rng.permutation(len(train_sources)) if recoloured > 0 else []:
        if len(non_copies) == round(recoloured * len(sources)):
            break
        read, label, _, name = sources[train_sources[position]]
        image = read()  # read once: tested for colour, then turned
        if _colourful(image):
            path = add(_recoloured(image, rng), f"{label} recoloured {len(non_copies)}", "test", f"recoloured_{name}")
            non_copies.append({"path": path, "source": written[train_sources[position]]})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["path", "label", "split"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(out / "dataset.csv", buffer.getvalue())
    truth: dict[str, Any] = {"flipped": flipped, "copies": copies, "outliers": outliers, "recoloured": non_copies}
    truth.update(seed=seed, rows=len(rows))
    write_text(out / "truth.json", json.dumps(truth, indent=1) + "\n")
    return truth


def _unit(features: np.ndarray) -> np.ndarray:
    features = np.asarray(features, dtype=np.float32)
    return features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)


def _pixels(paths: list[Path], mode: str) -> np.ndarray:
    """Raw pixels (`mode`: "L" or "RGB", as the model reads them), centred per dimension, as unit vectors."""
    from retrieval.images import load_image

    pixels = np.stack([np.asarray(load_image(path, mode), dtype=np.float32).ravel() for path in paths])
    return _unit(pixels - pixels.mean(axis=0))


def _network_features(checkpoint: Path, paths: list[Path], trained: bool) -> np.ndarray:
    """Embeddings of the checkpoint's model, or of the same architecture freshly initialised (seed 0)."""
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.inference.image_encoder import ImageEncoder
    from retrieval.models import Embedder
    from retrieval.runtime.device import resolve_device

    if trained:
        encoder = ImageEncoder.from_checkpoint(checkpoint, device="cpu")
    else:
        loaded = Checkpoint.read(checkpoint)
        config = loaded.config()
        torch.manual_seed(0)
        model = Embedder(**loaded.model_config.model_copy(update={"pretrained": False, "weights": None}).model_dump())
        encoder = ImageEncoder(
            model, loaded.model_config, config.data.image_size, config.augment, resolve_device("cpu")
        )
    embedded = encoder.embed_files(paths, batch_size=256, progress=False)
    if embedded.failures:
        raise SystemExit(f"unreadable images: {embedded.failures[:3]}")
    return embedded.embeddings


class _Truth:
    """The planted rows of each fault, and the rows each finding is scored on."""

    def __init__(self, csv_path: Path, truth: dict[str, Any], paths: list[Path]) -> None:
        position = {path.resolve(): i for i, path in enumerate(paths)}

        def rows(names: list[str]) -> np.ndarray:
            return np.array(sorted(position[(csv_path.parent / name).resolve()] for name in names), dtype=np.int64)

        self.flipped = rows(truth["flipped"])
        self.copies = rows([copy["copy"] for copy in truth["copies"]])
        self.outliers = rows(truth["outliers"])
        self.n = len(paths)
        self.part = "scored"
        self.label_splits = ("train", "val", "test")  # rows label errors are scored on (flips are planted in train)

    def validation(self) -> np.ndarray:
        """`(N,)` bool: the half of the rows (seed 1) the rules and defaults were chosen on; the rest is scored."""
        return np.random.default_rng(1).random(self.n) < 0.5

    def candidates(self, finding: str, splits: list[str]) -> np.ndarray:
        others = {"leaks": (self.flipped, self.outliers), "labels": (self.copies, self.outliers)}
        others["outliers"] = (self.flipped, self.copies)
        keep = np.ones(self.n, dtype=bool)
        for planted in others[finding]:
            keep[planted] = False
        if finding == "leaks":
            keep &= np.array([split != "train" for split in splits])
        if finding == "labels":
            keep &= np.array([split in self.label_splits for split in splits])
        keep &= self.validation() if self.part == "validation" else ~self.validation()
        return np.flatnonzero(keep)


def _measure(
    planted: np.ndarray, candidates: np.ndarray, suspicion: np.ndarray, flagged: np.ndarray
) -> dict[str, float]:
    """Precision at the planted count (top-n by suspicion among candidates) and the flagged set's precision/recall."""
    planted = np.intersect1d(planted, candidates)
    n = len(planted)
    order = candidates[np.argsort(-suspicion[candidates], kind="stable")]
    top = set(order[:n].tolist())
    truth = set(planted.tolist())
    chosen = set(candidates[flagged[candidates]].tolist())
    return {
        "at_planted": len(top & truth) / n,
        "flagged": len(chosen),
        "precision": len(chosen & truth) / len(chosen) if chosen else float("nan"),
        "recall": len(chosen & truth) / n,
    }


def _pipeline_row(features: np.ndarray, catalogue: Any, truth: _Truth, threshold: float) -> dict[str, Any]:
    """The audit pipeline (FAISS graph, leaks at the threshold, cleanlab over the graph) on these features."""
    from retrieval.audit.findings import audit_embeddings
    from retrieval.audit.leaks import find_leaks

    started = time.perf_counter()
    settings = AuditConfig(k=10, threshold=threshold, checks=_NO_HASH)
    findings = audit_embeddings(features, catalogue, settings, progress=False)
    scores = findings.scores
    # The same ratio rule over the embedding's own graph: what the embedding alone tells of copies.
    alone = find_leaks(findings.graph, findings.graph.neighbours[:, 0], catalogue.splits, settings.leak_ratio)
    return {
        "leaks": _measure(
            truth.copies, truth.candidates("leaks", catalogue.splits), -findings.leaks.ratio, findings.leaks.leaked
        ),
        "leaks_by_embedding_alone": _measure(
            truth.copies, truth.candidates("leaks", catalogue.splits), -alone.ratio, alone.leaked
        ),
        "labels": _measure(
            truth.flipped, truth.candidates("labels", catalogue.splits), -scores.label_score, scores.is_label_issue
        ),
        "outliers": _measure(
            truth.outliers, truth.candidates("outliers", catalogue.splits), scores.strangeness, scores.is_outlier
        ),
        "seconds": time.perf_counter() - started,
    }


def _cleanlab_row(features: np.ndarray, catalogue: Any, truth: _Truth) -> dict[str, Any]:
    """cleanlab's default path: `Datalab.find_issues(features=...)`, its own kNN graph and kNN label model."""
    import pandas as pd
    from cleanlab import Datalab

    started = time.perf_counter()
    codes, _ = catalogue.label_codes()
    lab = Datalab(data=pd.DataFrame({"label": codes}), label_name="label", verbosity=0)
    lab.find_issues(features=features, issue_types={"label": {}, "outlier": {}, "near_duplicate": {}})
    labels, outliers, duplicates = (lab.get_issues(name) for name in ("label", "outlier", "near_duplicate"))
    order = {"train": 0, "val": 1, "test": 2}
    split_order = np.array([order[split] for split in catalogue.splits])
    crossing = np.array(
        [
            any(split_order[j] < split_order[i] for j in members)
            for i, members in enumerate(duplicates["near_duplicate_sets"])
        ]
    )
    return {
        "leaks": _measure(
            truth.copies,
            truth.candidates("leaks", catalogue.splits),
            -duplicates["near_duplicate_score"].to_numpy(),
            duplicates["is_near_duplicate_issue"].to_numpy() & crossing,
        ),
        "labels": _measure(
            truth.flipped,
            truth.candidates("labels", catalogue.splits),
            -labels["label_score"].to_numpy(),
            labels["is_label_issue"].to_numpy(),
        ),
        "outliers": _measure(
            truth.outliers,
            truth.candidates("outliers", catalogue.splits),
            -outliers["outlier_score"].to_numpy(),
            outliers["is_outlier_issue"].to_numpy(),
        ),
        "seconds": time.perf_counter() - started,
    }


def score(
    csv_path: Path, checkpoint: Path, threshold: float, part: str, saved: Path | None = None, label_rows: str = "all"
) -> dict[str, Any]:
    """Every row of the planted-fault table on one half (`part`: validation or scored); `saved`: cached features.

    `label_rows`: "all", or "train" to score label errors on the training rows only (zero-shot data: a val or
    test class is unseen by the model, so its rows look mislabelled to any kNN label model).
    A cleanlab row that raises is recorded with its error, not dropped.
    """
    import warnings

    from retrieval.audit.catalogue import read_catalogue
    from retrieval.checkpoint import Checkpoint

    warnings.filterwarnings("ignore", module=r"cleanlab\.")
    catalogue = read_catalogue(csv_path)
    truth = _Truth(csv_path, json.loads((csv_path.parent / "truth.json").read_text()), catalogue.paths)
    truth.part = part
    if label_rows == "train":
        truth.label_splits = ("train",)
    if saved is not None and saved.is_file():
        with np.load(saved) as cached:
            features = {name: cached[name] for name in ("trained", "untrained", "pixels")}
    else:
        mode = "RGB" if Checkpoint.read(checkpoint).model_config.in_chans == 3 else "L"
        features = {
            "trained": _network_features(checkpoint, catalogue.paths, trained=True),
            "untrained": _network_features(checkpoint, catalogue.paths, trained=False),
            "pixels": _pixels(catalogue.paths, mode),
        }
        if saved is not None:
            np.savez(saved, **features)
    results = {}
    for name, values in features.items():
        results[f"audit, {name} embedding"] = _pipeline_row(values, catalogue, truth, threshold)
        print(name, json.dumps(results[f"audit, {name} embedding"]), flush=True)
    for name in ("untrained", "pixels"):
        try:
            results[f"cleanlab default, {name} features"] = _cleanlab_row(features[name], catalogue, truth)
        except ValueError as error:  # cleanlab's own failure on these features is a result of the comparison
            results[f"cleanlab default, {name} features"] = {"error": str(error).splitlines()[0]}
        print("cleanlab", name, json.dumps(results[f"cleanlab default, {name} features"]), flush=True)
    return results


def table(results: dict[str, Any]) -> str:
    """The planted-fault table in markdown."""
    lines = [
        "| features and method | leaks P@n | leaks flagged P / R | label errors P@n | label errors flagged P / R "
        "| outliers P@n | outliers flagged P / R | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        if "error" in row:
            lines.append(f"| {name} | failed: {row['error']} |||||||")
            continue
        cells = [name]
        for finding in ("leaks", "labels", "outliers"):
            measured = row[finding]
            cells.append(f"{measured['at_planted']:.3f}")
            cells.append(f"{measured['precision']:.3f} / {measured['recall']:.3f} ({measured['flagged']})")
        cells.append(f"{row['seconds']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _scale_one(n: int, dim: int, classes: int) -> dict[str, Any]:
    """The audit of `n` synthetic clustered unit embeddings with labels (5% flipped) and splits, in this process."""
    from retrieval.audit import leaks
    from retrieval.audit.catalogue import Catalogue
    from retrieval.audit.findings import audit_embeddings
    from retrieval.audit.knn_graph import graph_recall

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    labels = rng.integers(0, classes, size=n)
    embeddings = centres[labels] + rng.normal(scale=0.6, size=(n, dim)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    given = labels.copy()
    flip = rng.random(n) < 0.05
    given[flip] = (given[flip] + 1) % classes
    splits = rng.choice(["train", "val", "test"], size=n, p=[0.8, 0.1, 0.1]).tolist()
    catalogue = Catalogue([Path(f"/synthetic/{i}.png") for i in range(n)], [str(c) for c in given], splits)
    # No image files: the copy check gets synthetic thumbnails of the same count and shape, streamed as images are
    # read (its image reading, linear in N, is timed on real files by `_copy_reading`); its index and graph are timed.
    images, planted = _synthetic_images(splits, rng)
    real_describe, real_index, real_graph = leaks.describe_images, leaks.copy_index, leaks.copy_graph
    timed = {"copy_index": 0.0, "copy_graph": 0.0}
    exact = []

    def timed_index(*args: Any) -> Any:
        start = time.perf_counter()
        index = real_index(*args)
        timed["copy_index"] += time.perf_counter() - start
        exact.append(index.exact)
        return index

    def timed_graph(*args: Any) -> Any:
        start = time.perf_counter()
        graph = real_graph(*args)
        timed["copy_graph"] += time.perf_counter() - start
        return graph

    leaks.describe_images = lambda paths, progress=True: images  # type: ignore[attr-defined]
    leaks.copy_index, leaks.copy_graph = timed_index, timed_graph  # type: ignore[attr-defined]
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    try:
        findings = audit_embeddings(embeddings, catalogue, AuditConfig(k=10, checks=_NO_HASH), progress=False)
    finally:
        leaks.describe_images = real_describe  # type: ignore[attr-defined]
        leaks.copy_index, leaks.copy_graph = real_index, real_graph  # type: ignore[attr-defined]
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    recall = graph_recall(findings.graph, embeddings, sample=500)
    assert findings.leaks is not None
    leaked = findings.leaks.leaked
    return {
        "n": n,
        "seconds": seconds,
        "cpu_seconds": after.ru_utime + after.ru_stime - cpu_before,
        "copy_index_seconds": timed["copy_index"],
        "copy_graph_seconds": timed["copy_graph"],
        "exact_graph": findings.graph.exact,
        "exact_copy_graph": exact == [True],
        "graph_recall@10": recall,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "label_issues": int(findings.scores.is_label_issue.sum()),
        "leaks_found": int(leaked.sum()),
        "planted_copies_found": int(leaked[planted].sum()),
        "leaks_planted": len(planted),
    }


_PER_IMAGE = 26  # descriptors a synthetic image: its thumbnail and 25 crops'
_SYNTHETIC_BLOCK = 1024  # images drawn at once, each block from its own seeds (7 MiB of thumbnails)


def _synthetic_images(splits: list[str], rng: np.random.Generator) -> tuple[Iterator[Any], np.ndarray]:
    """Copy-check descriptors of N made-up images, streamed in row order as `describe_images` streams real ones
    (a whole thumbnail and 25 crop thumbnails near it each), and the rows of the planted copies: 2% of N test rows,
    each the copy of a train row (its thumbnail one of the row's crops, slightly changed)."""
    n = len(splits)
    test, train = np.flatnonzero(np.array(splits) == "test"), np.flatnonzero(np.array(splits) == "train")
    copies = np.sort(rng.choice(test, size=min(len(test), round(0.02 * n)), replace=False))
    sources = rng.choice(train, size=len(copies))
    # The crop each copy is made of, one per (source, crop) pair: two copies of one crop copy the same thumbnail.
    crops, made_of = np.unique(
        sources * _PER_IMAGE + rng.integers(1, _PER_IMAGE, size=len(copies)), return_inverse=True
    )
    seed = int(rng.integers(2**32))
    source_wholes = np.empty((len(crops), 64), dtype=np.float32)
    for start in range(0, n, _SYNTHETIC_BLOCK):  # the sources' thumbnails: their blocks' drawn once more, cheaply
        inside = (crops // _PER_IMAGE >= start) & (crops // _PER_IMAGE < start + _SYNTHETIC_BLOCK)
        source_wholes[inside] = _synthetic_wholes(seed, start, n)[crops[inside] // _PER_IMAGE - start]
    crop_thumbnails = _unit(source_wholes + 0.3 * rng.standard_normal(source_wholes.shape, dtype=np.float32))
    copy_thumbnails = _unit(
        crop_thumbnails[made_of.ravel()] + 0.05 * rng.standard_normal((len(copies), 64), dtype=np.float32)
    )
    return _synthetic_stream(seed, n, (crops, crop_thumbnails), (copies, copy_thumbnails)), copies


def _synthetic_wholes(seed: int, start: int, n: int) -> np.ndarray:
    """The whole thumbnails of the synthetic block of images from row `start`."""
    count = min(_SYNTHETIC_BLOCK, n - start)
    return _unit(np.random.default_rng([seed, start, 0]).standard_normal((count, 64), dtype=np.float32))


def _synthetic_stream(
    seed: int, n: int, crops: tuple[np.ndarray, np.ndarray], copies: tuple[np.ndarray, np.ndarray]
) -> Iterator[Any]:
    """Each synthetic image's `Described`, block by block; `crops` (descriptor numbers, thumbnails) and `copies`
    (rows, whole thumbnails) replace what was drawn."""
    from retrieval.audit.copies import Described, picture_key

    for start in range(0, n, _SYNTHETIC_BLOCK):
        wholes = _synthetic_wholes(seed, start, n)
        noise = np.random.default_rng([seed, start, 1]).standard_normal((len(wholes) * _PER_IMAGE, 64), np.float32)
        block = _unit(np.repeat(wholes, _PER_IMAGE, axis=0) + 0.3 * noise)
        block[::_PER_IMAGE] = wholes
        first, stop = start * _PER_IMAGE, (start + len(wholes)) * _PER_IMAGE
        inside = (crops[0] >= first) & (crops[0] < stop)
        block[crops[0][inside] - first] = crops[1][inside]
        inside = (copies[0] >= start) & (copies[0] < start + len(wholes))
        block[(copies[0][inside] - start) * _PER_IMAGE] = copies[1][inside]
        for image in block.reshape(len(wholes), _PER_IMAGE, 64):
            yield Described(image, picture_key(image[0], lambda: b""))  # never flat: no file key


def _copy_reading(images: int = 500, side: int = 64) -> float:
    """Seconds an image of the copy check's reading (decode, thumbnail, 25 crop thumbnails, stored): PNG files in a
    temp dir."""
    import tempfile

    from retrieval.audit.copies import describe_images
    from retrieval.audit.copy_index import copy_index

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder) / f"{i}.png" for i in range(images)]
        for path in paths:
            Image.fromarray(rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)).save(path)
        started = time.perf_counter()
        copy_index(describe_images(paths, progress=False))
        return (time.perf_counter() - started) / images


def scale(sizes: list[int], dim: int, classes: int) -> list[dict[str, Any]]:
    """`_scale_one` of each size in a fresh interpreter (its own peak memory), after the copy check's reading time."""
    print(json.dumps({"copy_reading_seconds_per_64px_image": _copy_reading()}), flush=True)
    results = []
    for n in sizes:
        code = f"import json, bench_audit as b; print(json.dumps(b._scale_one({n}, {dim}, {classes})))"
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tools", check=False
        )
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            break
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    planting = commands.add_parser("plant", help="write a Fashion-MNIST subset (or --csv's images) with planted faults")
    planting.add_argument("--out", type=Path, required=True)
    planting.add_argument(
        "--csv", type=Path, help="plant into this dataset's images, its splits kept (--train etc. unused)"
    )
    planting.add_argument("--train", type=int, default=6000)
    planting.add_argument("--val", type=int, default=1000)
    planting.add_argument("--test", type=int, default=2000)
    planting.add_argument("--seed", type=int, default=0)
    planting.add_argument(
        "--recoloured", type=float, default=0.0, help="with --csv: this share of the rows as recoloured non-copies"
    )
    scoring = commands.add_parser("score", help="the planted-fault table")
    scoring.add_argument("--csv", type=Path, required=True)
    scoring.add_argument("--checkpoint", type=Path, required=True)
    scoring.add_argument("--threshold", type=float, default=0.95)
    scoring.add_argument("--json", type=Path)
    scoring.add_argument("--part", choices=("validation", "scored"), default="scored", help="half of the rows to score")
    scoring.add_argument(
        "--label-rows",
        choices=("all", "train"),
        default="all",
        help="rows scoring label errors (zero-shot: train)",
    )
    scoring.add_argument(
        "--features", type=Path, help="an .npz of the three feature sets: read if present, else written"
    )
    scaling = commands.add_parser("scale", help="time and peak memory of the audit of synthetic embeddings")
    scaling.add_argument("--sizes", default="10000,100000,1000000")
    scaling.add_argument("--dim", type=int, default=128)
    scaling.add_argument("--classes", type=int, default=100)
    scaling.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.command == "scale":
        measured = scale([int(size) for size in args.sizes.split(",")], args.dim, args.classes)
        if args.json:
            write_text(args.json, json.dumps(measured, indent=1) + "\n")
    if args.command == "score":
        results = score(args.csv, args.checkpoint, args.threshold, args.part, args.features, args.label_rows)
        if args.json:
            write_text(args.json, json.dumps(results, indent=1) + "\n")
        print(table(results))
    if args.command == "plant":
        if args.csv is not None:
            truth = plant_csv(args.out, args.csv, args.seed, args.recoloured)
        else:
            truth = plant(args.out, args.train, args.val, args.test, args.seed)
        print(
            f"{truth['rows']} rows: {len(truth['flipped'])} flipped, {len(truth['copies'])} copies, "
            f"{len(truth['outliers'])} out-of-domain, {len(truth['recoloured'])} recoloured non-copies"
        )


if __name__ == "__main__":
    main()
