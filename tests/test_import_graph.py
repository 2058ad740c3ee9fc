"""The layering CONTRIBUTING promises, read from the source and seen in a process without torch.

`serve/`, `index/`, `vectordb/`, `core/` and `embedding_files/`, the torch-free side of `export/` (the
bundle, its encoder and its preprocessing) and the dispatcher `export/index_encoder.py`, import nothing
from `retrieval.train` or `retrieval.data` and neither torch nor timm when they load, so a search
service starts without the training stack. Imports inside functions are allowed there: they run only
when a command needs them.
`export/onnx_export.py` and `export/quantize.py` write exports and need torch by design.
`inference/` never imports `export/` (export builds on inference, not the reverse). (That `retrieval
serve --model BUNDLE` answers searches in an interpreter where torch and the other training
packages cannot be imported, as with `pip install "retrieval[serve]"`, is the command's:
tests/cli/test_serve_without_torch.py.)
The top-level subpackages (and modules) of `retrieval`, and every module within them, import each
other without a cycle, counting imports inside functions and under `TYPE_CHECKING`: each layer
imports only the layers under it, so none needs a late import to load. And `import retrieval.config`
loads no torch: a config typo fails in an instant.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "retrieval"
SERVING = [
    "serve",
    "index",
    "vectordb",
    "export/bundle.py",
    "export/onnx_encoder.py",
    "export/index_encoder.py",
    "export/reranker_onnx.py",
    "core",
    "embedding_files",
]
FORBIDDEN = ("torch", "timm", "torchvision", "retrieval.train", "retrieval.data")


def _module_level_imports(path: Path) -> list[str]:
    """Absolute module names imported by the statements at a file's top level (not inside functions)."""
    return _imports(ast.parse(path.read_text()).body)


def _all_imports(path: Path) -> list[str]:
    """Absolute module names imported anywhere in a file, inside functions too."""
    return _imports(list(ast.walk(ast.parse(path.read_text()))))


def _imports(nodes: list[ast.stmt] | list[ast.AST]) -> list[str]:
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "retrieval":
            names += [f"retrieval.{alias.name}" for alias in node.names]  # `from retrieval import data`
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _layer_graph() -> dict[str, set[str]]:
    """Top-level subpackage or module of `retrieval` -> the others its files import anywhere (functions too)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if layer == "__init__":
            continue
        imported = {name.split(".")[1] for name in _all_imports(path) if name.startswith("retrieval.")}
        graph.setdefault(layer, set()).update(imported - {layer})
    return graph


def _module_graph() -> dict[str, set[str]]:
    """Module of `retrieval` -> the modules its file imports anywhere, with the packages whose `__init__` that runs.

    Importing `retrieval.a.b` runs `retrieval/a/__init__.py` first, so it counts as importing `retrieval.a`
    too; a module's own packages are left out (they are already loading when it runs).
    """
    modules = {_module_name(path) for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        own = {".".join(module.split(".")[:end]) for end in range(1, module.count(".") + 2)}
        imported: set[str] = set()
        for name in _all_imports(path):
            parts = name.split(".")
            imported.update(".".join(parts[:end]) for end in range(2, len(parts) + 1))
        graph[module] = (imported & modules) - own
    return graph


def _module_name(path: Path) -> str:
    """`retrieval/index/__init__.py` -> `retrieval.index`; `retrieval/index/gallery.py` -> `retrieval.index.gallery`."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: each strongly connected set of two or more layers, sorted."""
    reaches = {layer: _reachable(graph, layer) for layer in graph}
    groups = {tuple(sorted(other for other in reaches[layer] if layer in reaches.get(other, ()))) for layer in graph}
    return sorted(list(group) for group in groups if len(group) > 1)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The layers `start` imports, directly or through others (itself included when it is on a cycle)."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        layer = todo.pop()
        if layer not in seen:
            seen.add(layer)
            todo += graph.get(layer, ())
    return seen


def _files(entry: str) -> list[Path]:
    target = PACKAGE / entry
    return sorted(target.rglob("*.py")) if target.is_dir() else [target]


@pytest.mark.parametrize("entry", SERVING)
def test_serving_code_imports_no_training_code_or_torch_at_module_level(entry: str) -> None:
    files = _files(entry)
    assert files, f"nothing to check under {entry}"
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in files
        for name in _module_level_imports(path)
        if any(name == bad or name.startswith(f"{bad}.") for bad in FORBIDDEN)
    ]
    assert found == []


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom torch.utils.data import Dataset\n\ndef f():\n    import timm\n")
    assert _module_level_imports(module) == ["os", "torch.utils.data"]
    module.write_text("if TYPE_CHECKING:\n    from retrieval.index import SearchIndex\ndef f():\n    import timm\n")
    assert sorted(_all_imports(module)) == ["retrieval.index", "timm"]


def test_no_import_cycle_between_the_subpackages() -> None:
    assert _cycles(_layer_graph()) == []


def test_no_import_cycle_between_the_modules() -> None:
    assert _cycles(_module_graph()) == []


_CONFIG_WITHOUT_TORCH = """
import sys
import retrieval.config as config
from retrieval.errors import UserError
config.check_config()
try:
    config.check_config(None, ["data.name=cub"])
except UserError as error:
    print(error)
print(config.resolve_augment({}, "cub200").preset)
print(sorted(name for name in sys.modules if name == "torch" or name.startswith("retrieval.data")))
"""


def test_the_config_checks_dataset_names_and_presets_without_torch_or_the_dataset_readers() -> None:
    """`import retrieval.config`, `check_config` (what `train` and `evaluate` run first) and `augment.preset: auto`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _CONFIG_WITHOUT_TORCH], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines() == [
        "unknown data.name 'cub'; valid names: digits, csv, folder, cub200, cars196, sop, inshop",
        "natural",
        "[]",
    ]


# What the commands read before PyTorch loads (issue 48): the config, a dataset's files, the images to
# embed or query, a pretraining run's checkpoint path; `retrieval.data` itself loads its names on first use.
_READERS_WITHOUT_TORCH = """
import sys
import retrieval.data, retrieval.data.splits, retrieval.inference.sources, retrieval.pretrain.resume_path
import retrieval.choices.losses
print(sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "timm", "torchvision")))
"""


def test_what_commands_check_before_pytorch_loads_imports_no_torch() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _READERS_WITHOUT_TORCH], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_every_name_of_the_data_package_is_its_module_s() -> None:
    """`from retrieval.data import X` (loaded on first use) gives the object its module defines, for every X."""
    import importlib

    import retrieval.data as data

    homes = {name: getattr(data, name) for name in data.__all__}
    assert sorted(homes) == sorted(data._HOMES)
    for name, value in homes.items():
        assert value is getattr(importlib.import_module(data._HOMES[name]), name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        data.nothing  # noqa: B018


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from retrieval import config\nfrom retrieval.data.image_loader import ImageLoader\n")
    assert _module_level_imports(module) == ["retrieval.config", "retrieval.data.image_loader"]
    graph = {"config": {"runtime"}, "runtime": {"config", "errors"}, "data": {"config"}, "errors": set()}
    assert _cycles(graph) == [["config", "runtime"]]


def test_inference_never_imports_export() -> None:
    """Export builds on inference (its encoder and embedding path); `export/index_encoder.py` dispatches over both."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in _files("inference")
        for name in _all_imports(path)
        if name == "retrieval.export" or name.startswith("retrieval.export.")
    ]
    assert found == []
