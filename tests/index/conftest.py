"""Small clustered unit vectors and held-out queries for the index tests, on one FAISS thread."""

from __future__ import annotations

import numpy as np
import pytest

from tests.index.index_oracle import N, clustered_data, one_faiss_thread_only


@pytest.fixture(scope="session")
def data() -> tuple[np.ndarray, np.ndarray]:
    """`(N, DIM)` stored vectors and `(QUERIES, DIM)` held-out queries from the same 40 classes."""
    return clustered_data()


@pytest.fixture(scope="session")
def metadata() -> dict[str, list]:
    return {"path": [f"images/{i:05d}.png" for i in range(N)], "label": [f"class{i % 40}" for i in range(N)]}


@pytest.fixture(autouse=True, scope="session")
def one_faiss_thread():
    """The index tests on one FAISS thread (`one_faiss_thread_only`)."""
    with one_faiss_thread_only():
        yield
