"""The `audit:` config section: read from a file and `--set`, every key checked, the CLI's flags as shorthands."""

from __future__ import annotations

import pytest

from retrieval.audit.leaks import MAX_RATIO
from retrieval.config import AUDIT_CHECKS, AuditConfig, config_from_dict, config_to_dict, load_audit_config
from retrieval.errors import UserError


def test_the_audit_section_is_read_from_a_file_then_set(tmp_path):
    config = tmp_path / "audit.yaml"
    config.write_text("model:\n  backbone: resnet18\naudit:\n  k: 4\n  threshold: 0.9\n  checks: [leaks, outliers]\n")
    settings = load_audit_config(config, ["audit.k=6", "audit.threshold=null", "audit.threshold_fmr=1e-3"])
    assert settings == AuditConfig(k=6, threshold=None, threshold_fmr=1e-3, checks=["leaks", "outliers"])
    assert load_audit_config() == AuditConfig() and AuditConfig().checks == list(AUDIT_CHECKS)


def test_defaults_are_the_checks_own():
    assert AuditConfig().leak_ratio == MAX_RATIO  # what evaluate --exclude-leaks uses too


def test_a_run_config_round_trips_its_audit_section():
    config = config_from_dict({"audit": {"k": 3, "checks": ["near_duplicates"]}})
    assert config_to_dict(config)["audit"]["checks"] == ["near_duplicates"]
    assert config_from_dict(config_to_dict(config)).audit == config.audit


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["audit.treshold=0.9"], "unknown config key audit.treshold; valid keys in audit: checks, k, threshold, "),
        (["audit.threshold=1.5"], "audit.threshold must be a cosine in [-1, 1], got 1.5"),
        (["audit.threshold_fmr=0"], "audit.threshold_fmr must be a false match rate in (0, 1)"),
        (["audit.leak_ratio=1"], "audit.leak_ratio must be a distance ratio in [0, 1)"),
        (["audit.k=0"], "audit.k must be"),
        (["audit.checks=[leaks,dupes]"], "audit.checks must be a non-empty list of exact_duplicates, near_duplicates"),
        (["train.lr=0.1"], "--set train.lr: retrieval audit reads only the audit section"),
    ],
)
def test_bad_audit_keys_and_values_are_one_line_errors_naming_what_is_valid(overrides, message):
    with pytest.raises(UserError) as error:
        load_audit_config(None, overrides)
    assert message in str(error.value) and "\n" not in str(error.value)
