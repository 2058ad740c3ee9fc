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

`BACKBONES` is that registry (`retrieval.registry.Registry`, the one kind every extension of the
toolkit uses), without built-ins: timm's models are backbones by their own names.

A checkpoint records the builder (`module:qualname`, `builder_path`) beside the name, so a process
without the builder says which code to install instead of failing on an unknown name. A name
timm already has is refused: a config name means one model everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import timm
from torch import nn

from retrieval.registry import Registry, object_path

__all__ = [
    "BACKBONES",
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


def _timm_name(name: str) -> str | None:
    """Why `name` cannot be registered: it is a timm model's (a config name means one model everywhere)."""
    return "is a timm model; register your builder under another name" if timm.is_model(name) else None


# No built-ins: timm's models are backbones by their own names; these are the others.
BACKBONES: Registry[BackboneBuilder] = Registry(
    "backbone",
    ENTRY_POINT_GROUP,
    expected="a backbone builder (pretrained, in_chans) -> nn.Module",
    reserved=_timm_name,
)


def register_backbone(name: str | None = None) -> Callable[[Builder], Builder]:
    """Decorator: register a builder as backbone `name` (default: the function's name); returns it unchanged.

    Raises:
        ValueError: `name` is a timm model, or another builder already holds it.
    """
    return BACKBONES.register(name)


def backbone_builder(name: str) -> BackboneBuilder | None:
    """The builder registered as `name`, from this process or the `retrieval.backbones` entry points; None if neither.

    Raises:
        UserError: the entry point of that name cannot be imported.
    """
    return BACKBONES.find(name)


def registered_backbones() -> list[str]:
    """The names registered in this process and those the entry points declare (read without importing them)."""
    return sorted(BACKBONES.names())


def builder_path(name: str) -> str | None:
    """`module:qualname` of the builder registered as `name` (what a checkpoint records), None for a timm name."""
    builder = None if timm.is_model(name) else backbone_builder(name)
    return None if builder is None else object_path(builder)
