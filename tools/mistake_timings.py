"""Time issue 48's list of mistakes: how long each one-line error takes, wall and CPU seconds, in a fresh interpreter.

    python tools/mistake_timings.py                          # this source tree
    python tools/mistake_timings.py --source /tmp/before     # another checkout (e.g. a `git worktree` of an old commit)

Runs `python -m retrieval ARGS` for every case of `tests/cli/test_import_budget.py::MISTAKES` in a folder made by
`mistake_folder`, with PYTHONPATH set to the source tree, one at a time. Prints a Markdown table: the command, its
exit code, wall seconds, CPU seconds (user + system: less sensitive to a loaded machine than wall time) and whether
it printed "loading PyTorch" first. Take wall figures on a quiet machine and record the load average (printed).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cli.test_import_budget import MISTAKES, mistake_folder  # noqa: E402


def time_case(args: list[str], source: Path) -> tuple[int, float, float, bool]:
    """(exit code, wall seconds, CPU seconds, "loading PyTorch" printed) of one mistake, in a fresh folder."""
    with tempfile.TemporaryDirectory(prefix="mistake-") as folder:
        env = {**os.environ, "PYTHONPATH": str(source)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "retrieval", *args],
            cwd=mistake_folder(Path(folder)),
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.returncode, wall, cpu, "loading PyTorch" in done.stderr + done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=ROOT, help="the source tree to run (default: this one)")
    args = parser.parse_args()
    print(f"source {args.source}, load average {os.getloadavg()[0]:.2f} at the start")
    print("| command | exit | wall s | CPU s | loading PyTorch first |")
    print("|---|---|---|---|---|")
    for case, _ in MISTAKES:
        code, wall, cpu, loading = time_case(case, args.source.resolve())
        print(f"| `{' '.join(case)}` | {code} | {wall:.2f} | {cpu:.2f} | {'yes' if loading else 'no'} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
