"""The search service over a vector database collection written by `retrieval index export`.

The collection's record names the model that embedded its vectors; uploaded images are embedded
with that checkpoint or export (the recorded path, or `checkpoint` / `model_dir` if it is the same
model file by sha256), and search and filters run in the database. The record is read once at
start; points the database gains or loses later are searched as they are.
"""

from __future__ import annotations

from pathlib import Path

from retrieval.core.rerank import stored_augmentation
from retrieval.export.index_encoder import encoder_for_index
from retrieval.inference.interface import Encoder
from retrieval.serve.backend import FixedView
from retrieval.serve.public import public_info
from retrieval.serve.searcher import IndexView
from retrieval.vectordb.uri import parse_database_uri

__all__ = ["database_views"]


def database_views(
    uri: str, checkpoint: str | Path | None, device: str, model_dir: str | Path | None = None
) -> FixedView[IndexView]:
    """The view of the collection at `uri` (see `retrieval.vectordb.uri`) and of its model.

    Raises:
        UserError: a bad URI, a database or collection that cannot be opened or is partly
            exported, or a checkpoint that is missing or not the recorded one.
    """
    from retrieval.vectordb.collection_index import CollectionIndex  # needs the optional qdrant-client

    collection = CollectionIndex.open(parse_database_uri(uri))
    model = collection.record.model
    encoder: Encoder | None = encoder_for_index(model, checkpoint, device, model_dir) if model.identity else None
    info = public_info(collection.manifest, collection.metadata_schema).model_copy(update={"backend": "qdrant"})
    augmentation = stored_augmentation(collection.manifest.database_augmentation)
    return FixedView(IndexView(collection, encoder, info, augmentation))
