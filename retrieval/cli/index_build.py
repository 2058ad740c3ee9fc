"""`retrieval index build`: embed images with a model (or read embedding files) and write an index directory."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import add_config_arguments, add_embedding_arguments, existing_checkpoint, output_folder
from retrieval.cli._index_common import add_image_inputs, add_lock_timeout, format_measurement, well_measured, writing
from retrieval.cli._progress import showing_progress
from retrieval.cli.index_from_files import add_embeddings_arguments, add_shard_arguments, built_from_embeddings
from retrieval.errors import UserError
from retrieval.index.choice import DEFAULT_TARGET_RECALL, IndexKind
from retrieval.index.locking import writer_lock
from retrieval.index.storage import INDEX_FILE

if TYPE_CHECKING:
    from retrieval.index import SearchIndex
    from retrieval.index.manifest import IndexManifest
    from retrieval.inference.interface import Encoder
    from retrieval.inference.sources import ImageSource

__all__ = ["add_parser", "run"]

_KINDS = tuple(kind.value for kind in IndexKind)  # auto, then every row of retrieval.index.choice.KINDS


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index build`."""
    build = actions.add_parser(
        "build",
        help="embed images with a checkpoint and write an index directory",
        description="Embed images with a checkpoint's model and eval transform and write INDEX_DIR (index.faiss, "
        "metadata, manifest.json recording the checkpoint's path and sha256). CSV paths are relative to the CSV's "
        "folder; every CSV column becomes metadata. Unreadable images are skipped and listed on stderr. "
        "--embeddings builds from the files `retrieval embed` wrote instead, streamed, without a model.",
    )
    model = build.add_mutually_exclusive_group()
    model.add_argument("--checkpoint", type=Path, metavar="CKPT", help="a run's checkpoints/best.pt")
    model.add_argument("--model", type=Path, metavar="EXPORT_DIR", help="a `retrieval export` directory (onnxruntime)")
    model.add_argument(
        "--backbone",
        metavar="NAME",
        help="a timm model without training (pooled features); image size and transform from --config/--set",
    )
    build.add_argument("--weights", type=Path, metavar="FILE", help="--backbone's .safetensors/.pth state dict")
    add_config_arguments(build)
    add_image_inputs(build, required=False)
    add_embeddings_arguments(build)
    add_shard_arguments(build)
    build.add_argument("--out", type=Path, required=True, metavar="INDEX_DIR", help="index directory to write")
    build.add_argument("--type", default="auto", choices=_KINDS, help="index kind (default: auto, from N, D, memory)")
    build.add_argument("--max-memory", metavar="SIZE", help="memory budget for auto, e.g. 4G or 512M")
    build.add_argument(
        "--rerank",
        metavar="dba[:k=K,alpha=A]",
        help="store database-side augmented vectors (exact kNN over the gallery: up to ~100k images); recorded, "
        "and index add augments new images the same way",
    )
    build.add_argument(
        "--target-recall",
        type=_target_recall,
        metavar="R|none",
        help=f"tune search parameters to this 10-recall@10 (default: {DEFAULT_TARGET_RECALL} for hnsw/ivf/ivfpq, "
        "best effort); none: keep the kind's fixed defaults",
    )
    build.add_argument(
        "--exclude",
        type=Path,
        metavar="FILE.csv",
        help="leave out the images this CSV's path column lists, e.g. an audit's near_duplicates.csv (keeps one image "
        "of each duplicate group: a keep column excludes only its keep=0 rows)",
    )
    add_lock_timeout(build)
    add_embedding_arguments(build)


def _target_recall(text: str) -> float | str:
    """A `--target-recall` value: a recall in (0, 1], or `none`."""
    if text == "none":
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"takes a recall in (0, 1], like 0.95, or none, got {text!r}")
    return value


def _tuning(target: float | str | None) -> tuple[float | None, float | None]:
    """`IndexBuildOptions`' `(target_recall, default_target_recall)` for `--target-recall` (None: not given)."""
    if target is None:
        return None, DEFAULT_TARGET_RECALL
    if target == "none":
        return None, None
    return float(target), DEFAULT_TARGET_RECALL


def run(args: argparse.Namespace) -> int:
    """`index build`: from images with a model, or streamed from `--embeddings` files."""
    with showing_progress("index build"):  # in a log, where no bar shows, a line every so often while embedding
        return _build(args)


