"""The one registry of every extension kind (`retrieval.registry`), and one extension of each kind from one file.

Each kind's test writes a single module outside the toolkit (into a temporary folder) and either imports
it (its decorator registers it) or declares it as an entry point of a fake installed distribution (a
`*.dist-info` folder with `METADATA` and `entry_points.txt` on `sys.path`), then uses the extension
through the toolkit's normal path: the config, `build_loss`, `build_method`, `read_splits`,
`SearchIndex.build`, `retrieval export`. No toolkit file is touched: that is the claim checked.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.registry import Registry

GROUP = "retrieval.test_widgets"


def _distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, entries: str) -> None:
    """`module` (with `source`) installed as a fake distribution declaring `entries` (an entry_points.txt body)."""
    (tmp_path / f"{module}.py").write_text(source)
    info = tmp_path / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entries)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str) -> object:
    """`source` written as `module` and imported: what a user's script does with its own extension module."""
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return importlib.import_module(module)


def _isolated(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    """What a test registers in the shared `registry` is gone after it."""
    for store in ("_registered", "_paths", "_loaded"):
        monkeypatch.setattr(registry, store, dict(getattr(registry, store)))


def _widgets(**builtins: str) -> Registry:
    return Registry("widget", GROUP, builtins)


def test_the_decorator_registers_and_returns_the_object_unchanged() -> None:
    widgets = _widgets()

    @widgets.register("spanner")
    def spanner() -> str:
        return "tight"

    @widgets.register()
    def hammer() -> str:
        return "bang"

    assert widgets["spanner"] is spanner and widgets.get("hammer") is hammer and spanner() == "tight"
    assert widgets.names() == ["spanner", "hammer"] and "spanner" in widgets and "saw" not in widgets


def test_a_name_registered_twice_by_different_objects_is_refused() -> None:
    widgets = _widgets(builtin="json:dumps")

    def one() -> None: ...

    def other() -> None: ...

    widgets.add("one", one)
    widgets.add("one", one)  # the same object again (its module imported twice): not a second holder
    with pytest.raises(ValueError, match="widget 'one' is already registered by tests.test_registry:.*one"):
        widgets.add("one", other)
    with pytest.raises(ValueError, match="widget 'builtin' is already registered by json:dumps"):
        widgets.add("builtin", other)
    with pytest.raises(ValueError, match="is not a class or function"):
        widgets.add("number", 3)


def test_an_unknown_name_is_one_line_listing_the_valid_names() -> None:
    widgets = _widgets(a="json:dumps", b="json:loads")
    with pytest.raises(UserError) as caught:
        widgets.get("c")
    assert str(caught.value) == "unknown widget 'c'; valid names: a, b"
    with pytest.raises(UserError, match="unknown widget 'c'"):
        widgets.check("c")
    assert widgets.find("c") is None


def test_a_builtin_s_module_is_not_imported_until_it_is_used(tmp_path, monkeypatch) -> None:
    (tmp_path / "lazy_widget_module.py").write_text("def widget():\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_widget_module", raising=False)
    widgets = _widgets(lazy="lazy_widget_module:widget")
    widgets.check("lazy")
    assert "lazy" in widgets and widgets.names() == ["lazy"]
    assert "lazy_widget_module" not in sys.modules
    assert widgets.get("lazy")() == 7 and "lazy_widget_module" in sys.modules


def test_an_entry_point_s_name_is_valid_before_its_package_is_imported(tmp_path, monkeypatch) -> None:
    _distribution(tmp_path, monkeypatch, "outside_widgets", "def wrench():\n    return 'outside'\n", "")
    (tmp_path / "outside_widgets-1.0.dist-info" / "entry_points.txt").write_text(
        f"[{GROUP}]\nwrench = outside_widgets:wrench\nbroken = outside_widgets:missing\n"
    )
    widgets = _widgets(builtin="json:dumps")
    assert "wrench" in widgets and widgets.names() == ["builtin", "broken", "wrench"]
    assert "outside_widgets" not in sys.modules
    assert widgets.get("wrench")() == "outside" and "outside_widgets" in sys.modules
    with pytest.raises(UserError, match=r"widget 'broken': its entry point outside_widgets:missing .* cannot be imp"):
        widgets.get("broken")


def test_an_entry_point_that_takes_a_builtin_s_name_is_refused(tmp_path, monkeypatch) -> None:
    _distribution(tmp_path, monkeypatch, "clashing_widgets", "def dumps():\n    pass\n", f"[{GROUP}]\nd = x:y\n")
    (tmp_path / "clashing_widgets-1.0.dist-info" / "entry_points.txt").write_text(
        f"[{GROUP}]\nbuiltin = clashing_widgets:dumps\n"
    )
    with pytest.raises(
        UserError, match="widget 'builtin': its entry point clashing_widgets:dumps .* clashes with json"
    ):
        _widgets(builtin="json:dumps").get("builtin")


# One extension of each kind, from one file.

_LOSS_MODULE = """
from retrieval.losses import TripletLoss


class HardTriplet(TripletLoss):
    '''The triplet loss on each anchor's hardest positive and negative.'''

    def __init__(self, margin: float = 0.3) -> None:
        super().__init__(margin=margin, miner="batch_hard")
"""


def test_a_loss_from_an_outside_package_is_a_loss_name_checked_before_torch_and_built(tmp_path, monkeypatch) -> None:
    from retrieval.config import check_config, load_config
    from retrieval.losses import LOSSES, build_loss, pair_losses

    _isolated(monkeypatch, LOSSES)
    entries = "[retrieval.losses]\nhard_triplet = outside_losses:HardTriplet\n"
    _distribution(tmp_path, monkeypatch, "outside_losses", _LOSS_MODULE, entries)
    check_config(None, ["loss.name=hard_triplet"])  # known by its metadata, before its module (or torch) loads
    assert "outside_losses" not in sys.modules
    config = load_config(None, ["loss.name=hard_triplet", "loss.margin=0.5"])
    loss = build_loss(config.loss.name, config.loss.params, num_classes=3, embedding_dim=8)
    assert type(loss).__name__ == "HardTriplet" and loss.margin == 0.5 and "hard_triplet" in pair_losses()
    assert config.loss.params == {"margin": 0.5, "memory_size": 0}
    with pytest.raises(UserError, match="unknown config key loss.scale for loss 'hard_triplet'"):
        load_config(None, ["loss.name=hard_triplet", "loss.scale=3"])


_METHOD_MODULE = """
from torch import nn

from retrieval.choices.pretrain_methods import PRETRAIN_METHODS
from retrieval.pretrain.methods import SimCLRLoss


@PRETRAIN_METHODS.register("linear_simclr")
def linear_simclr(pretrain, feature_width):
    '''SimCLR with a linear projection.'''
    return nn.Linear(feature_width, pretrain.projection_dim), SimCLRLoss(pretrain.temperature)
"""


def test_a_pretraining_method_from_one_module_is_a_config_value_and_builds(tmp_path, monkeypatch) -> None:
    import torch

    from retrieval.choices.pretrain_methods import PRETRAIN_METHODS
    from retrieval.config import load_config
    from retrieval.pretrain.methods import build_method

    _isolated(monkeypatch, PRETRAIN_METHODS)
    with pytest.raises(UserError, match="pretrain.method must be one of simclr, simsiam, got 'linear_simclr'"):
        load_config(None, ["pretrain.method=linear_simclr"])
    _module(tmp_path, monkeypatch, "my_methods", _METHOD_MODULE)
    config = load_config(None, ["pretrain.method=linear_simclr", "pretrain.projection_dim=6"])
    head, loss = build_method(config.pretrain, feature_width=10)
    outputs = head(torch.randn(8, 10))
    assert outputs.shape == (8, 6) and torch.isfinite(loss(outputs, torch.arange(4).repeat(2)))


_DATASET_MODULE = """
from retrieval.choices.datasets import register_dataset
from retrieval.data.folder import read_folder


@register_dataset("shop_shelves", reads_root=True, augment_preset="natural")
def read_shelves(root, check_images):
    '''A shop's shelf photos: train/ and test/ folders of one folder a product.'''
    return read_folder(root / "shelves", check_images)
"""


def test_a_dataset_from_one_module_is_checked_by_the_config_and_read(tmp_path, monkeypatch) -> None:
    from PIL import Image

    from retrieval.choices.datasets import DATASETS
    from retrieval.config import load_config
    from retrieval.data import read_splits

    _isolated(monkeypatch, DATASETS)
    _module(tmp_path, monkeypatch, "my_datasets", _DATASET_MODULE)
    for split in ("train", "test"):
        for label in ("soap", "tea"):
            folder = tmp_path / "data" / "shelves" / split / label
            folder.mkdir(parents=True)
            for index in range(2):
                Image.new("RGB", (8, 8), (index * 90, 20, 40)).save(folder / f"{index}.png")
    with pytest.raises(UserError, match="data.name shop_shelves reads a dataset folder but data.root is not set"):
        load_config(None, ["data.name=shop_shelves"])
    config = load_config(None, ["data.name=shop_shelves", f"data.root={tmp_path / 'data'}", "augment.preset=auto"])
    assert config.augment.preset == "natural"  # the dataset's `auto` preset
    splits = read_splits(config.data)
    assert sorted(splits) == ["test", "train"] and len(splits["train"].paths) == 4
    assert splits["test"].class_names == ["soap", "tea"]


_KIND_MODULE = """
from retrieval.index.choice import IndexPlan, KindSpec


def _plan(n, dim, sizes):
    return IndexPlan("sq8", "IDMap2,SQ8", min_training_vectors=256, bytes_per_vector=dim + 16.0)


SQ8 = KindSpec(_plan, native_remove=True, in_auto=lambda n, dim: False)
"""


def test_an_index_kind_from_an_outside_package_is_built_searched_saved_reloaded_and_removed_from(
    tmp_path, monkeypatch
) -> None:
    from retrieval.index import SearchIndex
    from retrieval.index.choice import KINDS, choose_index

    _isolated(monkeypatch, KINDS)
    _distribution(
        tmp_path, monkeypatch, "outside_kinds", _KIND_MODULE, "[retrieval.index_kinds]\nsq8 = outside_kinds:SQ8\n"
    )
    vectors = np.random.default_rng(0).normal(size=(600, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = SearchIndex.build(vectors, kind="sq8", progress=False, default_target_recall=None)
    assert index.kind == "sq8" and index.factory == "IDMap2,SQ8"
    scores, ids = index.search(vectors[:5], 1)
    assert ids[:, 0].tolist() == [0, 1, 2, 3, 4] and np.all(scores[:, 0] > 0.99)
    index.save(tmp_path / "index")
    loaded = SearchIndex.load(tmp_path / "index")
    loaded.remove([0])
    assert loaded.kind == "sq8" and loaded.ntotal == 599 and loaded.search(vectors[:1], 1)[1][0, 0] != 0
    assert choose_index(600, 16).kind == "flat"  # not in `auto`: its spec said so


_QUANTIZER_MODULE = """
import shutil

from retrieval.export.manifest import Quantization


def float_copy(float_path, out_path, checkpoint, preprocess, request):
    '''The float model unchanged: a quantizer that keeps everything.'''
    shutil.copyfile(float_path, out_path)
    same = {"recall@1": 1.0, "map@r": 1.0}
    return Quantization.model_validate({
        "method": "copy", "format": "float32", "calibration_images": 0, "calibration_split": "none",
        "tolerance": request.tolerance, "split": "none", "float": same, "int8": same,
        "drop": {"recall@1": 0.0, "map@r": 0.0}, "embedding_cosine": {"min": 1.0, "mean": 1.0},
        "nearest_neighbor_agreement": 1.0,
    })
"""


@pytest.mark.slow
def test_a_quantizer_from_an_outside_package_is_an_export_quantize_name(
    tmp_path, monkeypatch, tiny_checkpoint, capsys
) -> None:
    from retrieval.cli.main import main
    from retrieval.export.manifest import ExportManifest
    from retrieval.export.quantizers import QUANTIZERS

    out = tmp_path / "export"
    args = ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(out), "--quantize", "float_copy"]
    assert main(args) == 2
    assert "unknown --quantize 'float_copy'; valid names: int8" in capsys.readouterr().err
    _isolated(monkeypatch, QUANTIZERS)
    entries = "[retrieval.quantizers]\nfloat_copy = outside_quantizers:float_copy\n"
    _distribution(tmp_path, monkeypatch, "outside_quantizers", _QUANTIZER_MODULE, entries)
    assert main(args) == 0
    manifest = ExportManifest.read(__import__("json").loads((out / "manifest.json").read_text()), out)
    assert manifest.quantization is not None and manifest.quantization.method == "copy"
    assert "float_copy: recall@1 1.0000 (float 1.0000)" in capsys.readouterr().out
