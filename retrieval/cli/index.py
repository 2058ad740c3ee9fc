"""`retrieval index build|query|add|remove|compact|eval|export`: a FAISS index of a trained embedder's gallery.

The index records the checkpoint that embedded it (path and sha256), so `query` and `add` embed
new images with the same model and transform without being told; a `--checkpoint` given to them
must be that same file. An index built from an export (`--model DIR`, `retrieval export`) records
the sha256 of its model.onnx instead and embeds with onnxruntime (`OnnxEncoder`).

Writers (`build --out` over an index, `add`, `remove`) take the index's writer lock
(`retrieval.index.locking`) from load to save, so concurrent ones all take effect; a second
writer waits up to `--lock-timeout` seconds. `add` embeds its images before taking the lock,
so a long embedding does not hold other writers up. A write that fails (read-only folder, no
permission, disk full) is one line and leaves the previous index as it was.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from retrieval.cli._common import add_column_types_argument, add_config_arguments, add_embedding_arguments
from retrieval.cli.index_from_files import add_embeddings_arguments, built_from_embeddings
from retrieval.cli.index_shards import add_merge_parser, add_shard_arguments, add_train_parser, run_merge, run_train
from retrieval.config import load_config
from retrieval.errors import UserError
from retrieval.index.choice import DEFAULT_TARGET_RECALL, parse_memory
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT, writer_lock
from retrieval.index.storage import INDEX_FILE, read_manifest
from retrieval.index.threshold import STORED, keep_matches, no_match_text, parse_min_score, resolve_min_score
from retrieval.inference.splits import SPLITS
from retrieval.vectordb import DEFAULT_BATCH_SIZE, parse_database_uri

if TYPE_CHECKING:
    from retrieval.index import SearchIndex
    from retrieval.inference.interface import Encoder

__all__ = ["add_parser", "run"]

DATABASE_AUGMENTATION = "database_augmentation"  # manifest field: the dba spec the stored vectors were built with

_KINDS = ("auto", "flat", "hnsw", "ivf", "ivfpq")
_MAX_ID = 2**63 - 1  # ids are int64
# Fewer queries than this measure recall too coarsely for its 4 decimals, and time a batch too small
# for its queries/s to be more than the cost of one call: such figures are not printed.
_MIN_QUERIES = 100
_WRITE_HINTS = {
    errno.ENOSPC: "free space on its file system and retry",
    errno.EDQUOT: "free space within your disk quota and retry",
    errno.EFBIG: "raise the file size limit (ulimit -f) and retry",
    errno.EROFS: "it is on a read-only file system: copy it somewhere writable and update the copy",
    errno.EACCES: "make the index directory and its parent folder writable by this user",
    errno.EPERM: "make the index directory and its parent folder writable by this user",
}
_SPLIT_HELP = (
    "CSV rows to index: all (default: every row, whatever its split), train, val, test, or gallery "
    "(test rows with is_gallery=1; every test row when the CSV has no is_gallery column)"
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("index", help="build, query, update and measure a FAISS index of a checkpoint")
    actions = parser.add_subparsers(dest="index_command", required=True, metavar="ACTION")

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
    _add_image_inputs(build, required=False)
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
    _add_lock_timeout(build)
    add_embedding_arguments(build)

    query = actions.add_parser("query", help="search the index with images")
    query.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    group = query.add_mutually_exclusive_group(required=True)
    group.add_argument("--image", type=Path, nargs="+", metavar="PATH", help="query image file(s)")
    group.add_argument("--images", type=Path, metavar="DIR", help="every image under DIR is a query")
    query.add_argument("-k", type=int, default=10, help="results per query (default: 10)")
    query.add_argument("--json", action="store_true", help="print JSON instead of a table")
    query.add_argument(
        "--where",
        metavar="EXPR|FILE.json",
        help='search only items whose metadata passes, e.g. "label in (3, 5) and price < 50" or a JSON filter file',
    )
    query.add_argument(
        "--min-score",
        type=_min_score,
        metavar=f"S|{STORED}",
        help="drop results scoring below S (a cosine), or below the threshold the index stores (evaluate "
        "--save-threshold); default: none",
    )
    query.add_argument(
        "--rerank",
        metavar="SPEC",
        help="re-rank results: qe or kreciprocal, with the parameters evaluate --rerank chose, e.g. qe:k=2,alpha=3",
    )
    _add_checkpoint_check(query)
    add_embedding_arguments(query)

    add = actions.add_parser("add", help="embed more images into an index (atomic)")
    add.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    _add_image_inputs(add)
    _add_checkpoint_check(add)
    _add_lock_timeout(add)
    add_embedding_arguments(add)

    remove = actions.add_parser("remove", help="remove vectors by id (atomic)")
    remove.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    remove.add_argument("--ids", type=int, nargs="+", required=True, metavar="ID", help="ids from query results")
    _add_lock_timeout(remove)

    compact = actions.add_parser("compact", help="drop removed vectors that hnsw/ivfpq only hide (atomic)")
    compact.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    _add_lock_timeout(compact)

    evaluate = actions.add_parser("eval", help="recall@k vs exact search, latency and bytes/vector")
    evaluate.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    evaluate.add_argument("-k", type=int, default=10, help="recall@k and results per query (default: 10)")
    evaluate.add_argument("--json", action="store_true", help="print JSON instead of a table")

    export = actions.add_parser(
        "export",
        help="copy the index into a vector database collection (Qdrant)",
        description="Upsert the index's vectors, ids and metadata (as payload) into a Qdrant collection. Running it "
        "again writes only what is missing and deletes what the index no longer holds, so it resumes an "
        "interrupted export and changes nothing when the collection is up to date.",
    )
    export.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    export.add_argument(
        "--to",
        required=True,
        metavar="URI",
        help="qdrant+local:///abs/dir?collection=NAME (embedded, a folder), qdrant://HOST[:PORT]/NAME or "
        "qdrants://HOST[:PORT]/NAME (a server; API key from $QDRANT_API_KEY)",
    )
    export.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help=f"points per request (default: {DEFAULT_BATCH_SIZE})"
    )
    export.add_argument("--recreate", action="store_true", help="delete the collection first, whatever it holds")
    add_train_parser(actions)
    add_merge_parser(actions)


def _add_image_inputs(parser: argparse.ArgumentParser, required: bool = True) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--csv", type=Path, metavar="FILE", help="dataset CSV: path,label,split[,...] (see --split)")
    group.add_argument("--images", type=Path, metavar="DIR", help="every image under DIR; label = its subfolder")
    parser.add_argument("--split", default="all", choices=SPLITS, help=_SPLIT_HELP)
    add_column_types_argument(parser)


def _add_checkpoint_check(parser: argparse.ArgumentParser) -> None:
    model = parser.add_mutually_exclusive_group()
    model.add_argument(
        "--checkpoint", type=Path, metavar="CKPT", help="default: the one the index records (must be the same file)"
    )
    model.add_argument(
        "--model", type=Path, metavar="EXPORT_DIR", help="for an index built from an export: default the one it records"
    )


def _add_lock_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lock-timeout",
        type=_seconds,
        default=DEFAULT_LOCK_TIMEOUT,
        metavar="SECONDS",
        help=f"wait this long for another writer of the index to finish (default: {DEFAULT_LOCK_TIMEOUT:g})",
    )


def _seconds(text: str) -> float:
    """A `--lock-timeout` value: a finite number of seconds >= 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"takes a number of seconds >= 0, like 60, got {text!r}")
    return seconds


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


