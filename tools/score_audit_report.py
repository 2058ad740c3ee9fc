"""Score an audit's report folder against the faults `tools/bench_audit.py plant` planted (its truth.json).

Reads only the report's CSVs and summary.json by column name, so a report written by an earlier version of
`retrieval audit` is scored the same way (before / after). For each finding: how many planted rows it lists
(found), their median rank in its list, and the false alarms among its first n rows (n = the planted count).
Recoloured non-copies (`plant --recoloured`) are another item in other colours: listed as a leak without the
`colour: differs` note, each is a false alarm; with it, the user is told the pair differs only in colour.

    python tools/score_audit_report.py --truth planted/truth.json REPORT_DIR [REPORT_DIR ...] [--label-rows train]

Prints one markdown table, a row per report folder.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from statistics import median
from typing import Any

__all__ = ["main", "score_report"]


def _rows(report: Path, name: str) -> list[dict[str, str]]:
    """The rows of one of the report's CSVs, in its order ([] when the report has no such section)."""
    path = report / f"{name}.csv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _listed(rows: list[dict[str, str]], planted: AbstractSet[Path], others: AbstractSet[Path]) -> dict[str, Any]:
    """Found, median rank and false alarms in the top n of a list of `rows` (by `path`) against `planted` paths.

    `others`: paths of other planted faults, neither found nor false alarms here (a copy in the outlier list)."""
    paths = [Path(row["path"]).resolve() for row in rows]
    kept = [path for path in paths if path not in others]
    ranks = [rank for rank, path in enumerate(kept, start=1) if path in planted]
    top = kept[: len(planted)]
    return {
        "planted": len(planted),
        "found": len(ranks),
        "median_rank": median(ranks) if ranks else None,
        "false_alarms_in_top_n": sum(path not in planted for path in top),
        "listed": len(kept),
    }


def score_report(report: Path, truth: dict[str, Any], root: Path, label_rows: str = "all") -> dict[str, Any]:
    """Each finding of one report folder scored against `truth` (paths relative to `root`: the planted CSV's folder)."""

    def resolved(paths: list[str]) -> set[Path]:
        return {(root / path).resolve() for path in paths}

    copies = resolved([copy["copy"] for copy in truth["copies"]])
    non_copies = resolved([row["path"] for row in truth.get("recoloured", [])])
    flipped, outliers = resolved(truth["flipped"]), resolved(truth["outliers"])
    leaks = _rows(report, "leaks")
    # A recoloured non-copy listed as a leak is a false alarm unless the row says the two differ in colour.
    noted = {Path(row["path"]).resolve() for row in leaks if row.get("colour") == "differs"}
    excused = non_copies & noted
    scored_leaks = [row for row in leaks if Path(row["path"]).resolve() not in excused]
    labels = _rows(report, "label_issues")
    if label_rows == "train":
        labels = [row for row in labels if row.get("split") == "train"]
    near = _rows(report, "near_duplicates")
    groups: dict[str, int] = {}
    for row in near:
        groups[row["group"]] = groups.get(row["group"], 0) + 1
    summary_path = report / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    listed_leaks = {Path(row["path"]).resolve() for row in leaks}
    return {
        "leaks": _listed(scored_leaks, copies, flipped | outliers),
        "recoloured": {
            "planted": len(non_copies),
            "listed_as_leaks": len(non_copies & listed_leaks),
            "said_to_differ_in_colour": len(non_copies & noted),
            "copies_said_to_differ_in_colour": len(copies & noted),
        },
        "label_errors": _listed(labels, flipped, copies | outliers),
        "outliers": _listed(_rows(report, "outliers"), outliers, copies | flipped),
        "near_duplicates": {
            "threshold": summary.get("threshold"),
            "threshold_source": summary.get("threshold_source"),
            "groups": len(groups),
            "largest_group": max(groups.values(), default=0),
            "images": summary.get("images"),
            "warnings": summary.get("warnings", []),
        },
    }


def _cell(found: dict[str, Any]) -> str:
    rank = "-" if found["median_rank"] is None else f"{found['median_rank']:g}"
    return f"{found['found']}/{found['planted']}, rank {rank}, {found['false_alarms_in_top_n']}"


def table(scores: dict[str, dict[str, Any]]) -> str:
    """One markdown row per report."""
    lines = [
        "| report | leaks: found, median rank, false alarms in top n | recoloured non-copies: listed as leaks / "
        "said to differ in colour | label errors | outliers | near-duplicate threshold (how) | largest group / images "
        "| warning |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, score in scores.items():
        recoloured, near = score["recoloured"], score["near_duplicates"]
        threshold = "-" if near["threshold"] is None else f"{near['threshold']:.4f}"
        how = near["threshold_source"] or "fixed"
        warned = "yes" if near["warnings"] else "no"
        lines.append(
            f"| {name} | {_cell(score['leaks'])} | {recoloured['listed_as_leaks']}/{recoloured['planted']} / "
            f"{recoloured['said_to_differ_in_colour']} | {_cell(score['label_errors'])} | {_cell(score['outliers'])} "
            f"| {threshold} ({how}) | {near['largest_group']} / {near['images']} | {warned} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", type=Path, nargs="+", help="audit report folders (retrieval audit --out)")
    parser.add_argument("--truth", type=Path, required=True, help="the planted set's truth.json")
    parser.add_argument(
        "--label-rows", choices=("all", "train"), default="all", help="rows scoring label errors (zero-shot: train)"
    )
    parser.add_argument("--json", type=Path, help="also write the scores as JSON")
    args = parser.parse_args(argv)
    truth = json.loads(args.truth.read_text())
    scores = {str(report): score_report(report, truth, args.truth.parent, args.label_rows) for report in args.reports}
    if args.json:
        args.json.write_text(json.dumps(scores, indent=1) + "\n")
    print(table(scores))


if __name__ == "__main__":
    main()
