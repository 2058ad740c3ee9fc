"""Datasets, transforms and samplers; `DATASETS` (`retrieval.choices.datasets`) names every dataset `data.name` can be.

Each name below is imported from its module on first use (PEP 562), so that importing this package,
or one of its torch-free modules (the readers: `csv_dataset`, `folder`, `official`, `exclusion`,
`splits`), loads no torch: a command checks a dataset's files before PyTorch loads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retrieval.choices.datasets import DATASETS, DatasetSpec, dataset_spec
    from retrieval.data.csv_dataset import CsvSplit, labeled_split, read_csv_split, read_csv_splits
    from retrieval.data.datasets import EvalSplit, RetrievalData, build_data
    from retrieval.data.digits import DigitsDataset, load_digits_split
    from retrieval.data.folder import list_images, read_folder
    from retrieval.data.holdout import holdout_classes, holdout_images
    from retrieval.data.image_dataset import ImageDataset
    from retrieval.data.image_loader import BAD_IMAGE_POLICIES, BadImage, ImageLoader
    from retrieval.data.official import read_cars196, read_cub200, read_inshop, read_sop
    from retrieval.data.pk_sampler import PKSampler
    from retrieval.data.splits import read_splits
    from retrieval.images import flatten_image, load_image

__all__ = [
    "BAD_IMAGE_POLICIES",
    "DATASETS",
    "BadImage",
    "CsvSplit",
    "DatasetSpec",
    "DigitsDataset",
    "EvalSplit",
    "ImageDataset",
    "ImageLoader",
    "PKSampler",
    "RetrievalData",
    "build_data",
    "dataset_spec",
    "flatten_image",
    "holdout_classes",
    "holdout_images",
    "labeled_split",
    "list_images",
    "load_digits_split",
    "load_image",
    "read_cars196",
    "read_csv_split",
    "read_csv_splits",
    "read_cub200",
    "read_folder",
    "read_inshop",
    "read_sop",
    "read_splits",
]

# The module each name of `__all__` is imported from (the imports above, for the type checker).
_HOMES: dict[str, str] = {
    **dict.fromkeys(["CsvSplit", "labeled_split", "read_csv_split", "read_csv_splits"], "retrieval.data.csv_dataset"),
    **dict.fromkeys(["EvalSplit", "RetrievalData", "build_data"], "retrieval.data.datasets"),
    **dict.fromkeys(["DigitsDataset", "load_digits_split"], "retrieval.data.digits"),
    **dict.fromkeys(["list_images", "read_folder"], "retrieval.data.folder"),
    **dict.fromkeys(["holdout_classes", "holdout_images"], "retrieval.data.holdout"),
    "ImageDataset": "retrieval.data.image_dataset",
    **dict.fromkeys(["BAD_IMAGE_POLICIES", "BadImage", "ImageLoader"], "retrieval.data.image_loader"),
    **dict.fromkeys(["read_cars196", "read_cub200", "read_inshop", "read_sop"], "retrieval.data.official"),
    "PKSampler": "retrieval.data.pk_sampler",
    **dict.fromkeys(["DATASETS", "DatasetSpec", "dataset_spec"], "retrieval.choices.datasets"),
    "read_splits": "retrieval.data.splits",
    **dict.fromkeys(["flatten_image", "load_image"], "retrieval.images"),
}


def __getattr__(name: str) -> Any:
    """The public `name`, imported from its module when first asked for (torch only with a module that needs it)."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
