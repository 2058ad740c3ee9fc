"""Any pytorch-metric-learning loss, with an optional PML miner, as a `MetricLoss` (`loss.name: pml.<ClassName>`).

The config names a PML class after the `pml.` prefix and passes its constructor's own keyword
arguments in a `kwargs` mapping; `num_classes` and `embedding_size` come from the data and model.
The prefix keeps PML's classes apart from the toolkit's own losses of the same idea (PML's
`CircleLoss` has other defaults and another reduction than `circle`; its ArcFace margin is in
degrees), and says whose constructor the kwargs are checked against.

A loss that holds a classification weight (PML's `WeightMixin`: proxies, class centres, a softmax
weight) trains on shuffled batches; every other PML loss compares the images of a batch with each
other and gets P x K batches, the global batch under torchrun and a cross-batch memory where PML
supports one. The weights join the optimizer's proxy group through `parameters()`.

The kwargs stay a plain dict: they are PML's constructor arguments, checked by name against
the class's signature (`constructor_parameters`) and typed by PML, not records of the toolkit.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners as pml_miners
from pytorch_metric_learning.losses.base_metric_loss_function import BaseMetricLossFunction
from pytorch_metric_learning.losses.mixins import WeightMixin
from pytorch_metric_learning.miners.base_miner import BaseMiner
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu
from torch import Tensor, nn

from retrieval.choices.losses import PML_PREFIX, is_pml_name
from retrieval.errors import UserError
from retrieval.losses.base import MetricLoss, PairLoss, PairMemory

__all__ = [
    "PML_PREFIX",
    "PMLLoss",
    "PMLPairLoss",
    "build_pml_loss",
    "check_pml_parameters",
    "is_pml_name",
    "pml_adapter_class",
    "pml_loss_class",
    "pml_loss_names",
]


# Constructor arguments the trainer fills in from the data and the model, never the user.
_PROVIDED = ("num_classes", "embedding_size", "descriptors_dim")
# Classes of PML's modules that are no loss of (embeddings, labels): bases and wrappers of other
# losses, and VICReg, which compares two views of the same images instead of labels.
_NOT_LOSSES = frozenset({"BaseMetricLossFunction", "GenericPairLoss", "VICRegLoss"})


def pml_loss_names() -> list[str]:
    """Every `pml.<ClassName>` the adapter builds, sorted."""
    return sorted(PML_PREFIX + name for name in _classes(pml_losses, BaseMetricLossFunction, _NOT_LOSSES))


def pml_loss_class(name: str) -> type[BaseMetricLossFunction]:
    """The PML loss class of `pml.<ClassName>`.

    Raises:
        UserError: no such PML loss; the message lists the ones there are.
    """
    return _lookup(name, pml_losses, BaseMetricLossFunction, _NOT_LOSSES, "loss.name")


def pml_adapter_class(name: str) -> type[PMLLoss]:
    """`PMLLoss` for a PML loss that holds class weights (`WeightMixin`), `PMLPairLoss` for one over pairs.

    Raises:
        UserError: no such PML loss.
    """
    return PMLLoss if issubclass(pml_loss_class(name), WeightMixin) else PMLPairLoss


def _miner_class(name: str) -> type[BaseMiner]:
    return _lookup(
        name, pml_miners, BaseMiner, frozenset({"BaseMiner", "EmbeddingsAlreadyPackagedAsTriplets"}), "loss.miner"
    )


def _classes(module: Any, base: type, excluded: frozenset[str]) -> dict[str, type]:
    return {
        name: cls
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and issubclass(cls, base) and name not in excluded
    }


def _lookup(name: str, module: Any, base: type, excluded: frozenset[str], key: str) -> Any:
    classes = _classes(module, base, excluded)
    bare = name.removeprefix(PML_PREFIX)
    if not is_pml_name(name) or bare not in classes:
        valid = ", ".join(PML_PREFIX + item for item in sorted(classes))
        raise UserError(f"unknown {key} {name!r}; pytorch-metric-learning offers: {valid}")
    return classes[bare]


def constructor_parameters(cls: type) -> dict[str, Any]:
    """The keyword arguments of a PML class and the classes it passes `**kwargs` to, with their defaults.

    Mixins (distance, reducer, regularizers: objects, not config values) and the bases
    (`BaseMetricLossFunction`, `GenericPairLoss`, `BaseMiner`) are left out; an argument without a
    default maps to `inspect.Parameter.empty`. The first class of the MRO that names an argument
    gives its default (CosFace's `margin=0.35`, not its base's).
    """
    return {key: default for key, default in _named_arguments(cls).items() if key not in _PROVIDED}


def _named_arguments(cls: type) -> dict[str, Any]:
    """Every keyword argument along `cls`'s MRO of PML losses or miners, the trainer-provided ones included."""
    found: dict[str, Any] = {}
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for klass in cls.__mro__:
        if not (issubclass(klass, (BaseMetricLossFunction, BaseMiner)) and "__init__" in vars(klass)):
            continue
        if klass.__name__ in {*_NOT_LOSSES, "BaseMiner"}:
            continue
        for key, param in inspect.signature(vars(klass)["__init__"]).parameters.items():
            if param.kind in named and key != "self":
                found.setdefault(key, param.default)
    return found


