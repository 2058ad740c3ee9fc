"""Fake copies of the official benchmark layouts (real file formats, tiny images) written into a temp dir.

Each writer returns what a correct reader must find, computed from what it wrote: the image paths
of every split and their class ids (and In-Shop's query / gallery flags), so the tests compare the
readers against this independent list rather than against hard-coded counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image


@dataclass
class Expected:
    """Per split: image paths and the dataset's own class id of each (as written)."""

    paths: dict[str, list[Path]] = field(default_factory=dict)
    classes: dict[str, list[str]] = field(default_factory=dict)
    query: list[bool] = field(default_factory=list)  # In-Shop test rows: status query
    gallery: list[bool] = field(default_factory=list)

    def add(self, split: str, path: Path, class_id: str) -> None:
        self.paths.setdefault(split, []).append(path)
        self.classes.setdefault(split, []).append(class_id)


def write_image(path: Path, seed: int) -> Path:
    """An 8x8 image of random colours, JPEG or PNG by the suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def write_cub(root: Path, classes: tuple[int, ...] = (1, 2, 50, 100, 101, 150, 200)) -> Expected:
    """CUB_200_2011: images/<NNN.Name>/<file>.jpg, images.txt and image_class_labels.txt (ids shuffled)."""
    expected, lines, labels = Expected(), [], []
    image_id = 0
    for cls in classes:
        for i in range(2 + cls % 2):  # 2 or 3 images a class
            image_id += 1
            name = f"{cls:03d}.Bird_{cls}/Bird_{cls}_{i:04d}_{image_id}.jpg"
            write_image(root / "images" / name, image_id)
            lines.append(f"{image_id} {name}")
            labels.append(f"{image_id} {cls}")
            expected.add("train" if cls <= 100 else "test", root / "images" / name, str(cls))
    order = np.random.default_rng(0).permutation(len(lines))  # the reader must join on ids, not on line order
    (root / "images.txt").write_text("".join(lines[i] + "\n" for i in order))
    (root / "image_class_labels.txt").write_text("".join(line + "\n" for line in labels))
    return expected


def write_cars(root: Path, classes: tuple[int, ...] = (1, 30, 50, 98, 99, 150, 196)) -> Expected:
    """Cars196: car_ims/NNNNNN.jpg and cars_annos.mat (struct array as MATLAB writes it, via scipy)."""
    from scipy.io import savemat

    expected, records = Expected(), []
    for cls in classes:
        for _ in range(2 + cls % 2):
            number = len(records) + 1
            relative = f"car_ims/{number:06d}.jpg"
            write_image(root / relative, number)
            box = [np.array([[v]], dtype=np.uint16) for v in (1, 2, 7, 7)]
            # The `test` flag is the classification split: set on both sides of class 98, and ignored.
            records.append(
                (relative, *box, np.array([[cls]], dtype=np.uint8), np.array([[number % 2]], dtype=np.uint8))
            )
            expected.add("train" if cls <= 98 else "test", root / relative, str(cls))
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annotations = np.zeros((1, len(records)), dtype=[(name, "O") for name in fields])
    for i, record in enumerate(records):
        annotations[0, i] = record
    class_names = np.array([[f"Car {c}" for c in range(1, 197)]], dtype=object)
    savemat(root / "cars_annos.mat", {"annotations": annotations, "class_names": class_names})
    return expected


def write_sop(root: Path) -> Expected:
    """Stanford_Online_Products: <super>_final/<class>_<n>.JPG, Ebay_train.txt and Ebay_test.txt."""
    expected = Expected()
    layout = {"train": [(1, 1), (2, 1), (3, 2), (4, 2)], "test": [(5, 1), (6, 2), (7, 2)]}  # (class_id, super_class_id)
    image_id = 0
    for split, classes in layout.items():
        lines = ["image_id class_id super_class_id path"]
        for class_id, super_id in classes:
            for i in range(2 + class_id % 2):
                image_id += 1
                relative = f"{('bicycle', 'cabinet')[super_id - 1]}_final/{class_id}{i}_{i}.JPG"
                write_image(root / relative, image_id)
                lines.append(f"{image_id} {class_id} {super_id} {relative}")
                expected.add(split, root / relative, str(class_id))
        (root / f"Ebay_{split}.txt").write_text("\n".join(lines) + "\n")
    return expected


def write_inshop(root: Path, archive_layout: bool = False) -> Expected:
    """In-Shop: img/<GENDER>/<Category>/id_NNNNNNNN/<n>_<view>.jpg and list_eval_partition.txt.

    `archive_layout`: as the DeepFashion archive unpacks, `Eval/list_eval_partition.txt` and `Img/img/`.
    """
    expected = Expected()
    rows = []
    # item -> statuses of its images; test items have queries and gallery images.
    items = {item: ["train"] * (2 + item % 2) for item in range(1, 5)}
    items.update({5: ["query", "gallery", "gallery"], 6: ["query", "query", "gallery"]})
    images = root / "Img" if archive_layout else root
    for item, statuses in items.items():
        for i, status in enumerate(statuses):
            relative = f"img/WOMEN/Dresses/id_{item:08d}/{i:02d}_1_front.jpg"
            write_image(images / relative, item * 10 + i)
            rows.append(f"{relative:<60}id_{item:08d}      {status}")
            expected.add("train" if status == "train" else "test", images / relative, f"id_{item:08d}")
            if status != "train":
                expected.query.append(status == "query")
                expected.gallery.append(status == "gallery")
    partition = root / "Eval" / "list_eval_partition.txt" if archive_layout else root / "list_eval_partition.txt"
    partition.parent.mkdir(parents=True, exist_ok=True)
    partition.write_text(f"{len(rows)}\nimage_name item_id evaluation_status\n" + "\n".join(rows) + "\n")
    return expected


def write_class_folders(root: Path, classes: list[str], per_class: int = 2) -> dict[str, list[Path]]:
    """root/<class>/<n>.png (one class's images in a nested folder); returns the files of each class."""
    files = {}
    for c, name in enumerate(classes):
        nested = "nested/" if c == 0 else ""
        files[name] = [write_image(root / name / f"{nested}{i}.png", c * 10 + i) for i in range(per_class)]
    return files
