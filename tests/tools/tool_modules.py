"""Import the scripts in tools/ (not a package) as modules for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(name: str) -> ModuleType:
    """tools/<name>.py as a module (cached in sys.modules under `tools_<name>`)."""
    key = f"tools_{name}"
    if str(TOOLS) not in sys.path:  # as when run as a script: tools/ first, for the modules scripts share
        sys.path.insert(0, str(TOOLS))
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]
