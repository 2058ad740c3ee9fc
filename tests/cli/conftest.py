"""The index tests' vectors, for the index commands' tests here (tests/index/conftest.py has the same)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.index.index_oracle import clustered_data, one_faiss_thread_only


@pytest.fixture(scope="session")
def data() -> tuple[np.ndarray, np.ndarray]:
    """`(N, DIM)` stored vectors and `(QUERIES, DIM)` held-out queries from the same 40 classes."""
    return clustered_data()


@pytest.fixture(scope="module")
def one_faiss_thread():
    """A module on one FAISS thread (`one_faiss_thread_only`): `pytestmark = pytest.mark.usefixtures(...)`."""
    with one_faiss_thread_only():
        yield
