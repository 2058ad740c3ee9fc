"""`build_index`, what `retrieval index build` runs: a typed request in, the index saved and a typed report out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.index_query import QueryRequest, query_index
from retrieval.index import SearchIndex

CHECKPOINT = EncoderChoice(checkpoint=Path("best.pt"))
FILES = (Path("e.npy"),)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"embeddings": FILES, "column_types": "a=int"}, "--column-types types the columns of --csv/--images"),
        ({"embeddings": FILES, "rerank": "dba"}, "--rerank dba needs every vector at once"),
        ({"embeddings": FILES, "reranker": Path("r")}, "--reranker needs every vector at once"),
        ({"embeddings": FILES, "exclude": Path("x.csv")}, "--exclude leaves images out of --csv/--images"),
        (
            {"embeddings": FILES, "encoder": EncoderChoice(model=Path("m")), "csv": Path("a.csv")},
            "--embeddings builds from vectors already made: drop --model, --csv",
        ),
        ({"csv": Path("a.csv"), "encoder": CHECKPOINT, "trained": Path("t")}, "--trained and --shard build shards"),
        ({"csv": Path("a.csv"), "encoder": CHECKPOINT, "shard": (0, 2)}, "--trained and --shard build shards"),
        ({"csv": Path("a.csv")}, "index build needs a model (--checkpoint CKPT, --model EXPORT_DIR or --backbone"),
        ({"encoder": CHECKPOINT}, "index build needs the images to index: --csv FILE or --images DIR"),
        ({"csv": Path("a.csv"), "encoder": CHECKPOINT, "rerank": "qe"}, "qe re-ranks queries, not the stored vectors"),
        (
            {"csv": Path("a.csv"), "encoder": CHECKPOINT, "rerank": "dba", "reranker": Path("r")},
            "--reranker brings the dba its blend was chosen over: drop --rerank",
        ),
        ({"csv": Path("a.csv"), "encoder": CHECKPOINT, "rerank": "dba:alpha=x"}, "re-ranking dba: alpha='x' is not"),
    ],
)
def test_a_request_that_cannot_be_built_is_one_line_when_made(fields: dict, message: str) -> None:
    with pytest.raises(UserError) as caught:
        IndexBuildRequest(out=Path("index"), **fields)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_target_recall_sets_the_tuning() -> None:
    options = [
        IndexBuildRequest(Path("i"), embeddings=FILES, target_recall=target).options() for target in (None, "none", 0.9)
    ]
    assert [(o.target_recall, o.default_target_recall) for o in options] == [(None, 0.95), (None, None), (0.9, 0.95)]


@pytest.mark.parametrize(("fields", "message"), [({"max_memory": "4X"}, "4X")])
def test_a_wrong_option_is_refused_before_any_file_is_read(fields: dict, message: str, tmp_path: Path) -> None:
    missing = {"encoder": EncoderChoice(checkpoint=tmp_path / "none.pt"), "csv": tmp_path / "none.csv"}
    with pytest.raises(UserError, match=message):
        build_index(IndexBuildRequest(tmp_path / "i", **missing, **fields))


def test_a_missing_checkpoint_is_refused_before_the_images_are_embedded(csv_dataset: Path, tmp_path: Path) -> None:
    request = IndexBuildRequest(tmp_path / "i", EncoderChoice(checkpoint=tmp_path / "none.pt"), csv=csv_dataset)
    with pytest.raises(UserError, match="checkpoint not found"):
        build_index(request)
    assert not (tmp_path / "i").exists()


def test_a_build_from_images_reports_what_it_read_left_out_and_measured(
    csv_dataset: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    images = csv_dataset.parent / "images"
    groups = tmp_path / "near_duplicates.csv"
    groups.write_text(f"group,keep,path\n0,1,{images / 'train_0_0.png'}\n0,0,{images / 'train_0_1.png'}\n")
    choice = EncoderChoice(checkpoint=tiny_checkpoint, device="cpu")
    request = IndexBuildRequest(tmp_path / "index", choice, csv=csv_dataset, exclude=groups, kind="flat")
    report = build_index(request)
    index = SearchIndex.load(tmp_path / "index")
    paths = {row["path"] for row in index.metadata_for(index.ids)}
    assert (report.images, report.excluded, report.vectors, index.ntotal) == (27, 1, 27, 27)
    assert str(images / "train_0_0.png") in paths and str(images / "train_0_1.png") not in paths
    assert report.manifest == index.manifest and report.manifest.kind == "flat" and report.directory == request.out
    assert report.measured.recall_at_k is not None and report.embedding_files is None and report.first_id is None


def test_a_build_from_embedding_files_needs_no_model(tmp_path: Path) -> None:
    vectors = np.random.default_rng(0).normal(size=(150, 8)).astype(np.float32)
    np.save(tmp_path / "e.npy", vectors)
    report = build_index(IndexBuildRequest(tmp_path / "index", embeddings=(tmp_path / "e.npy",), kind="flat"))
    assert (report.vectors, report.embedding_files, report.images, report.first_id) == (150, 1, None, None)
    assert report.measured.queries == 150 and report.measured.recall_at_k == 1.0
    assert SearchIndex.load(tmp_path / "index").ntotal == 150


@pytest.mark.slow
@pytest.mark.parametrize("base", ["dba:k=2,alpha=0", None])
def test_a_build_for_a_reranker_stores_the_vectors_its_blend_was_chosen_on(
    base, tiny_reranker, tiny_reranker_indexes, tiny_reranker_over_dba, tmp_path: Path
) -> None:
    """`index build --reranker DIR`: the re-ranker's dba (or plain vectors), so that `index query --reranker DIR`
    takes the index as it is; the same vectors as `--rerank` with that spec builds."""
    checkpoint, dataset, _, _ = tiny_reranker
    # the forced re-ranker over dba and the index `--rerank dba:k=2,alpha=0` built; the plain forced one and its index
    same, reranker = tiny_reranker_over_dba if base else tiny_reranker_indexes[:2]
    encoder = EncoderChoice(checkpoint=checkpoint, device="cpu")
    report = build_index(IndexBuildRequest(tmp_path / "index", encoder, csv=dataset, kind="flat", reranker=reranker))
    assert report.manifest.database_augmentation == base
    built, expected = SearchIndex.load(tmp_path / "index").all_vectors(), SearchIndex.load(same).all_vectors()
    np.testing.assert_array_equal(built[0], expected[0])
    np.testing.assert_array_equal(built[1], expected[1])
    image = sorted((dataset.parent / "images").glob("train_0_*.png"))[0]
    answer = query_index(QueryRequest(tmp_path / "index", (image,), k=3, reranker=reranker, device="cpu"))
    assert len(answer.answers[0].results) == 3


@pytest.mark.slow
def test_a_build_for_a_reranker_of_another_checkpoint_is_refused_before_embedding(
    tiny_reranker, other_checkpoint, tmp_path: Path
) -> None:
    _, dataset, reranker, _ = tiny_reranker
    request = IndexBuildRequest(
        tmp_path / "index", EncoderChoice(checkpoint=other_checkpoint, device="cpu"), csv=dataset, reranker=reranker
    )
    with pytest.raises(UserError, match="this re-ranker belongs to checkpoint .* not to the checkpoint this index"):
        build_index(request)
    assert not (tmp_path / "index").exists()
