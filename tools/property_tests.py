"""Run every Hypothesis property (`pytest -m property`) at the long profile: 20,000 examples a property.

    python tools/property_tests.py                 # all properties, long profile
    python tools/property_tests.py --profile ci    # the CI profile (what `pytest` runs)
    python tools/property_tests.py -- -k filters   # extra pytest arguments after --

Prints Hypothesis's statistics (examples run, failures, time a property) and exits with pytest's code.
A failure prints the shrunk example; it is saved in `.hypothesis/` and tried first on the next run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="long", choices=("ci", "long", "dev"))
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()
    command = [
        sys.executable, "-m", "pytest", "-m", "property", "-q",
        f"--hypothesis-profile={args.profile}", "--hypothesis-show-statistics", *args.pytest_args,
    ]  # fmt: skip
    start = time.perf_counter()
    code = subprocess.call(command, cwd=Path(__file__).resolve().parent.parent)
    print(f"profile {args.profile}: pytest exit {code} after {time.perf_counter() - start:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
