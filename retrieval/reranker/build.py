"""Training a learned re-ranker of a checkpoint end to end, from a `RerankerRequest` to the re-ranker directory.

`retrieval reranker` parses its flags into a request and prints the `RerankerReport`; a Python user calls
`train_reranker` the same way. In order: the checkpoint's embedder embeds the images to mine (the training
split, or half of the validation classes: `sources.py`) and pairs are mined there (`mining.py`); the pair
model, started from the checkpoint's backbone, trains on them (`training.py`); the blend, over the `reranker.base`
augmentation if one is set, is chosen on the validation split, or its other half
(`retrieval.evaluate.learned_rerank.choose_blend`); the directory is
written. The test split is never read. The directory is made in a scratch folder beside `output_dir`
(weights, ONNX graphs checked against PyTorch, preprocessing, the manifest last) and renamed into place, so
a failed run leaves no half of one.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from retrieval import __version__
from retrieval.core.learned_rerank import (
    FILES,
    MANIFEST_FILE,
    PREPROCESS_FILE,
    RERANKER_FORMAT,
    WEIGHTS_FILE,
    RerankerManifest,
)
from retrieval.errors import UserError
from retrieval.runtime.files import file_sha256, write_text

if TYPE_CHECKING:
    from torch.utils.data import Dataset

    from retrieval.config import Config
    from retrieval.core.preprocess import Preprocess
    from retrieval.core.rerank import DatabaseAugmentation
    from retrieval.data.datasets import EvalSplit
    from retrieval.evaluate.learned_rerank import BlendChoice
    from retrieval.models.pair_model import PairModel

__all__ = ["RerankerReport", "RerankerRequest", "train_reranker"]


@dataclass(frozen=True)
class RerankerRequest:
    """The flags of `retrieval reranker`, by name.

    Attributes:
        checkpoint: the trained run's checkpoint whose results the re-ranker re-scores.
        output_dir: the re-ranker directory to write (replaced if it holds an earlier re-ranker).
        config, overrides: a config file and `section.key=value` overrides applied to the checkpoint's saved
            config (the `reranker` section sets the training; `data` where its splits are).
    """

    checkpoint: Path
    output_dir: Path
    config: Path | None = None
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class RerankerReport:
    """What a re-ranker's training chose and measured: its manifest, and where it was written."""

    manifest: RerankerManifest
    directory: Path

    def text(self) -> str:
        """The lines `retrieval reranker` prints: the verdict on validation, then where the re-ranker is."""
        return f"{self.manifest.verdict()}\nre-ranker written to {self.directory}"


def train_reranker(request: RerankerRequest) -> RerankerReport:
    """Train the re-ranker of `request.checkpoint` and write its directory.

    Raises:
        UserError: no validation split, data the re-ranker cannot train on, missing ONNX packages, or an
            output directory that holds something else than a re-ranker.
    """
    from retrieval.checkpoint import Checkpoint
    from retrieval.data import build_data
    from retrieval.data.transforms import describe_eval_transform
    from retrieval.evaluate.evaluator import embed_as_configured
    from retrieval.evaluate.learned_rerank import choose_blend, describe_split
    from retrieval.export.onnx_export import check_onnx_packages
    from retrieval.inference.forward import Precision
    from retrieval.models.pair_model import PairModel, Pooled
    from retrieval.reranker.mining import mine_pairs
    from retrieval.reranker.sources import pair_source
    from retrieval.reranker.training import PairDataset, PairFeatures, PairImages, train_pair_model
    from retrieval.runtime.device import place_model, resolve_device
    from retrieval.runtime.environment import torch_seeded

    check_onnx_packages()
    _check_output(request.output_dir)
    sha256 = file_sha256(request.checkpoint)
    checkpoint = Checkpoint.read(request.checkpoint)
    config = checkpoint.config(request.config, request.overrides)
    settings, in_chans = config.reranker, checkpoint.model_config.in_chans
    device = resolve_device(config.train.device)
    precision = Precision.for_run(config.train, device)
    embedder = checkpoint.embedder().eval()
    place_model(embedder, device, precision.channels_last)  # moves the module in place
    stats = embedder.data_config()
    data = build_data(config.data, stats, config.augment, in_chans)
    if data.val is None:
        raise UserError(
            "the re-ranker chooses its blend on a validation split, and this data has none; set data.val_fraction "
            "(e.g. --set data.val_fraction=0.2) or data.val_classes, or add split=val rows"
        )

    def embed(model: torch.nn.Module, dataset: Dataset) -> np.ndarray:
        return embed_as_configured(model, dataset, config.data, device, precision)

    source = pair_source(data, data.val, settings.pairs_from, config.train.seed)  # the test split: never
    started = time.perf_counter()
    pairs = mine_pairs(embed(embedder, source.eval_images), source.labels, settings.mine_depth, source.name)
    with torch_seeded(config.train.seed):
        model = PairModel(embedder, settings.width, settings.grid, in_chans, config.data.image_size)
    place_model(model, device, precision.channels_last)
    if settings.backbone == "frozen":
        pair_data: PairDataset = PairFeatures(embed(Pooled(model.describe).eval(), source.eval_images), pairs)
    else:
        pair_data = PairImages(source.train_images, pairs)
    train_pair_model(model, pair_data, config, device)
    train_seconds = time.perf_counter() - started
    blend = source.blend
    val_embeddings = embed(embedder, blend.dataset)
    descriptors = describe_split(
        model, blend.dataset, config.data.eval_batch_size, device, precision, config.data.num_workers
    )
    base = _base(settings.base, val_embeddings, blend)
    choice = choose_blend(model.head, val_embeddings, descriptors, blend, settings, base)
    preprocess = describe_eval_transform(config.augment, config.data.image_size, stats, in_chans)
    fields = _manifest_fields(request, sha256, config, choice, base, len(pairs.targets), pairs.positives, train_seconds)
    manifest = _write(request.output_dir, model, preprocess, fields)
    return RerankerReport(manifest, request.output_dir)


