"""The `auto` choice over N and memory, explicit plans, memory parsing."""

from __future__ import annotations

import pytest

from retrieval.errors import UserError
from retrieval.index import choose_index, parse_memory, plan_index
from retrieval.index.choice import FLAT_MAX_VECTORS, TRAINING_VECTORS_PER_CENTROID


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4G", 4 * 1024**3), ("512M", 512 * 1024**2), ("1.5GiB", int(1.5 * 1024**3)), ("800k", 800 * 1024), ("123", 123)],
)
def test_parse_memory(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["lots", "4X", "-1G", "0"])
def test_parse_memory_rejects_nonsense(text: str) -> None:
    with pytest.raises(UserError, match="memory"):
        parse_memory(text)


def test_small_collections_are_searched_exactly() -> None:
    assert choose_index(1000, 128).kind == "flat"
    assert choose_index(FLAT_MAX_VECTORS, 128).kind == "flat"


def test_large_collections_without_a_budget_get_hnsw() -> None:
    plan = choose_index(1_000_000, 128)
    assert plan.kind == "hnsw" and plan.factory == "IDMap2,HNSW32,Flat"
    assert plan.parameters["ef_construction"] > 40  # FAISS's default links clustered data poorly


def test_the_budget_walks_down_from_hnsw_to_ivf_to_ivfpq() -> None:
    n, dim = 1_000_000, 128
    hnsw, ivf, ivfpq = (plan_index(n, dim, kind) for kind in ("hnsw", "ivf", "ivfpq"))
    assert hnsw.bytes_per_vector > ivf.bytes_per_vector > ivfpq.bytes_per_vector
    assert choose_index(n, dim, int(hnsw.bytes_per_vector * n)).kind == "hnsw"
    assert choose_index(n, dim, int(hnsw.bytes_per_vector * n) - 1).kind == "ivf"
    assert choose_index(n, dim, int(ivf.bytes_per_vector * n) - 1).kind == "ivfpq"
    assert choose_index(n, dim, parse_memory("48M")).bytes_per_vector <= 48
    with pytest.raises(UserError, match="raise --max-memory"):
        choose_index(n, dim, int(ivfpq.bytes_per_vector * n) - 1)


def test_ivf_lists_are_about_four_sqrt_n_and_each_has_its_training_vectors() -> None:
    assert plan_index(1_000_000, 128, "ivf").parameters["nlist"] == 4000
    small = plan_index(10_000, 128, "ivf")
    assert small.min_training_vectors <= 10_000
    assert small.parameters["nlist"] == 10_000 // TRAINING_VECTORS_PER_CENTROID


def test_every_choice_can_be_overridden() -> None:
    assert plan_index(10**6, 128, "ivf", nlist=1024).factory == "IVF1024,Flat"
    assert plan_index(10**6, 128, "hnsw", hnsw_m=16).factory == "IDMap2,HNSW16,Flat"
    assert plan_index(10**6, 128, "ivfpq", nlist=2048, pq_bytes=32).factory == "IDMap2,IVF2048,PQ64x4fsr,RFlat"
    assert choose_index(10**6, 128, parse_memory("40M"), nlist=512).parameters["nlist"] == 512


def test_bad_kind_and_parameters_are_user_errors() -> None:
    with pytest.raises(UserError, match="unknown index kind 'annoy'; use one of: auto, flat"):
        plan_index(100, 8, "annoy")
    with pytest.raises(UserError, match="nlist must be a positive integer"):
        plan_index(100, 8, "ivf", nlist=0)
    with pytest.raises(UserError, match="divisible"):
        plan_index(10**5, 100, "ivfpq", pq_bytes=16)


def test_every_kind_is_one_row_of_kinds_from_which_the_cli_manifest_and_removal_derive(tmp_path) -> None:
    """The CLI's choices, the manifest's accepted kinds and native removal all read `KINDS`, in its order."""
    import argparse

    import numpy as np
    from pydantic import ValidationError

    from retrieval.cli.index_build import add_parser
    from retrieval.index import SearchIndex
    from retrieval.index.choice import KINDS
    from retrieval.index.manifest import IndexManifest

    assert list(KINDS) == ["flat", "hnsw", "ivf", "ivfpq"]
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    (build,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    (kind_option,) = [action for action in build.choices["build"]._actions if action.dest == "type"]
    assert list(kind_option.choices) == ["auto", *KINDS]
    with pytest.raises(ValidationError, match="one of flat, hnsw, ivf, ivfpq"):
        IndexManifest.model_validate({"kind": "auto"})
    vectors = np.random.default_rng(0).normal(size=(2_000, 16)).astype(np.float32)
    for kind, spec in KINDS.items():
        assert plan_index(2_000, 16, kind).kind == kind
        index = SearchIndex.build(vectors, kind=kind, nlist=8, progress=False, default_target_recall=None)
        index.remove([0, 1])
        assert index.ntotal == 1_998 and (index.manifest.stored == 1_998) is spec.native_remove, kind  # or hidden
