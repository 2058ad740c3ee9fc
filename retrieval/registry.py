"""`Registry`: one name -> object map for every kind of extension (losses, backbones, datasets, ...).

A registry is filled three ways, and a name means one object whichever way it came:

- built-ins, given as `"module:attr"` strings and imported on first use, so their names are known
  (and a config is checked against them) before the modules, and PyTorch, load;
- `@REGISTRY.register("name")` on a class or function: the process that imports its module has it;
- the registry's entry-point group, for a package outside the toolkit (and for commands run from the
  shell, which never import your module):

      [project.entry-points."retrieval.losses"]
      my_loss = "my_package.losses:MyLoss"

  whose names come from the installed distributions' metadata without importing them, the object
  on first use.

A name held twice (a built-in, a decorator and an entry point, by different objects) is refused; the
same object registered again (its module imported twice) is not a second holder. An unknown name is a
one-line `UserError` listing the valid names. This module imports nothing heavy: the config and the
command line read names from it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from retrieval.errors import UserError

__all__ = ["Registry", "object_path"]

T = TypeVar("T")
Registered = TypeVar("Registered")


def object_path(obj: object) -> str:
    """`module:qualname` of a class or function: its identity across imports (a re-import makes new objects).

    Any other object (an instance) has no such name: its path names its class and the object itself.
    """
    if hasattr(obj, "__qualname__") and hasattr(obj, "__module__"):
        return f"{obj.__module__}:{obj.__qualname__}"
    return f"{type(obj).__module__}:{type(obj).__qualname__} at {id(obj):#x}"


def _default_unknown(kind: str) -> Callable[[str, list[str]], str]:
    return lambda name, names: f"unknown {kind} {name!r}; valid names: {', '.join(names)}"


class Registry(Generic[T]):
    """Names of one kind -> their objects: built-ins, `register`, and entry-point group `group`.

    Args:
        kind: what a name names in messages, as the user writes it (`loss.name`, `index kind`).
        group: the entry-point group (`retrieval.losses`).
        builtins: name -> `"module:attr"` of the toolkit's own entries, in the order names are listed.
        accepts: whether a loaded object is one of this kind (a class of the right base, a callable).
        expected: what `accepts` wants, for the error of an object it refuses.
        unknown: (name, valid names) -> the message of an unknown name; default
            `unknown {kind} 'x'; valid names: a, b`.
        reserved: name -> why it cannot be registered, completing "KIND 'name' ..." ("is a timm model; ..."),
            or None.
    """

    def __init__(
        self,
        kind: str,
        group: str,
        builtins: Mapping[str, str] | None = None,
        *,
        accepts: Callable[[Any], bool] = callable,
        expected: str = "a class or function",
        unknown: Callable[[str, list[str]], str] | None = None,
        reserved: Callable[[str], str | None] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self._builtins = dict(builtins or {})
        self._accepts = accepts
        self._expected = expected
        self._unknown = unknown or _default_unknown(kind)
        self._reserved = reserved
        self._registered: dict[str, T] = {}
        self._paths: dict[str, str] = {}  # registered name -> the `module:qualname` of what holds it
        self._loaded: dict[str, T] = {}

    def register(self, name: str | None = None) -> Callable[[Registered], Registered]:
        """Decorator: register a class or function as `name` (default: its `__name__`); returns it unchanged.

        Raises:
            ValueError: `name` is reserved, or another object already holds it.
        """

        def decorate(obj: Registered) -> Registered:
            self.add(name or obj.__name__, obj)  # type: ignore[attr-defined]  # a class or function: has __name__
            return obj

        return decorate

    def add(self, name: str, obj: object, *, path: str | None = None) -> None:
        """Register `obj` as `name` (what `register` does).

        Args:
            name: the name it answers to.
            obj: the object.
            path: `module:qualname` that identifies it (default `object_path(obj)`): what it is built from,
                for an instance (a spec around a reader function), so that importing its module again is
                not a second holder.

        Raises:
            ValueError: `name` is reserved, `obj` is not of this kind, or another object already holds `name`.
        """
        reason = self._reserved(name) if self._reserved is not None else None
        if reason is not None:
            raise ValueError(f"{self.kind} {name!r} {reason}")
        if not self._accepts(obj):
            raise ValueError(f"{self.kind} {name!r}: {object_path(obj)} is not {self._expected}")
        path = path or object_path(obj)
        holder = self._holder(name)
        if holder is not None and holder != path:
            raise ValueError(f"{self.kind} {name!r} is already registered by {holder}")
        self._registered[name] = obj  # type: ignore[assignment]  # accepted above: an object of this kind
        self._paths[name] = path
        self._loaded.pop(name, None)

    def fresh(self) -> Registry[T]:
        """This registry as a process that registered nothing has it: the built-ins and entry points only."""
        return Registry(
            self.kind,
            self.group,
            self._builtins,
            accepts=self._accepts,
            expected=self._expected,
            unknown=self._unknown,
            reserved=self._reserved,
        )

    def names(self) -> list[str]:
        """Every valid name: the built-ins in their order, then registered ones, then entry points (sorted)."""
        held = [*self._builtins, *(name for name in self._registered if name not in self._builtins)]
        return held + sorted(set(self._entry_points()) - set(held))

    def __contains__(self, name: object) -> bool:
        """Whether `name` is valid; entry points are read (not imported) only for a name not held here."""
        if not isinstance(name, str):
            return False
        return name in self._builtins or name in self._registered or name in self._entry_points()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def items(self) -> list[tuple[str, T]]:
        """(name, object) of every name, each loaded."""
        return [(name, self.get(name)) for name in self.names()]

    def values(self) -> list[T]:
        """The object of every name, each loaded."""
        return [self.get(name) for name in self.names()]

    def check(self, name: str) -> None:
        """Refuse a name that is not valid, without importing anything.

        Raises:
            UserError: `name` is unknown; the message lists the valid names.
        """
        if name not in self:
            raise self.unknown(name)

    def unknown(self, name: str) -> UserError:
        """The one-line error for an unknown `name`."""
        return UserError(self._unknown(name, self.names()))

    def find(self, name: str) -> T | None:
        """The object registered as `name`, imported on first use; None when no one holds the name.

        Raises:
            UserError: an entry point of that name cannot be imported, is not of this kind, or clashes.
        """
        if name in self._loaded:
            return self._loaded[name]
        if name in self._registered or name in self._builtins:
            self._refuse_clashing_entry_point(name)
            obj = self._registered[name] if name in self._registered else self._import_builtin(self._builtins[name])
        else:
            entry = self._entry_points().get(name)
            if entry is None:
                return None
            obj = self._load_entry(name, entry)
        self._loaded[name] = obj
        return obj

    def get(self, name: str) -> T:
        """The object registered as `name`, imported on first use.

        Raises:
            UserError: `name` is unknown (the message lists the valid names), or its entry point fails to load.
        """
        obj = self.find(name)
        if obj is None:
            raise self.unknown(name)
        return obj

    def _holder(self, name: str) -> str | None:
        """`module:attr` of what holds `name` now (a built-in is not imported to say so), or None."""
        if name in self._registered:
            return self._paths[name]
        if name in self._builtins:
            return self._builtins[name]
        return None

    def _refuse_clashing_entry_point(self, name: str) -> None:
        """Refuse an entry point that declares a name held here by another object (read once, when first loaded)."""
        entry = self._entry_points().get(name)
        holder = self._holder(name)
        if entry is not None and entry.value.replace(" ", "") != holder:
            raise UserError(
                f"{self.kind} {name!r}: its entry point {entry.value} ({self.group}) clashes with {holder}, "
                "which holds the name; rename the entry point"
            )

    def _entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The group's entry points by name, read from the installed distributions' metadata (nothing imported)."""
        return {entry.name: entry for entry in importlib.metadata.entry_points(group=self.group)}

    def _import_builtin(self, target: str) -> T:
        module, _, attr = target.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        if not self._accepts(obj):
            raise TypeError(f"built-in {self.kind} {target} is not {self._expected}")
        return obj  # an Any from getattr or load, accepted above as one of this kind

    def _load_entry(self, name: str, entry: importlib.metadata.EntryPoint) -> T:
        """The object of entry point `entry`; its module may register it itself on import (the same object)."""
        where = f"its entry point {entry.value} ({self.group})"
        try:
            obj = entry.load()
        except Exception as exc:  # any import-time failure of the user's package
            raise UserError(
                f"{self.kind} {name!r}: {where} cannot be imported ({type(exc).__name__}: {exc}); "
                "fix or reinstall the package that declares it"
            ) from exc
        holder = self._holder(name)
        if holder is not None and holder != object_path(obj):
            raise UserError(
                f"{self.kind} {name!r}: {where} clashes with {holder}, which holds the name; rename the entry point"
            )
        reason = self._reserved(name) if self._reserved is not None else None
        if reason is not None:
            raise UserError(f"{self.kind} {name!r} {reason} (declared by {where})")
        if not self._accepts(obj):
            raise UserError(f"{self.kind} {name!r}: {where} is not {self._expected}; fix the package that declares it")
        return obj  # an Any from getattr or load, accepted above as one of this kind