def _build(args: argparse.Namespace) -> int:
    output_folder(args.out, "--out", INDEX_FILE)  # the save replaces the folder as a whole
    if args.embeddings:
        if args.column_types:
            raise UserError(
                "--column-types types the columns of --csv/--images; embedding files keep the types embed gave"
            )
        if args.rerank:
            raise UserError("--rerank dba needs every vector at once: build from images, not --embeddings")
        if args.exclude:
            raise UserError("--exclude leaves images out of --csv/--images; embedding files are built as they are")
        with built_from_embeddings(args, *_tuning(args.target_recall)) as (index, inputs):
            return _save_built(args, index, inputs)
    if args.trained or args.shard:
        raise UserError("--trained and --shard build shards from embedding files: pass --embeddings PATH...")
    if args.checkpoint is None and args.model is None and args.backbone is None:
        raise UserError(
            "index build needs a model (--checkpoint CKPT, --model EXPORT_DIR or --backbone NAME) and --csv FILE "
            "or --images DIR, or --embeddings PATH... (no model)"
        )
    if args.csv is None and args.images is None:
        raise UserError("index build needs the images to index: --csv FILE or --images DIR")
    if args.backbone is None and (args.weights is not None or args.config is not None or args.overrides):
        raise UserError("--weights, --config and --set describe a --backbone; a checkpoint holds its own")
    from retrieval.config import check_config
    from retrieval.core.column_types import parse_column_types
    from retrieval.index import SearchIndex
    from retrieval.index.build import IndexBuildOptions
    from retrieval.inference.interface import ModelInfo
    from retrieval.inference.sources import embed_source, read_source

    target_recall, default_target_recall = _tuning(args.target_recall)
    options = IndexBuildOptions(
        kind=args.type,
        max_memory=args.max_memory or None,
        target_recall=target_recall,
        default_target_recall=default_target_recall,
    )
    # The images, the checkpoint's presence and a backbone's config before the model: before PyTorch loads.
    source = read_source(args.csv, args.images, args.split, parse_column_types(args.column_types))
    if args.checkpoint is not None:
        existing_checkpoint(args.checkpoint)
    if args.backbone is not None:
        check_config(args.config, args.overrides)
    if args.exclude is not None:
        source = _without_excluded(source, args.exclude)
    encoder = _build_encoder(args)
    options = dataclasses.replace(
        options,
        database_augmentation=args.rerank,
        model_info=ModelInfo.read(encoder.info()),
        match_threshold=encoder.match_threshold,
    )
    embeddings, rows = embed_source(encoder, source, args.batch_size, args.num_workers)
    index = SearchIndex.build(embeddings, rows, options)
    skipped = len(source.paths) - index.ntotal
    inputs = f"vectors: {index.ntotal} of {len(source.paths)} images" + (
        f" ({skipped} unreadable, skipped)" if skipped else ""
    )
    return _save_built(args, index, inputs)


def _without_excluded(source: ImageSource, exclude: Path) -> ImageSource:
    """The images of `source` that `--exclude` does not list (`retrieval.data.exclusion`)."""
    import numpy as np

    from retrieval.data.exclusion import excluded_paths
    from retrieval.inference.sources import ImageSource

    excluded = excluded_paths(exclude)
    kept = np.array([i for i, path in enumerate(source.paths) if path.resolve() not in excluded], dtype=np.int64)
    if len(kept) == 0:
        raise UserError(f"--exclude {exclude} lists every image to index; nothing is left to build from")
    print(f"excluded: {len(source.paths) - len(kept)} image(s) listed in {exclude}")
    return ImageSource([source.paths[i] for i in kept], source.rows(kept))


def _save_built(args: argparse.Namespace, index: SearchIndex, inputs: str) -> int:
    """Save a built index to `--out` under its writer lock and print what it holds and how it measured."""
    with writing(args.out), writer_lock(args.out, args.lock_timeout):
        index.save(args.out)
    # Measured while building, on held-out vectors; a build too small to hold out enough of them is measured
    # as index eval measures it: every stored vector (up to 1,000) searched for among the others.
    shard = index.manifest.trained is not None  # a shard (index build --trained) is measured once merged
    measured = index.manifest.measured
    if not shard and not well_measured(measured):
        measured = index.evaluate(k=10)
    print(f"index: {args.out} ({index.kind}: {index.factory})")
    print(inputs)
    print(
        format_measurement(measured)
        if measured.model_fields_set
        else "not measured: a shard; index merge, then index eval"
    )
    print(_tuning_line(index.manifest))
    return 0


def _tuning_line(manifest: IndexManifest) -> str:
    """`search parameters: nprobe=64 (tuned to recall@10 0.95, the default target)`, or why they are fixed.

    The claim is checked against the recall measured with the same definition (ties as equal): a
    best-effort tuning that fell short says what it reached instead of the target.
    """
    parameters = ", ".join(f"{name}={value}" for name, value in manifest.search_parameters.items())
    if not parameters:
        return "search parameters: none (exact search)"
    target, source = manifest.target_recall, manifest.target_recall_source
    if target is None:
        return f"search parameters: {parameters} (the kind's fixed defaults: --target-recall none)"
    which = "the default target" if source == "default" else "--target-recall"
    measured = manifest.measured.recall_at_k
    if measured is not None and measured < target:  # best effort on the default target: say what it reached
        reached = f"the most accurate explored: recall@10 {measured:.4f}, short of {which} {target}"
        return f"search parameters: {parameters} ({reached})"
    return f"search parameters: {parameters} (tuned to recall@10 {target}, {which})"


def _build_encoder(args: argparse.Namespace) -> Encoder:
    """The encoder of `--checkpoint`, `--model` (an export), or `--backbone` (`--weights`, `--config`, `--set`)."""
    from retrieval.export.onnx_encoder import OnnxEncoder

    if args.model is not None:
        return OnnxEncoder.from_export(args.model, device=args.device)
    from retrieval.inference.backbone import backbone_config  # torch: only a checkpoint or a backbone needs it
    from retrieval.inference.image_encoder import ImageEncoder

    if args.backbone is None:
        return ImageEncoder.from_checkpoint(args.checkpoint, device=args.device)
    from retrieval.config import load_config  # pydantic: only a backbone's config needs it

    config = backbone_config(load_config(args.config, args.overrides), args.backbone, args.weights)
    return ImageEncoder.from_backbone(config, device=args.device)
