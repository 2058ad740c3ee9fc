"""The registry of `pretrain.method`: name -> the builder of a self-supervised objective, torch-free.

A builder takes the `pretrain` section (`retrieval.config.PretrainConfig`) and the width `F` of the
backbone's pooled features, and returns `(head, loss)`: the head maps `(2B, F)` features to
`(2B, H)` outputs, the loss takes those outputs and the `(2B,)` image index of each view (rows `i`
and `B + i` are two views of one image) and returns a scalar (`retrieval.pretrain.methods`).
The built-ins are imported on first use, so the config checks a name before PyTorch loads; a new
method is one module with `@PRETRAIN_METHODS.register("name")` on its builder, or a
`retrieval.pretrain_methods` entry point (`docs/extending.md`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from retrieval.registry import Registry

__all__ = ["PRETRAIN_METHODS"]

PRETRAIN_METHODS: Registry[Callable[..., Any]] = Registry(
    "pretrain.method",
    "retrieval.pretrain_methods",
    {"simclr": "retrieval.pretrain.methods:simclr", "simsiam": "retrieval.pretrain.methods:simsiam"},
    expected="a builder (pretrain section, feature width) -> (head, loss)",
)
