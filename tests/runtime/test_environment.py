"""The process a run lives in: seeded weights that leave the caller's random stream alone, and the run's record."""

from __future__ import annotations

import json

import torch

from retrieval.runtime.environment import describe_environment, seed_everything, torch_seeded


def test_torch_seeded_draws_depend_only_on_the_seed_and_the_callers_stream_goes_on() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with torch_seeded(7):
        inside = torch.rand(3)
    torch.testing.assert_close(torch.rand(3), expected_next, rtol=0, atol=0)
    with torch_seeded(7):
        torch.testing.assert_close(torch.rand(3), inside, rtol=0, atol=0)


def test_seed_everything_repeats_the_global_streams() -> None:
    seed_everything(5)
    first = torch.rand(2)
    seed_everything(5)
    torch.testing.assert_close(torch.rand(2), first, rtol=0, atol=0)


def test_the_environment_record_is_json_and_names_versions_threads_and_device() -> None:
    record = json.loads(json.dumps(describe_environment(torch.device("cpu"))))
    assert record["device"] == "cpu"
    assert record["torch_threads"] == torch.get_num_threads()
    assert record["versions"]["torch"] is not None
    assert {"python", "platform", "cpu", "cpu_count", "deterministic"} <= set(record)