def _check_kwargs(cls: type, kwargs: Any, key: str) -> dict[str, Any]:
    """`kwargs` typed like `cls`'s defaults (`_typed_argument`).

    Raises:
        UserError: a kwargs that is no mapping, names an argument `cls` lacks, misses a required one, or gives
            one a value of another type than its default's, or a number that is not finite.
    """
    if not isinstance(kwargs, dict):
        raise UserError(f"{key} must be a mapping of {cls.__name__}'s arguments (e.g. {{margin: 0.1}}), got {kwargs!r}")
    parameters = constructor_parameters(cls)
    listing = ", ".join(f"{name}={_shown(default)}" for name, default in parameters.items()) or "none"
    unknown = sorted(set(kwargs) - set(parameters))
    if unknown:
        raise UserError(f"unknown {key} {', '.join(unknown)} for {cls.__name__}; its arguments: {listing}")
    missing = [
        name for name, default in parameters.items() if default is inspect.Parameter.empty and name not in kwargs
    ]
    if missing:
        raise UserError(f"{cls.__name__} needs {key} {', '.join(missing)}; its arguments: {listing}")
    return {name: _typed_argument(cls, key, name, parameters[name], value) for name, value in kwargs.items()}


def _typed_argument(cls: type, key: str, name: str, default: Any, value: Any) -> Any:
    """`value` of argument `name`, checked against the type of its default, since PML's constructors check nothing.

    A number (int or float) default takes any finite number, also as text (`1e-3`, which YAML 1.1 leaves a
    string); a bool or str default takes its own type. An argument without a default, or with None, takes
    anything but a non-finite number. Any float must be finite: a NaN margin mines nothing, silently.

    Raises:
        UserError: naming the class, the argument, its default and the value.
    """
    expected = None
    if isinstance(default, bool):
        expected = None if isinstance(value, bool) else "true or false"
    elif isinstance(default, int | float):
        value = _number(value)
        expected = None if isinstance(value, int | float) and math.isfinite(value) else "a finite number"
    elif isinstance(default, str):
        expected = None if isinstance(value, str) else "text"
    elif isinstance(value, float) and not math.isfinite(value):
        expected = "a finite number"
    if expected is not None:
        dotted = f"{key.replace(' ', '.')}.{name}"
        fix = f"fix it in the config or with --set {dotted}=..." if key == "loss.kwargs" else "fix it in the config"
        raise UserError(
            f"{dotted} of {cls.__name__} must be {expected} (its default is {default!r}), got {value!r}; {fix}"
        )
    return value


