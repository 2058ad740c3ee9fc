"""The splits of a dataset of image files (`data.name` csv, folder or a benchmark), read without torch.

`read_splits` is what every command reads a dataset's files with; `training_splits` adds what training
needs of them. Both run before PyTorch loads (`retrieval train` checks its data first), and again
where the datasets are built, so the check and the run read the files one way.
"""

from __future__ import annotations

from pathlib import Path

from retrieval.choices.datasets import DATASETS, dataset_spec
from retrieval.config import DataConfig
from retrieval.data.csv_dataset import CsvSplit
from retrieval.data.exclusion import excluded_paths, without_excluded
from retrieval.errors import UserError

__all__ = ["check_training_files", "read_splits", "training_splits"]


def read_splits(cfg: DataConfig) -> dict[str, CsvSplit]:
    """The splits (`train`, `test`, maybe `val`) of a dataset of image files, before any validation holdout.

    Labels are each split's class indices; `class_names` holds the dataset's own class ids.

    Raises:
        UserError: `data.name` is not a dataset of files (digits), its path/root is unset or
            missing, or the layout does not match (the message names the file).
    """
    spec = dataset_spec(cfg.name)
    read_files = spec.files_reader()
    if read_files is None:
        files = ", ".join(name for name, other in DATASETS.items() if other.read_files is not None)
        raise UserError(f"data.name {cfg.name!r} is not a dataset of image files; use {files}")
    check_images = cfg.on_bad_image == "fail"  # with skip, a missing image is skipped when read
    if not spec.reads_root:
        if not cfg.path:
            raise UserError(
                f"data.name is {cfg.name} but data.path is not set; use --set data.path=path/to/dataset.csv"
            )
        return _excluding(read_files(Path(cfg.path), check_images), cfg.exclude)
    if not cfg.root:
        raise UserError(f"data.name is {cfg.name} but data.root is not set; use --set data.root=path/to/dataset")
    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise UserError(f"data.root {root} is not a folder; set data.root to the extracted {cfg.name} dataset")
    return _excluding(read_files(root, check_images), cfg.exclude)


def training_splits(cfg: DataConfig) -> dict[str, CsvSplit]:
    """The splits training reads of a dataset of image files: `read_splits`, with train and test rows.

    Raises:
        UserError: as `read_splits`, or the dataset lacks train or test rows.
    """
    splits = read_splits(cfg)
    for required in ("train", "test"):
        if required not in splits:
            raise UserError(
                f"{cfg.path or cfg.root} has no rows with split={required}; every dataset needs train and test rows"
            )
    return splits


def check_training_files(cfg: DataConfig) -> None:
    """Read the files of `cfg`'s dataset as training will (`training_splits`), so a mistake in them fails at once.

    A dataset held in memory (digits) has no files to check.

    Raises:
        UserError: as `training_splits`.
    """
    if dataset_spec(cfg.name).read_files is not None:
        training_splits(cfg)


def _excluding(splits: dict[str, CsvSplit], exclude: str | None) -> dict[str, CsvSplit]:
    """The splits without the images `data.exclude` lists (`retrieval.data.exclusion`); a split left empty is gone."""
    if not exclude:
        return splits
    excluded = excluded_paths(exclude)
    kept = {name: without_excluded(split, excluded, Path(exclude)) for name, split in splits.items()}
    return {name: split for name, split in kept.items() if split.paths}
