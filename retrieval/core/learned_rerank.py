"""A learned pairwise re-ranker applied to a search: the embedding's cosine blended with a pair model's probability.

`retrieval reranker` (`retrieval.reranker`) trains a pair model on a checkpoint's own data and chooses
on validation how many of each query's nearest results it re-scores (the depth N) and how much its
probability weighs against the cosine (w). A query's top N results are then scored

    s = (1 - w) * cosine + w * p,      p = the pair model's probability that query and result match,

and sorted by s. Results past N keep their order and are scored as if their p were the lowest of the
N re-scored ones, so every score stays finite and the list is in descending order. A result identical to
the query (cosine >= `IDENTICAL_SCORE`, the query's own image) has p = 1 by definition, so it stays first,
as with every re-ranking method (`retrieval.core.rerank`). w = 0 is the embedding alone: the search's own
order and scores, the pair model never run.

The blend may re-score another re-ranking's results instead of the embedding's own search: `base`, database-side
augmentation (`dba`), whose averaged gallery vectors lift MAP@R while the pair model restores the top of the
list. Such a re-ranker is applied to an index built with that same augmentation, and refused by any other.

The same `Blend` serves `evaluate --reranker` (PyTorch pair model), `index query --reranker` and `serve
--reranker` (the ONNX pair model, `retrieval.export.reranker_onnx`); here are only numpy and the files of a
re-ranker directory, so `serve` can use it without torch. The directory (`read_reranker`) holds
`manifest.json` (`RerankerManifest`: the checkpoint it belongs to, N, w, the validation metrics with and
without it), the PyTorch weights and the ONNX export, each file's sha256 in the manifest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import ConfigDict, JsonValue

from retrieval.core.rerank import IDENTICAL_SCORE, DatabaseAugmentation, Gallery, stored_augmentation
from retrieval.errors import UserError
from retrieval.runtime.files import file_sha256
from retrieval.validation import Record, ValidationError, user_error

__all__ = [
    "DESCRIBE_FILE",
    "FILES",
    "HEAD_FILE",
    "MANIFEST_FILE",
    "PREPROCESS_FILE",
    "RERANKER_FORMAT",
    "WEIGHTS_FILE",
    "Blend",
    "RerankerFiles",
    "RerankerManifest",
    "RowReranker",
    "read_reranker",
]

RERANKER_FORMAT = 1
MANIFEST_FILE = "manifest.json"
WEIGHTS_FILE = "weights.safetensors"  # the PyTorch pair model (`retrieval.models.pair_model.PairModel`)
DESCRIBE_FILE = "describe.onnx"  # images (B, C, S, S) -> descriptors (B, P)
HEAD_FILE = "head.onnx"  # query descriptors (M, P), result descriptors (M, P), cosines (M,) -> logits (M,)
PREPROCESS_FILE = "preprocess.json"  # the checkpoint's eval transform as data (`retrieval.core.preprocess`)
FILES = (WEIGHTS_FILE, DESCRIBE_FILE, HEAD_FILE, PREPROCESS_FILE)

# (n, d) result ids (-1: none) and their (n, d) cosines -> (n, d) pair probabilities
Probabilities = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Blend:
    """How a learned re-ranker scores a query's results: its `depth` N nearest re-scored, its probability's `weight` w.

    Raises:
        ValueError: depth below 1, or a weight outside [0, 1].
    """

    depth: int
    weight: float

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"a blend's depth must be >= 1, got {self.depth}")
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"a blend's weight must lie in [0, 1], got {self.weight}")

    def rescore(self, scores: np.ndarray, ids: np.ndarray, probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Blended `(n, m)` scores and ids of a plain search's `(n, m)` `scores` (cosines, best first) and `ids`.

        Args:
            scores: the plain search's scores, best first.
            ids: its ids, -1 past the end.
            probabilities: `(n, min(depth, m))` the pair model's probabilities of the first columns (any value
                where the id is -1).

        Returns:
            Scores in descending order (-inf where the id is -1, at the end) and the ids in that order.
        """
        width = min(self.depth, ids.shape[1])
        valid = ids >= 0
        identical = valid & (scores >= IDENTICAL_SCORE)
        chances = np.where(identical[:, :width], 1.0, np.asarray(probabilities, dtype=np.float64)[:, :width])
        floor = np.where(valid[:, :width], chances, np.inf).min(axis=1, initial=np.inf)
        floor = np.where(np.isfinite(floor), floor, 0.0)  # a query without results: nothing past the block either
        cosines = np.where(valid, scores, 0.0).astype(np.float64)  # a missing result's score may be NaN or -inf
        blended = (1.0 - self.weight) * cosines
        blended[:, :width] += self.weight * chances
        blended[:, width:] += self.weight * floor[:, None]
        blended[~valid] = -np.inf
        columns = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
        order = np.lexsort((columns, ~identical, -blended), axis=1)  # ties: the query's own image, then search order
        return np.take_along_axis(blended, order, axis=1).astype(np.float32), np.take_along_axis(ids, order, axis=1)

    def search(
        self, gallery: Gallery, queries: np.ndarray, k: int, probabilities: Probabilities
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(n, k)` blended scores and ids: `gallery`'s max(N, k) nearest results of each query, the first N re-scored.

        Args:
            gallery: what is searched (an index under a filter, an evaluation gallery).
            queries: `(n, D)` unit vectors.
            k: results per query.
            probabilities: the pair model's probabilities of each query with `(n, d)` result ids (-1: none),
                given them and their cosines; not called when the weight is 0.
        """
        scores, ids = gallery.search(queries, max(k, self.depth))
        width = min(self.depth, ids.shape[1])
        chances = probabilities(ids[:, :width], scores[:, :width]) if self.weight > 0 else np.zeros((len(ids), width))
        blended, order = self.rescore(scores, ids, chances)
        return blended[:, :k], order[:, :k]


@runtime_checkable
class RowReranker(Protocol):
    """A re-ranker that needs to know which rows of an evaluation split its queries are (a pair model sees images).

    `retrieval.metrics.ranking.per_query_scores` calls `search_rows` instead of `search` for one.
    """

    def database(self, vectors: np.ndarray) -> np.ndarray:
        """The vectors to store (the same ones: a learned re-ranker changes no vector)."""
        ...

    def search_rows(
        self, gallery: Gallery, queries: np.ndarray, rows: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(n, k)` scores and gallery ids of queries `(n, D)` that are the split's rows `rows` `(n,)`."""
        ...


class Validation(Record):
    """A re-ranker's validation metrics with the chosen blend and with the embedding alone."""

    model_config = ConfigDict(extra="forbid", strict=True)

    map_at_r: float
    recall_at_1: float
    map_at_r_without: float
    recall_at_1_without: float
    queries: int
    # the best blend's paired MAP@R gain over the embedding alone: estimate, low, high (95% class bootstrap);
    # None where no blend beat it (and in manifests written before it was recorded)
    gain: list[float] | None = None


class RerankerManifest(Record):
    """`manifest.json` of a re-ranker directory: what it belongs to, how it blends, what it measured."""

    model_config = ConfigDict(extra="allow", strict=True)

    format: int
    created: str  # ISO 8601
    checkpoint: str  # the checkpoint it was trained on (where it was then)
    checkpoint_sha256: str  # its identity: a re-ranker of another checkpoint is refused
    depth: int  # N: results re-scored per query
    weight: float  # w: the pair model's weight in the blend; 0 when it did not beat the embedding on validation
    # the database-side augmentation whose results the blend re-scores (a `dba:k=K,alpha=A` spec); None: the
    # embedding's own search (and in manifests written before it was recorded)
    base: str | None = None
    image_size: int
    descriptor_dim: int
    validation: Validation
    grid: list[dict[str, float]]  # every (depth, weight) tried on validation, with its MAP@R and Recall@1
    pairs: dict[str, int]  # training pairs: total, positives
    train_seconds: float
    parity: dict[str, float]  # the ONNX model's largest difference from PyTorch's (logits, probabilities)
    versions: dict[str, str]
    files: dict[str, str]  # sha256 of every other file
    settings: dict[str, JsonValue]  # the `reranker` config section it trained with

    @property
    def blend(self) -> Blend:
        """The chosen N and w."""
        return Blend(self.depth, self.weight)

    @property
    def applied(self) -> bool:
        """Whether it changes anything: False when validation chose the embedding alone (w = 0)."""
        return self.weight > 0

    def base_augmentation(self) -> DatabaseAugmentation | None:
        """The augmentation of the gallery the blend re-scores, None for the embedding's own vectors."""
        return stored_augmentation(self.base)

    def check_index(self, index: DatabaseAugmentation | None) -> None:
        """Refuse an index whose stored vectors (`index`: its build's augmentation, or None) are not the ones the
        blend was chosen on; a re-ranker that is not applied changes nothing, so it fits any index.

        Raises:
            UserError: the index is augmented otherwise than the re-ranker's base, or not at all.
        """
        if not self.applied:
            return
        base = self.base_augmentation()
        if index == base:
            return
        chosen_on = "plain search results" if base is None else f"{base.spec()} results"
        stored = "plain vectors" if index is None else f"vectors augmented by {index.spec()}"
        build = "without --rerank" if base is None else f"with --rerank {base.spec()}"
        raise UserError(
            f"this re-ranker's blend was chosen on {chosen_on}, but this index stores {stored}: build the index "
            f"{build} (index build --reranker DIR does), or train a re-ranker with --set reranker.base="
            f"{'null' if index is None else index.spec()}"
        )

    def verdict(self) -> str:
        """One line: whether it beat the embedding alone on validation, and by what."""
        val = self.validation
        alone = f"MAP@R {val.map_at_r_without:.4f}, Recall@1 {val.recall_at_1_without:.4f}"
        if self.applied:
            gain = "" if val.gain is None else f", {_gain_text(val.gain)}"
            over = "" if self.base is None else f" over {self.base}"
            return (
                f"re-ranker: N={self.depth}, w={self.weight:g}{over} chosen on validation: MAP@R {val.map_at_r:.4f}, "
                f"Recall@1 {val.recall_at_1:.4f} vs {alone} with the embedding alone ({val.queries} queries{gain})"
            )
        tried = [row for row in self.grid if row["weight"] > 0]
        best = max(tried, key=lambda row: (row["map@r"], row["recall@1"]), default=None)
        reached = (
            "no blend was tried"
            if best is None
            else (
                f"its best blend, N={best['depth']:g}, w={best['weight']:g}: MAP@R {best['map@r']:.4f}, "
                f"Recall@1 {best['recall@1']:.4f}"
            )
        )
        if val.gain is not None:
            reached += f", {_gain_text(val.gain)} that is not clear of 0"
        return (
            f"the re-ranker does not beat the embedding alone on validation ({reached}; the embedding alone: {alone}, "
            f"{val.queries} queries): it will not be applied"
        )

    def belongs_to(self, sha256: str, what: str) -> None:
        """Refuse a re-ranker trained on another checkpoint than the one whose sha256 is `sha256` (`what`'s).

        Raises:
            UserError: the checksums differ.
        """
        if sha256 != self.checkpoint_sha256:
            raise UserError(
                f"this re-ranker belongs to checkpoint {self.checkpoint} (sha256 {self.checkpoint_sha256[:12]}...), "
                f"not to {what} (sha256 {sha256[:12]}...); train one for it with `retrieval reranker --checkpoint CKPT`"
            )

    def record(self) -> dict[str, Any]:
        """JSON-ready."""
        return self.model_dump()


def _gain_text(gain: list[float]) -> str:
    """`a gain of +0.0123 [+0.0010, +0.0240]`: the estimate and its interval."""
    estimate, low, high = gain
    return f"a gain of {estimate:+.4f} [{low:+.4f}, {high:+.4f}]"


@dataclass(frozen=True)
class RerankerFiles:
    """A checked re-ranker directory."""

    directory: Path  # absolute
    manifest: RerankerManifest

    def path(self, name: str) -> Path:
        """One of its files."""
        return self.directory / name


def read_reranker(directory: str | Path) -> RerankerFiles:
    """Read a re-ranker directory and check its files against its manifest.

    Raises:
        UserError: the directory, its manifest or a file is missing, the manifest is damaged or of another
            format, or a file's sha256 is not the one the manifest records.
    """
    directory = Path(directory).resolve()
    path = directory / MANIFEST_FILE
    fix = "train it again with `retrieval reranker --checkpoint CKPT --output-dir DIR`"
    if not path.is_file():
        what = f"has no {MANIFEST_FILE}" if directory.is_dir() else "does not exist"
        raise UserError(f"re-ranker {directory} {what}; pass a directory written by `retrieval reranker`")
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"cannot read {path} ({exc.__class__.__name__}); {fix}") from exc
    found = data.get("format") if isinstance(data, Mapping) else None
    if found != RERANKER_FORMAT:
        raise UserError(f"{path} has format {found!r}, this version reads {RERANKER_FORMAT}; {fix}")
    try:
        manifest = RerankerManifest.model_validate(data)
    except ValidationError as exc:
        raise user_error(RerankerManifest, exc, str(path), f"the manifest is damaged: {fix}") from None
    for name in FILES:
        file = directory / name
        if not file.is_file():
            raise UserError(f"{file} is missing; {fix}")
        if file_sha256(file) != manifest.files.get(name):
            raise UserError(f"{file} is not the file {MANIFEST_FILE} records; the directory was changed: {fix}")
    return RerankerFiles(directory, manifest)
