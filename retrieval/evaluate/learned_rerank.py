"""A learned pairwise re-ranker on an evaluation split: its blend chosen on validation, and scored like any re-ranker.

`SplitReranker` applies a `Blend` (`retrieval.core.learned_rerank`) to a split whose images were all described
once by the pair model (`describe_split`): a query's pairs then cost the head alone, and each (query, result)
probability is computed once however many blends are tried. `choose_blend` tries every depth N and weight w
of the `reranker` config section on the validation split and keeps the best MAP@R (ties: Recall@1, then the
smaller w and N); w = 0, the embedding alone, is always a candidate, so a re-ranker that does not help is
chosen away, and so is one whose gain's paired interval does not clear 0 (`reranker.require_clear_gain`).
With a `base` augmentation the split's gallery is stored augmented and the blend re-scores its results; the
embedding alone stays the candidate to beat.
`retrieval reranker` chooses with it and `evaluate --reranker` scores test with the choice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from retrieval.core.learned_rerank import WEIGHTS_FILE, Blend, RerankerFiles
from retrieval.core.rerank import DatabaseAugmentation, Gallery
from retrieval.evaluate.evaluator import embed_dataset, readable_rows, score_split
from retrieval.inference.forward import Precision
from retrieval.metrics.bootstrap import Interval, paired_difference
from retrieval.models.pair_model import PairHead, PairModel

if TYPE_CHECKING:
    from torch.utils.data import Dataset

    from retrieval.config import RerankerConfig
    from retrieval.data import EvalSplit
    from retrieval.models import Embedder

__all__ = [
    "BlendChoice",
    "SplitReranker",
    "choose_blend",
    "describe_split",
    "load_pair_model",
    "pair_probabilities",
    "split_reranker",
]

_PAIRS_PER_BATCH = 8192  # head evaluations at once


def load_pair_model(files: RerankerFiles, embedder: Embedder, in_chans: int) -> PairModel:
    """The PyTorch pair model of a checked re-ranker directory, built on (a copy of) the checkpoint's `embedder`."""
    from safetensors.torch import load_file

    from retrieval.config import RerankerConfig

    settings = RerankerConfig.model_validate(files.manifest.settings)  # the settings it trained with
    model = PairModel(embedder, settings.width, settings.grid, in_chans, files.manifest.image_size)
    model.load_state_dict(load_file(str(files.path(WEIGHTS_FILE))))
    return model.eval()


def describe_split(
    model: PairModel, dataset: Dataset, batch_size: int, device: torch.device, precision: Precision, workers: int = 0
) -> np.ndarray:
    """`(N, P)` descriptors of every image of `dataset` (NaN rows for images skipped as unreadable)."""
    return embed_dataset(
        model.describe.eval(),
        dataset,
        batch_size,
        device,
        num_workers=workers,
        amp_dtype=precision.amp_dtype,
        channels_last=precision.channels_last,
    )


@torch.no_grad()
def pair_probabilities(head: PairHead, queries: np.ndarray, results: np.ndarray, cosines: np.ndarray) -> np.ndarray:
    """`(M,)` float64 probabilities that each (query, result) pair matches, from `(M, P)` descriptors and cosines."""
    device = next(head.parameters()).device
    out = np.empty(len(queries), dtype=np.float64)
    for start in range(0, len(queries), _PAIRS_PER_BATCH):
        part = slice(start, start + _PAIRS_PER_BATCH)
        tensors = (torch.as_tensor(np.ascontiguousarray(array[part]), device=device) for array in (queries, results))
        cos = torch.as_tensor(np.asarray(cosines[part], dtype=np.float32), device=device)
        out[part] = torch.sigmoid(head.eval()(*tensors, cos)).double().cpu().numpy()
    return out


