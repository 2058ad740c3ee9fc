"""What the API shows of an index: image paths relative to an image root, and the public manifest fields.

The index's metadata holds absolute paths and its manifest holds the checkpoint's path, library
versions and removed ids: facts about the server's disk and software, not about the search.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pyarrow as pa

from retrieval.serve.responses import IndexInfo
from retrieval.validation import Record

__all__ = ["PublicPaths", "public_info"]

# Manifest fields a client may see; anything else (checkpoint path, versions, removed ids, file checksums) stays in.
_PUBLIC_FIELDS = (
    "format",
    "version",
    "kind",
    "factory",
    "dimension",
    "metric",
    "normalized",
    "count",
    "created",
    "match_threshold",
)
_PUBLIC_MODEL_FIELDS = ("checkpoint_sha256", "onnx_sha256", "embedding_dim", "image_size", "transform")
_PRIVATE_MODEL_CONFIG = ("weights",)  # a local file path


class PublicPaths:
    """Image paths as the API shows them: relative to `root`, or None (the item is then known by its id only).

    A stored relative path is shown as it is, unless it climbs out with `..`; an absolute path
    outside `root` is never shown.
    """

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        self.root = os.path.normpath(os.path.abspath(root)) if root is not None else None

    @classmethod
    def common_root(cls, paths: Iterable[str | None]) -> PublicPaths:
        """The deepest folder holding every absolute path in `paths` (none: nothing absolute is shown)."""
        folders = {os.path.dirname(os.path.normpath(path)) for path in paths if path and os.path.isabs(path)}
        return cls(os.path.commonpath(folders) if folders else None)

    def show(self, path: str | None) -> str | None:
        """`path` relative to the root, in `/` form; None when it would reveal more than that."""
        if not path:
            return None
        if not os.path.isabs(path):
            relative = os.path.normpath(path)
        elif self.root is None:
            return None
        else:
            relative = os.path.relpath(os.path.normpath(path), self.root)
        if relative == os.pardir or relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
            return None
        return relative.replace(os.sep, "/")


def public_info(manifest: Record, schema: pa.Schema) -> IndexInfo:
    """The manifest fields a client needs (shape, kind, measured quality, model identity), nothing private,
    and the metadata `columns` a filter may name, with their types (`int`, `float`, `str`, `bool`, or Arrow's name).

    `manifest` is an index's (`IndexManifest`) or an export's (`ExportedManifest`), read as it was written.
    """
    manifest_json = manifest.model_dump(by_alias=True, exclude_unset=True)
    info = {key: manifest_json[key] for key in _PUBLIC_FIELDS if key in manifest_json}
    info["columns"] = [{"name": field.name, "type": _type_name(field.type)} for field in schema]
    measured = manifest_json.get("measured")
    if isinstance(measured, dict):
        info["measured"] = measured
    model = manifest_json.get("model")
    if isinstance(model, dict) and model:
        public_model = {key: model[key] for key in _PUBLIC_MODEL_FIELDS if key in model}
        config = model.get("model_config")
        if isinstance(config, dict):
            public_model["model_config"] = {k: v for k, v in config.items() if k not in _PRIVATE_MODEL_CONFIG}
        info["model"] = public_model
    return IndexInfo.model_validate(info)


def _type_name(arrow_type: pa.DataType) -> str:
    """The filter language's name of a column type: what the page's placeholder and a client need."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_integer(arrow_type):
        return "int"
    if pa.types.is_floating(arrow_type):
        return "float"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "str"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    return str(arrow_type)
