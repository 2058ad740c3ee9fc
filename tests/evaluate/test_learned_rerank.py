"""`evaluate --reranker`: test scored with a learned re-ranker and with the embedding alone, both printed."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.core.learned_rerank import MANIFEST_FILE, Blend
from retrieval.data import EvalSplit
from retrieval.evaluate.evaluator import score_split
from retrieval.evaluate.learned_rerank import split_reranker
from retrieval.models.pair_model import PairHead


def test_a_split_reranker_scores_the_rows_it_is_told_and_skips_unreadable_ones():
    """A head that answers 1 exactly for the pairs with row 7 makes row 7 every other query's first result."""
    import torch

    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((12, 4)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    embeddings[5] = np.nan  # an image skipped as unreadable: row 7 is the 7th of the rows scored
    labels = np.arange(12) % 3
    descriptors = np.zeros((12, 2), np.float32)
    descriptors[7] = 1.0
    head = PairHead(2)  # [q * r, |q - r|, cosine] -> Linear -> GELU -> Linear
    with torch.no_grad():
        for layer in (head.mlp[0], head.mlp[2]):
            layer.weight.zero_()
            layer.bias.zero_()
        head.mlp[0].weight[0, 2] = 1.0  # |q - r| of the first column: 1 for a pair with row 7, else 0
        head.mlp[2].weight[0, 0] = 50.0
        head.mlp[2].bias.fill_(-25.0)  # logit +17 or -25
    split = EvalSplit(dataset=None, labels=labels)  # type: ignore[arg-type]
    reranker = split_reranker(Blend(depth=11, weight=1.0), head, embeddings, descriptors, split)
    plain = score_split(embeddings, split)[1]
    _, scores = score_split(embeddings, split, rerank=reranker)
    kept = np.array([row for row in range(12) if row != 5])
    assert scores.rows.tolist() == list(range(11))  # positions among the rows scored
    for position, row in enumerate(kept[scores.rows]):
        expected = labels[row] == labels[7] if row != 7 else plain.hits(1)[position]
        assert scores.hits(1)[position] == expected, row


pytestmark = pytest.mark.slow


def test_evaluate_prints_the_embedding_alone_and_the_reranked_rows(tiny_reranker, tmp_path, capsys):
    checkpoint, dataset, directory, _ = tiny_reranker
    base = ["evaluate", "--checkpoint", str(checkpoint), "--set", f"data.path={dataset}"]
    base += ["--set", "data.val_fraction=0.34", "--set", "data.num_workers=0", "--json", str(tmp_path / "m.json")]
    forced = tmp_path / "applied"
    shutil.copytree(directory, forced)
    manifest = json.loads((forced / MANIFEST_FILE).read_text())
    manifest.update(depth=4, weight=0.5)  # applied whatever validation chose: the pair model's path runs
    (forced / MANIFEST_FILE).write_text(json.dumps(manifest))
    for chosen, applied in ((directory, None), (forced, True)):
        assert main([*base, "--reranker", str(chosen)]) == 0
        out = capsys.readouterr().out
        record = json.loads((tmp_path / "m.json").read_text())["reranker"]
        assert "embedding alone" in out and "re-ranked" in out
        if applied is None:
            applied = record["applied"]
        assert record["applied"] == applied
        if not applied:
            assert "it will not be applied" in out and record["reranked"] == record["embedding_alone"]
        else:
            assert "re-ranked (N=4, w=0.5)" in out
            assert json.loads((tmp_path / "m.json").read_text())["recall@1"] == record["reranked"]["recall@1"]


def test_a_reranker_of_another_checkpoint_or_image_size_is_refused(tiny_reranker, other_checkpoint, capsys):
    checkpoint, dataset, directory, _ = tiny_reranker
    sets = ["--set", f"data.path={dataset}", "--set", "data.num_workers=0"]
    assert main(["evaluate", "--checkpoint", str(other_checkpoint), *sets, "--reranker", str(directory)]) == 2
    assert "this re-ranker belongs to checkpoint" in capsys.readouterr().err
    sized = ["--set", "data.image_size=48", "--reranker", str(directory)]
    assert main(["evaluate", "--checkpoint", str(checkpoint), *sets, *sized]) == 2
    assert "trained at data.image_size=32" in capsys.readouterr().err
    both = ["--rerank", "qe", "--reranker", str(directory)]
    assert main(["evaluate", "--checkpoint", str(checkpoint), *sets, *both]) == 2
    assert "evaluate one at a time" in capsys.readouterr().err