def _base(spec: str | None, embeddings: np.ndarray, split: EvalSplit) -> DatabaseAugmentation | None:
    """The augmentation `reranker.base` names, its k and alpha chosen on `split` (the blend's) where not given."""
    from retrieval.core.rerank import augmentation_at_build
    from retrieval.evaluate.rerank_choice import choose_rerank

    if spec is None:
        return None
    return augmentation_at_build(choose_rerank(spec, (embeddings, split)).reranker.spec())


def _manifest_fields(
    request: RerankerRequest,
    sha256: str,
    config: Config,
    choice: BlendChoice,
    base: DatabaseAugmentation | None,
    pairs_total: int,
    positives: int,
    train_seconds: float,
) -> dict[str, Any]:
    """The manifest's fields: where the re-ranker comes from, its blend (over `base`), its validation scores and
    its cost."""
    return {
        "format": RERANKER_FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": str(request.checkpoint.resolve()),
        "checkpoint_sha256": sha256,
        "depth": choice.blend.depth,
        "weight": choice.blend.weight,
        "base": None if base is None else base.spec(),
        "image_size": config.data.image_size,
        "descriptor_dim": config.reranker.width,
        "validation": {
            "map_at_r": choice.metrics["map@r"],
            "recall_at_1": choice.metrics["recall@1"],
            "map_at_r_without": choice.without["map@r"],
            "recall_at_1_without": choice.without["recall@1"],
            "queries": choice.queries,
            "gain": None if choice.gain is None else list(choice.gain),
        },
        "grid": choice.grid,
        "pairs": {"total": pairs_total, "positives": positives},
        "train_seconds": round(train_seconds, 3),
        "versions": {"retrieval": __version__, "torch": torch.__version__},
        "settings": dict(config.reranker.model_dump(mode="json")),
    }


def _write(out: Path, model: PairModel, preprocess: Preprocess, fields: dict[str, Any]) -> RerankerManifest:
    """Write the directory in a scratch folder beside `out`, then rename it into place; the manifest written."""
    from safetensors.torch import save_file

    from retrieval.reranker.onnx import export_pair_model

    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model = model.cpu().eval()
        state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
        save_file(state, str(staged / WEIGHTS_FILE))
        write_text(staged / PREPROCESS_FILE, json.dumps(preprocess.to_dict(), indent=2) + "\n")
        fields["parity"] = export_pair_model(model, staged, preprocess)
        fields["versions"] = {**fields["versions"], "onnxruntime": importlib.metadata.version("onnxruntime")}
        fields["files"] = {name: file_sha256(staged / name) for name in FILES}
        manifest = RerankerManifest.model_validate(fields)
        write_text(staged / MANIFEST_FILE, json.dumps(manifest.record(), indent=2) + "\n")
        _replace(staged, out)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return manifest


def _check_output(out: Path) -> None:
    """Refuse an output directory that holds anything but an earlier re-ranker (it would be replaced)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST_FILE).is_file())):
        raise UserError(f"--output-dir {out} exists and is not a re-ranker directory; choose a new or empty one")


def _replace(staged: Path, out: Path) -> None:
    """Rename `staged` to `out`; an earlier `out` is moved aside first and removed once the new one is in place."""
    aside = None
    if out.exists():
        aside = out.with_name(f".{out.name}-old-{time.time_ns()}")
        out.rename(aside)
    staged.rename(out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