def _min_score(text: str) -> float | str | None:
    """A `--min-score` value: a cosine in [-1, 1] or `stored`."""
    try:
        return parse_min_score(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _tuning(target: float | str | None) -> tuple[float | None, float | None]:
    """`SearchIndex.build`'s `(target_recall, default_target_recall)` for `--target-recall` (None: not given)."""
    if target is None:
        return None, DEFAULT_TARGET_RECALL
    if target == "none":
        return None, None
    return float(target), DEFAULT_TARGET_RECALL


def run(args: argparse.Namespace) -> int:
    commands = {"build": _build, "query": _query, "add": _add, "remove": _remove, "compact": _compact, "eval": _eval}
    return {**commands, "export": _export, "train": run_train, "merge": run_merge}[args.index_command](args)


def _build(args: argparse.Namespace) -> int:
    from retrieval.column_types import parse_column_types
    from retrieval.index import SearchIndex
    from retrieval.inference.sources import embed_source, read_source
    from retrieval.rerank import augmentation_at_build

    target_recall, default_target_recall = _tuning(args.target_recall)
    if args.embeddings:
        if args.column_types:
            raise UserError(
                "--column-types types the columns of --csv/--images; embedding files keep the types embed gave"
            )
        if args.rerank:
            raise UserError("--rerank dba needs every vector at once: build from images, not --embeddings")
        with built_from_embeddings(args, target_recall, default_target_recall) as (index, inputs):
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
    max_memory = parse_memory(args.max_memory) if args.max_memory else None
    encoder = _build_encoder(args)
    augmentation = augmentation_at_build(args.rerank) if args.rerank else None
    source = read_source(args.csv, args.images, args.split, parse_column_types(args.column_types))
    embeddings, rows = embed_source(encoder, source, args.batch_size, args.num_workers)
    if augmentation is not None:
        embeddings = augmentation.database(embeddings)
    index = SearchIndex.build(
        embeddings,
        rows,
        kind=args.type,
        max_memory=max_memory,
        target_recall=target_recall,
        default_target_recall=default_target_recall,
        model_info=encoder.info(),
        match_threshold=encoder.match_threshold,
    )
    if augmentation is not None:
        index.manifest[DATABASE_AUGMENTATION] = augmentation.spec()  # `index add` augments new vectors the same way
    skipped = len(source.paths) - index.ntotal
    inputs = f"vectors: {index.ntotal} of {len(source.paths)} images" + (
        f" ({skipped} unreadable, skipped)" if skipped else ""
    )
    return _save_built(args, index, inputs)


def _save_built(args: argparse.Namespace, index: SearchIndex, inputs: str) -> int:
    """Save a built index to `--out` under its writer lock and print what it holds and how it measured."""
    with _writing(args.out), writer_lock(args.out, args.lock_timeout):
        index.save(args.out)
    # Measured while building, on held-out vectors; a build too small to hold out enough of them is measured
    # as index eval measures it: every stored vector (up to 1,000) searched for among the others.
    shard = "trained" in index.manifest  # a shard (index build --trained) is measured once merged
    measured = index.manifest.get("measured")
    if not shard and (not measured or measured["queries"] < _MIN_QUERIES):
        measured = index.evaluate(k=10)
    print(f"index: {args.out} ({index.kind}: {index.factory})")
    print(inputs)
    print(_format_measurement(measured) if measured else "not measured: a shard; index merge, then index eval")
    print(_tuning_line(index.manifest))
    return 0


def _tuning_line(manifest: dict[str, Any]) -> str:
    """`search parameters: nprobe=64 (tuned to recall@10 0.95, the default target)`, or why they are fixed."""
    parameters = ", ".join(f"{name}={value}" for name, value in manifest["search_parameters"].items())
    if not parameters:
        return "search parameters: none (exact search)"
    target, source = manifest.get("target_recall"), manifest.get("target_recall_source")
    if target is None:
        return f"search parameters: {parameters} (the kind's fixed defaults: --target-recall none)"
    which = "the default target" if source == "default" else "--target-recall"
    return f"search parameters: {parameters} (tuned to recall@10 {target}, {which})"


def _build_encoder(args: argparse.Namespace) -> Encoder:
    """The encoder of `--checkpoint`, `--model` (an export), or `--backbone` (`--weights`, `--config`, `--set`)."""
    from retrieval.export.onnx_encoder import OnnxEncoder

    if args.backbone is None and (args.weights is not None or args.config is not None or args.overrides):
        raise UserError("--weights, --config and --set describe a --backbone; a checkpoint holds its own")
    if args.model is not None:
        return OnnxEncoder.from_export(args.model, device=args.device)
    from retrieval.inference.backbone import backbone_config  # torch: only a checkpoint or a backbone needs it
    from retrieval.inference.encoder import ImageEncoder

    if args.backbone is None:
        return ImageEncoder.from_checkpoint(args.checkpoint, device=args.device)
    config = backbone_config(load_config(args.config, args.overrides), args.backbone, args.weights)
    return ImageEncoder.from_backbone(config, device=args.device)


def _query(args: argparse.Namespace) -> int:
    from retrieval.encoders import encoder_for_index
    from retrieval.index import SearchIndex
    from retrieval.index.filters import load_filter
    from retrieval.inference.sources import image_files
    from retrieval.rerank import IndexGallery, rerank_at_query

    if not 1 <= args.k <= 1000:
        raise UserError(f"-k must be between 1 and 1000, got {args.k}")
    where = load_filter(args.where) if args.where is not None else None
    index = SearchIndex.load(args.index, mmap=True)  # read-only: vectors stay in the page cache, shared
    if where is not None:
        where.check(index.metadata_schema)  # before embedding: a typo in a column name fails at once
    min_score = resolve_min_score(args.min_score, index.manifest)
    reranker = rerank_at_query(args.rerank) if args.rerank else None
    encoder = encoder_for_index(
        index.manifest.get("model") or {}, args.checkpoint, device=args.device, model_dir=args.model
    )
    paths = list(args.image) if args.image else image_files(args.images)
    if not paths:
        raise UserError(f"no images in {args.images}; pass query images with --image or --images")
    embedded = encoder.embed_files(paths, args.batch_size, args.num_workers, progress=False)
    if embedded.failures:
        path, reason = embedded.failures[0]
        raise UserError(f"cannot read query image {path} ({reason}); pass a readable image file")
    if reranker is None:
        scores, ids = index.search(embedded.embeddings, k=args.k, filter=where)
    else:
        scores, ids = reranker.search(IndexGallery(index, where), embedded.embeddings, args.k)
    answers = [
        {
            "query": str(path),
            "min_score": min_score,
            "results": keep_matches(_results(index, scores[row], ids[row]), min_score),
        }
        for row, path in enumerate(paths)
    ]
    print(json.dumps(answers, indent=2) if args.json else "\n\n".join(_table(answer) for answer in answers))
    return 0


def _add(args: argparse.Namespace) -> int:
    from retrieval.column_types import parse_column_types
    from retrieval.encoders import encoder_for_index
    from retrieval.index import SearchIndex
    from retrieval.inference.sources import embed_source, read_source
    from retrieval.rerank import IndexGallery, augmentation_at_build

    model = read_manifest(args.index).get("model") or {}  # checked against the verified load under the lock
    encoder = encoder_for_index(model, args.checkpoint, device=args.device, model_dir=args.model)
    source = read_source(args.csv, args.images, args.split, parse_column_types(args.column_types))
    embeddings, rows = embed_source(encoder, source, args.batch_size, args.num_workers)
    with _writing(args.index), SearchIndex.edit(args.index, args.lock_timeout) as index:
        if (index.manifest.get("model") or {}) != model:
            raise UserError(
                f"{args.index} was rebuilt with another model while the images were embedded; run add again"
            )
        recorded = index.manifest.get(DATABASE_AUGMENTATION)
        if recorded:
            embeddings = augmentation_at_build(recorded).added(IndexGallery(index), embeddings)
        ids = index.add(embeddings, rows)
    print(f"added {len(ids)} vectors (ids {ids.min()}..{ids.max()}); the index holds {index.ntotal}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from retrieval.index import SearchIndex

    outside = [value for value in args.ids if not 0 <= value <= _MAX_ID]
    if outside:
        raise UserError(f"id {outside[0]} is out of range: ids are integers from 0 to {_MAX_ID}, from query results")
    ids = np.unique(np.asarray(args.ids, dtype=np.int64))
    with _writing(args.index), SearchIndex.edit(args.index, args.lock_timeout) as index:
        removed = index.remove(ids)  # UserError naming unknown ids, before anything changes
    print(f"removed {removed} vectors; the index holds {index.ntotal}")
    return 0


def _compact(args: argparse.Namespace) -> int:
    from retrieval.index import SearchIndex

    with _writing(args.index), SearchIndex.edit(args.index, args.lock_timeout) as index:
        before = index.manifest["files"][INDEX_FILE]["size"]
        dropped = index.compact()
    after = index.manifest["files"][INDEX_FILE]["size"]
    print(
        f"compacted {args.index}: dropped {dropped} removed vectors, {index.ntotal} remain; "
        f"{INDEX_FILE} {before / 2**20:.1f} MB -> {after / 2**20:.1f} MB"
    )
    return 0


@contextmanager
def _writing(directory: Path) -> Iterator[None]:
    """Turn an `OSError` while locking, reading or saving the index at `directory` into a one-line `UserError`.

    Saves are atomic, so the message can promise that the previous index is unchanged.
    """
    try:
        yield
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        hint = _WRITE_HINTS.get(exc.errno or 0, "check that the index's folder is writable and retry")
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot write index {directory}: {reason}{where}; {hint}; the index is unchanged") from exc


def _eval(args: argparse.Namespace) -> int:
    from retrieval.index import SearchIndex

    if args.k < 1:
        raise UserError(f"-k must be >= 1, got {args.k}")
    index = SearchIndex.load(args.index)
    metrics = index.evaluate(k=args.k)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        print(f"index: {args.index} ({index.kind}: {index.factory}), {index.ntotal} vectors")
        print(_format_measurement(metrics))
    return 0


def _export(args: argparse.Namespace) -> int:
    from retrieval.vectordb.export import export_index  # needs the optional qdrant-client

    done = export_index(args.index, parse_database_uri(args.to), args.batch_size, args.recreate)
    print(
        f"exported {args.index} to {done.location}: {done.vectors} vectors ({done.written} written, "
        f"{done.kept} already there, {done.deleted} removed)"
    )
    return 0


def _results(index: SearchIndex, scores: np.ndarray, ids: np.ndarray) -> list[dict[str, Any]]:
    found = ids >= 0  # FAISS pads with -1 when fewer than k vectors are stored
    rows = index.metadata_for(ids[found])
    return [
        {"rank": rank, "score": float(score), **row}
        for rank, (score, row) in enumerate(zip(scores[found], rows, strict=True), start=1)
    ]


def _table(answer: dict[str, Any]) -> str:
    lines = [f"query: {answer['query']}", f"{'rank':>4}  {'score':>7}  {'id':>8}  {'label':<16}  path"]
    if not answer["results"] and answer.get("min_score") is not None:
        lines.append(no_match_text(answer["min_score"]))
    for result in answer["results"]:
        label = str(result.get("label") or "")
        lines.append(
            f"{result['rank']:>4}  {result['score']:>7.4f}  {result['id']:>8}  {label:<16}  {result.get('path', '')}"
        )
    return "\n".join(lines)


def _format_measurement(measured: dict[str, Any]) -> str:
    """Recall, latency, throughput and size lines of a `SearchIndex` measurement (speed from enough queries only)."""
    size = (
        f"bytes/vector: {measured['resident_bytes_per_vector']:.1f} in memory, "
        f"{measured['disk_bytes_per_vector']:.1f} on disk"
    )
    if measured["recall_at_k"] is None or measured["queries"] < _MIN_QUERIES:
        return f"{_recall_line(measured)}\nlatency, throughput: not measured (too few vectors)\n{size}"
    return "\n".join(
        [
            _recall_line(measured),
            f"latency p50 / p99: {measured['p50_ms']:.3f} / {measured['p99_ms']:.3f} ms (one query, one thread)",
            f"batch throughput: {measured['batch_qps']:,.0f} queries/s ({measured['batch_threads']} threads)",
            size,
        ]
    )


def _recall_line(measured: dict[str, Any]) -> str:
    """The recall line, saying what it counts when the index holds fewer than k candidates a query."""
    k, queries, neighbors = measured["k"], measured["queries"], measured.get("neighbors", measured["k"])
    if measured["recall_at_k"] is None or queries < _MIN_QUERIES:
        held = measured.get("ntotal", queries)
        return (
            f"recall@{k} vs exact: not measured: too few vectors (the index holds {held}; each is searched for "
            f"among the others, and measuring needs {_MIN_QUERIES} queries)"
        )
    line = f"recall@{k} vs exact: {measured['recall_at_k']:.4f} ({queries} queries)"
    if neighbors < k:
        line += f"; each query has only {neighbors} other vectors to find, so recall counts those {neighbors}"
    return line
