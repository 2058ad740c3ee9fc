"""The training loop: AdamW with a proxy group, warm-up + cosine lr, validation, model selection, logs.

Model selection is honest: `checkpoints/best.pt` is the epoch with the best validation metric
(`train.select_on`), or the last epoch when there is no validation split. The test set is scored
once, at the end, on the selected checkpoint; choosing on it needs `train.select_on_test: true`,
and then every test figure is labelled as selected on test.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
import warnings
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.optim import param_groups_weight_decay
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import DataLoader
from tqdm import tqdm

from retrieval.config import Config, config_to_dict, save_config
from retrieval.data import EvalSplit, PKSampler, RetrievalData, build_data
from retrieval.data.balanced_sampler import balanced_sampler
from retrieval.engine.checkpoint import copy_checkpoint, load_checkpoint, save_checkpoint
from retrieval.engine.device import amp_dtype, place_model, resolve_device, uses_channels_last
from retrieval.engine.environment import apply_runtime_settings, describe_environment
from retrieval.engine.evaluate import KS, score_model
from retrieval.engine.plots import plot_curves, plot_histogram
from retrieval.engine.uncertainty import record_uncertainty
from retrieval.errors import UserError
from retrieval.losses import PAIR_LOSSES, build_loss
from retrieval.metrics import PerQuery, check_queries_have_positives
from retrieval.models import Embedder

__all__ = ["Trainer", "TrainResult", "lr_factor"]


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up from ~0 to 1 over `warmup_steps`, then cosine decay to 0 at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _epoch_seed(seed: int, epoch: int) -> int:
    """Every epoch's randomness depends only on (seed, epoch), so a resumed run continues exactly."""
    return seed * 1_000_003 + epoch


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
    (one JSON object per epoch), `checkpoints/last.pt` (every epoch) and `best.pt` (the selected
    checkpoint), `result.json` (the selected checkpoint's test metrics) and `plots/*.png`.

    Args:
        config: the resolved run config.
        run_dir: where the run's files go.
        resuming: the weights will come from a checkpoint (`resume`), so no pretrained weights are loaded.
    """

    def __init__(self, config: Config, run_dir: Path, resuming: bool = False) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        apply_runtime_settings(config.train)
        self.device = resolve_device(config.train.device)
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
        self.data = build_data(config.data, self.model.data_config(), config.augment, config.model.in_chans)
        for split in (self.data.test, self.data.val):
            if split is not None:
                check_queries_have_positives(split.labels, split.query_mask, split.gallery_mask)
        self.selection_split = self._selection_split()
        class_counts = np.bincount(self.data.train_labels, minlength=self.data.num_classes)
        self.loss_fn = build_loss(
            config.loss.name, config.loss.params, self.data.num_classes, config.model.embedding_dim, class_counts
        ).to(self.device)
        self.generator = torch.Generator()
        use_pk = self._sampler_kind() == "pk"
        self.pk_sampler = self._pk_sampler(self.data.train_labels) if use_pk else None
        self.loader = self._train_loader(self.data)
        train = config.train
        # No weight decay on norms, biases (timm's rule) or proxies (losses.md); proxies learn faster.
        groups = param_groups_weight_decay(self.model, train.weight_decay)
        for group in groups:
            group["lr"] = train.lr
        proxies = {"params": list(self.loss_fn.parameters()), "lr": train.lr * train.proxy_lr_mult, "weight_decay": 0.0}
        self.optimizer = torch.optim.AdamW([*groups, proxies])
        self.base_lrs = [group["lr"] for group in self.optimizer.param_groups]
        steps = len(self.loader)
        self.frozen_steps = min(train.freeze_backbone_epochs, train.epochs) * steps
        self.total_steps = train.epochs * steps
        self.warmup_steps = round(train.warmup_epochs * steps)
        self.start_epoch = 0
        self.best_score = -1.0
        self.best_epoch = 0

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

    def _pk_sampler(self, labels: np.ndarray) -> PKSampler:
        cfg = self.config.data
        try:
            return PKSampler(labels, cfg.p, cfg.k, seed=self.config.train.seed)
        except ValueError as exc:
            raise UserError(f"PK sampler (data.p={cfg.p}, data.k={cfg.k}): {exc}") from exc

    def _train_loader(self, data: RetrievalData) -> DataLoader:
        """Batches of the training set, reseeded through `self.generator` at every epoch."""
        cfg = self.config.data
        common = {"num_workers": cfg.num_workers, "pin_memory": self.device.type == "cuda", "generator": self.generator}
        if self.pk_sampler is not None:
            return DataLoader(data.train, batch_sampler=self.pk_sampler, **common)
        drop_last = len(data.train) > cfg.batch_size
        if self._sampler_kind() == "balanced":
            sampler = balanced_sampler(data.train_labels, self.generator)
            return DataLoader(data.train, batch_size=cfg.batch_size, sampler=sampler, drop_last=drop_last, **common)
        return DataLoader(data.train, batch_size=cfg.batch_size, shuffle=True, drop_last=drop_last, **common)

    def resume(self, checkpoint: dict[str, Any]) -> None:
        """Continue from a loaded `last.pt`: weights, proxies, optimizer, epoch and best score."""
        self.model.load_state_dict(checkpoint["model"])
        self.loss_fn.load_state_dict(checkpoint["loss"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.start_epoch = int(checkpoint["epoch"]) + 1
        self.best_score = float(checkpoint["best_score"])
        self.best_epoch = int(checkpoint["best_epoch"])

    def fit(self) -> TrainResult:
        """Train all remaining epochs, then score the selected checkpoint on the test set once."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "plots").mkdir(exist_ok=True)
        save_config(self.config, self.run_dir / "config.yaml")
        (self.run_dir / "environment.json").write_text(json.dumps(describe_environment(self.device), indent=2) + "\n")
        records = self._read_records()
        epochs = self.config.train.epochs
        for epoch in range(self.start_epoch, epochs):
            started = time.perf_counter()
            record, sample_stats = self._train_epoch(epoch)
            if (epoch + 1) % self.config.train.eval_every == 0 or epoch + 1 == epochs:
                record.update(self._evaluate_epoch())
            record["seconds"] = round(time.perf_counter() - started, 3)
            records.append(record)
            self._save(epoch, record)
            self._write_logs(records, sample_stats)
            print(self._summary(record), flush=True)  # one line per epoch, also when stdout is a file
        result = self._final_result()
        (self.run_dir / "result.json").write_text(json.dumps(dataclasses.asdict(result), indent=2) + "\n")
        return result

    def _train_epoch(self, epoch: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        seed = _epoch_seed(self.config.train.seed, epoch)
        _seed_everything(seed)
        self.generator.manual_seed(seed)
        if self.pk_sampler is not None:
            self.pk_sampler.set_epoch(epoch)
        self._set_train_mode(epoch)
        autocast = torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype else nullcontext()
        losses: list[float] = []
        stats: dict[str, list[Tensor]] = defaultdict(list)
        steps = len(self.loader)
        progress = tqdm(self.loader, desc=f"epoch {epoch + 1}/{self.config.train.epochs}", leave=False, disable=None)
        for step, (images, labels) in enumerate(progress):
            self._set_lr(epoch * steps + step)
            images, labels = images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            with autocast:
                embeddings = self.model(images)
            loss = self.loss_fn(embeddings, labels)
            if not torch.isfinite(loss):
                raise UserError(
                    f"the loss became {loss.item()} at epoch {epoch + 1}, step {step + 1}; nothing saved was "
                    f"overwritten (checkpoints/last.pt holds epoch {epoch}); lower train.lr or the loss's scale"
                )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
            for key, value in getattr(self.loss_fn, "last_stats", {}).items():
                stats[key].append(value.detach().float().cpu().reshape(-1))
            progress.set_postfix(loss=f"{losses[-1]:.4f}")
        sample_stats = {key: torch.cat(values).numpy() for key, values in stats.items()}
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "loss": float(np.mean(losses)),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        record.update({key: _quantiles(values) for key, values in sample_stats.items()})
        return record, sample_stats

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
        """Head and proxies train at the full rate while the backbone is frozen; warm-up starts when it thaws."""
        if step < self.frozen_steps:
            factor = 1.0
        else:
            factor = lr_factor(step - self.frozen_steps, self.warmup_steps, self.total_steps - self.frozen_steps)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor

    def _evaluate_epoch(self) -> dict[str, float]:
        """Validation metrics (`val/...`), and test metrics (`test/...`) only when selected or logged on test."""
        scores = {}
        if self.data.val is not None:
            scores.update({f"val/{key}": value for key, value in self._evaluate(self.data.val).items()})
        if self.selection_split == "test" or self.config.train.log_test:
            scores.update({f"test/{key}": value for key, value in self._evaluate(self.data.test).items()})
        return scores

    def _evaluate(self, split: EvalSplit) -> dict[str, float]:
        return self._score(split).summary(KS)

    def _score(self, split: EvalSplit) -> PerQuery:
        return score_model(
            self.model,
            split,
            self.config.data.eval_batch_size,
            self.device,
            num_workers=self.config.data.num_workers,
            amp_dtype=self.amp_dtype,
            channels_last=self.channels_last,
        )

    def _save(self, epoch: int, record: dict[str, Any]) -> None:
        key = f"{self.selection_split}/{self.config.train.select_on}"
        improved = key in record and record[key] > self.best_score
        if improved:
            self.best_score, self.best_epoch = record[key], epoch + 1
        payload = {
            "model": self.model.state_dict(),
            "loss": self.loss_fn.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": epoch,
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "config": config_to_dict(self.config),
            "num_classes": self.data.num_classes,
        }
        model_config = dataclasses.asdict(self.config.model)
        checkpoints = self.run_dir / "checkpoints"
        save_checkpoint(checkpoints / "last.pt", payload, model_config)
        # Without a selection split, the run's result is its last epoch: best.pt follows last.pt.
        if improved or self.selection_split is None:
            copy_checkpoint(checkpoints / "last.pt", checkpoints / "best.pt")

    def _final_result(self) -> TrainResult:
        """Test metrics of the selected checkpoint, with per-query scores (`per_query.npz`) and their CIs."""
        last_epoch = self.config.train.epochs
        chosen = self.best_epoch if self.selection_split is not None else last_epoch
        if chosen != last_epoch:
            best = load_checkpoint(self.run_dir / "checkpoints" / "best.pt")
            self.model.load_state_dict(best["model"])
        scores = self._score(self.data.test)
        uncertainty = record_uncertainty(self.run_dir, scores)
        selection_value = self.best_score if self.selection_split is not None else None
        return TrainResult(chosen, self.selection_split or "last", scores.summary(KS), selection_value, uncertainty)

    def _read_records(self) -> list[dict[str, Any]]:
        """Records of epochs already trained (when resuming), so logs and plots stay whole."""
        path = self.run_dir / "metrics.jsonl"
        if self.start_epoch == 0 or not path.is_file():
            return []
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in records if r["epoch"] <= self.start_epoch]

    def _write_logs(self, records: list[dict[str, Any]], sample_stats: dict[str, np.ndarray]) -> None:
        lines = "".join(json.dumps(record) + "\n" for record in records)
        (self.run_dir / "metrics.jsonl").write_text(lines)
        plot_curves(records, self.run_dir / "plots" / "curves.png")
        if "c" in sample_stats:
            title = "semantic difficulty c_i (last epoch)"
            plot_histogram(sample_stats["c"], self.run_dir / "plots" / "difficulty.png", title)

    def _summary(self, record: dict[str, Any]) -> str:
        text = f"epoch {record['epoch']}/{self.config.train.epochs}  loss {record['loss']:.4f}  lr {record['lr']:.2e}"
        for split in ("val", "test"):
            if f"{split}/recall@1" in record:
                text += f"  {split} R@1 {record[f'{split}/recall@1']:.4f} MAP@R {record[f'{split}/map@r']:.4f}"
        if "c" in record:
            text += f"  c_i median {record['c']['median']:.3f}"
        return text + f"  ({record['seconds']:.1f}s)"


def _quantiles(values: np.ndarray) -> dict[str, float]:
    """min / median / p90 / max / mean of one epoch's per-sample (or per-step) statistic."""
    low, median, p90, high = (float(q) for q in np.quantile(values, [0.0, 0.5, 0.9, 1.0]))
    return {"min": low, "median": median, "p90": p90, "max": high, "mean": float(values.mean())}
