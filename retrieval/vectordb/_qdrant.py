"""`qdrant-client`, an optional extra: imported here once, so a missing install is one line saying how to add it."""

from retrieval.errors import UserError

try:
    from qdrant_client import QdrantClient, models
    from qdrant_client.http.exceptions import ApiException
except ImportError as exc:
    raise UserError("the vector-database backend needs qdrant-client: pip install 'retrieval[qdrant]'") from exc

__all__ = ["ApiException", "QdrantClient", "models"]
