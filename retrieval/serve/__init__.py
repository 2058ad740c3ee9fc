"""An HTTP search service over an index: `create_app(index_dir)` returns the FastAPI app `retrieval serve` runs."""

from retrieval.serve.app import MAX_K, ServeLimits, create_app

__all__ = ["MAX_K", "ServeLimits", "create_app"]
