"""`retrieval index query --reranker DIR`: a learned re-ranker through onnxruntime, as PyTorch applies it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrieval.cli.main import main

pytestmark = pytest.mark.slow

NO_WORKERS = ["--num-workers", "0", "--device", "cpu"]


@pytest.fixture(scope="module")
def indexed(tiny_reranker, tiny_reranker_indexes) -> tuple[Path, Path, Path, list[Path]]:
    """(index dir of the re-ranker's dataset, the re-ranker forced to apply (N=4, w=0.5), its checkpoint, queries)."""
    checkpoint, dataset, _, _ = tiny_reranker
    index, forced, _ = tiny_reranker_indexes
    return index, forced, checkpoint, sorted((dataset.parent / "images").glob("*_0.png"))[:5]


def _query(capsys, index: Path, reranker: Path, images: list[Path], *args: str) -> list[dict]:
    capsys.readouterr()
    command = ["index", "query", "--index", str(index), "--image", *map(str, images), "--json", *NO_WORKERS]
    assert main([*command, "--reranker", str(reranker), *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_each_image_comes_back_first_with_k_results_in_descending_order(indexed, capsys):
    index, reranker, _, queries = indexed
    for answer, image in zip(_query(capsys, index, reranker, queries, "-k", "7"), queries, strict=True):
        scores = [result["score"] for result in answer["results"]]
        assert len(scores) == 7 and scores == sorted(scores, reverse=True) and np.isfinite(scores).all()
        assert Path(answer["results"][0]["path"]).name == image.name
    filtered = _query(capsys, index, reranker, queries, "-k", "50", "--where", "split = 'test'")
    assert all(len(answer["results"]) == 18 for answer in filtered)  # every test image passes, and only they
    assert all(result["split"] == "test" for answer in filtered for result in answer["results"])


@pytest.fixture(params=["plain", "over dba"])
def index_and_reranker(request, indexed) -> tuple[Path, Path]:
    """The plain index with the re-ranker, or the dba index with the re-ranker chosen over that dba."""
    return indexed[:2] if request.param == "plain" else request.getfixturevalue("tiny_reranker_over_dba")


def test_onnx_in_index_query_agrees_with_the_pytorch_pair_model(index_and_reranker, indexed, capsys):
    """The same blend with PyTorch's descriptors and head over the same index (its stored vectors plain or
    augmented): the same ids, scores within 1e-4."""
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.core.learned_rerank import read_reranker
    from retrieval.evaluate.learned_rerank import load_pair_model, pair_probabilities
    from retrieval.images import load_image
    from retrieval.index import SearchIndex
    from retrieval.index.gallery import IndexGallery
    from retrieval.inference.image_encoder import ImageEncoder

    index_dir, directory = index_and_reranker
    checkpoint, queries = indexed[2:]
    answers = _query(capsys, index_dir, directory, queries, "-k", "6")
    files = read_reranker(directory)
    encoder = ImageEncoder.from_checkpoint(checkpoint, device="cpu")
    model = load_pair_model(files, Checkpoint.read(checkpoint).embedder(), 3)
    index = SearchIndex.load(index_dir)
    images = [load_image(path) for path in queries]
    embeddings = encoder.embed_images(images)

    def describe(pictures):
        with torch.no_grad():
            return model.describe(torch.stack([encoder.preprocess(picture) for picture in pictures])).numpy()

    described = describe(images)

    def probabilities(ids, cosines):
        found = ids >= 0
        rows = np.broadcast_to(np.arange(len(ids))[:, None], ids.shape)[found]
        results = describe([load_image(row["path"]) for row in index.metadata_for(ids[found])])
        out = np.zeros(ids.shape)
        out[found] = pair_probabilities(model.head, described[rows], results, cosines[found])
        return out

    scores, ids = files.manifest.blend.search(IndexGallery(index), embeddings, 6, probabilities)
    for row, answer in enumerate(answers):
        assert [result["id"] for result in answer["results"]] == ids[row].tolist()
        np.testing.assert_allclose([result["score"] for result in answer["results"]], scores[row], atol=1e-4)


def test_a_reranker_of_another_checkpoint_and_two_rerankings_are_refused(indexed, tiny_reranker_indexes, capsys):
    index, reranker, _, queries = indexed
    built = tiny_reranker_indexes[2]
    command = ["index", "query", "--image", str(queries[0]), *NO_WORKERS, "--reranker", str(reranker)]
    assert main([*command, "--index", str(built)]) == 2
    assert "this re-ranker belongs to checkpoint" in capsys.readouterr().err
    assert main([*command, "--index", str(index), "--rerank", "qe"]) == 2
    assert "two re-rankings" in capsys.readouterr().err


def test_min_score_with_a_reranker_is_refused_as_its_scores_are_no_cosines(indexed, capsys):
    index, reranker, _, queries = indexed
    command = ["index", "query", "--index", str(index), "--image", str(queries[0]), "--reranker", str(reranker)]
    assert main([*command, *NO_WORKERS, "--min-score", "0.5"]) == 2
    assert "--min-score compares cosines" in capsys.readouterr().err


def test_a_reranker_over_dba_answers_k_results_in_order_and_needs_an_index_of_that_dba(
    indexed, tiny_reranker_over_dba, capsys
):
    index, reranker, _, queries = indexed
    dba_index, over_dba = tiny_reranker_over_dba
    for answer in _query(capsys, dba_index, over_dba, queries, "-k", "7", "--where", "split = 'test'"):
        scores = [result["score"] for result in answer["results"]]
        assert len(scores) == 7 and scores == sorted(scores, reverse=True) and np.isfinite(scores).all()
        assert all(result["split"] == "test" for result in answer["results"])
    command = ["index", "query", "--image", str(queries[0]), *NO_WORKERS]
    assert main([*command, "--index", str(index), "--reranker", str(over_dba)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chosen on dba:k=2,alpha=0 results, but this index stores plain vectors" in err
    assert "build the index with --rerank dba:k=2,alpha=0" in err
    assert main([*command, "--index", str(dba_index), "--reranker", str(reranker)]) == 2
    assert (
        "chosen on plain search results, but this index stores vectors augmented by dba:k=2" in capsys.readouterr().err
    )


def test_index_build_for_a_reranker_makes_the_index_it_takes(
    indexed, tiny_reranker, tiny_reranker_over_dba, tmp_path, capsys
):
    """`index build --reranker DIR` stores its dba (the library's test: tests/export/test_index_build.py)."""
    _, dataset, _, _ = tiny_reranker
    _, _, checkpoint, queries = indexed
    over_dba, index = tiny_reranker_over_dba[1], tmp_path / "index"
    build = ["index", "build", "--checkpoint", str(checkpoint), "--csv", str(dataset), "--out", str(index)]
    assert main([*build, "--type", "flat", "--reranker", str(over_dba), *NO_WORKERS]) == 0
    assert len(_query(capsys, index, over_dba, queries[:1], "-k", "3")[0]["results"]) == 3
