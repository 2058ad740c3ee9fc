"""Typed parts of a training run: a `Config` (or your own model, loss and data) in, `TrainingRun` out.

`build_training(config)` is what `retrieval train` runs: it builds the `Embedder`, the data and
the loss from the config, then `assemble_training` wires them. `assemble_training` takes any
model, any `MetricLoss` and any `RetrievalData`, with the typed `TrainConfig` / `DataConfig`
dataclasses for the knobs (no YAML file, no `Config`): see `examples/train_custom_model.py`.

Nothing here changes process-wide state: threads, deterministic algorithms and global seeds are
set by a command's entry (`retrieval.train.runs.configure_run_process`, which `run_training` calls
before each run). The model and loss
built from a config are initialized from `train.seed` in a forked generator, so the same config
builds the same weights and the caller's random stream is left alone.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from timm.optim import param_groups_weight_decay
from torch import nn
from torch.utils.data import DataLoader

from retrieval.config import Config, DataConfig, ModelConfig, TrainConfig
from retrieval.data import RetrievalData, build_data
from retrieval.errors import UserError
from retrieval.evaluate.evaluator import SplitEvaluator
from retrieval.losses import MetricLoss, build_loss
from retrieval.metrics import check_queries_have_positives, class_counts, frequency_groups
from retrieval.models import Embedder
from retrieval.runtime.device import amp_dtype, place_model, resolve_device, uses_channels_last
from retrieval.runtime.distributed import DistributedContext
from retrieval.runtime.environment import torch_seeded
from retrieval.train.accumulation import optimizer_steps
from retrieval.train.sampling import build_train_loader, fitting_p, sampler_kind
from retrieval.train.schedule import LrSchedule
from retrieval.train.step import GatheredLoss, OptimizerStep, adamw

__all__ = [
    "TrainingRun",
    "assemble_training",
    "build_embedder",
    "build_evaluators",
    "build_optimizer",
    "build_training",
]

_log = logging.getLogger(__name__)


@dataclass
class TrainingRun:
    """Everything one training run uses, built from its `TrainConfig` and placed: the `Trainer` only drives it.

    Named apart from the `train` section of the config (`TrainConfig`), one optimizer step
    (`OptimizerStep`) and what the run leaves in `result.json` (`RunResult`).

    The model maps images `(B, C, H, W)` to embeddings `(B, D)`; nothing else is required of it.
    A `backbone` submodule, if it has one, is what `train.freeze_backbone_epochs` freezes.
    """

    model: nn.Module  # on `device`; BatchNorm synchronized over GPUs under torchrun
    loss: MetricLoss  # on `device`; holds the proxies of proxy losses
    data: RetrievalData  # training set and labels, test split, optional validation split
    loader: DataLoader  # training batches (see `retrieval.train.sampling`)
    optimizer: torch.optim.Optimizer  # AdamW over the model's and the loss's parameters
    schedule: LrSchedule  # the lr factor of every step
    step: OptimizerStep  # one optimizer step: forward, loss, backward (DDP), clipping, loss scaling, AdamW
    evaluators: dict[str, SplitEvaluator]  # "test", and "val" when the data has a validation split
    device: torch.device
    class_groups: np.ndarray  # (K,) head / mid / tail group of every training class
    channels_last: bool = False  # batches go to the model in NHWC
    context: DistributedContext = field(default_factory=DistributedContext)
    loading: DataConfig = field(default_factory=DataConfig)  # as the loader reads it: data.p fitted to the data


def build_training(config: Config, resuming: bool = False) -> TrainingRun:
    """The parts of the run `config` describes (model, data and loss from the registries), ready to train.

    Args:
        config: the resolved run config.
        resuming: the weights will come from a checkpoint, so no pretrained weights are loaded.
    """
    with torch_seeded(config.train.seed):
        _log.info("building the model (%s) ...", config.model.backbone)
        model = build_embedder(config.model, config.train, resuming)
        _log.info("reading the data (%s) ...", config.data.name)
        data = build_data(config.data, model.data_config(), config.augment, config.model.in_chans)
        counts = class_counts(data.train_labels, data.num_classes)
        loss = build_loss(config.loss.name, config.loss.params, data.num_classes, model.embedding_dim, counts)
    return assemble_training(model, loss, data, config.train, config.data)


def build_embedder(model: ModelConfig, train: TrainConfig, resuming: bool = False) -> Embedder:
    """The configured `Embedder` (on the CPU); with `resuming`, without pretrained weights.

    Warns when `train.freeze_bn` would freeze BatchNorm layers that start from scratch.
    """
    if resuming:
        model = model.model_copy(update={"pretrained": False, "weights": None})
    elif train.freeze_bn and not (model.pretrained or model.weights):
        warnings.warn(
            "train.freeze_bn is set but the backbone starts from scratch: its BatchNorm statistics and "
            "affine parameters will never be learned; set train.freeze_bn=false",
            stacklevel=3,
        )
    return Embedder(**model.model_dump())


def assemble_training(
    model: nn.Module,
    loss: MetricLoss,
    data: RetrievalData,
    train: TrainConfig,
    loading: DataConfig,
    context: DistributedContext | None = None,
) -> TrainingRun:
    """Wire a model, a loss and data into `TrainingRun`: device, loader, optimizer, schedule, step, evaluators.

    Args:
        model: any embedder, images `(B, C, H, W)` -> `(B, D)` (see `TrainingRun`).
        loss: a `MetricLoss` with one proxy per class of `data` if it has proxies.
        data: training images and labels `0..num_classes-1`, a test split, an optional validation split.
        train: device, autocast, optimizer, schedule and step knobs (`lr`, `epochs`, `grad_clip`, ...).
        loading: batch size, sampler, P and K, workers and evaluation batch size.
        context: the process group (default: the current one, or a single process).

    Raises:
        UserError: labels outside the classes, a loss that cannot train with the data or sampler,
            or a test / validation split whose queries have no positive.
    """
    context = context or DistributedContext.current()
    device = context.process_device(resolve_device(train.device))
    autocast = amp_dtype(train.amp, device)
    channels_last = uses_channels_last(train.channels_last, device)
    model = place_model(model, device, channels_last)
    if context.enabled and device.type == "cuda" and not train.freeze_bn:
        # BatchNorm statistics over the global batch, as one process would compute them (NCCL only).
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    kind = _check_data(data, loss, loading)
    class_groups = frequency_groups(data.train_labels, data.num_classes)
    loss = loss.to(device)
    if kind == "pk":
        loading = fitting_p(loading, data.train_labels, context)
    loader = build_train_loader(data.train, data.train_labels, kind, loading, train.seed, context, device)
    optimizer = build_optimizer(model, loss, train)
    schedule = _schedule(train, optimizer_steps(len(loader), train.accumulate_steps))
    # Pair losses compare the images of a batch: under several processes they see every rank's share.
    criterion: nn.Module = GatheredLoss(loss) if context.enabled and loss.needs_pk_batches else loss
    step = OptimizerStep(
        model, criterion, optimizer, context, autocast, train.grad_clip, train.compile, train.accumulate_steps
    )
    if train.accumulate_steps > 1 and loss.needs_pk_batches and context.is_main:
        _warn_pairs_stay_in_micro_batches(train.accumulate_steps)
    evaluators = build_evaluators(data, loading, device, context, autocast, channels_last, class_groups)
    return TrainingRun(
        model, loss, data, loader, optimizer, schedule, step, evaluators, device, class_groups, channels_last, context,
        loading,
    )  # fmt: skip


def _check_data(data: RetrievalData, loss: MetricLoss, loading: DataConfig) -> str:
    """The sampler kind for `loss`, once the splits, the labels and the loss are known to train together.

    Raises:
        UserError: a test / validation query without a positive, labels outside the loss's classes, or
            multi-label data with a loss or sampler that cannot take it.
    """
    for split in (data.test, data.val):
        if split is not None:
            check_queries_have_positives(split.labels, split.query_mask, split.gallery_mask)
    _check_train_labels(data, loss)
    kind = sampler_kind(loading.sampler, loss)
    if data.train_labels.ndim == 2 and (kind == "pk" or not loss.multi_label):
        raise UserError(
            f"{loading.path} is multi-label (labels joined by '|'): train it with loss.name=asymmetric_proxy "
            "and data.sampler=random (or auto)"
        )
    return kind


def _schedule(train: TrainConfig, steps_per_epoch: int) -> LrSchedule:
    """The learning-rate schedule of `train` over `steps_per_epoch` optimizer steps an epoch."""
    return LrSchedule(
        train.schedule,
        steps_per_epoch,
        train.epochs,
        train.warmup_epochs,
        train.freeze_backbone_epochs,
        train.step_epochs,
        train.step_gamma,
    )


def _warn_pairs_stay_in_micro_batches(accumulate_steps: int) -> None:
    """Gradient accumulation with a pair loss: a step is not one larger batch, since pairs never cross micro-batches."""
    _log.warning(
        "train.accumulate_steps=%d with a pair loss: pairs never cross micro-batches, so a step is not one batch "
        "%d times larger (each micro-batch of data.p x data.k images forms its pairs alone)",
        accumulate_steps,
        accumulate_steps,
    )


def build_evaluators(
    data: RetrievalData,
    loading: DataConfig,
    device: torch.device,
    context: DistributedContext,
    autocast: torch.dtype | None,
    channels_last: bool,
    class_groups: np.ndarray,
) -> dict[str, SplitEvaluator]:
    """One `SplitEvaluator` for the test split and, when there is one, the validation split."""
    splits = {"test": data.test} | ({"val": data.val} if data.val is not None else {})
    return {
        name: SplitEvaluator(
            split,
            loading.eval_batch_size,
            device,
            context,
            num_workers=loading.num_workers,
            pin_memory=loading.pin_memory and device.type == "cuda",
            persistent_workers=loading.persistent_workers,
            amp_dtype=autocast,
            channels_last=channels_last,
            class_groups=class_groups,
        )
        for name, split in splits.items()
    }


def build_optimizer(model: nn.Module, loss: MetricLoss, train: TrainConfig) -> torch.optim.AdamW:
    """AdamW: the model's groups at `train.lr`, no weight decay on norms and biases (timm's rule), then
    one group of the loss's parameters (proxies) at `lr * proxy_lr_mult` without weight decay."""
    groups = param_groups_weight_decay(model, train.weight_decay)
    for group in groups:
        group["lr"] = train.lr
    proxies = {"params": list(loss.parameters()), "lr": train.lr * train.proxy_lr_mult, "weight_decay": 0.0}
    return adamw([*groups, proxies])


def _check_train_labels(data: RetrievalData, loss: MetricLoss) -> None:
    """Check the training labels once, so the loss skips its per-step check (a GPU sync each)."""
    labels = data.train_labels
    if len(labels) and (labels.min() < 0 or labels.max() >= data.num_classes):
        raise UserError(
            f"training labels span [{labels.min()}, {labels.max()}] but the dataset declares "
            f"{data.num_classes} classes; the dataset builder must number classes 0..C-1"
        )
    loss.check_labels = False
