"""The query grid: ranking against a brute-force numpy search, selection, and the PNG."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from retrieval.data import EvalSplit
from retrieval.report import query_grid
from retrieval.report.query_grid import draw_query_grid, rank_queries, select_queries


def _split(seed: int = 0, n: int = 40, masks: bool = False):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, size=n)
    embeddings = rng.normal(size=(n, 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    query_mask = gallery_mask = None
    if masks:
        query_mask = np.arange(n) % 2 == 0
        gallery_mask = ~query_mask
    return embeddings, EvalSplit(None, labels, query_mask, gallery_mask)


@pytest.mark.parametrize("masks", [False, True])
def test_ranking_matches_brute_force(masks):
    embeddings, split = _split(masks=masks)
    ranked = rank_queries(embeddings, split)
    gallery = np.flatnonzero(split.gallery_mask if masks else np.ones(len(split.labels), bool))
    for position, query in enumerate(ranked.rows):
        candidates = gallery[gallery != query]
        similarities = embeddings[candidates] @ embeddings[query]
        order = candidates[np.argsort(-similarities, kind="stable")]
        assert ranked.neighbors[position].tolist() == order[:5].tolist()
        hits = split.labels[order] == split.labels[query]
        assert ranked.first_hit[position] == int(np.argmax(hits))
    assert len(ranked.rows) == len(set(ranked.rows))


def test_worst_queries_come_first_and_random_is_seeded(tmp_path):
    embeddings, split = _split(seed=1)
    ranked = rank_queries(embeddings, split)
    worst = select_queries(ranked, 6, "worst")
    assert ranked.first_hit[worst].tolist() == sorted(ranked.first_hit, reverse=True)[:6]
    random_pick = select_queries(ranked, 6, "random", seed=3)
    assert random_pick.tolist() == select_queries(ranked, 6, "random", seed=3).tolist() and len(set(random_pick)) == 6
    path = tmp_path / "grid.png"
    draw_query_grid(ranked, worst, split.labels, lambda row: np.full((8, 8), row / 40.0), path, "worst")
    with Image.open(path) as image:
        assert image.size[0] > image.size[1] / 2 and image.size[1] > 6 * 100  # six rows of six images


def test_captions_name_classes_by_the_datasets_labels_and_give_scores_to_four_decimals(tmp_path, monkeypatch):
    embeddings, split = _split(seed=2)
    ranked = rank_queries(embeddings, split)
    captions: list[str] = []
    monkeypatch.setattr(query_grid, "_show", lambda ax, image, colour, caption: captions.append(caption))
    names = ["cat", "dog", "a very long class name from a CSV label", "owl", "fox"]
    chosen = select_queries(ranked, 2, "worst")
    draw_query_grid(ranked, chosen, split.labels, lambda row: np.zeros((8, 8)), tmp_path / "g.png", "t", names)
    query_row, top_row = ranked.rows[chosen[0]], ranked.neighbors[chosen[0]][0]

    def shown(label: int) -> str:
        return names[label] if len(names[label]) <= 22 else names[label][:21] + "…"

    assert captions[0] == f"query: {shown(split.labels[query_row])}\nfirst hit #{ranked.first_hit[chosen[0]] + 1}"
    assert captions[1] == f"{shown(split.labels[top_row])}\n{ranked.similarities[chosen[0]][0]:.4f}"
    assert "a very long class nam…" in "\n".join(captions)
