"""The backbone registry: your own `nn.Module` as a `model.backbone` name, beside timm's.

A builder is registered with the `register_backbone` decorator (in the process that imports its
module) or, for a process that never imports it (`retrieval export`, `index build`, `serve` run
from the command line), in the `retrieval.backbones` entry-point group of the package that holds it:

    [project.entry-points."retrieval.backbones"]
    small_cnn = "my_package.models:small_cnn"

as timm's `register_model`. The builder is called with keyword arguments `pretrained` (the
config's `model.pretrained`: load your own weights, or none) and `in_chans`, and returns a module
whose `forward(images)` gives `(B, C, H, W)` feature maps, which `model.pooling` pools (`avg`,
`max`, `avgmax`, `gem`), or `(B, F)` features it pooled itself. The `Embedder` adds the Linear
head and the L2 normalization as for a timm backbone. Preprocessing comes from the module's
`pretrained_cfg` dict as timm reads it (`input_size`, `mean`, `std`, `interpolation`,
`crop_pct`); without one, timm's ImageNet defaults.

A checkpoint records the builder (`module:qualname`, `builder_path`) beside the name, so a process
without the builder says which code to install instead of failing on an unknown name. A name
timm already has is refused: a config name means one model everywhere.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Protocol, TypeVar

import timm
from torch import nn

from retrieval.errors import UserError

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackboneBuilder",
    "backbone_builder",
    "builder_path",
    "register_backbone",
    "registered_backbones",
]

ENTRY_POINT_GROUP = "retrieval.backbones"


class BackboneBuilder(Protocol):
    """Builds a backbone: `(B, C, H, W)` images -> `(B, C', H', W')` feature maps or `(B, F)` features."""

    def __call__(self, *, pretrained: bool, in_chans: int) -> nn.Module: ...


Builder = TypeVar("Builder", bound=BackboneBuilder)

_REGISTRY: dict[str, BackboneBuilder] = {}


def register_backbone(name: str | None = None) -> Callable[[Builder], Builder]:
    """Decorator: register a builder as backbone `name` (default: the function's name); returns it unchanged.

    Raises:
        ValueError: `name` is a timm model, or another builder already holds it.
    """

    def register(builder: Builder) -> Builder:
        _add(name or builder.__name__, builder)  # type: ignore[attr-defined]  # a function or class: has __name__
        return builder

    return register


def backbone_builder(name: str) -> BackboneBuilder | None:
    """The builder registered as `name`, from this process or the `retrieval.backbones` entry points; None if neither.

    Raises:
        UserError: the entry point of that name cannot be imported.
    """
    if name not in _REGISTRY:
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
            try:
                builder = entry.load()
            except Exception as exc:  # any import-time failure of the user's package
                raise UserError(
                    f"backbone {name!r}: its entry point {entry.value} ({ENTRY_POINT_GROUP}) cannot be imported "
                    f"({type(exc).__name__}: {exc}); fix or reinstall the package that declares it"
                ) from exc
            if name not in _REGISTRY:  # its module may have registered it on import
                _add(name, builder)
            break
    return _REGISTRY.get(name)


def registered_backbones() -> list[str]:
    """The names registered in this process so far (entry points join when first asked for)."""
    return sorted(_REGISTRY)


def builder_path(name: str) -> str | None:
    """`module:qualname` of the builder registered as `name` (what a checkpoint records), None for a timm name."""
    builder = None if timm.is_model(name) else backbone_builder(name)
    return None if builder is None else _path_of(builder)


def _add(name: str, builder: BackboneBuilder) -> None:
    if timm.is_model(name):
        raise ValueError(f"backbone name {name!r} is a timm model; register your builder under another name")
    held = _REGISTRY.get(name)
    if held is not None and _path_of(held) != _path_of(builder):
        raise ValueError(f"backbone {name!r} is already registered by {_path_of(held)}")
    _REGISTRY[name] = builder


def _path_of(builder: BackboneBuilder) -> str:
    """`module:qualname` of a builder: its identity (a module imported twice makes new objects, the same path)."""
    return f"{builder.__module__}:{getattr(builder, '__qualname__', type(builder).__qualname__)}"
