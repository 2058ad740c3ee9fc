"""CUB / Cars / SOP / In-Shop / class folders: splits, counts and labels read from fake official layouts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval.config import load_config
from retrieval.data import DATASETS, DatasetSpec, build_data, read_splits
from retrieval.errors import UserError
from tests.data.official_layouts import write_cars, write_class_folders, write_cub, write_image, write_inshop, write_sop

WRITERS = {"cub200": write_cub, "cars196": write_cars, "sop": write_sop, "inshop": write_inshop}
STATS = {"mean": (0.5,) * 3, "std": (0.5,) * 3}
ROOT_DATASETS = [name for name, spec in DATASETS.items() if spec.reads_root]


def _config(name, root, *overrides):
    base = [f"data.name={name}", f"data.root={root}", "data.image_size=16", "data.val_fraction=0"]
    return load_config(None, [*base, *overrides])  # the demo config, on another dataset


def _check_split(split, paths, class_ids):
    """Same files in the same order; class indices 0..C-1 that name the written class ids."""
    assert split.paths == paths
    assert [split.class_names[label] for label in split.labels] == class_ids
    assert sorted(set(split.labels.tolist())) == list(range(len(set(class_ids))))


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_official_layouts_give_the_zero_shot_splits(tmp_path, name):
    expected = WRITERS[name](tmp_path)
    splits = read_splits(_config(name, tmp_path).data)
    assert sorted(splits) == ["test", "train"]
    for split in ("train", "test"):
        _check_split(splits[split], expected.paths[split], expected.classes[split])
    assert not set(expected.classes["train"]) & set(expected.classes["test"])  # zero-shot: no class in both


def test_cub_and_cars_split_at_their_class_boundary(tmp_path):
    for writer, name, boundary in ((write_cub, "cub200", 100), (write_cars, "cars196", 98)):
        root = tmp_path / name
        writer(root)
        splits = read_splits(_config(name, root).data)
        assert max(int(c) for c in splits["train"].class_names) == boundary
        assert min(int(c) for c in splits["test"].class_names) == boundary + 1


@pytest.mark.parametrize("archive_layout", [False, True])
def test_inshop_queries_search_the_gallery_only(tmp_path, archive_layout):
    expected = write_inshop(tmp_path, archive_layout)
    data = build_data(_config("inshop", tmp_path).data, STATS, _config("inshop", tmp_path).augment)
    np.testing.assert_array_equal(data.test.query_mask, expected.query)
    np.testing.assert_array_equal(data.test.gallery_mask, expected.gallery)
    assert len(data.train) == len(expected.paths["train"]) and data.num_classes == 4
    assert data.test.dataset.paths == expected.paths["test"]


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_benchmarks_build_the_training_data_with_a_class_holdout(tmp_path, name):
    expected = WRITERS[name](tmp_path)
    config = _config(name, tmp_path, "data.val_classes=2")
    data = build_data(config.data, STATS, config.augment)
    train_classes = len(set(expected.classes["train"]))
    assert data.num_classes == train_classes - 2
    assert set(np.unique(data.train_labels)) == set(range(train_classes - 2))
    assert len(data.train) + len(data.val.dataset) == len(expected.paths["train"])
    assert len(data.test.dataset) == len(expected.paths["test"])
    image, label = data.test.dataset[0]
    assert image.shape == (3, 16, 16) and label == data.test.labels[0]


def test_class_folders_split_by_sorted_name_halves(tmp_path):
    classes = ["b", "a", "e", "c", "d"]
    files = write_class_folders(tmp_path, classes)
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "empty").mkdir()
    (tmp_path / ".cache").mkdir()
    splits = read_splits(_config("folder", tmp_path).data)
    assert splits["train"].class_names == ["a", "b", "c"] and splits["test"].class_names == ["d", "e"]
    _check_split(splits["train"], [p for c in "abc" for p in files[c]], [c for c in "abc" for _ in files[c]])
    assert all(path.name.endswith(".png") for path in splits["test"].paths)


def test_class_folders_under_train_val_test_are_the_splits(tmp_path):
    train = write_class_folders(tmp_path / "train", ["x", "y", "z"])
    test = write_class_folders(tmp_path / "test", ["x", "y"])  # closed-set: test classes also train
    write_class_folders(tmp_path / "val", ["v", "w"])
    splits = read_splits(_config("folder", tmp_path).data)
    assert sorted(splits) == ["test", "train", "val"]
    _check_split(splits["test"], [p for c in "xy" for p in test[c]], [c for c in "xy" for _ in test[c]])
    assert len(splits["train"].paths) == sum(map(len, train.values()))
    data = build_data(_config("folder", tmp_path).data, STATS, _config("folder", tmp_path).augment)
    assert data.val is not None and len(data.val.dataset) == 4
    assert data.test.class_names == ["x", "y"] and data.val.class_names == ["v", "w"]  # the query grid's captions


def test_every_root_dataset_has_a_fake_layout_here():
    assert set(ROOT_DATASETS) == {"folder", *WRITERS}


def _write_dataset(name, root):
    """Write a tiny copy of registered dataset `name` under `root`; returns the --set keys that point to it."""
    if name == "digits":
        return []  # scikit-learn's bundled copy
    if name == "csv":
        splits = {"a": "train", "b": "train", "c": "test", "d": "test"}
        rows = [f"{label}{i}.png,{label},{split}" for label, split in splits.items() for i in range(2)]
        for seed, row in enumerate(rows):
            write_image(root / row.split(",")[0], seed)
        (root / "data.csv").write_text("\n".join(["path,label,split", *rows]) + "\n")
        return [f"data.path={root / 'data.csv'}"]
    if name == "folder":
        write_class_folders(root, ["a", "b", "c", "d"])
    else:
        WRITERS[name](root)
    return [f"data.root={root}"]


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_registered_dataset_is_accepted_by_the_config_and_built(tmp_path, name):
    config = load_config(
        None,
        [
            f"data.name={name}",
            "data.image_size=16",
            "data.val_fraction=0",
            "augment.preset=auto",
            *_write_dataset(name, tmp_path),
        ],
    )
    assert config.augment.preset == DATASETS[name].augment_preset
    data = build_data(config.data, STATS, config.augment)
    assert data.num_classes >= 2 and len(data.train) == len(data.train_labels)
    image, label = data.test.dataset[0]
    assert image.shape == (3, 16, 16) and label == data.test.labels[0]


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_dataset_the_config_accepts_has_a_reader_that_imports(name):
    """One table: the names the config checks (torch-free, readers by name) are those whose readers load."""
    spec = DATASETS[name]
    readers = [spec.files_reader(), spec.tensor_loader()]
    assert sum(callable(reader) for reader in readers) == 1 and readers.count(None) == 1


def test_a_dataset_spec_reads_files_or_loads_tensors_not_both():
    with pytest.raises(ValueError, match="exactly one of read_files and load_tensors"):
        DatasetSpec()
    with pytest.raises(ValueError, match="exactly one of read_files and load_tensors"):
        DatasetSpec(read_files=DATASETS["csv"].read_files, load_tensors=DATASETS["digits"].load_tensors)


def test_an_unknown_dataset_is_one_line_listing_the_registry():
    with pytest.raises(UserError, match="unknown data.name 'cub'; valid names: digits, csv, folder, cub200") as caught:
        load_config(None, ["data.name=cub"])
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ROOT_DATASETS)
def test_root_datasets_need_data_root(name):
    with pytest.raises(UserError, match=f"data.name {name} reads a dataset folder but data.root is not set"):
        load_config(None, [f"data.name={name}"])


def _break(name, root):
    """Damage one file of a layout; returns the text the error must contain."""
    if name == "cub_missing_labels":
        (root / "image_class_labels.txt").unlink()
        return "image_class_labels.txt not found"
    if name == "cub_bad_line":
        with (root / "images.txt").open("a") as handle:
            handle.write("999 a b\n")
        return r"images.txt:\d+: expected '<image_id> <image_name>', got 3 fields"
    if name == "cub_missing_image":
        next((root / "images").rglob("*.jpg")).unlink()
        return "1 image\\(s\\) listed in .* do not exist"
    if name == "cars_not_mat":
        (root / "cars_annos.mat").write_bytes(b"MATLAB 5.0 MAT-file, broken" + b"\0" * 10)
        return "cars_annos.mat is not a readable MATLAB file"
    if name == "cars_wrong_struct":
        from scipy.io import savemat

        savemat(root / "cars_annos.mat", {"annotations": np.zeros((1, 3))})
        return "has no 'annotations' struct array with fields relative_im_path and class"
    if name == "sop_missing_test":
        (root / "Ebay_test.txt").unlink()
        return "Ebay_test.txt not found"
    if name == "sop_short_line":
        with (root / "Ebay_train.txt").open("a") as handle:
            handle.write("99 7 1\n")
        return r"Ebay_train.txt:\d+: expected 4 fields"
    if name == "inshop_truncated":
        partition = root / "list_eval_partition.txt"
        partition.write_text("\n".join(partition.read_text().splitlines()[:-2]) + "\n")
        return "declares 16 images but lists 14; the file is truncated"
    if name == "inshop_bad_status":
        partition = root / "list_eval_partition.txt"
        partition.write_text(partition.read_text().replace("gallery", "galery", 1))
        return "expected '<image_name> <item_id> <train\\|query\\|gallery>'"
    raise AssertionError(name)


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("cub200", "cub_missing_labels"),
        ("cub200", "cub_bad_line"),
        ("cub200", "cub_missing_image"),
        ("cars196", "cars_not_mat"),
        ("cars196", "cars_wrong_struct"),
        ("sop", "sop_missing_test"),
        ("sop", "sop_short_line"),
        ("inshop", "inshop_truncated"),
        ("inshop", "inshop_bad_status"),
    ],
)
def test_a_malformed_layout_names_the_file(tmp_path, name, damage):
    WRITERS[name](tmp_path)
    message = _break(damage, tmp_path)
    with pytest.raises(UserError, match=message):
        read_splits(_config(name, tmp_path).data)


def test_a_layout_of_another_dataset_says_so(tmp_path):
    write_sop(tmp_path)
    with pytest.raises(UserError, match="images.txt not found: data.root must hold"):
        read_splits(_config("cub200", tmp_path).data)
    with pytest.raises(UserError, match="is not a folder"):
        read_splits(_config("sop", tmp_path / "nope").data)


@pytest.mark.parametrize("layout", ["train_only", "one_class"])
def test_class_folders_that_cannot_split_say_why(tmp_path, layout):
    if layout == "train_only":
        write_class_folders(tmp_path / "train", ["a", "b"])
        message = "has train/ but no test/"
    else:
        write_class_folders(tmp_path, ["a"])
        message = "1 class folder\\(s\\) with images; data.name folder needs at least 2"
    with pytest.raises(UserError, match=message):
        read_splits(_config("folder", tmp_path).data)


BENCHMARK_CONFIGS = sorted(Path(__file__).resolve().parents[2].joinpath("configs").glob("*_*.yaml"))
BENCHMARK_CONFIGS = [path for path in BENCHMARK_CONFIGS if path.name.split("_")[0] in WRITERS]


def test_every_benchmark_has_a_config_per_loss():
    names = {path.stem for path in BENCHMARK_CONFIGS}
    assert names == {f"{data}_{loss}" for data in WRITERS for loss in ("anchor", "proxy_nca", "circle", "triplet")}


@pytest.mark.parametrize("path", BENCHMARK_CONFIGS, ids=lambda path: path.stem)
def test_benchmark_configs_hold_the_recipe_and_read_their_layout(tmp_path, path):
    name, loss = path.stem.split("_", 1)
    config = load_config(path, [f"data.root={tmp_path}"])
    assert (config.data.name, config.loss.name, config.model.backbone) == (name, loss, "resnet50")
    assert (config.model.embedding_dim, config.model.pooling, config.data.image_size) == (128, "avgmax", 224)
    assert config.augment.preset == "natural" and config.train.amp == "bf16" and config.train.freeze_bn
    assert (config.train.lr, config.train.weight_decay, config.train.freeze_backbone_epochs) == (1e-4, 1e-4, 1)
    assert config.train.epochs == (100 if name == "sop" else 60)
    pair = loss in ("circle", "triplet")
    batch = config.data.p * config.data.k if pair else config.data.batch_size
    assert batch == 128 and config.data.sampler == ("pk" if pair else "random")
    assert pair or config.train.proxy_lr_mult == 100.0
    expected = WRITERS[name](tmp_path)
    assert read_splits(config.data)["test"].paths == expected.paths["test"]
