"""The dataset registry: `data.name` -> how that dataset is read. The one place a new dataset is added.

Everything else that depends on the name (the config's checks, `augment.preset: auto`, `read_splits`,
`build_data`) reads this table. This module imports the readers only, never `retrieval.config`, so the
config can look names up lazily without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import Tensor

from retrieval.augment_presets import PresetName
from retrieval.data.csv_dataset import CsvSplit, read_csv_splits
from retrieval.data.digits import load_digits_split
from retrieval.data.folder import read_folder
from retrieval.data.official import read_cars196, read_cub200, read_inshop, read_sop
from retrieval.errors import UserError

__all__ = ["DATASETS", "DatasetSpec", "SplitReader", "TensorLoader", "dataset_spec"]

# (data.path or data.root, check that listed images exist) -> the splits (train, test, maybe val).
SplitReader = Callable[[Path, bool], dict[str, CsvSplit]]
# (split: train | test, image size) -> images (N, 3, S, S) in [0, 1] and labels (N,).
TensorLoader = Callable[[str, int], tuple[Tensor, np.ndarray]]


@dataclass(frozen=True)
class DatasetSpec:
    """How one `data.name` is read: either image files (`read_files`) or tensors in memory (`load_tensors`).

    Attributes:
        read_files: (file or folder, check that listed images exist) -> splits of image files.
        load_tensors: (split, image size) -> the split's images and labels, held in memory.
        reads_root: `read_files` takes `data.root` (a folder); otherwise `data.path` (a file).
        augment_preset: the preset that `augment.preset: auto` stands for with this dataset.
    """

    read_files: SplitReader | None = None
    load_tensors: TensorLoader | None = None
    reads_root: bool = False
    augment_preset: PresetName = "light"

    def __post_init__(self) -> None:
        if (self.read_files is None) == (self.load_tensors is None):
            raise ValueError("a DatasetSpec needs exactly one of read_files and load_tensors")


DATASETS: dict[str, DatasetSpec] = {
    # scikit-learn's bundled 8x8 digits: a stratified half of each digit trains, the other half tests.
    "digits": DatasetSpec(load_tensors=load_digits_split),
    # data.path: path,label,split[,is_query,is_gallery] (retrieval/data/csv_dataset.py).
    "csv": DatasetSpec(read_files=read_csv_splits),
    # data.root: one folder of images per class, or train/ val/ test/ folders of them.
    "folder": DatasetSpec(read_files=read_folder, reads_root=True),
    # The official benchmark layouts (retrieval/data/official.py), natural photos.
    "cub200": DatasetSpec(read_files=read_cub200, reads_root=True, augment_preset="natural"),
    "cars196": DatasetSpec(read_files=read_cars196, reads_root=True, augment_preset="natural"),
    "sop": DatasetSpec(read_files=read_sop, reads_root=True, augment_preset="natural"),
    "inshop": DatasetSpec(read_files=read_inshop, reads_root=True, augment_preset="natural"),
}


def dataset_spec(name: str) -> DatasetSpec:
    """The registered dataset `name`.

    Example:
        >>> dataset_spec("cub200").augment_preset, dataset_spec("csv").augment_preset, dataset_spec("folder").reads_root
        ('natural', 'light', True)

    Raises:
        UserError: `name` is not registered; the message lists the valid names.
    """
    if name not in DATASETS:
        raise UserError(f"unknown data.name {name!r}; valid names: {', '.join(DATASETS)}")
    return DATASETS[name]
