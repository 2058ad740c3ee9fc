"""`data.name: folder`: a tree of class folders, `root/<class>/<image>`, split into train and test classes.

Two layouts:

- `root/train/<class>/...` and `root/test/<class>/...` (optionally `root/val/<class>/...`): the
  splits are the folders; train and test classes may overlap (closed-set) or not (zero-shot).
- `root/<class>/...`: a zero-shot split by sorted class name: the first half of the classes
  (the middle one included when the count is odd) trains, the second half is the test set.

Images may sit in nested folders below their class folder; files whose extension Pillow does not
read are ignored, and so are folders whose names start with `.`.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from retrieval.data.csv_dataset import CsvSplit, labeled_split
from retrieval.errors import UserError

__all__ = ["list_images", "read_folder"]

_SPLIT_FOLDERS = ("train", "val", "test")


def read_folder(root: Path, check_images: bool = True) -> dict[str, CsvSplit]:
    """The splits of a class-folder tree (see the module docstring); labels are the class folder names.

    Raises:
        UserError: `root` is not a folder, has `train/` without `test/` (or the reverse), or has
            fewer than 2 class folders holding images.
    """
    if not root.is_dir():
        raise UserError(f"data.root {root} is not a folder; data.name folder expects root/<class>/<image>")
    present = [name for name in _SPLIT_FOLDERS if (root / name).is_dir()]
    if "train" in present or "test" in present:
        if "train" not in present or "test" not in present:
            raise UserError(
                f"{root} has {present[0]}/ but no {'test' if 'train' in present else 'train'}/; give both "
                "root/train/<class>/ and root/test/<class>/, or class folders directly under root"
            )
        return {split: _split_of(root / split, _class_images(root / split), check_images) for split in present}
    classes = _class_images(root)
    if len(classes) < 2:
        raise UserError(
            f"{root} has {len(classes)} class folder(s) with images; data.name folder needs at least 2 "
            "(root/<class>/<image>: the first half of the sorted names trains, the second half tests)"
        )
    names = sorted(classes)
    half = (len(names) + 1) // 2
    train, test = ({name: classes[name] for name in part} for part in (names[:half], names[half:]))
    return {"train": _split_of(root, train, check_images), "test": _split_of(root, test, check_images)}


def list_images(directory: Path) -> list[Path]:
    """Every file under `directory` (recursively, skipping `.`-folders) whose extension Pillow reads, sorted."""
    extensions = set(Image.registered_extensions())
    return sorted(
        path
        for path in directory.rglob("*")
        if path.suffix.lower() in extensions
        and not any(part.startswith(".") for part in path.relative_to(directory).parts[:-1])
        and path.is_file()
    )


def _class_images(directory: Path) -> dict[str, list[Path]]:
    """`{class folder name: its images}` for the subfolders of `directory` that hold at least one image."""
    folders = sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))
    images = {folder.name: list_images(folder) for folder in folders}
    return {name: files for name, files in images.items() if files}


def _split_of(directory: Path, classes: dict[str, list[Path]], check_images: bool) -> CsvSplit:
    if not classes:
        raise UserError(f"{directory} has no class folders with images; expected {directory}/<class>/<image>")
    files = [(path, name) for name, paths in classes.items() for path in paths]
    return labeled_split([path for path, _ in files], [name for _, name in files], directory, check_images=check_images)
