"""The four standard benchmarks in their official layouts, with the zero-shot class splits of docs/datasets.md.

| `data.name` | `data.root` holds | train | test |
|---|---|---|---|
| `cub200` | `images/`, `images.txt`, `image_class_labels.txt` | classes 1-100 (5,864 images) | 101-200 (5,924) |
| `cars196` | `car_ims/`, `cars_annos.mat` | classes 1-98 (8,054) | 99-196 (8,131) |
| `sop` | `Ebay_train.txt`, `Ebay_test.txt`, class folders | 11,318 classes (59,551) | 11,316 (60,502) |
| `inshop` | `img/`, `list_eval_partition.txt` | 3,997 items (25,882) | 3,985 items: 14,218 queries, 12,612 gallery |

Each reader returns the same `{split: CsvSplit}` a dataset CSV gives, so every benchmark goes through
the one code path of the CSV format (validation holdouts, query/gallery protocol, bad-image policy).
The classification split files some archives also carry (CUB's `train_test_split.txt`, the `test`
flag of `cars_annos.mat`) are for closed-set classification and are ignored: metric learning
trains on the first half of the classes and retrieves among the unseen second half.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from retrieval.data.csv_dataset import CsvSplit, labeled_split
from retrieval.errors import UserError

__all__ = ["OFFICIAL_READERS", "read_cars196", "read_cub200", "read_inshop", "read_sop"]


def read_cub200(root: Path, check_images: bool = True) -> dict[str, CsvSplit]:
    """CUB-200-2011 (`CUB_200_2011/`): classes 1-100 train, 101-200 test; every test image queries the rest."""
    names = _id_table(root, "images.txt", "<image_id> <image_name>")
    classes = _id_table(root, "image_class_labels.txt", "<image_id> <class_id>")
    if names.keys() != classes.keys():
        only = sorted(names.keys() ^ classes.keys(), key=_numeric_first)[0]
        raise UserError(
            f"{root / 'images.txt'} and image_class_labels.txt list different image ids (e.g. {only}); "
            "use the two files of one CUB_200_2011 download"
        )
    ids = sorted(names, key=_numeric_first)
    paths = [root / "images" / names[i] for i in ids]
    labels = [_int_field(root / "image_class_labels.txt", classes[i], "class_id") for i in ids]
    return _split_classes_at(paths, labels, 100, "CUB-200-2011", root, check_images)


def read_cars196(root: Path, check_images: bool = True) -> dict[str, CsvSplit]:
    """Cars196 (`car_ims/` + `cars_annos.mat`): classes 1-98 train, 99-196 test (the `test` flag is ignored)."""
    from scipy.io import loadmat  # imported only for Cars196

    mat_path = root / "cars_annos.mat"
    _require(mat_path, "the annotation file of the Stanford Cars download (cars_annos.mat)")
    try:
        annotations = loadmat(mat_path, squeeze_me=True).get("annotations")
    except Exception as exc:  # scipy's parser raises MatReadError, ValueError, IndexError, ... on a damaged file
        reason = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
        raise UserError(f"{mat_path} is not a readable MATLAB file ({reason}); download cars_annos.mat again") from exc
    fields = getattr(getattr(annotations, "dtype", None), "names", None) or ()
    if "relative_im_path" not in fields or "class" not in fields:
        raise UserError(
            f"{mat_path} has no 'annotations' struct array with fields relative_im_path and class; "
            "it is not the cars_annos.mat of the Stanford Cars download"
        )
    annotations = np.atleast_1d(annotations)
    paths = [root / str(path) for path in annotations["relative_im_path"]]
    labels = [int(label) for label in annotations["class"]]
    return _split_classes_at(paths, labels, 98, "Cars196", root, check_images)


def read_sop(root: Path, check_images: bool = True) -> dict[str, CsvSplit]:
    """Stanford Online Products: the classes of `Ebay_train.txt` train, those of `Ebay_test.txt` are the test set."""
    return {split: _sop_file(root, f"Ebay_{split}.txt", check_images) for split in ("train", "test")}


def _sop_file(root: Path, name: str, check_images: bool) -> CsvSplit:
    rows = _table(root, name, "image_id class_id super_class_id path", header=1)
    if any(len(row) != 4 for _, row in rows):
        line = next(line for line, row in rows if len(row) != 4)
        raise UserError(f"{root / name}:{line}: expected 4 fields '<image_id> <class_id> <super_class_id> <path>'")
    paths = [root / row[3] for _, row in rows]
    labels = [str(_int_field(root / name, row[1], "class_id")) for _, row in rows]
    return labeled_split(paths, labels, root / name, check_images=check_images)


def read_inshop(root: Path, check_images: bool = True) -> dict[str, CsvSplit]:
    """In-Shop Clothes: `train` items train; test queries (`query` rows) search the gallery (`gallery` rows) only.

    `list_eval_partition.txt` may sit in `root` or, as in the DeepFashion archive, in `root/Eval/`;
    its image paths (`img/...`) are relative to `root`, or to `root/Img` when that holds `img/`.
    """
    partition = root / "list_eval_partition.txt"
    if not partition.is_file() and (root / "Eval" / partition.name).is_file():
        partition = root / "Eval" / partition.name
    rows = _table(partition.parent, partition.name, "image_name item_id evaluation_status", header=2)
    declared = _first_line(partition)
    if declared.isdigit() and int(declared) != len(rows):
        raise UserError(f"{partition} declares {declared} images but lists {len(rows)}; the file is truncated")
    bad = next(((line, row) for line, row in rows if len(row) != 3 or row[2] not in _INSHOP_STATUS), None)
    if bad is not None:
        raise UserError(
            f"{partition}:{bad[0]}: expected '<image_name> <item_id> <train|query|gallery>', got {' '.join(bad[1])!r}"
        )
    images = root / "Img" if not (root / "img").is_dir() and (root / "Img" / "img").is_dir() else root
    status = np.array([row[2] for _, row in rows])
    paths = [images / row[0] for _, row in rows]
    items = [row[1] for _, row in rows]
    train, test = np.flatnonzero(status == "train"), np.flatnonzero(status != "train")
    splits = {}
    for split, chosen in (("train", train), ("test", test)):
        is_test = split == "test"
        splits[split] = labeled_split(
            [paths[i] for i in chosen],
            [items[i] for i in chosen],
            partition,
            query_mask=status[chosen] == "query" if is_test else None,
            gallery_mask=status[chosen] == "gallery" if is_test else None,
            check_images=check_images,
        )
    return splits


_INSHOP_STATUS = ("train", "query", "gallery")

# data.name -> (root, check_images) -> splits.
OFFICIAL_READERS: dict[str, Callable[[Path, bool], dict[str, CsvSplit]]] = {
    "cub200": read_cub200,
    "cars196": read_cars196,
    "sop": read_sop,
    "inshop": read_inshop,
}


def _split_classes_at(
    paths: list[Path], labels: list[int], last_train: int, dataset: str, root: Path, check_images: bool
) -> dict[str, CsvSplit]:
    """Classes 1..last_train train, the rest test (the zero-shot protocol of CUB and Cars)."""
    class_ids = np.asarray(labels)
    if not len(class_ids) or class_ids.min() > last_train or class_ids.max() <= last_train:
        raise UserError(
            f"{dataset} at {root}: expected class ids on both sides of {last_train} (train 1-{last_train}, test "
            f"{last_train + 1}+), got {class_ids.min() if len(class_ids) else 'none'}-"
            f"{class_ids.max() if len(class_ids) else 'none'}; is data.name right for this folder?"
        )
    splits = {}
    for split, chosen in (("train", class_ids <= last_train), ("test", class_ids > last_train)):
        indices = np.flatnonzero(chosen)
        splits[split] = labeled_split(
            [paths[i] for i in indices], [str(class_ids[i]) for i in indices], root, check_images=check_images
        )
    return splits


def _require(path: Path, what: str) -> None:
    if not path.is_file():
        raise UserError(f"{path} not found: data.root must hold {what}; set data.root to the extracted dataset folder")


def _table(root: Path, name: str, columns: str, header: int = 0) -> list[tuple[int, list[str]]]:
    """`(line number, whitespace-separated fields)` of each non-empty line after `header` lines."""
    path = root / name
    _require(path, f"{name} ({columns})")
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not a text file ({exc.reason}); expected lines '{columns}'") from exc
    rows = [(number, line.split()) for number, line in enumerate(lines, start=1) if number > header and line.strip()]
    if not rows:
        raise UserError(f"{path} lists no images; expected lines '{columns}'")
    return rows


def _id_table(root: Path, name: str, columns: str) -> dict[str, str]:
    """`{first field: second field}` of a two-column CUB file, rejecting malformed lines and repeated ids."""
    table: dict[str, str] = {}
    for line, row in _table(root, name, columns):
        if len(row) != 2 or row[0] in table:
            problem = "a repeated id" if len(row) == 2 else f"{len(row)} fields"
            raise UserError(f"{root / name}:{line}: expected '{columns}', got {problem}")
        table[row[0]] = row[1]
    return table


def _int_field(path: Path, value: str, field: str) -> int:
    if not value.lstrip("-").isdigit():
        raise UserError(f"{path}: {field} must be an integer, got {value!r}")
    return int(value)


def _first_line(path: Path) -> str:
    with path.open() as handle:
        return handle.readline().strip()


def _numeric_first(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 62, value)
