"""Dev benchmark: the toolkit against a plain timm + PML script at the same budget.

Every row trains the same backbone at the same image size, batch size, epochs, seed and CPU
thread count (OMP_NUM_THREADS and --threads, which change CPU results), then reports the test
Recall@1 and MAP@R it prints as its last lines, and its wall-clock seconds:

- `peer-proxy_nca`, `peer-proxy_anchor`: tools/plain_pml_script.py (PML's losses with their
  defaults, Adam, constant lr, light affine augmentation, last epoch);
- `toolkit-proxy_nca`, `toolkit-anchor`: `retrieval train` with the loss's config from
  `configs/` (`--config-proxy_nca`, `--config-anchor`) plus `--set` overrides for the shared
  budget and any `--toolkit-set` (e.g. `augment.preset=glyph model.in_chans=1`);
- `aug-<preset>` for each of `--presets`: the toolkit-anchor row with `augment.preset=<preset>`
  (the augmentation table at a fixed budget).

Model selection: with `--select last` (default) the toolkit evaluates only after the last
epoch, like the script; with `--select val` it evaluates every epoch and its final lines are
the test metrics of the checkpoint chosen on the CSV's `val` rows (never on test).

Tuning: `--eval-split val` gives every pipeline a copy of the CSV whose val rows are its test
rows (the test rows dropped), so settings are compared without looking at the test set.

Each row's result is kept in OUT/rows/<row>.json (with its log and command) and reused on the
next call unless `--force`; OUT/table.md and OUT/results.json collect them.

    python tools/dev_benchmark.py --csv /data/glyphs/dataset.csv --out /tmp/bench --epochs 8 \\
        --toolkit-set augment.preset=glyph model.in_chans=1
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytorch_metric_learning
import timm
import torch

from retrieval.runtime.files import atomic_write, write_text

__all__ = ["Row", "build_rows", "main", "parse_metrics", "strip_val_rows", "val_as_test", "write_table"]

ROOT = Path(__file__).resolve().parent.parent
PEER_LOSSES = ("proxy_nca", "proxy_anchor")
TOOLKIT_LOSSES = ("proxy_nca", "anchor")
_METRIC = re.compile(r"^(Recall@1|MAP@R): ([0-9.]+)(?:\s+\((.+)\))?\s*$", re.MULTILINE)  # (label) optional


@dataclass(frozen=True)
class Row:
    """One pipeline of the table and the command that runs it."""

    name: str
    pipeline: str  # what the table says the row is
    command: list[str]


def parse_metrics(output: str) -> dict[str, float]:
    """The last `Recall@1: x` and `MAP@R: x` lines of a run's output; missing ones are absent.

    A label the toolkit appends to its figures (`Recall@1: 0.9 (selected on test)`) is kept as `label`.
    """
    found: dict = {}
    for name, value, label in _METRIC.findall(output):
        found[{"Recall@1": "recall@1", "MAP@R": "map@r"}[name]] = float(value)
        if label:
            found["label"] = label
    return found


def strip_val_rows(csv_path: Path) -> Path:
    """A sibling CSV without `split=val` rows, for a toolkit that knows only train and test."""
    return _rewrite_splits(csv_path, ".noval.csv", {"train": "train", "test": "test"})


def val_as_test(csv_path: Path) -> Path:
    """A sibling CSV whose `val` rows are its `test` rows (the real test rows dropped).

    Every pipeline then reports validation metrics through its usual test path: settings are
    compared on held-out training-side classes, and the test set is never looked at.
    """
    return _rewrite_splits(csv_path, ".valtest.csv", {"train": "train", "val": "test"})


def _rewrite_splits(csv_path: Path, suffix: str, mapping: dict[str, str]) -> Path:
    out = csv_path.with_name(csv_path.stem + suffix)
    with csv_path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = [{**row, "split": mapping[row["split"]]} for row in reader if row["split"] in mapping]
        fields = reader.fieldnames or []
    with atomic_write(out) as temporary, temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return out


def build_rows(args: argparse.Namespace, peer_csv: Path, toolkit_csv: Path, out: Path) -> list[Row]:
    """Every row the flags describe, in table order."""
    python = sys.executable
    peer = [
        python,
        str(ROOT / "tools" / "plain_pml_script.py"),
        f"--csv={peer_csv}",
        f"--backbone={args.backbone}",
        f"--image-size={args.image_size}",
        f"--batch-size={args.batch_size}",
        f"--epochs={args.epochs}",
        f"--lr={args.lr}",
        f"--seed={args.seed}",
        f"--threads={args.threads}",
        f"--workers={args.workers}",
    ]
    shared = [
        f"data.path={toolkit_csv}",
        f"model.backbone={args.backbone}",
        "model.pretrained=false",
        f"data.image_size={args.image_size}",
        f"data.batch_size={args.batch_size}",
        f"data.num_workers={args.workers}",
        f"train.epochs={args.epochs}",
        f"train.lr={args.lr}",
        f"train.seed={args.seed}",
        "train.freeze_backbone_epochs=0",  # nothing pretrained to protect
        "train.freeze_bn=false",  # BatchNorm statistics must be learned from scratch
        "train.device=cpu",
        "train.amp=none",
    ]
    if args.select == "last":
        shared.append(f"train.eval_every={args.epochs}")  # one evaluation, after the last epoch
    shared += args.toolkit_set

    def toolkit(name: str, loss: str, extra: Sequence[str]) -> list[str]:
        config = getattr(args, f"config_{loss}")
        sets = [item for override in [*shared, *extra] for item in ("--set", override)]
        command = [python, "-m", "retrieval.cli.main", "train", "--config", str(args.toolkit_root / config), *sets]
        return [*command, "--output-dir", str(out / "runs" / name)]

    rows = [Row(f"peer-{loss}", f"plain timm + PML script, {loss}", [*peer, f"--loss={loss}"]) for loss in PEER_LOSSES]
    for loss in TOOLKIT_LOSSES:
        label = f"toolkit, {loss} ({Path(getattr(args, f'config_{loss}')).name})"
        rows.append(Row(f"toolkit-{loss}", label, toolkit(f"toolkit-{loss}", loss, [])))
    for preset in args.presets:
        label = f"toolkit, anchor, augment.preset={preset}"
        rows.append(Row(f"aug-{preset}", label, toolkit(f"aug-{preset}", "anchor", [f"augment.preset={preset}"])))
    chosen = set(args.rows) if args.rows else None
    return [row for row in rows if chosen is None or row.name in chosen]


def run_row(row: Row, out: Path, threads: int, toolkit_root: Path, force: bool) -> dict:
    """Run one row (or reuse its saved result when its command was the same); returns its result dict."""
    result_path, log_path = out / "rows" / f"{row.name}.json", out / "rows" / f"{row.name}.log"
    if result_path.is_file() and not force:
        saved = json.loads(result_path.read_text())
        if saved.get("command") == row.command:  # toolkit rows name their config by its path in the root
            return saved
    # torch takes its CPU thread count from OMP_NUM_THREADS; the script also calls set_num_threads.
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env["PYTHONPATH"] = str(toolkit_root)  # the `retrieval` package the toolkit rows run
    print(f"[{row.name}] {' '.join(row.command)}", flush=True)
    start = time.perf_counter()
    with log_path.open("w") as log:
        code = subprocess.run(row.command, cwd=toolkit_root, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    output = log_path.read_text()
    result = {"row": row.name, "pipeline": row.pipeline, "seconds": seconds, "exit_code": code, **parse_metrics(output)}
    result |= {"command": row.command, "toolkit_root": str(toolkit_root)}
    if code != 0 or "recall@1" not in result:
        result["error"] = (output.strip().splitlines() or ["no output"])[-1]
    write_text(result_path, json.dumps(result, indent=2))
    print(f"[{row.name}] {_cells(result)}", flush=True)
    return result


def write_table(results: Sequence[dict], footer: str) -> str:
    """The markdown table: pipeline, Recall@1, MAP@R, seconds (a failed row says why)."""
    lines = ["| pipeline | Recall@1 | MAP@R | seconds |", "|---|---|---|---|"]
    lines += [f"| {r['pipeline']} | {_cells(r)} |" for r in results]
    return "\n".join([*lines, "", footer, ""])


def _cells(result: dict) -> str:
    if "error" in result:
        return f"failed: {result['error'][:120]} | | {result['seconds']:.0f}"
    label = f" ({result['label']})" if result.get("label") else ""
    return f"{result['recall@1']:.4f}{label} | {result['map@r']:.4f}{label} | {result['seconds']:.0f}"


def _footer(args: argparse.Namespace, peer_csv: Path, toolkit_csv: Path) -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    return (
        f"{args.backbone} from scratch, {args.image_size} px, batch {args.batch_size}, {args.epochs} epochs, "
        f"lr {args.lr}, seed {args.seed}, selection: {args.select}; "
        f"metrics on the {args.eval_split.upper()} split; data {peer_csv} (toolkit reads {toolkit_csv.name}); "
        f"{args.threads} CPU threads (OMP_NUM_THREADS / torch.set_num_threads), {args.workers} loader workers; "
        f"toolkit from {args.toolkit_root}; "
        f"torch {torch.__version__}, timm {timm.__version__}, pytorch-metric-learning "
        f"{pytorch_metric_learning.__version__}; CPU: {cpu} ({os.cpu_count()} cores, shared: seconds are indicative)."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, required=True, help="dataset CSV (path,label,split[,is_query,is_gallery])")
    parser.add_argument("--out", type=Path, required=True, help="folder for rows/, runs/, table.md, results.json")
    parser.add_argument("--rows", nargs="*", help="row names to run (default: all), e.g. peer-proxy_nca aug-glyph")
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for every row")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers for every row")
    parser.add_argument("--select", choices=("last", "val"), default="last", help="toolkit: last epoch or val-chosen")
    parser.add_argument(
        "--toolkit-root",
        type=Path,
        default=ROOT,
        help="checkout whose `retrieval` the toolkit rows run (default: this)",
    )
    parser.add_argument("--config-proxy_nca", type=Path, default=Path("configs/csv_proxy_nca.yaml"), help="in root")
    parser.add_argument("--config-anchor", type=Path, default=Path("configs/csv_anchor.yaml"), help="in toolkit root")
    parser.add_argument("--toolkit-set", nargs="*", default=[], help="extra --set overrides for every toolkit row")
    parser.add_argument("--presets", nargs="*", default=["natural", "light", "glyph"], help="augmentation table rows")
    parser.add_argument("--strip-val", action="store_true", help="give the toolkit a copy of the CSV without val rows")
    parser.add_argument(
        "--eval-split", choices=("test", "val"), default="test", help="val: report metrics on the val rows (tuning)"
    )
    parser.add_argument("--force", action="store_true", help="re-run rows that have a saved result")
    args = parser.parse_args(argv)
    args.csv, args.toolkit_root, args.out = args.csv.resolve(), args.toolkit_root.resolve(), args.out.resolve()
    (args.out / "rows").mkdir(parents=True, exist_ok=True)
    peer_csv = val_as_test(args.csv) if args.eval_split == "val" else args.csv
    toolkit_csv = strip_val_rows(args.csv) if args.strip_val and args.eval_split == "test" else peer_csv
    rows = build_rows(args, peer_csv, toolkit_csv, args.out)
    results = [run_row(row, args.out, args.threads, args.toolkit_root, args.force) for row in rows]
    table = write_table(results, _footer(args, peer_csv, toolkit_csv))
    write_text(args.out / "table.md", table)
    write_text(args.out / "results.json", json.dumps(results, indent=2))
    print(table)


if __name__ == "__main__":
    main()
