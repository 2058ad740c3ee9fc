"""The dataset registry: `data.name` -> how that dataset is read.

`read_splits` and `build_data` read this table. What the config checks of a name (that it exists,
whether it reads `data.root`, what `augment.preset: auto` means for it) is in the torch-free table
`retrieval.choices.datasets.DATASET_TRAITS`, under the same names, so that the config never imports
the readers; a new dataset is one entry in each. The table and the file readers import no torch (a
command reads a dataset's files before PyTorch loads); the digits load it when they are loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from retrieval.choices.datasets import dataset_traits
from retrieval.data.csv_dataset import CsvSplit, read_csv_splits
from retrieval.data.folder import read_folder
from retrieval.data.official import read_cars196, read_cub200, read_inshop, read_sop

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["DATASETS", "DatasetSpec", "SplitReader", "TensorLoader", "dataset_spec"]

# (data.path or data.root, check that listed images exist) -> the splits (train, test, maybe val).
SplitReader = Callable[[Path, bool], dict[str, CsvSplit]]
# (split: train | test, image size) -> images (N, 3, S, S) in [0, 1] and labels (N,).
TensorLoader: TypeAlias = "Callable[[str, int], tuple[Tensor, np.ndarray]]"  # a string: torch is not loaded


@dataclass(frozen=True)
class DatasetSpec:
    """How one `data.name` is read: either image files (`read_files`) or tensors in memory (`load_tensors`).

    Attributes:
        read_files: (file or folder, check that listed images exist) -> splits of image files.
        load_tensors: (split, image size) -> the split's images and labels, held in memory.

    Whether `read_files` takes `data.root` (a folder) or `data.path` (a file) is the name's `DatasetTraits`.
    """

    read_files: SplitReader | None = None
    load_tensors: TensorLoader | None = None

    def __post_init__(self) -> None:
        if (self.read_files is None) == (self.load_tensors is None):
            raise ValueError("a DatasetSpec needs exactly one of read_files and load_tensors")


def _load_digits(split: str, image_size: int) -> tuple[Tensor, np.ndarray]:
    """`retrieval.data.digits.load_digits_split`, imported (with torch and scikit-learn) when the digits are loaded."""
    from retrieval.data.digits import load_digits_split

    return load_digits_split(split, image_size)


DATASETS: dict[str, DatasetSpec] = {
    # scikit-learn's bundled 8x8 digits: a stratified half of each digit trains, the other half tests.
    "digits": DatasetSpec(load_tensors=_load_digits),
    # data.path: path,label,split[,is_query,is_gallery] (retrieval/data/csv_dataset.py).
    "csv": DatasetSpec(read_files=read_csv_splits),
    # data.root: one folder of images per class, or train/ val/ test/ folders of them.
    "folder": DatasetSpec(read_files=read_folder),
    # The official benchmark layouts (retrieval/data/official.py), natural photos.
    "cub200": DatasetSpec(read_files=read_cub200),
    "cars196": DatasetSpec(read_files=read_cars196),
    "sop": DatasetSpec(read_files=read_sop),
    "inshop": DatasetSpec(read_files=read_inshop),
}


def dataset_spec(name: str) -> DatasetSpec:
    """The registered dataset `name`.

    Raises:
        UserError: `name` is not registered; the message lists the valid names.
    """
    dataset_traits(name)  # the one wording of an unknown name
    return DATASETS[name]
