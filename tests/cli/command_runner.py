"""`python -m retrieval ARGS` as a fresh interpreter runs it, one case after another without starting one each.

A server process imports what `python -m retrieval` imports before it parses (`retrieval.cli.main`) and
nothing else, then forks a child per case: the child starts from that state, runs `main(ARGS)` in the
case's folder with its stdout and stderr in files, and reports its exit code and every top-level package
it has loaded. A case therefore sees only its own imports, as in a new interpreter, at the cost of a fork.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]

_SERVER = r"""
import json, os, sys
from retrieval.cli.main import main

print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})), flush=True)
for line in sys.stdin:
    case = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.chdir(case["cwd"])
            for fd, name in ((1, case["stdout"]), (2, case["stderr"])):
                os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            try:
                code = main(case["args"])
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
            sys.stdout.flush()
            sys.stderr.flush()
            loaded = sorted({name.split(".")[0] for name in sys.modules})
            with open(case["result"], "w") as handle:
                json.dump({"code": code, "modules": loaded}, handle)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    print("done", flush=True)
"""


class Ran(NamedTuple):
    """What a case did: its exit code, its stdout and stderr, and the top-level packages it loaded."""

    returncode: int
    stdout: str
    stderr: str
    modules: set[str]


class CommandRunner:
    """Runs `python -m retrieval ARGS` cases in forks of one server process (see the module docstring)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self._server = subprocess.Popen(
            [sys.executable, "-c", _SERVER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._server.stdout is not None
        self.server_modules = set(json.loads(self._server.stdout.readline()))
        self._files = tempfile.TemporaryDirectory(prefix="command-runner-")

    def __call__(self, args: list[str], cwd: Path | None = None) -> Ran:
        folder = Path(self._files.name)
        names = {key: str(folder / key) for key in ("stdout", "stderr", "result")}
        Path(names["result"]).unlink(missing_ok=True)
        assert self._server.stdin is not None and self._server.stdout is not None
        self._server.stdin.write(json.dumps({"args": args, "cwd": str(cwd or Path.cwd()), **names}) + "\n")
        self._server.stdin.flush()
        assert self._server.stdout.readline() == "done\n", "the command runner's server died"
        result = json.loads(Path(names["result"]).read_text())
        stdout, stderr = (Path(names[key]).read_text() for key in ("stdout", "stderr"))
        return Ran(result["code"], stdout, stderr, set(result["modules"]))

    def close(self) -> None:
        """Stop the server and remove the case files."""
        if self._server.stdin is not None:
            self._server.stdin.close()
        self._server.wait(timeout=30)
        self._files.cleanup()
