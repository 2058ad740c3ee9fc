"""An export killed (SIGKILL) halfway through a batch resumes to the collection an uninterrupted export writes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from retrieval.errors import UserError
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.collection_index import CollectionIndex
from retrieval.vectordb.upload import export_index

pytestmark = pytest.mark.slow

# Exports INDEX_DIR to URI in batches of 8 and kills itself in its third upsert, after half of that batch is
# stored. The library call rather than the CLI: the process then imports no torch, and starts in a second.
_DIES_IN_THIRD_BATCH = textwrap.dedent(
    """
    import os, signal, sys
    from retrieval.vectordb import parse_database_uri
    from retrieval.vectordb.upload import export_index
    from retrieval.vectordb.qdrant_store import QdrantStore

    upsert, calls = QdrantStore.upsert, []

    def dying(self, ids, vectors, payloads):
        calls.append(len(ids))
        if len(calls) == 3:
            half = len(ids) // 2
            upsert(self, ids[:half], vectors[:half], payloads[:half])
            os.kill(os.getpid(), signal.SIGKILL)
        upsert(self, ids, vectors, payloads)

    QdrantStore.upsert = dying
    export_index(sys.argv[1], parse_database_uri(sys.argv[2]), batch_size=8, progress=False)
    """
)


def test_killed_export_resumes_to_the_uninterrupted_result(tmp_path, build_index, local_uri, snapshot):
    build_index(tmp_path / "index", n=40)
    killed, whole = local_uri(tmp_path / "killed"), local_uri(tmp_path / "whole")
    script = [sys.executable, "-c", _DIES_IN_THIRD_BATCH, str(tmp_path / "index"), killed]
    died = subprocess.run(script, capture_output=True)
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()[-2000:]

    with pytest.raises(UserError, match="only partly exported"):
        CollectionIndex.open(parse_database_uri(killed)).close()
    # What `index export --batch-size 8` runs; it prints these counts as "40 vectors (20 written, 20 already there,
    # 0 removed)".
    done = export_index(tmp_path / "index", parse_database_uri(killed), batch_size=8, progress=False)
    assert (done.vectors, done.written, done.kept, done.deleted) == (40, 20, 20, 0)  # 2.5 batches were in
    export_index(tmp_path / "index", parse_database_uri(whole), batch_size=8, progress=False)
    assert snapshot(parse_database_uri(killed)) == snapshot(parse_database_uri(whole))
