"""The types of an index manifest's fields, checked before anything reads them.

`manifest.json` is a text file people open and edit; a field of the wrong type (a string where
a count belongs, a list where the file table belongs) must be refused naming the field, not
surface later as a `KeyError` or `TypeError` deep in loading or searching.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from retrieval.errors import UserError

__all__ = ["check_manifest_fields"]

_KINDS = ("flat", "hnsw", "ivf", "ivfpq")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return _integer(value) and value >= 0


def _fraction(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1


def _threshold(value: Any) -> bool:
    score = value.get("score") if isinstance(value, dict) else None
    return isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(score)


def _file_entry(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _count(value.get("size"))
        and isinstance(value.get("sha256"), str)
        and _SHA256.fullmatch(value["sha256"]) is not None
    )


# field -> (what it must be, the check); absent optional fields are not checked.
_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "version": ("an integer", _integer),
    "dimension": ("a positive integer", lambda value: _integer(value) and value > 0),
    "metric": ("a string", lambda value: isinstance(value, str)),
    "normalized": ("true or false", lambda value: isinstance(value, bool)),
    "factory": ("a string", lambda value: isinstance(value, str)),
    "kind": (f"one of {', '.join(_KINDS)}", lambda value: value in _KINDS),
    "count": ("a non-negative integer", _count),
    "stored": ("a non-negative integer", _count),
    "next_id": ("a non-negative integer", _count),
    "removed_ids": (
        "a list of non-negative integers",
        lambda value: isinstance(value, list) and all(map(_count, value)),
    ),
    "search_parameters": (
        "an object of integer settings",
        lambda value: isinstance(value, dict) and all(map(_integer, value.values())),
    ),
    "target_recall": ("null or a recall in (0, 1]", lambda value: value is None or _fraction(value)),
    "target_recall_source": ('null, "given" or "default"', lambda value: value in (None, "given", "default")),
    "parameters": ("an object", lambda value: isinstance(value, dict)),
    "measured": ("an object", lambda value: isinstance(value, dict)),
    "model": ("an object", lambda value: isinstance(value, dict)),
    "database_augmentation": ("null or a dba spec string", lambda value: value is None or isinstance(value, str)),
    "match_threshold": ('null or an object with a numeric "score"', lambda value: value is None or _threshold(value)),
    "files": (
        'an object of {"size": bytes, "sha256": 64 hex digits} by file name',
        lambda value: isinstance(value, dict) and all(map(_file_entry, value.values())),
    ),
}


def check_manifest_fields(manifest: Mapping[str, Any], path: Path) -> None:
    """Raise `UserError` naming the first field of `manifest` (read from `path`) whose value has the wrong type."""
    for field, (expected, valid) in _FIELDS.items():
        if field in manifest and not valid(manifest[field]):
            shown = _shown(manifest[field])
            raise UserError(f"{path}: field {field!r} must be {expected}, got {shown}; fix it or rebuild the index")


def _shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters: enough to recognise a hand edit, never a screenful."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
