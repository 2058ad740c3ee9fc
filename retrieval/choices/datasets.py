"""The dataset registry `DATASETS`: `data.name` -> a `DatasetSpec` (how it is read, and what the config needs).

A spec says whether the dataset reads `data.root` (a folder) or `data.path` (a file), which preset
`augment.preset: auto` means for it, and its reader: `read_files` (image files, split by split) or
`load_tensors` (images held in memory). Readers may be given as `"module:attr"` strings, imported when
the data is read, so that `retrieval.config` checks `data.name`, `data.root` and `augment.preset: auto`
without importing the readers or torch. A new dataset is one module with `@register_dataset("name")`
on its reader, or a `retrieval.datasets` entry point naming a `DatasetSpec` (`docs/extending.md`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from retrieval.choices.augment_presets import PresetName
from retrieval.registry import Registry, object_path

__all__ = ["DATASETS", "DatasetSpec", "SplitReader", "TensorLoader", "dataset_spec", "register_dataset"]

# (data.path or data.root, check that listed images exist) -> the splits (train, test, maybe val) by name,
# each a `retrieval.data.csv_dataset.CsvSplit` (not imported here: the config reads this module).
SplitReader = Callable[[Path, bool], dict[str, Any]]
# (split: train | test, image size) -> images (N, 3, S, S) in [0, 1] (a torch Tensor) and labels (N,).
TensorLoader = Callable[[str, int], tuple[Any, Any]]
Reader = TypeVar("Reader", bound=SplitReader)


@dataclass(frozen=True)
class DatasetSpec:
    """How one `data.name` is read: either image files (`read_files`) or tensors in memory (`load_tensors`).

    Attributes:
        read_files: (file or folder, check that listed images exist) -> splits of image files; a callable
            or its `"module:attr"`.
        load_tensors: (split, image size) -> the split's images and labels, held in memory; a callable or
            its `"module:attr"`.
        reads_root: `read_files` takes `data.root` (a folder); otherwise `data.path` (a file), or neither.
        augment_preset: the preset that `augment.preset: auto` stands for with this dataset.
    """

    read_files: SplitReader | str | None = None
    load_tensors: TensorLoader | str | None = None
    reads_root: bool = False
    augment_preset: PresetName = "light"

    def __post_init__(self) -> None:
        if (self.read_files is None) == (self.load_tensors is None):
            raise ValueError("a DatasetSpec needs exactly one of read_files and load_tensors")

    def files_reader(self) -> SplitReader | None:
        """`read_files`, imported if given by name; None for a dataset held in memory."""
        return _resolved(self.read_files)

    def tensor_loader(self) -> TensorLoader | None:
        """`load_tensors`, imported if given by name; None for a dataset of image files."""
        return _resolved(self.load_tensors)


def _resolved(reader: Callable[..., Any] | str | None) -> Any:
    if not isinstance(reader, str):
        return reader
    module, _, attr = reader.partition(":")
    return getattr(importlib.import_module(module), attr)


_OFFICIAL = "retrieval.data.official"
# scikit-learn's bundled 8x8 digits: a stratified half of each digit trains, the other half tests.
DIGITS = DatasetSpec(load_tensors="retrieval.data.digits:load_digits_split")
# data.path: path,label,split[,is_query,is_gallery] (retrieval/data/csv_dataset.py).
CSV = DatasetSpec(read_files="retrieval.data.csv_dataset:read_csv_splits")
# data.root: one folder of images per class, or train/ val/ test/ folders of them.
FOLDER = DatasetSpec(read_files="retrieval.data.folder:read_folder", reads_root=True)
# The official benchmark layouts (retrieval/data/official.py), natural photos.
CUB200 = DatasetSpec(read_files=f"{_OFFICIAL}:read_cub200", reads_root=True, augment_preset="natural")
CARS196 = DatasetSpec(read_files=f"{_OFFICIAL}:read_cars196", reads_root=True, augment_preset="natural")
SOP = DatasetSpec(read_files=f"{_OFFICIAL}:read_sop", reads_root=True, augment_preset="natural")
INSHOP = DatasetSpec(read_files=f"{_OFFICIAL}:read_inshop", reads_root=True, augment_preset="natural")

DATASETS: Registry[DatasetSpec] = Registry(
    "data.name",
    "retrieval.datasets",
    {name: f"{__name__}:{name.upper()}" for name in ("digits", "csv", "folder", "cub200", "cars196", "sop", "inshop")},
    accepts=lambda obj: isinstance(obj, DatasetSpec),
    expected="a retrieval.choices.datasets.DatasetSpec",
)


def register_dataset(
    name: str, *, reads_root: bool = False, augment_preset: PresetName = "light"
) -> Callable[[Reader], Reader]:
    """Decorator: register a reader of image files (a `SplitReader`) as dataset `name`; returns it unchanged.

    Args:
        name: the `data.name` it answers to.
        reads_root: it reads `data.root` (a folder); otherwise `data.path` (a file).
        augment_preset: what `augment.preset: auto` means for it.

    Raises:
        ValueError: another dataset already holds `name`.
    """

    def register(reader: Reader) -> Reader:
        spec = DatasetSpec(read_files=reader, reads_root=reads_root, augment_preset=augment_preset)
        DATASETS.add(name, spec, path=object_path(reader))
        return reader

    return register


def dataset_spec(name: str) -> DatasetSpec:
    """The registered dataset `name`.

    Example:
        >>> dataset_spec("cub200").augment_preset, dataset_spec("csv").reads_root, dataset_spec("sop").reads_root
        ('natural', False, True)

    Raises:
        UserError: `name` is not registered; the message lists the valid names.
    """
    return DATASETS.get(name)
