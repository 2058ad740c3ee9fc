"""The one validation layer: pydantic models for the config and the records, and their errors in one line.

FastAPI already validates HTTP bodies with pydantic, so one library covers the config
(`retrieval.config`), the records the toolkit writes and reads back (model info, embedding parts)
and requests. A model states each field's type, its choices (`Literal[...]`) and its range
(`accepts(...)` in an `Annotated[...]` type); `user_error` turns pydantic's multi-line
`ValidationError` into the project's one-line `UserError`, the one place that words them:
"KEY must be WHAT IT ACCEPTS, got VALUE", or for an unknown key every valid key and the nearest one.

Example:
    >>> from typing import Annotated
    >>> class Part(Record):
    ...     rows: Annotated[int, at_least(0)]
    >>> try:
    ...     Part.model_validate({"rows": -1})
    ... except ValidationError as exc:
    ...     print(user_error(Part, exc, "part", fix="write the part again"))
    part.rows must be an integer >= 0, got -1; write the part again
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from retrieval.errors import UserError, short_repr
from retrieval.registry import Registry

__all__ = [
    "Record",
    "ValidationError",
    "Worded",
    "accepts",
    "at_least",
    "choices",
    "registered",
    "split_text",
    "unknown_key",
    "user_error",
]


def accepts(test: Callable[[Any], bool], expected: str) -> AfterValidator:
    """A range rule: the field accepts the values that pass `test`; `expected` completes "KEY must be ..."."""

    def check(value: Any) -> Any:
        if not test(value):
            raise PydanticCustomError("rule", expected, {"value": value})
        return value

    return AfterValidator(check)


def at_least(low: int, note: str = "") -> AfterValidator:
    """The rule of an integer >= `low`; `note` says what the number means."""
    return accepts(lambda value: value >= low, f"an integer >= {low}" + (f" ({note})" if note else ""))


def registered(registry: Registry[Any], *, many: bool = False) -> AfterValidator:
    """The rule of a name of `registry` ("KEY must be one of a, b"), or with `many` a list of them.

    The names are read when a value is checked, so that names registered after import count.
    """

    def check(value: Any) -> Any:
        if not all(name in registry for name in (value if many else [value])):
            names = registry.names()
            listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else "".join(names)
            expected = f"a list of {listed}, or []" if many else f"one of {', '.join(names)}"
            raise PydanticCustomError("rule", expected, {"value": value})
        return value

    return AfterValidator(check)


@dataclass(frozen=True)
class Worded:
    """`Annotated` metadata: how errors word what a field accepts, where that reads better than its type's name.

    A `Literal` field's choices ("null, 8, 16 or 32" for "one of None, 8, 16, 32"), or a nested record's
    layout ("an object of {size, sha256} by file name" for "a mapping").
    """

    text: str


def split_text(value: Any) -> Any:
    """A pair or list given as text, `0.5,1.0` or `(a, b)`, as its items; anything else as it is."""
    if isinstance(value, str):
        return [part.strip() for part in value.strip().strip("[]()").split(",") if part.strip()]
    return value


class Record(BaseModel):
    """Base of the models here: unknown keys are errors, and numbers are never guessed from bools or fractions.

    Lax typing reads `"3e-4"` as a float and `yes` as a bool; it would also read `true` as 1 and
    `2.0` as the integer 2, which a typo more likely meant otherwise, so those are refused.
    """

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _exact_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is not None and not _number_fits(value, cls.model_fields[info.field_name].annotation):
            raise PydanticCustomError("number_type", "not a number of the field's type")
        return value


def user_error(
    model: type[BaseModel],
    exc: ValidationError,
    prefix: str,
    fix: str = "",
    texts: Mapping[str, str] | None = None,
    noun: str = "key",
) -> UserError:
    """One line for pydantic's errors about `model`: an unknown key first, else the first error.

    Args:
        model: the model validated.
        exc: pydantic's error.
        prefix: what the keys are of, the KEY prefix (`train`, `part-00003.json`).
        fix: how to fix it, appended after "; "; `{key}` in it stands for the full key.
        texts: `PREFIX.KEY` -> the text a value was typed as (`--set`), quoted instead of the value
            it was read as when the value has the wrong type.
        noun: what an unknown key is called ("unknown config key ...").
    """
    errors = exc.errors()
    unknown = [error for error in errors if error["type"] == "extra_forbidden"]
    if unknown:
        return unknown_key(prefix, str(unknown[0]["loc"][-1]), list(model.model_fields), noun=noun)
    error = errors[0]
    if not error["loc"]:  # the record as a whole
        context = error.get("ctx") or {}
        if isinstance(context.get("error"), UserError):  # a rule over several fields
            return context["error"]
        if error["type"] == "json_invalid":
            return UserError(f"{prefix} is not valid JSON ({context.get('error')})" + _then(fix, prefix))
        return UserError(
            f"{prefix} must be a mapping of keys to values, got {short_repr(error['input'])}" + _then(fix, prefix)
        )
    name = str(error["loc"][0])  # the key as the record spells it: a field's alias, if it has one
    field = next(item for key, item in model.model_fields.items() if name in (key, item.validation_alias))
    wording = next((item.text for item in field.metadata if isinstance(item, Worded)), None)
    key = f"{prefix}.{name}"
    if error["type"] == "missing":  # a nested record's key is named in full: `shard.inputs.0.fingerprint`
        missing = ".".join([prefix, *(str(part) for part in error["loc"])])
        return UserError(f"{missing} is missing" + _then(fix, missing))
    return UserError(_problem(key, error, field.annotation, wording, (texts or {}).get(key)) + _then(fix, key))


def unknown_key(
    prefix: str, key: str, valid: list[str], owner: str = "", listing: str = "", noun: str = "key"
) -> UserError:
    """An unknown key, every valid one, and the nearest valid key when one is close (a typo's fix).

    `owner` follows the key ("for loss 'anchor'"); `listing` names the list ("valid keys in PREFIX").
    """
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"; did you mean {prefix}.{close[0]}?" if close else ""
    where = f"{prefix}.{key} {owner}".rstrip()
    listing = listing or f"valid keys in {prefix}"
    return UserError(f"unknown {noun} {where}; {listing}: {', '.join(valid) or 'none'}{hint}")


def choices(annotation: Any) -> tuple[Any, ...]:
    """The values a `Literal[...]` field accepts (None too for `Literal[...] | None`); () for other types."""
    members = _union_members(annotation)
    if not any(typing.get_origin(member) is Literal for member in members):
        return ()
    return tuple(choice for member in members for choice in typing.get_args(member) or (None,))


def _problem(key: str, error: ErrorDetails, annotation: Any, wording: str | None, text: str | None) -> str:
    """ "KEY must be ..., got ...": a rule's own words, the choices, or the type expected."""
    context = error.get("ctx") or {}
    if isinstance(context.get("error"), UserError):  # a check that words its own error (augment.auto_augment)
        return str(context["error"])
    if error["type"] == "rule":
        return _must(key, error["msg"], context["value"])
    value = error["input"]
    shown = value if text is None else text  # a wrong type: the value as the user typed it
    if error["type"] == "finite_number":  # a model with allow_inf_nan=False refused a NaN or an infinity
        return _must(key, "a finite number", shown)
    allowed = choices(annotation)
    if allowed and error["type"] == "literal_error":
        return _must(key, wording or _choices_text(allowed), value if _is_scalar(value) else shown)
    return _must(key, wording or _expected(annotation), shown)


def _must(key: str, expected: str, value: Any) -> str:
    return f"{key} must be {expected}, got {value!r}"


def _then(fix: str, key: str) -> str:
    return f"; {fix.replace('{key}', key)}" if fix else ""


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float))


def _number_fits(value: Any, annotation: Any) -> bool:
    """False for what lax typing would turn into a number silently: a bool as a number, `2.0` as an integer."""
    members = _union_members(annotation)
    if isinstance(value, bool):
        return bool in members or Any in members or not {int, float} & set(members)
    return not (isinstance(value, float) and int in members and float not in members)


def _choices_text(allowed: tuple[Any, ...]) -> str:
    return "one of " + ", ".join("null" if choice is None else str(choice) for choice in allowed)


def _union_members(annotation: Any) -> tuple[Any, ...]:
    """`X | Y` -> (X, Y); any other annotation -> (annotation,)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _expected(annotation: Any) -> str:
    """What a field of type `annotation` accepts, for an error message."""
    allowed = choices(annotation)
    if allowed:
        return _choices_text(allowed)
    return " or ".join(_type_name(member) for member in _union_members(annotation))


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is tuple:
        return "a pair of numbers (e.g. 0.5,1.0)"
    if typing.get_origin(annotation) in (list, dict):
        return "a list (e.g. [a, b])" if typing.get_origin(annotation) is list else "a mapping"
    return getattr(annotation, "__name__", str(annotation))