class SplitReranker:
    """A `RowReranker` of one evaluation split: the blend applied with the split's described images.

    Args:
        blend: N and w.
        head: the pair model's head.
        descriptors: `(N, P)` descriptors of the split's rows that `score_split` scores (`readable_rows`).
        gallery_rows: the positions, among those rows, of the gallery's items in gallery order.
        memo: (query row, gallery id) -> probability, shared by the blends tried on one split.
        base: the augmentation of the gallery whose results the blend re-scores; None: the vectors as they are.
    """

    def __init__(
        self,
        blend: Blend,
        head: PairHead,
        descriptors: np.ndarray,
        gallery_rows: np.ndarray,
        memo: dict[tuple[int, int], float] | None = None,
        base: DatabaseAugmentation | None = None,
    ) -> None:
        self.blend, self.head, self.descriptors, self.gallery_rows = blend, head, descriptors, gallery_rows
        self.memo = {} if memo is None else memo
        self.base = base

    def database(self, vectors: np.ndarray) -> np.ndarray:
        """The gallery's vectors as the base stores them (a pair model itself changes no vector)."""
        return vectors if self.base is None else self.base.database(vectors)

    def search_rows(
        self, gallery: Gallery, queries: np.ndarray, rows: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(n, k)` blended scores and gallery ids of queries `(n, D)`, the split's rows `rows`."""

        def probabilities(ids: np.ndarray, cosines: np.ndarray) -> np.ndarray:
            return self._probabilities(rows, ids, cosines)

        return self.blend.search(gallery, queries, k, probabilities)

    def _probabilities(self, rows: np.ndarray, ids: np.ndarray, cosines: np.ndarray) -> np.ndarray:
        """`(n, d)` probabilities of query rows `rows` with gallery ids `ids` (-1: none, 0 returned)."""
        keys = [(int(row), int(item)) for row, line in zip(rows, ids, strict=True) for item in line]
        missing = [i for i, key in enumerate(keys) if key[1] >= 0 and key not in self.memo]
        if missing:
            query_rows = np.array([keys[i][0] for i in missing])
            result_rows = self.gallery_rows[np.array([keys[i][1] for i in missing])]
            found = pair_probabilities(
                self.head, self.descriptors[query_rows], self.descriptors[result_rows], cosines.reshape(-1)[missing]
            )
            self.memo.update(zip((keys[i] for i in missing), found.tolist(), strict=True))
        flat = np.array([self.memo.get(key, 0.0) for key in keys], dtype=np.float64)
        return flat.reshape(ids.shape)


def split_reranker(
    blend: Blend,
    head: PairHead,
    embeddings: np.ndarray,
    descriptors: np.ndarray,
    split: EvalSplit,
    memo: dict[tuple[int, int], float] | None = None,
    base: DatabaseAugmentation | None = None,
) -> SplitReranker:
    """The `SplitReranker` of `split`, whose `(N, D)` embeddings and `(N, P)` descriptors are row-aligned with it."""
    kept = readable_rows(embeddings)
    in_gallery = np.ones(len(embeddings), bool) if split.gallery_mask is None else split.gallery_mask
    return SplitReranker(blend, head, descriptors[kept], np.flatnonzero(in_gallery[kept]), memo, base)


class BlendChoice(NamedTuple):
    """The blend chosen on validation, the metrics with it and without, and every blend tried."""

    blend: Blend
    metrics: dict[str, float]  # validation MAP@R / Recall@1 with the chosen blend
    without: dict[str, float]  # ... with the embedding alone
    queries: int
    grid: list[dict[str, float]]  # depth, weight, map@r, recall@1 of every blend tried
    gain: Interval | None  # the best blend's paired MAP@R gain over the embedding alone; None: none beat it


def choose_blend(
    head: PairHead,
    embeddings: np.ndarray,
    descriptors: np.ndarray,
    split: EvalSplit,
    settings: RerankerConfig,
    base: DatabaseAugmentation | None = None,
) -> BlendChoice:
    """The depth and weight of `settings.depths` x `settings.weights` with the best validation MAP@R.

    The embedding alone (w = 0) is scored once, without the pair model, and wins every tie. With
    `settings.require_clear_gain` the best blend is kept only where its paired class-bootstrap 95% interval of
    the MAP@R gain lies above 0: a gain of a query or two on a small validation split is noise. With `base`
    every blend re-scores the augmented gallery's results; the embedding alone is still the one to beat.
    """
    plain, scored = score_split(embeddings, split)
    best, best_metrics, best_scores = Blend(min(settings.depths), 0.0), plain, scored
    grid = [{"depth": 0, "weight": 0.0, "map@r": plain["map@r"], "recall@1": plain["recall@1"]}]
    memo: dict[tuple[int, int], float] = {}
    for depth in sorted(set(settings.depths)):
        for weight in sorted(set(settings.weights) - {0.0}):
            blend = Blend(depth, weight)
            reranker = split_reranker(blend, head, embeddings, descriptors, split, memo, base)
            metrics, scores = score_split(embeddings, split, rerank=reranker)
            grid.append({"depth": depth, "weight": weight, "map@r": metrics["map@r"], "recall@1": metrics["recall@1"]})
            if _key(metrics) > _key(best_metrics):
                best, best_metrics, best_scores = blend, metrics, scores
    if best.weight == 0:
        return BlendChoice(best, plain, plain, len(scored.rows), grid, None)
    gain = paired_difference(best_scores.average_precision, scored.average_precision, scored.labels)
    if settings.require_clear_gain and gain.low <= 0:
        best, best_metrics = Blend(min(settings.depths), 0.0), plain
    return BlendChoice(best, best_metrics, plain, len(scored.rows), grid, gain)


def _key(metrics: dict[str, float]) -> tuple[float, float]:
    return metrics["map@r"], metrics["recall@1"]
