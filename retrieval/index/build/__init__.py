"""Building a `SearchIndex` in phases, from one `IndexBuildOptions`.

`sample` draws the rows FAISS trains on, the held-out queries and the rows tuning checks; `train`
makes the trained, empty FAISS index; `add` streams every row in; `tune` picks and measures search
parameters; `describe` writes the manifest; `pipeline` runs them in order.
"""

from __future__ import annotations

from retrieval.index.build.options import IndexBuildOptions

__all__ = ["IndexBuildOptions"]
