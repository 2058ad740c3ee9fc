"""tools/score_audit_report.py: a report folder's findings counted against the planted truth, by path."""

from __future__ import annotations

import csv
import json

from retrieval.audit.tables import SECTIONS
from tests.tools.tool_modules import load_tool

score_audit_report = load_tool("score_audit_report")
COLUMNS = {section.name: section.columns for section in SECTIONS}


def _write(report, name, rows):
    with (report / f"{name}.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS[name], restval="")
        writer.writeheader()
        writer.writerows(rows)


def test_found_ranks_and_false_alarms_are_counted_by_path_and_colour_notes_excuse_only_non_copies(tmp_path):
    root, report = tmp_path / "planted", tmp_path / "report"
    root.mkdir()
    report.mkdir()
    truth = {
        "copies": [{"copy": f"images/copy_{i}.png", "source": f"images/{i}.png", "kind": "jpeg"} for i in range(3)],
        "recoloured": [{"path": f"images/recoloured_{i}.png", "source": f"images/{i}.png"} for i in range(2)],
        "flipped": ["images/10.png", "images/11.png"],
        "outliers": ["images/ood_0.png"],
    }

    def absolute(name):
        return str(root / "images" / name)

    # leaks, in the report's order: copy_0, a noted non-copy (excused, so not ranked), a silent non-copy (a false
    # alarm), copy_2, copy_1 noted as differing in colour (still a found copy), a wrong leak: copies at 1, 3 and 4
    leaks = [("copy_0", ""), ("recoloured_0", "differs"), ("recoloured_1", ""), ("copy_2", ""), ("copy_1", "differs")]
    leaks.append(("20", ""))
    _write(
        report, "leaks", [{"path": absolute(f"{name}.png"), "split": "test", "colour": note} for name, note in leaks]
    )
    _write(report, "label_issues", [{"path": absolute(f"{name}.png"), "split": "train"} for name in ("12", "11")])
    _write(report, "outliers", [{"path": absolute(name)} for name in ("copy_0.png", "ood_0.png")])  # the copy: ignored
    _write(report, "near_duplicates", [{"group": group, "path": absolute(f"{n}.png")} for n, group in enumerate("aab")])
    (report / "summary.json").write_text(json.dumps({"threshold": 0.97, "images": 40, "warnings": ["one group"]}))
    score = score_audit_report.score_report(report, truth, root)
    assert score["leaks"] == {
        "planted": 3, "found": 3, "median_rank": 3, "false_alarms_in_top_n": 1, "listed": 5
    }  # fmt: skip
    assert score["recoloured"] == {
        "planted": 2, "listed_as_leaks": 2, "said_to_differ_in_colour": 1, "copies_said_to_differ_in_colour": 1
    }  # fmt: skip
    assert score["label_errors"] == {
        "planted": 2, "found": 1, "median_rank": 2, "false_alarms_in_top_n": 1, "listed": 2
    }  # fmt: skip
    assert score["outliers"]["found"] == 1 and score["outliers"]["median_rank"] == 1
    near = score["near_duplicates"]
    assert (near["threshold"], near["groups"], near["largest_group"], near["warnings"]) == (0.97, 2, 2, ["one group"])
    row = score_audit_report.table({"after": score}).splitlines()[-1]
    assert row.startswith("| after | 3/3, rank 3, 1 | 2/2 / 1 | 1/2, rank 2, 1 | 1/1, rank 1, 0 | 0.9700 (fixed)")
    assert row.endswith("| 2 / 40 | yes |")


def test_a_report_of_an_earlier_version_without_the_colour_column_or_sections_is_scored(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    with (report / "leaks.csv").open("w") as handle:
        handle.write(
            f"path,split,label,partner_path,partner_split,partner_label,ratio,score\n{tmp_path}/a.png,test,x,,,,,\n"
        )
    truth = {"copies": [{"copy": "a.png", "source": "b.png"}], "flipped": [], "outliers": []}
    score = score_audit_report.score_report(report, truth, tmp_path)
    assert score["leaks"]["found"] == 1 and score["recoloured"]["planted"] == 0
    assert score["label_errors"]["listed"] == 0 and score["near_duplicates"]["threshold"] is None
