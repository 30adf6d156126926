"""A CPU run's operations on the configured thread count, put back when the run ends."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn

from biomoe.training.step.cpu_threads import CpuThreads


def trainer_on(device: str) -> SimpleNamespace:
    return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)), is_global_zero=True)


def test_a_cpu_run_uses_one_thread_and_gives_the_others_back(two_threads):
    stream = io.StringIO()
    callback = CpuThreads(1, stream=stream)
    callback.setup(trainer_on("cpu"), None, TrainerFn.FITTING)  # what Lightning passes
    assert torch.get_num_threads() == 1
    assert stream.getvalue().startswith("biomoe: note: fit runs on 1 CPU thread per operation (of 2)")
    callback.teardown(trainer_on("cpu"), None, "fit")
    assert torch.get_num_threads() == 2


def test_a_gpu_run_and_null_leave_the_threads_alone(two_threads):
    for callback, device in ((CpuThreads(1), "meta"), (CpuThreads(None), "cpu")):
        callback.setup(trainer_on(device), None, "fit")
        assert torch.get_num_threads() == 2
        callback.teardown(trainer_on(device), None, "fit")
        assert torch.get_num_threads() == 2


def test_zero_threads_is_refused():
    with pytest.raises(ValueError, match="threads must be >= 1"):
        CpuThreads(0)
