"""What a non-editable install gets: the demo config travels inside the wheel."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_ships_the_demo_config(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("retrieval-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("retrieval/resources/digits_demo.yaml").decode()
    assert shipped == (ROOT / "configs" / "digits_demo.yaml").read_text()
