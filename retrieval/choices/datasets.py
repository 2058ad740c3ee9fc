"""What the config needs to know of each `data.name`: the folder-or-file rule and the `auto` augment preset.

The names are those of the dataset registry (`retrieval.data.registry.DATASETS`, which adds each
one's readers; a test holds the two to the same names). A plain table, so that `retrieval.config`
checks `data.name`, `data.root` and `augment.preset: auto` without importing the readers or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.choices.augment_presets import PresetName
from retrieval.errors import UserError

__all__ = ["DATASET_TRAITS", "DatasetTraits", "dataset_traits"]


@dataclass(frozen=True)
class DatasetTraits:
    """How the config treats one `data.name`.

    Attributes:
        reads_root: the dataset is read from `data.root` (a folder); otherwise from `data.path` (a file), or neither.
        augment_preset: the preset that `augment.preset: auto` stands for with this dataset.
    """

    reads_root: bool = False
    augment_preset: PresetName = "light"


DATASET_TRAITS: dict[str, DatasetTraits] = {
    "digits": DatasetTraits(),
    "csv": DatasetTraits(),
    "folder": DatasetTraits(reads_root=True),
    "cub200": DatasetTraits(reads_root=True, augment_preset="natural"),
    "cars196": DatasetTraits(reads_root=True, augment_preset="natural"),
    "sop": DatasetTraits(reads_root=True, augment_preset="natural"),
    "inshop": DatasetTraits(reads_root=True, augment_preset="natural"),
}


def dataset_traits(name: str) -> DatasetTraits:
    """The traits of registered dataset `name`.

    Example:
        >>> dataset_traits("cub200").augment_preset, dataset_traits("csv").reads_root, dataset_traits("sop").reads_root
        ('natural', False, True)

    Raises:
        UserError: `name` is not registered; the message lists the valid names.
    """
    if name not in DATASET_TRAITS:
        raise UserError(f"unknown data.name {name!r}; valid names: {', '.join(DATASET_TRAITS)}")
    return DATASET_TRAITS[name]
