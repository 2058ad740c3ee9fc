"""A vector database as a search backend: export an index into a Qdrant collection and search it there.

`parse_database_uri` reads a `--to`/`--backend` URI, `export_index` writes a collection from an
index directory, `CollectionIndex` searches one the way `SearchIndex` searches a FAISS index.
Everything but the URI parser needs the optional `qdrant-client` (`pip install 'retrieval[qdrant]'`).
"""

from retrieval.vectordb.uri import DatabaseLocation, parse_database_uri

__all__ = ["DEFAULT_BATCH_SIZE", "DatabaseLocation", "parse_database_uri"]

DEFAULT_BATCH_SIZE = 256  # points per upsert request: a few hundred KB of JSON for 128-d vectors
