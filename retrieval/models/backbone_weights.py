"""Loading a local state dict (`model.weights`) into a timm backbone: all of it, or on request what fits.

timm's own loader reads the file, converts other layouts (the model module's `checkpoint_filter_fn`),
adapts the stem to `in_chans` and drops the classifier; but with the classifier dropped it loads
non-strictly, so a file of another model loads nothing and training starts from random weights after
a multi-kilobyte log message. Here timm does the loading with its log quietened, hooks on the model
count what was loaded, and anything short of every tensor is refused in one line unless
`model.weights_partial` asks for a partial load.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import timm.models
from torch import Tensor, nn

from retrieval.errors import UserError

__all__ = ["WeightsFit", "load_backbone_weights"]

_log = logging.getLogger(__name__)


@dataclass
class WeightsFit:
    """How a state dict fitted a model: the model's tensors it filled and the file's tensors left over."""

    total: int  # tensors in the model's state dict (as all counts here: without BatchNorm's step counters)
    missing: list[str] = field(default_factory=list)  # model tensors the file did not fill (incl. `mismatched`)
    mismatched: list[str] = field(default_factory=list)  # in both, but of another shape: left out of the load
    unexpected: list[str] = field(default_factory=list)  # file tensors the model has no place for

    @property
    def matched(self) -> int:
        """Model tensors loaded from the file."""
        return self.total - len(self.missing)

    @property
    def complete(self) -> bool:
        """Every model tensor loaded and every file tensor used."""
        return not self.missing and not self.unexpected

    def counts(self) -> str:
        """`80 of 102 model tensors matched (2 of another shape), 5 file tensors unexpected`."""
        shapes = f" ({len(self.mismatched)} of another shape)" if self.mismatched else ""
        return (
            f"{self.matched} of {self.total} model tensors matched{shapes}, "
            f"{len(self.unexpected)} file tensors unexpected"
        )


def load_backbone_weights(model: nn.Module, name: str, path: Path, in_chans: int, partial: bool = False) -> WeightsFit:
    """Load the state dict in `path` into the timm model `name` (built with `num_classes=0`) in place.

    Args:
        model: the timm model, as `timm.create_model(name, num_classes=0, ...)` built it.
        name: its timm name, for the messages and the model module's checkpoint converter.
        path: a `.safetensors` / `.pth` state dict (or a training checkpoint holding one under
            `state_dict` / `model`); a classifier in it is dropped, a 3-channel stem adapted to `in_chans`.
        in_chans: the model's input channels.
        partial: load the tensors that fit and log one line with the counts, instead of refusing.

    Raises:
        UserError: the file cannot be read, none of its tensors fit, or (without `partial`) not all do.
    """
    try:
        state = timm.models.load_state_dict(str(path))
    except Exception as exc:  # torch and safetensors raise many types for foreign or truncated files
        raise UserError(
            f"cannot read model.weights {path} ({exc.__class__.__name__}); give a .safetensors or .pth state dict"
        ) from exc
    shapes = {key: tensor.shape for key, tensor in model.state_dict().items()}
    fit = WeightsFit(total=len(_counted(shapes)))

    def drop_mismatched(module: nn.Module, state_dict: dict[str, Tensor], *_: Any) -> None:
        """Leave tensors of another shape out (they would abort the load) and count them."""
        for key in [key for key, tensor in state_dict.items() if key in shapes and tensor.shape != shapes[key]]:
            fit.mismatched.append(key)
            del state_dict[key]

    def record(module: nn.Module, incompatible: Any) -> None:
        fit.missing, fit.unexpected = _counted(incompatible.missing_keys), _counted(incompatible.unexpected_keys)

    handles = [
        model.register_load_state_dict_pre_hook(drop_mismatched),
        model.register_load_state_dict_post_hook(record),
    ]
    try:
        with _timm_quiet():
            timm.models.load_pretrained(
                model,
                # The state dict in place of the model's source: timm then neither downloads nor reads files.
                pretrained_cfg={**cast(dict[str, Any], model.pretrained_cfg), "source": "", "state_dict": state},
                num_classes=0,
                in_chans=in_chans,
                filter_fn=_checkpoint_filter(name),
                strict=False,
            )
    except (RuntimeError, KeyError, ValueError) as exc:  # a converter or timm's stem adaptation gave up on the file
        raise UserError(
            f"model.weights {path} cannot be loaded into {name}: {str(exc).splitlines()[0][:200]}; "
            f"give {name}'s own weights (a state dict saved from timm.create_model({name!r}))"
        ) from exc
    finally:
        for handle in handles:
            handle.remove()
    if fit.matched == 0 or not (fit.complete or partial):
        first = f" (first: {fit.unexpected[0]})" if fit.unexpected else ""
        remedy = "" if fit.matched == 0 else f", or set model.weights_partial=true to load the {fit.matched} that match"
        raise UserError(
            f"model.weights {path} does not fit {name}: {fit.counts()}{first}; give {name}'s own weights{remedy}"
        )
    if not fit.complete:
        _log.warning("model.weights: partial load of %s into %s: %s", path, name, fit.counts())
    else:
        # One line, so a run started from `retrieval pretrain`'s file says what it did and did not load.
        _log.info(
            "model.weights: %s loaded into %s (%d tensors); the head and proxies start fresh", path, name, fit.total
        )
    return fit


def _counted(keys: Iterable[str]) -> list[str]:
    """The keys of weights and statistics: BatchNorm's step counters fit any model, so they count for nothing."""
    return [key for key in keys if not key.endswith("num_batches_tracked")]


def _checkpoint_filter(name: str) -> Callable[..., dict[str, Any]] | None:
    """The model module's `checkpoint_filter_fn`, timm's convention for converting other layouts, or None.

    Its state dicts are timm's (untyped in timm's own hints), passed through as they are.
    """
    module = sys.modules[timm.models.model_entrypoint(name).__module__]
    converter = getattr(module, "checkpoint_filter_fn", None)
    return converter if callable(converter) else None


@contextlib.contextmanager
def _timm_quiet() -> Iterator[None]:
    """timm's log below errors off while it loads: its key lists are replaced by our one-line counts."""
    logger = logging.getLogger("timm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
