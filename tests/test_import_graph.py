"""The layering CONTRIBUTING promises, read from the source: what the serving side imports at module level.

`serve/`, `index/` and `vectordb/`, and the torch-free side of `export/` (the bundle, its encoder and
its preprocessing), import nothing from `retrieval.train` or `retrieval.data` and neither torch nor timm
when they load, so a search service starts without the training stack. Imports inside functions are
allowed: they run only when a command needs them. `export/onnx_export.py` and `export/quantize.py`
write exports and need torch by design. The top-level subpackages (and modules) of `retrieval`
import each other without a cycle: each layer imports only the layers under it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "retrieval"
SERVING = ["serve", "index", "vectordb", "export/bundle.py", "export/onnx_encoder.py", "export/preprocess.py"]
FORBIDDEN = ("torch", "timm", "torchvision", "retrieval.train", "retrieval.data")
# The one known cycle, evaluate -> inference -> export -> evaluate, is closed by inference/encoder.py
# importing retrieval.export (the ONNX encoder); the helper "serve-light" removes that import, and
# this exception goes with it.
KNOWN_CYCLE_EDGES = {("inference", "export")}


def _module_level_imports(path: Path) -> list[str]:
    """Absolute module names imported by the statements at a file's top level (not inside functions)."""
    names: list[str] = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "retrieval":
            names += [f"retrieval.{alias.name}" for alias in node.names]  # `from retrieval import data`
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _layer_graph() -> dict[str, set[str]]:
    """Top-level subpackage or module of `retrieval` -> the others its files import at module level."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if layer == "__init__":
            continue
        imported = {name.split(".")[1] for name in _module_level_imports(path) if name.startswith("retrieval.")}
        graph.setdefault(layer, set()).update(imported - {layer})
    return graph


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


def test_no_import_cycle_between_the_subpackages() -> None:
    graph = _layer_graph()
    for source, target in KNOWN_CYCLE_EDGES:
        graph[source].discard(target)
    assert _cycles(graph) == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from retrieval import config\nfrom retrieval.data.loader import ImageLoader\n")
    assert _module_level_imports(module) == ["retrieval.config", "retrieval.data.loader"]
    graph = {"config": {"runtime"}, "runtime": {"config", "errors"}, "data": {"config"}, "errors": set()}
    assert _cycles(graph) == [["config", "runtime"]]
