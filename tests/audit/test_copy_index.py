"""The copy check's index: exact against a brute-force oracle, coded (float16 store, product-quantizer search) past a
lowered exact limit against the exact one and the planted copies, and searched only where the ratio rule reads."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageEnhance

from retrieval.audit.copies import SIZE, Described, describe_images, picture_key
from retrieval.audit.copy_index import copy_graph, copy_index
from retrieval.audit.leaks import Leaks, copy_leaks, find_leaks, read_pictures
from tests.properties import examples

_LOWERED = 1000  # descriptors: the catalogue below has about 4,000, so its index is coded


def _jpeg(image: Image.Image) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=60)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


_COPIES = (  # how a planted copy is made from its source
    _jpeg,
    lambda image: image.resize((34, 34)).resize((48, 48)),
    lambda image: image.crop((3, 2, 47, 46)).resize((48, 48)),
    lambda image: ImageEnhance.Color(ImageEnhance.Brightness(image).enhance(1.15)).enhance(0.8),
)


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[str], dict[int, int]]:
    """150 smooth random colour pictures (120 train, 10 val, 20 test), 8 test copies of train or val pictures (each
    kind twice), a byte-identical test copy, and an unreadable file. Returns paths, splits and copy row -> source."""
    folder = tmp_path_factory.mktemp("copies")
    rng = np.random.default_rng(0)
    paths: list[Path] = []
    splits = ["train"] * 120 + ["val"] * 10 + ["test"] * 20
    for row in range(150):
        paths.append(folder / f"{row}.png")
        small = Image.fromarray(rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8))
        small.resize((48, 48), Image.Resampling.BICUBIC).save(paths[-1])
    copies = {}
    for number, source in enumerate([3, 17, 40, 55, 81, 99, 124, 127]):  # 124 and 127 are val
        paths.append(folder / f"copy{number}.png")
        _COPIES[number % 4](Image.open(paths[source]).convert("RGB")).save(paths[-1])
        copies[len(paths) - 1] = source
    paths.append(folder / "identical.png")
    paths[-1].write_bytes(paths[60].read_bytes())
    copies[len(paths) - 1] = 60
    paths.append(folder / "unreadable.png")
    paths[-1].write_bytes(b"not an image")
    return paths, splits + ["test"] * (len(paths) - 150), copies


def test_past_the_exact_limit_the_store_is_float16_and_holds_every_picture_once(catalogue):
    paths, _, _ = catalogue
    exact = copy_index(describe_images(paths, progress=False))
    coded = copy_index(describe_images(paths, progress=False), exact_limit=_LOWERED)
    assert exact.exact and not coded.exact
    assert coded.store.ntotal == exact.store.ntotal == exact.offsets[-1] > _LOWERED
    assert exact.pictures[-2] == exact.pictures[60] and exact.pictures[-1] == -1  # identical file; unreadable
    for field in ("pictures", "rows", "offsets"):
        assert np.array_equal(getattr(coded, field), getattr(exact, field))
    stored, held = coded.store.reconstruct_n(0, coded.store.ntotal), exact.store.reconstruct_n(0, exact.store.ntotal)
    assert np.abs(stored - held).max() < 1e-3 and not np.array_equal(stored, held)


@pytest.fixture(scope="module")
def coded_leaks(catalogue: tuple[list[Path], list[str], dict[int, int]]) -> Leaks:
    paths, splits, _ = catalogue
    return copy_leaks(paths, splits, progress=False, exact_limit=_LOWERED)


def test_the_coded_index_finds_every_planted_copy(catalogue, coded_leaks):
    _, _, copies = catalogue
    assert np.flatnonzero(coded_leaks.leaked).tolist() == sorted(copies)
    assert {row: int(coded_leaks.partner[row]) for row in copies} == copies


def test_the_ratio_rule_answers_alike_on_the_exact_and_the_coded_index(catalogue, coded_leaks):
    paths, splits, _ = catalogue
    exact = copy_leaks(paths, splits, progress=False)
    assert np.array_equal(coded_leaks.leaked, exact.leaked)
    assert np.array_equal(coded_leaks.partner, exact.partner)
    seen = np.isfinite(exact.ratio)
    assert np.array_equal(np.isfinite(coded_leaks.ratio), seen)
    # float16 descriptors scaled back to unit length keep a cosine to about 1e-4: a ratio moves by a few hundredths.
    assert np.abs(coded_leaks.score[seen] - exact.score[seen]).max() < 5e-4
    assert np.abs(coded_leaks.ratio[seen] - exact.ratio[seen]).max() < 0.05


@pytest.mark.parametrize("limit", [None, _LOWERED])
def test_searching_only_the_pictures_the_ratio_rule_reads_changes_none_of_its_answers(catalogue, limit):
    paths, splits, _ = catalogue
    index = copy_index(describe_images(paths, progress=False), *([] if limit is None else [limit]))
    searched = read_pictures(index.pictures, splits)
    assert 0 < len(searched) < len(index.rows)
    everyone = find_leaks(copy_graph(index, 10), None, splits, pictures=index.pictures)
    partial_graph = copy_graph(index, 10, searched)
    partial = find_leaks(partial_graph, None, splits, pictures=index.pictures)
    unread = np.setdiff1d(np.arange(120), [60])  # training pictures but 60, which a test row shows too
    assert (partial_graph.neighbours[unread] == -1).all() and (partial_graph.neighbours[60] >= 0).all()
    for field in ("partner", "score", "ratio"):
        assert np.array_equal(getattr(partial, field), getattr(everyone, field))


def _unit(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.property
@examples(0.5)
@given(
    images=st.lists(
        st.tuples(st.sampled_from(["new", "again", "unreadable"]), st.integers(1, 26)), min_size=2, max_size=12
    ),
    k=st.integers(1, 11),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_exact_copy_graph_is_each_pictures_best_descriptor_by_brute_force(images, k, seed):
    """Each picture's k nearest other pictures, by the best of their descriptors, as a numpy loop finds them."""
    rng = np.random.default_rng(seed)
    stream: list[Described | None] = []
    shown: list[np.ndarray] = []  # each picture's descriptors
    for kind, count in images:
        if kind == "unreadable":
            stream.append(None)
        elif kind == "again" and shown:
            again = shown[int(rng.integers(len(shown)))]
            stream.append(Described(again, picture_key(again[0], lambda: b"")))
        else:
            shown.append(_unit(rng.normal(size=(count, SIZE * SIZE))))
            stream.append(Described(shown[-1], picture_key(shown[-1][0], lambda: b"")))
    index = copy_index(stream)
    graph = copy_graph(index, k)
    assert index.exact and len(index.rows) == len(shown)
    for picture, row in enumerate(index.rows):
        best = np.array([(descriptors @ shown[picture][0]).max() for descriptors in shown])
        others = [other for other in np.argsort(-best, kind="stable") if other != picture][:k]
        assert graph.neighbours[row].tolist() == [*index.rows[others].tolist(), *[-1] * (k - len(others))]
        np.testing.assert_allclose(graph.scores[row, : len(others)], best[others], atol=1e-5)
    assert (graph.neighbours[np.setdiff1d(np.arange(len(stream)), index.rows)] == -1).all()
