"""`retrieval index build`: embed images with a model (or read embedding files) and write an index directory.

The flags and the lines printed; the build is `retrieval.export.index_build` (an `IndexBuildRequest` in, an
`IndexBuildReport` out).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import add_config_arguments, add_embedding_arguments, output_folder
from retrieval.cli._index_common import add_image_inputs, add_lock_timeout, format_measurement
from retrieval.cli._progress import showing_progress
from retrieval.cli.index_from_files import add_embeddings_arguments, add_shard_arguments, parse_shard
from retrieval.index.choice import AUTO, DEFAULT_TARGET_RECALL, KINDS
from retrieval.index.storage import INDEX_FILE

if TYPE_CHECKING:
    from retrieval.export.index_build import IndexBuildReport
    from retrieval.index.manifest import IndexManifest

__all__ = ["add_parser", "run"]


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
    build.add_argument(
        "--type", default=AUTO, choices=[AUTO, *KINDS], help="index kind (default: auto, from N, D, memory)"
    )
    build.add_argument("--max-memory", metavar="SIZE", help="memory budget for auto, e.g. 4G or 512M")
    build.add_argument(
        "--rerank",
        metavar="dba[:k=K,alpha=A]",
        help="store database-side augmented vectors (exact kNN over the gallery: up to ~100k images); recorded, "
        "and index add augments new images the same way",
    )
    build.add_argument(
        "--reranker",
        type=Path,
        metavar="DIR",
        help="store the vectors this learned re-ranker (retrieval reranker DIR) of the checkpoint was chosen on: "
        "its dba, or plain ones; then index query and serve take --reranker DIR",
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


def run(args: argparse.Namespace) -> int:
    """`index build`: from images with a model, or streamed from `--embeddings` files."""
    output_folder(args.out, "--out", INDEX_FILE)  # the save replaces the folder as a whole
    from retrieval.export.encoder_choice import EncoderChoice
    from retrieval.export.index_build import IndexBuildRequest, build_index

    encoder = EncoderChoice(
        checkpoint=args.checkpoint,
        model=args.model,
        backbone=args.backbone,
        weights=args.weights,
        config=args.config,
        overrides=tuple(args.overrides),
        device=args.device,
    )
    request = IndexBuildRequest(
        out=args.out,
        encoder=encoder,
        csv=args.csv,
        images=args.images,
        split=args.split,
        column_types=args.column_types,
        exclude=args.exclude,
        embeddings=tuple(args.embeddings or ()),
        on_disk=args.on_disk,
        trained=args.trained,
        shard=None if args.shard is None else parse_shard(args.shard),
        kind=args.type,
        max_memory=args.max_memory,
        target_recall=args.target_recall,
        rerank=args.rerank,
        reranker=args.reranker,
        lock_timeout=args.lock_timeout,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    with showing_progress("index build"):  # in a log, where no bar shows, a line every so often while embedding
        report = build_index(request)
    if report.excluded:
        print(f"excluded: {report.excluded} image(s) listed in {args.exclude}")
    print(f"index: {report.directory} ({report.manifest.kind}: {report.manifest.factory})")
    print(_inputs_line(report))
    measured = report.measured
    print(
        format_measurement(measured)
        if measured.model_fields_set
        else "not measured: a shard; index merge, then index eval"
    )
    print(_tuning_line(report.manifest))
    return 0


def _inputs_line(report: IndexBuildReport) -> str:
    """`vectors: 90 of 91 images (1 unreadable, skipped)`, or how many embedding inputs (and a shard's ids)."""
    if report.images is None:
        ids = "" if report.first_id is None else f", ids {report.first_id}..{report.first_id + report.vectors - 1}"
        return f"vectors: {report.vectors} from {report.embedding_files} embedding input(s){ids}"
    skipped = report.images - report.vectors
    return f"vectors: {report.vectors} of {report.images} images" + (
        f" ({skipped} unreadable, skipped)" if skipped else ""
    )


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
