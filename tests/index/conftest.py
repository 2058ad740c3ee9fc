"""Small clustered unit vectors and held-out queries for the index tests, on one FAISS thread."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from tests.index.index_oracle import N, clustered_data


@pytest.fixture(scope="session")
def data() -> tuple[np.ndarray, np.ndarray]:
    """`(N, DIM)` stored vectors and `(QUERIES, DIM)` held-out queries from the same 40 classes."""
    return clustered_data()


@pytest.fixture(scope="session")
def metadata() -> dict[str, list]:
    return {"path": [f"images/{i:05d}.png" for i in range(N)], "label": [f"class{i % 40}" for i in range(N)]}


@pytest.fixture(autouse=True, scope="session")
def one_faiss_thread():
    """One FAISS thread: on a shared CI core, OpenMP threads spinning against each other make
    small k-means runs tens of times slower; the results do not depend on the thread count."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)