def _number(value: Any) -> Any:
    """`value` as an int or float when it is one or its text is; anything else (bools included) as it is."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return value
    if isinstance(value, str):
        for parse in (int, float):
            try:
                return parse(value)
            except ValueError:
                continue
    return value


def _shown(default: Any) -> str:
    return "(required)" if default is inspect.Parameter.empty else repr(default)


def _miner_spec(miner: Any) -> tuple[str, dict[str, Any]] | None:
    """`loss.miner` as (name, kwargs): null, a name, or a mapping {name, kwargs}."""
    if miner is None:
        return None
    if isinstance(miner, str):
        return miner, {}
    if isinstance(miner, dict) and "name" in miner and set(miner) <= {"name", "kwargs"}:
        return str(miner["name"]), miner.get("kwargs") or {}
    raise UserError(
        f"loss.miner must be null, a PML miner name or {{name: pml.<Miner>, kwargs: {{...}}}}, got {miner!r}"
    )


def check_pml_parameters(name: str, kwargs: Any, miner: Any) -> tuple[dict[str, Any], Any]:
    """`loss.kwargs` and `loss.miner` of `pml.<ClassName>`, checked against PML's constructors and built once.

    Returns the kwargs and the miner with each argument typed like its default (`_typed_argument`): a
    number given as text becomes the number.

    Raises:
        UserError: an unknown loss or miner (listing the valid ones), an unknown or missing argument
            (listing the class's arguments), a value of another type than the argument's default, a
            number that is not finite, or a value the constructor refuses.
    """
    cls = pml_loss_class(name)
    kwargs = _check_kwargs(cls, kwargs, "loss.kwargs")
    spec = _miner_spec(miner)
    if spec is not None:
        miner_kwargs = _check_kwargs(_miner_class(spec[0]), spec[1], "loss.miner kwargs")
        if isinstance(miner, dict):
            miner = {**miner, "kwargs": miner_kwargs}
    build_pml_loss(name, kwargs, miner, num_classes=2, embedding_dim=4)
    return kwargs, miner


def build_pml_loss(name: str, kwargs: dict[str, Any], miner: Any, num_classes: int, embedding_dim: int) -> PMLLoss:
    """`pml.<ClassName>` built with `kwargs`, the trainer's `num_classes` / `embedding_dim`, and `miner`.

    Raises:
        UserError: an unknown class, or arguments its constructor refuses.
    """
    cls = pml_loss_class(name)
    wanted = _named_arguments(cls)  # CosFace takes num_classes and embedding_size through *args, for its base
    provided = {"num_classes": num_classes, "embedding_size": embedding_dim, "descriptors_dim": embedding_dim}
    provided = {key: value for key, value in provided.items() if key in wanted}
    spec = _miner_spec(miner)
    try:
        loss = cls(**kwargs, **provided)
        mining = _miner_class(spec[0])(**spec[1]) if spec is not None else None
    except (TypeError, ValueError, AssertionError) as exc:
        raise UserError(f"loss {name!r} with kwargs {kwargs} and miner {miner}: {exc}") from exc
    adapter = pml_adapter_class(name)
    return adapter(loss, mining, None if adapter.needs_pk_batches else num_classes)


class PMLLoss(MetricLoss):
    """A pytorch-metric-learning loss (and miner) run in float32 on raw embeddings `(B, D)` and labels `(B,)`.

    This class is the adapter of losses that hold class weights (proxies, SoftTriple's centres,
    a softmax weight): they train on shuffled batches. `PMLPairLoss` is the one of losses over
    the pairs of a batch. Both compute in float32, also under autocast: PML would otherwise cast
    its own weights to the embeddings' dtype.

    Args:
        loss: a PML loss module; its parameters are this module's (the proxy learning rate, no
            weight decay, the checkpoint's `loss` state).
        miner: a PML miner whose pairs or triplets the loss is restricted to, or None.
        num_classes: K, when the loss holds one weight per class (the label range is then checked).

    Attributes:
        last_stats: with a miner, the pairs (`positive_pairs`, `negative_pairs`) or `triplets` it
            kept in the last batch; empty otherwise.
        proxies: the `(K, D)` class weights where the loss has one matrix of them (`proxies` of
            Proxy-NCA / Proxy-Anchor, the transposed `W` of NormalizedSoftmax, CosFace, ArcFace), else None.
    """

    def __init__(self, loss: nn.Module, miner: nn.Module | None = None, num_classes: int | None = None) -> None:
        super().__init__()
        self.loss = loss
        self.miner = miner
        self.num_classes = num_classes

    @property
    def pml_name(self) -> str:
        """`pml.<ClassName>` of the wrapped loss."""
        return PML_PREFIX + type(self.loss).__name__

    @property
    def supports_memory(self) -> bool:
        """PML's own `CrossBatchMemory` takes this loss (it accepts reference embeddings)."""
        return type(self.loss).__name__ in pml_losses.CrossBatchMemory.supported_losses()

    @property
    def proxies(self) -> Tensor | None:  # type: ignore[override]  # read-only: PML's module owns the weight
        """`(K, D)` class weights, or None (pair losses; several centres per class)."""
        if self.num_classes is None:
            return None
        for name, transposed in (("proxies", False), ("W", True)):
            weight = dict(self.loss.named_parameters(recurse=False)).get(name)
            if weight is not None and weight.dim() == 2:
                rows = weight.t() if transposed else weight
                if rows.shape[0] == self.num_classes:
                    return rows
        return None

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Loss of raw embeddings `(B, D)` with labels `(B,)`; returns a scalar."""
        return self._pml_loss(embeddings, labels, None)

    def _pml_loss(self, embeddings: Tensor, labels: Tensor, memory: PairMemory | None) -> Tensor:
        """The PML loss of the batch; with a memory (`PairLoss`), the references are the batch followed by the
        memory, without an embedding's pair with itself."""
        if self.num_classes is not None and self.check_labels and labels.numel():
            if int(labels.min()) < 0 or int(labels.max()) >= self.num_classes:
                raise ValueError(f"labels must lie in [0, {self.num_classes}); remap class ids to 0..K-1")
        with torch.autocast(embeddings.device.type, enabled=False):
            embeddings = embeddings.float()
            if memory is None:
                indices = self.miner(embeddings, labels) if self.miner is not None else None
                loss: Tensor = self.loss(embeddings, labels, indices)
            else:
                references = torch.cat([embeddings, memory.embeddings.float()])
                reference_labels = torch.cat([labels, memory.labels.to(labels.dtype)])
                if self.miner is not None:
                    indices = self.miner(embeddings, labels, references, reference_labels)
                else:
                    indices = lmu.get_all_pairs_indices(labels, reference_labels)
                batch = torch.arange(len(embeddings), device=embeddings.device)
                indices = lmu.remove_self_comparisons(indices, batch, len(references))
                loss = self.loss(embeddings, labels, indices, references, reference_labels)
        self.last_stats = _mined_counts(indices) if self.miner is not None else {}
        return loss

    def extra_repr(self) -> str:
        return f"pml={type(self.loss).__name__}, miner={type(self.miner).__name__ if self.miner else None}"


class PMLPairLoss(PairLoss, PMLLoss):
    """A PML loss over the pairs (or triplets) of a batch: P x K batches, gathered under torchrun.

    `memory_size` wraps it in a `CrossBatchMemory` where PML's own memory supports the loss.
    """

    def pair_loss(self, embeddings: Tensor, labels: Tensor, memory: PairMemory | None) -> Tensor:
        """See `PairLoss.forward`."""
        return self._pml_loss(embeddings, labels, memory)


def _mined_counts(indices: tuple[Tensor, ...] | None) -> dict[str, Tensor]:
    """What a miner kept: positive and negative pairs of a 4-tuple, or triplets of a 3-tuple."""
    if indices is None:
        return {}
    if len(indices) == 4:
        return {"positive_pairs": torch.tensor(len(indices[0])), "negative_pairs": torch.tensor(len(indices[2]))}
    return {"triplets": torch.tensor(len(indices[0]))}
