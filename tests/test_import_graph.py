"""The layering CONTRIBUTING promises, read from the source: what the serving side imports at module level.

`serve/`, `index/` and `vectordb/`, and the torch-free side of `export/` (the bundle, its encoder and
its preprocessing), import nothing from `retrieval.train` or `retrieval.data` and neither torch nor timm
when they load, so a search service starts without the training stack. Imports inside functions are
allowed: they run only when a command needs them. `export/onnx_export.py` and `export/quantize.py`
write exports and need torch by design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "retrieval"
SERVING = ["serve", "index", "vectordb", "export/bundle.py", "export/onnx_encoder.py", "export/preprocess.py"]
FORBIDDEN = ("torch", "timm", "torchvision", "retrieval.train", "retrieval.data")


def _module_level_imports(path: Path) -> list[str]:
    """Absolute module names imported by the statements at a file's top level (not inside functions)."""
    names: list[str] = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


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
