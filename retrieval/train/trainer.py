"""The training loop: AdamW with a proxy group, warm-up + cosine lr, validation, model selection, logs.

Model selection is honest: `checkpoints/best.pt` is the epoch with the best validation metric
(`train.select_on`), or the last epoch when there is no validation split. The test set is scored
once, at the end, on the selected checkpoint; choosing on it needs `train.select_on_test: true`,
and then every test figure is labelled as selected on test.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.optim import param_groups_weight_decay
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import DistributedSampler
from tqdm import tqdm

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config, config_to_dict, save_config
from retrieval.data import EvalSplit, build_data
from retrieval.data.balanced_sampler import balanced_sampler
from retrieval.errors import UserError
from retrieval.evaluate.evaluator import SplitEvaluator
from retrieval.evaluate.uncertainty import record_uncertainty
from retrieval.losses import PAIR_LOSSES, build_loss
from retrieval.metrics import check_queries_have_positives, class_counts, frequency_groups
from retrieval.models import Embedder
from retrieval.report.plots import plot_curves, plot_run
from retrieval.runtime.device import amp_dtype, place_model, resolve_device, uses_channels_last
from retrieval.runtime.distributed import DistributedContext, GatheredLoss
from retrieval.runtime.environment import apply_runtime_settings, describe_environment
from retrieval.train.diagnostics import EpochDiagnostics
from retrieval.train.loaders import build_pk_sampler, build_train_loader
from retrieval.train.schedule import LrSchedule, lr_factor
from retrieval.train.step import LossTracker, TrainStep

__all__ = ["Trainer", "TrainResult", "lr_factor"]

# Steps between two read-backs of the loss (the non-finite check and the progress bar): each one
# waits for the GPU, so they are rare; an epoch's end always checks.
CHECK_EVERY = 50


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    """Every epoch's randomness depends only on (seed, epoch, rank), so a resumed run continues exactly.

    Ranks draw different augmentations; rank 0 (a single process) keeps the seeds of earlier versions.
    """
    return seed * 1_000_003 + epoch + rank * 104_729


@dataclasses.dataclass
class TrainResult:
    """What a finished run reports: the selected checkpoint and its test metrics (scored once)."""

    epoch: int  # the selected epoch (1-based)
    selected_on: str  # "val", "test" (optimistic, opted in) or "last" (no validation split)
    test: dict[str, float]  # Recall@K, MAP@R, R-precision of the selected checkpoint on the test set
    selection_value: float | None = None  # the selection metric's value at that epoch
    uncertainty: dict[str, Any] = dataclasses.field(default_factory=dict)  # test R@1 / MAP@R 95% bootstrap CIs

    @property
    def label(self) -> str:
        """The tag every printed test figure carries when the checkpoint was chosen on the test set."""
        return "selected on test" if self.selected_on == "test" else ""

    def describe(self, metric: str) -> str:
        """One line saying which checkpoint the test figures belong to and why."""
        if self.selected_on == "last":
            return f"result: last epoch ({self.epoch}); no validation split, so nothing was selected"
        where = "validation set" if self.selected_on == "val" else "TEST set (train.select_on_test; optimistic)"
        return f"result: epoch {self.epoch}, best {metric} {self.selection_value:.4f} on the {where}"


class Trainer:
    """Trains an `Embedder` with the configured loss and writes a run directory.

    The run directory holds `config.yaml`, `environment.json` (versions, threads, CPU), `metrics.jsonl`
    (one JSON object per epoch, with the seconds spent training, evaluating and writing, and the
    training images per second), `checkpoints/last.pt` (everything a resume needs, every epoch) and
    `best.pt` (the selected checkpoint: weights, config and manifest, no optimizer state),
    `result.json` (the selected checkpoint's test metrics) and `plots/*.png`.

    Under torchrun (an initialized process group) every process trains its share of each global
    batch, evaluates its shard of each split, and only rank 0 writes files and prints.

    Args:
        config: the resolved run config.
        run_dir: where the run's files go.
        resuming: the weights will come from a checkpoint (`resume`), so no pretrained weights are loaded.
    """

    def __init__(self, config: Config, run_dir: Path, resuming: bool = False) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.context = DistributedContext.current()
        apply_runtime_settings(config.train)
        self.device = self.context.process_device(resolve_device(config.train.device))
        self.amp_dtype = amp_dtype(config.train.amp, self.device)
        self.channels_last = uses_channels_last(config.train.channels_last, self.device)
        _seed_everything(config.train.seed)
        model_config = dataclasses.asdict(config.model)
        if resuming:
            model_config.update(pretrained=False, weights=None)
        elif config.train.freeze_bn and not (config.model.pretrained or config.model.weights):
            warnings.warn(
                "train.freeze_bn is set but the backbone starts from scratch: its BatchNorm statistics and "
                "affine parameters will never be learned; set train.freeze_bn=false",
                stacklevel=2,
            )
        self.model = place_model(Embedder(**model_config), self.device, self.channels_last)
        if self.context.enabled and self.device.type == "cuda" and not config.train.freeze_bn:
            # BatchNorm statistics over the global batch, as one process would compute them (NCCL only).
            self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        self.data = build_data(config.data, self.model.data_config(), config.augment, config.model.in_chans)
        for split in (self.data.test, self.data.val):
            if split is not None:
                check_queries_have_positives(split.labels, split.query_mask, split.gallery_mask)
        self.selection_split = self._selection_split()
        counts = class_counts(self.data.train_labels, self.data.num_classes)
        self.class_groups = frequency_groups(self.data.train_labels, self.data.num_classes)
        self.loss_fn = build_loss(
            config.loss.name, config.loss.params, self.data.num_classes, config.model.embedding_dim, counts
        ).to(self.device)
        self._check_train_labels()
        self.generator = torch.Generator()
        sampler_kind = self._sampler_kind()
        use_pk, use_balanced = sampler_kind == "pk", sampler_kind == "balanced"
        if self.data.train_labels.ndim == 2 and (use_pk or not getattr(self.loss_fn, "multi_label", False)):
            raise UserError(
                f"{config.data.path} is multi-label (labels joined by '|'): train it with loss.name=asymmetric_proxy "
                "and data.sampler=random (or auto)"
            )
        seed, context = config.train.seed, self.context
        self.pk_sampler = build_pk_sampler(self.data.train_labels, config.data, seed, context) if use_pk else None
        balanced = balanced_sampler(self.data.train_labels, self.generator) if use_balanced else None
        self.loader = build_train_loader(
            self.data.train, config.data, seed, context, self.device, self.generator, self.pk_sampler, balanced
        )
        train = config.train
        # No weight decay on norms, biases (timm's rule) or proxies (losses.md); proxies learn faster.
        groups = param_groups_weight_decay(self.model, train.weight_decay)
        for group in groups:
            group["lr"] = train.lr
        proxies = {"params": list(self.loss_fn.parameters()), "lr": train.lr * train.proxy_lr_mult, "weight_decay": 0.0}
        self.optimizer = torch.optim.AdamW([*groups, proxies])
        self.base_lrs = [group["lr"] for group in self.optimizer.param_groups]
        self.schedule = LrSchedule(
            train.schedule,
            len(self.loader),
            train.epochs,
            train.warmup_epochs,
            train.freeze_backbone_epochs,
            train.step_epochs,
            train.step_gamma,
        )
        # Pair losses compare the images of a batch: under several processes they see every rank's share.
        criterion = GatheredLoss(self.loss_fn) if self.context.enabled and config.loss.name in PAIR_LOSSES else None
        self.step_fn = TrainStep(
            self.model,
            criterion or self.loss_fn,
            self.optimizer,
            self.context,
            self.amp_dtype,
            train.grad_clip,
            train.compile,
        )
        self.evaluators = {name: self._evaluator(split) for name, split in self._eval_splits().items()}
        self.start_epoch = 0
        self.best_score = -1.0
        self.best_epoch = 0

    def _check_train_labels(self) -> None:
        """Check the training labels once, so proxy losses skip their per-step check (a GPU sync each)."""
        labels = self.data.train_labels
        if len(labels) and (labels.min() < 0 or labels.max() >= self.data.num_classes):
            raise UserError(
                f"training labels span [{labels.min()}, {labels.max()}] but the dataset declares "
                f"{self.data.num_classes} classes; the dataset builder must number classes 0..C-1"
            )
        if hasattr(self.loss_fn, "check_labels"):
            self.loss_fn.check_labels = False

    def _selection_split(self) -> str | None:
        """Which split picks `best.pt`: the test set only when opted in, else validation, else none."""
        if self.config.train.select_on_test:
            return "test"
        return "val" if self.data.val is not None else None

    def _sampler_kind(self) -> str:
        """`random`, `balanced` or `pk`; `auto` picks the PK sampler for pair losses, which cannot train without it."""
        cfg, loss_name = self.config.data, self.config.loss.name
        kind = cfg.sampler if cfg.sampler != "auto" else ("pk" if loss_name in PAIR_LOSSES else "random")
        if loss_name in PAIR_LOSSES and kind != "pk":
            raise UserError(
                f"loss {loss_name!r} compares images within a batch and needs P classes x K images per "
                f"batch; set data.sampler=pk (or auto) instead of {kind}"
            )
        return kind

    def _eval_splits(self) -> dict[str, EvalSplit]:
        splits = {"test": self.data.test}
        if self.data.val is not None:
            splits["val"] = self.data.val
        return splits

    def _evaluator(self, split: EvalSplit) -> SplitEvaluator:
        cfg = self.config.data
        return SplitEvaluator(
            split,
            cfg.eval_batch_size,
            self.device,
            self.context,
            num_workers=cfg.num_workers,
            pin_memory=cfg.pin_memory and self.device.type == "cuda",
            persistent_workers=cfg.persistent_workers,
            amp_dtype=self.amp_dtype,
            channels_last=self.channels_last,
            class_groups=self.class_groups,
        )

    def _score(self, split: str) -> dict[str, float]:
        """Metrics of the current model on `val` or `test`, with per-group results on closed-set data."""
        return self.evaluators[split](self.model, getattr(self.loss_fn, "proxies", None))

    def resume(self, checkpoint: Checkpoint) -> None:
        """Continue from a loaded `last.pt`: weights, proxies, optimizer, epoch and best score."""
        self.model.load_state_dict(checkpoint.model)
        self.loss_fn.load_state_dict(checkpoint.loss)
        self.optimizer.load_state_dict(checkpoint.optimizer or {})
        self.start_epoch = checkpoint.epoch + 1
        self.best_score = checkpoint.best_score
        self.best_epoch = checkpoint.best_epoch

    def fit(self) -> TrainResult:
        """Train all remaining epochs, then score the selected checkpoint on the test set once."""
        if self.context.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "plots").mkdir(exist_ok=True)
            save_config(self.config, self.run_dir / "config.yaml")
            environment = describe_environment(self.device) | {"world_size": self.context.world_size}
            (self.run_dir / "environment.json").write_text(json.dumps(environment, indent=2) + "\n")
        records = self._read_records()
        epochs = self.config.train.epochs
        for epoch in range(self.start_epoch, epochs):
            started = time.perf_counter()
            record = self._train_epoch(epoch)
            trained = time.perf_counter()
            if (epoch + 1) % self.config.train.eval_every == 0 or epoch + 1 == epochs:
                record.update(self._evaluate_epoch())
            evaluated = time.perf_counter()
            self._save(epoch, record)
            if self.context.is_main:
                plot_curves(records + [record], self.run_dir / "plots" / "curves.png")  # the diagnostics: at the end
            written = time.perf_counter()
            record["time"] = {
                "train": round(trained - started, 3),
                "eval": round(evaluated - trained, 3),
                "write": round(written - evaluated, 3),
            }
            record["images_per_second"] = round(record.pop("images") / max(trained - started, 1e-9), 1)
            record["seconds"] = round(written - started, 3)
            records.append(record)
            if self.context.is_main:
                self._write_records(records)
                print(self._summary(record), flush=True)  # one line per epoch, also when stdout is a file
        if self.context.is_main:
            plot_run(self.run_dir)
        result = self._final_result()
        if self.context.is_main:
            (self.run_dir / "result.json").write_text(json.dumps(dataclasses.asdict(result), indent=2) + "\n")
        return result

    def train_step(self, images: Tensor, labels: Tensor, step: int) -> Tensor:
        """One optimizer step of the run's global step `step` on a batch; returns its loss, on the device.

        The lr is set for `step`, the batch moved to the device (NHWC on GPU); nothing is read back.
        """
        self._set_lr(step)
        images, labels = images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.step_fn(images, labels)

    def begin_epoch(self, epoch: int) -> None:
        """Seed the epoch's randomness and data order, set train mode and what is frozen (0-based `epoch`)."""
        seed = _epoch_seed(self.config.train.seed, epoch)
        _seed_everything(_epoch_seed(self.config.train.seed, epoch, self.context.rank))
        self.generator.manual_seed(seed)
        if self.pk_sampler is not None:
            self.pk_sampler.set_epoch(epoch)
        if isinstance(self.loader.sampler, DistributedSampler):
            self.loader.sampler.set_epoch(epoch)
        self._set_train_mode(epoch)
        if hasattr(self.loss_fn, "set_epoch"):
            self.loss_fn.set_epoch(epoch)  # e.g. the balance-degree gate's warm-up
        self.step_fn.refresh()

    def recorded_step(
        self, images: Tensor, labels: Tensor, step: int, tracker: LossTracker, diagnostics: EpochDiagnostics
    ) -> None:
        """`train_step` plus what the epoch loop keeps of it (loss and the loss's diagnostics, on the device)."""
        tracker.add(self.train_step(images, labels, step))
        diagnostics.update(getattr(self.loss_fn, "last_stats", {}))

    def _train_epoch(self, epoch: int) -> dict[str, Any]:
        self.begin_epoch(epoch)
        tracker = LossTracker(self.device)
        diagnostics = EpochDiagnostics(torch.from_numpy(self.class_groups).to(self.device))
        steps, images_seen = len(self.loader), 0
        progress = tqdm(
            self.loader,
            desc=f"epoch {epoch + 1}/{self.config.train.epochs}",
            leave=False,
            disable=None if self.context.is_main else True,
        )
        for step, (images, labels) in enumerate(progress):
            self.recorded_step(images, labels, epoch * steps + step, tracker, diagnostics)
            images_seen += len(images)
            if (step + 1) % CHECK_EVERY == 0 or step + 1 == steps:
                self._check_finite(tracker, epoch)
                progress.set_postfix(loss=f"{tracker.mean():.4f}")
        total_loss = self.context.sum(tracker.total())  # the ranks' loss sums; the mean of their means
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "loss": float(total_loss) / max(tracker.steps * self.context.world_size, 1),
            "lr": self.optimizer.param_groups[0]["lr"],
            "images": images_seen * self.context.world_size,
        }
        record.update(diagnostics.summary())
        return record

    def _check_finite(self, tracker: LossTracker, epoch: int) -> None:
        """Stop with the first non-finite loss's epoch and step (steps after it never reach a checkpoint)."""
        bad = tracker.first_non_finite()
        if bad is not None:
            step, value = bad
            raise UserError(
                f"the loss became {value} at epoch {epoch + 1}, step {step + 1}; nothing saved was "
                f"overwritten (checkpoints/last.pt holds epoch {epoch}); lower train.lr or the loss's scale"
            )

    def _set_train_mode(self, epoch: int) -> None:
        """Train mode, with the backbone frozen in its first epochs and BatchNorm frozen when configured."""
        train_cfg = self.config.train
        self.model.train()
        frozen = epoch < train_cfg.freeze_backbone_epochs
        self.model.backbone.requires_grad_(not frozen)
        if train_cfg.freeze_bn or frozen:
            for module in self.model.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()  # running statistics stay as they are
                    module.requires_grad_(False)  # and so do the affine weight and bias

    def _set_lr(self, step: int) -> None:
        """Set every group's lr for the run's step `step` (see `LrSchedule`)."""
        factor = self.schedule.factor(step)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor

    def _evaluate_epoch(self) -> dict[str, float]:
        """Validation metrics (`val/...`), and test metrics (`test/...`) only when selected or logged on test."""
        scores = {}
        if self.data.val is not None:
            scores.update({f"val/{key}": value for key, value in self._score("val").items()})
        if self.selection_split == "test" or self.config.train.log_test:
            scores.update({f"test/{key}": value for key, value in self._score("test").items()})
        return scores

    def _save(self, epoch: int, record: dict[str, Any]) -> None:
        """`last.pt` with everything a resume needs; `best.pt` with what evaluation and indexing need (rank 0)."""
        key = f"{self.selection_split}/{self.config.train.select_on}"
        improved = key in record and record[key] > self.best_score
        if improved:
            self.best_score, self.best_epoch = record[key], epoch + 1
        if not self.context.is_main:
            return
        checkpoint = Checkpoint(
            model=self.model.state_dict(),
            model_config=self.config.model,
            run_config=config_to_dict(self.config),
            num_classes=self.data.num_classes,
            epoch=epoch,
            best_score=self.best_score,
            best_epoch=self.best_epoch,
            loss=self.loss_fn.state_dict(),
            optimizer=self.optimizer.state_dict(),
        )
        checkpoints = self.run_dir / "checkpoints"
        checkpoint.save(checkpoints / "last.pt")
        # Without a selection split, the run's result is its last epoch: best.pt follows last.pt.
        if improved or self.selection_split is None:
            checkpoint.slim().save(checkpoints / "best.pt")

    def _final_result(self) -> TrainResult:
        """Test metrics of the selected checkpoint, with per-query scores (`per_query.npz`) and their CIs."""
        last_epoch = self.config.train.epochs
        chosen = self.best_epoch if self.selection_split is not None else last_epoch
        if chosen != last_epoch:
            if self.context.is_main:  # the one process that wrote it (other nodes may not see the file)
                best = Checkpoint.load(self.run_dir / "checkpoints" / "best.pt")
                self.model.load_state_dict(best.model)
                self.loss_fn.load_state_dict(best.loss)
            self.context.broadcast_state(self.model)
            self.context.broadcast_state(self.loss_fn)
        test, scores = self.evaluators["test"].score(self.model, getattr(self.loss_fn, "proxies", None))
        uncertainty = record_uncertainty(self.run_dir, scores) if scores is not None else {}
        selection_value = self.best_score if self.selection_split is not None else None
        return TrainResult(chosen, self.selection_split or "last", test, selection_value, uncertainty)

    def _read_records(self) -> list[dict[str, Any]]:
        """Records of epochs already trained (when resuming), so logs and plots stay whole."""
        path = self.run_dir / "metrics.jsonl"
        if self.start_epoch == 0 or not self.context.is_main or not path.is_file():
            return self.context.broadcast([])
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return self.context.broadcast([r for r in records if r["epoch"] <= self.start_epoch])

    def _write_records(self, records: list[dict[str, Any]]) -> None:
        lines = "".join(json.dumps(record) + "\n" for record in records)
        (self.run_dir / "metrics.jsonl").write_text(lines)

    def _summary(self, record: dict[str, Any]) -> str:
        text = f"epoch {record['epoch']}/{self.config.train.epochs}  loss {record['loss']:.4f}  lr {record['lr']:.2e}"
        for split in ("val", "test"):
            if f"{split}/recall@1" in record:
                text += f"  {split} R@1 {record[f'{split}/recall@1']:.4f} MAP@R {record[f'{split}/map@r']:.4f}"
        if "c" in record:
            text += f"  c_i median {record['c']['median']:.3f}"
        return text + f"  ({record['seconds']:.1f}s, {record['images_per_second']:.0f} img/s)"
