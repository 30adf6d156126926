"""CPU inference runs its batches on the thread count that measured faster: torch's, or one thread."""

from __future__ import annotations

import time

import numpy as np
import torch

from biomoe.inference.batching import Window, pack_windows, run_batches
from biomoe.inference.cpu_threads import CpuThreadChoice


def run_with_cost(seconds_per_thread_count: dict[int, float], batches: int = 6) -> list[int]:
    """The thread count each batch ran on, when a batch takes ``seconds_per_thread_count[threads]``."""
    windows = [Window(i, np.full(16, 5, dtype=np.int64)) for i in range(batches)]
    seen: list[int] = []

    def compute(tokens, batch):
        threads = torch.get_num_threads()
        seen.append(threads)
        time.sleep(seconds_per_thread_count[threads])
        return {"x": tokens.float()}

    run_batches(pack_windows(windows, batch_tokens=16), torch.device("cpu"), compute, lambda batch, out: None)
    return seen


def test_a_cpu_run_keeps_one_thread_where_that_measured_faster(two_threads):
    seen = run_with_cost({2: 0.06, 1: 0.01})
    assert seen == [1, 1, 2, 1, 1, 1]  # warm-up, the two trials, then the faster
    assert torch.get_num_threads() == 2  # given back


def test_a_cpu_run_keeps_torchs_threads_where_they_measured_faster(two_threads):
    assert run_with_cost({2: 0.01, 1: 0.06}) == [1, 1, 2, 2, 2, 2]
    assert torch.get_num_threads() == 2


def test_other_devices_and_one_thread_are_left_alone(two_threads):
    choice = CpuThreadChoice(torch.device("meta"))
    for _ in range(4):
        with choice.batch(10):
            assert torch.get_num_threads() == 2
    torch.set_num_threads(1)
    assert not CpuThreadChoice(torch.device("cpu")).active
