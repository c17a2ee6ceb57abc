"""The `device` argument of models.train: an explicit CPU device is the default path bit for bit,
and (on a machine with CUDA) a fit on the GPU matches the CPU fit within a stated tolerance,
with every random draw still made on the CPU generators and everything returned or saved on
the CPU."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.checkpoint import Checkpointing, load_checkpoint
from models.train import _Run, fit
from tests.models._toy import toy_data
from tests.models.test_train import TINY, _same

SMALL = dataclasses.replace(TINY, rounds=2)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def test_explicit_cpu_device_is_the_default_bit_for_bit(tmp_path):
    data = toy_data()
    run = _Run(SMALL, data, device=torch.device("cpu"))
    placed = [run.env.coords_norm, run.env.nearest, run.real, *run.policy.parameters(),
              *run.value.parameters(), *run.critics.parameters(), run.critic_opt.t]
    assert {t.device.type for t in placed} == {"cpu"}
    default = fit(SMALL, data)
    explicit = fit(SMALL, data, device=torch.device("cpu"), checkpoint=Checkpointing(tmp_path))
    _same(default, explicit)
    for k, v in default.critics_state.items():
        assert torch.equal(v, explicit.critics_state[k]), k
    assert all(t.device.type == "cpu" for t in _tensors(load_checkpoint(tmp_path)))


# A GPU fit differs from the CPU fit only by floating-point rounding (GPU kernels sum in another
# order; all random numbers come from the same CPU generators). Over SMALL's 2 rounds that
# stays far below these bounds unless a rounding difference flips a sampled action, which
# needs a uniform draw within ~1e-7 of a probability boundary (about 1e-4 chance per fit).
ATOL_WEIGHTS = 1e-2  # Adam can turn a round-off gradient into a full lr-sized step
ATOL_HISTORY = 2e-2  # rewards in [0, 1], losses, entropy, action frequencies


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fit_matches_cpu_fit(tmp_path):
    data = toy_data()
    dev = torch.device("cuda", torch.cuda.current_device())
    run = _Run(SMALL, data, device=dev)
    placed = [run.env.coords_norm, run.env.nearest, run.real, *run.policy.parameters(),
              *run.value.parameters(), *run.critics.parameters(), run.critic_opt.t]
    assert {t.device.type for t in placed} == {"cuda"}
    del run
    cpu = fit(SMALL, data)
    gpu = fit(SMALL, data, device=dev, checkpoint=Checkpointing(tmp_path))
    assert all(t.device.type == "cpu" for t in _tensors(load_checkpoint(tmp_path)))
    assert all(t.device.type == "cpu" for t in _tensors([gpu.policy_state, gpu.critics_state,
                                                         gpu.start_probs]))
    assert torch.equal(cpu.start_probs, gpu.start_probs)  # CPU noise stream, same draws
    assert gpu.rounds_done == cpu.rounds_done
    for a, b in zip(cpu.history, gpu.history, strict=True):
        assert a["participants"] == b["participants"]
        for k in ("reward_mean", "policy_loss", "value_loss", "entropy", "clip_frac"):
            assert b[k] == pytest.approx(a[k], abs=ATOL_HISTORY), k
        for k in ("reward_raw_mean", "critic_loss"):  # trusted-zone figures
            assert b["trusted"][k] == pytest.approx(a["trusted"][k], abs=ATOL_HISTORY), k
        assert b["action_freq"] == pytest.approx(a["action_freq"], abs=ATOL_HISTORY)
        assert b["epsilon"] == pytest.approx(a["epsilon"], rel=1e-6)
    for k, v in cpu.policy_state.items():
        torch.testing.assert_close(gpu.policy_state[k], v, atol=ATOL_WEIGHTS, rtol=0, msg=k)
    for k, v in cpu.critics_state.items():
        torch.testing.assert_close(gpu.critics_state[k], v, atol=ATOL_WEIGHTS, rtol=0, msg=k)
    # a checkpoint written on the GPU resumes (here on the CPU) and finishes the run
    resumed = fit(dataclasses.replace(SMALL, rounds=3), data,
                  checkpoint=Checkpointing(tmp_path, resume=True))
    assert resumed.rounds_done == 3
