"""The pretraining loop: two views of each image, the method's loss, AdamW on a cosine schedule, weights every epoch.

It is the trainer's loop with another step: `OptimizerStep` (autocast, bf16/fp16, DDP under torchrun,
clipping), `LrSchedule`, the shuffled loader split over processes (`build_train_loader`), and the epoch
loop's seeding, progress and non-finite check (`retrieval.train.epoch_loop`); `train.loggers` get its records.
There is no evaluation: nothing is labelled, so nothing is selected, and the result is the last epoch.

The run directory holds `config.yaml`, `environment.json`, `metrics.jsonl` (one record an epoch:
loss, lr, seconds, images per second), `checkpoints/last.pt` (everything a resume needs, written
atomically every epoch) and `backbone.safetensors`: the backbone's state dict after the last
trained epoch, which `retrieval train --set model.weights=RUN/backbone.safetensors` loads.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Annotated, Final, Literal

import numpy as np
import torch
from pydantic import ConfigDict
from safetensors.torch import save_file
from timm.optim import param_groups_weight_decay

from retrieval.checkpoint import StateDict, load_torch_file
from retrieval.config import Config, ConfigDocument, config_to_dict
from retrieval.core.epoch_record import EpochRecord, StepTimes
from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.errors import UserError
from retrieval.models import Embedder
from retrieval.pretrain.methods import SelfSupervisedModel, build_method
from retrieval.pretrain.resume_path import missing_checkpoint
from retrieval.pretrain.views import views_dataset
from retrieval.runtime.device import amp_dtype, place_model, resolve_device, uses_channels_last
from retrieval.runtime.distributed import DistributedContext
from retrieval.runtime.environment import describe_environment, torch_seeded
from retrieval.runtime.files import atomic_write
from retrieval.train.epoch_loop import epoch_batches, load_resume_part, seed_epoch
from retrieval.train.run_files import RunFiles
from retrieval.train.sampling import build_train_loader
from retrieval.train.schedule import LrSchedule
from retrieval.train.step import LossTracker, OptimizerStep, adamw
from retrieval.train.trackers import open_tracker, tracked
from retrieval.validation import Record, ValidationError, at_least, user_error

__all__ = ["BACKBONE_FILE", "PRETRAIN_FORMAT", "PretrainCheckpoint", "PretrainResult", "Pretrainer"]

_log = logging.getLogger(__name__)

BACKBONE_FILE = "backbone.safetensors"
PRETRAIN_FORMAT: Final = "retrieval-pretrain"  # `format` of a pretraining run's checkpoints/last.pt


class PretrainCheckpoint(Record):
    """A pretraining run's `checkpoints/last.pt`: what `retrieval pretrain --resume` continues from.

    Written with `torch.save` and read as data (`weights_only`), field by field: a damaged or
    hand-edited file is one line naming the file and the field.
    """

    model_config = ConfigDict(extra="ignore", strict=True, arbitrary_types_allowed=True, protected_namespaces=())

    format: Literal["retrieval-pretrain"]
    model: dict[str, torch.Tensor]  # the `SelfSupervisedModel`'s weights (backbone and head)
    optimizer: StateDict
    grad_scaler: StateDict | None = None  # train.amp fp16 only
    epoch: Annotated[int, at_least(0)]  # the last trained epoch, 0-based
    config: ConfigDocument  # the run's config as `config_to_dict` wrote it (as `CheckpointFile.config`)
    source: ImageSourceSpec  # how the images were given: `--images DIR`, or `--csv FILE` and `--split`

    @classmethod
    def read(cls, path: Path) -> PretrainCheckpoint:
        """The pretraining checkpoint at `path`, read as data on the CPU.

        Raises:
            UserError: the file is missing, unreadable, not a pretraining checkpoint, or a field is
                missing or of the wrong type (naming the file and the field).
        """
        state = load_torch_file(path, missing_checkpoint(path), str(path), "it is not a pretraining checkpoint")
        if not isinstance(state, dict) or state.get("format") != PRETRAIN_FORMAT:
            raise UserError(f"{path} is not a `retrieval pretrain` checkpoint; resume a run directory `pretrain` wrote")
        try:
            return cls.model_validate(state)
        except ValidationError as exc:
            raise user_error(cls, exc, str(path), "restore an intact copy, or start the run again") from None

    def save(self, path: Path) -> None:
        """Write the checkpoint to `path` atomically; the source as the plain dict of its keys (`weights_only` data)."""
        with atomic_write(path) as temporary:
            torch.save({**dict(self), "source": self.source.model_dump(exclude_unset=True)}, temporary)


@dataclasses.dataclass(frozen=True)
class PretrainResult:
    """What a finished pretraining run reports."""

    weights: Path  # the backbone's state dict, for `model.weights`
    epochs: int  # epochs trained in all (a resumed run counts its earlier ones)
    images: int  # unlabeled images pretrained on
    loss: float  # the last epoch's mean loss
    image_steps: int  # images x views x epochs: the compute, for comparing budgets with training's


class Pretrainer:
    """Pretrains the backbone of `config.model` on the images `paths`, writing the run directory `run_dir`.

    Under torchrun every process takes its share of each global batch (`pretrain.batch_size`), and
    only rank 0 writes files and prints.

    Args:
        config: the resolved config (sections `model`, `data`, `augment`, `train` and `pretrain`).
        paths: the unlabeled images.
        run_dir: where the run's files go.
        source: how the images were given (`--images DIR`, or `--csv FILE` and `--split`), kept for a resume.
        context: the process group (default: the current one, or a single process).
    """

    def __init__(
        self,
        config: Config,
        paths: list[Path],
        run_dir: Path,
        source: ImageSourceSpec,
        context: DistributedContext | None = None,
    ) -> None:
        self.config, self.paths, self.source = config, paths, source
        self.files = RunFiles(run_dir)
        self.context = context = context or DistributedContext.current()
        train, pretrain = config.train, config.pretrain
        self.device = device = context.process_device(resolve_device(train.device))
        self.channels_last = uses_channels_last(train.channels_last, device)
        with torch_seeded(train.seed):
            _log.info("building the model (%s, %s head) ...", config.model.backbone, pretrain.method)
            encoder = Embedder(**config.model.model_copy(update={"embedding_dim": None}).model_dump())
            head, criterion = build_method(pretrain, encoder.embedding_dim)
            built = SelfSupervisedModel(encoder, head)
        model = place_model(built, device, self.channels_last)
        if context.enabled and device.type == "cuda":
            # BatchNorm statistics over the global batch, as one process would compute them (NCCL only).
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        self.model = model
        dataset = views_dataset(
            paths,
            config.augment,
            pretrain,
            config.data.image_size,
            encoder.data_config(),
            config.model.in_chans,
            config.data.on_bad_image,
        )
        loading = config.data.model_copy(update={"batch_size": pretrain.batch_size})
        if len(paths) < pretrain.batch_size:
            raise UserError(
                f"{len(paths)} images do not fill one step of pretrain.batch_size={pretrain.batch_size}; "
                "lower pretrain.batch_size or give more images"
            )
        self.loader = build_train_loader(dataset, np.arange(len(paths)), "random", loading, train.seed, context, device)
        groups = param_groups_weight_decay(model, pretrain.weight_decay)
        self.optimizer = adamw(groups, lr=pretrain.lr)
        self.base_lrs = [group["lr"] for group in self.optimizer.param_groups]
        self.schedule = LrSchedule("cosine", len(self.loader), pretrain.epochs, pretrain.warmup_epochs)
        self.step = OptimizerStep(
            model,
            criterion.to(device),
            self.optimizer,
            context,
            amp_dtype(train.amp, device),
            train.grad_clip,
            train.compile,
        )
        self.start_epoch = 0

    @property
    def last_checkpoint(self) -> Path:
        """`checkpoints/last.pt`: model, optimizer, loss scale and epoch, for a resume."""
        return self.files.checkpoints / "last.pt"

    @property
    def weights_file(self) -> Path:
        """`backbone.safetensors`: the backbone after the last trained epoch."""
        return self.files.root / BACKBONE_FILE

    def resume(self, state: PretrainCheckpoint) -> None:
        """Continue from a loaded `last.pt` (`PretrainCheckpoint.read`): weights, optimizer, loss scale, epoch."""
        load_resume_part("model", self.model, state.model)
        load_resume_part("optimizer", self.optimizer, state.optimizer)
        if self.step.scaler is not None and state.grad_scaler is not None:
            self.step.scaler.load_state_dict(state.grad_scaler)
        self.start_epoch = state.epoch + 1

    def fit(self) -> PretrainResult:
        """Pretrain the remaining epochs; returns where the backbone's weights are."""
        context, epochs = self.context, self.config.pretrain.epochs
        records: list[EpochRecord] = context.broadcast(
            self.files.read_records(self.start_epoch) if context.is_main else []
        )
        if context.is_main:
            environment = describe_environment(self.device) | {"world_size": context.world_size}
            self.files.start(environment, config_to_dict(self.config), records)
        if self.start_epoch < epochs:
            _log.info(
                "pretraining (%s) epochs %d-%d of %d on %s: %d images, %d batches each ...",
                self.config.pretrain.method,
                self.start_epoch + 1,
                epochs,
                epochs,
                self.device,
                len(self.paths),
                len(self.loader),
            )
        loggers = self.config.train.loggers if context.is_main else ()
        with tracked(open_tracker(loggers, self.files.root), config_to_dict(self.config)) as tracker:
            for epoch in range(self.start_epoch, epochs):
                record = self._train_epoch(epoch)
                train_seconds = record.time.train if record.time is not None else 0.0
                started = time.perf_counter()
                if context.is_main:
                    self._save(epoch)
                    record.time = StepTimes(train=train_seconds, write=round(time.perf_counter() - started, 3))
                    self.files.append_record(record)
                    tracker.log_record(record.model_dump(mode="json", exclude_none=True))
                    print(self._summary(record), flush=True)
                records.append(record)
            if not records:
                raise UserError(f"{self.files.root} holds no epoch records; start the run again without --resume")
            steps = sum(record.images or 0 for record in records)
            result = PretrainResult(self.weights_file, epochs, len(self.paths), records[-1].loss, 2 * steps)
            tracker.log_result({"epoch": epochs, "loss": result.loss, "image_steps": result.image_steps})
        return result

    def _train_epoch(self, epoch: int) -> EpochRecord:
        """One pass over the images; the record of it (loss, lr, images, seconds)."""
        context, step = self.context, self.step
        seed_epoch(self.loader, self.config.train.seed, epoch, context.rank)
        self.model.train()
        step.refresh()
        tracker = LossTracker(self.device, skip_non_finite=step.scaler is not None)
        batches, epochs = len(self.loader), self.config.pretrain.epochs
        advice = f"nothing saved was overwritten (checkpoints/last.pt holds epoch {epoch}); lower pretrain.lr"
        started, seen = time.perf_counter(), 0
        for index, (views, labels) in epoch_batches(self.loader, tracker, epoch, epochs, advice, context.is_main):
            lr_factor = self.schedule.factor(epoch * batches + index)
            for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
                group["lr"] = base * lr_factor
            images, pair_labels = _stack_views(views, labels, self.device, self.channels_last)
            tracker.add(step(images, pair_labels))
            seen += len(views)
        seconds = time.perf_counter() - started
        loss = float(context.sum(tracker.total())) / max(float(context.sum(tracker.count())), 1.0)
        total = seen * context.world_size
        return EpochRecord(
            epoch=epoch + 1,
            loss=loss,
            lr=self.optimizer.param_groups[0]["lr"],
            images=total,
            images_per_second=round(total / max(seconds, 1e-9), 1),
            time=StepTimes(train=round(seconds, 3)),
        )

    def _save(self, epoch: int) -> None:
        """Write `last.pt` and the backbone file, each atomically (rank 0)."""
        self.files.checkpoints.mkdir(parents=True, exist_ok=True)
        model = _unwrapped(self.model)
        PretrainCheckpoint(
            format=PRETRAIN_FORMAT,
            model=model.state_dict(),
            optimizer=self.optimizer.state_dict(),
            grad_scaler=None if self.step.scaler is None else self.step.scaler.state_dict(),
            epoch=epoch,
            config=config_to_dict(self.config),
            source=self.source,
        ).save(self.last_checkpoint)
        backbone = {name: tensor.detach().cpu().contiguous() for name, tensor in model.backbone.state_dict().items()}
        metadata = {"format": PRETRAIN_FORMAT, "backbone": self.config.model.backbone, "epoch": str(epoch + 1)}
        with atomic_write(self.weights_file) as temporary:
            save_file(backbone, str(temporary), metadata=metadata)

    def _summary(self, record: EpochRecord) -> str:
        seconds = record.time.train if record.time is not None else 0.0
        return (
            f"epoch {record.epoch}/{self.config.pretrain.epochs}  loss {record.loss:.4f}  lr {record.lr:.2e}"
            f"  ({seconds:.1f}s, {record.images_per_second:.0f} img/s)"
        )


def _stack_views(
    views: torch.Tensor, labels: torch.Tensor, device: torch.device, channels_last: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(B, 2, C, H, W)` views and `(B,)` image indices -> `(2B, C, H, W)` (first views, then second) and `(2B,)`."""
    images = views.transpose(0, 1).reshape(-1, *views.shape[2:]).to(device, non_blocking=True)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, labels.repeat(2).to(device, non_blocking=True)


def _unwrapped(model: torch.nn.Module) -> SelfSupervisedModel:
    """The `SelfSupervisedModel` (SyncBatchNorm conversion keeps the class; DDP lives inside `OptimizerStep`)."""
    assert isinstance(model, SelfSupervisedModel)
    return model
