"""`sft.resume_from`: a run resumed after whole epochs ends where one run of all the epochs
ends (weights, optimizer, data order), and what cannot be resumed exactly is refused."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch

from agent_r1_async.models import load_causal_lm
from agent_r1_async.sft.train import train_stage
from tests.unit.sft.tiny import tiny_sft_config


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.losses: dict[int, float] = {}

    def console(self, line: str) -> None:
        self.lines.append(line)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.losses[step] = metrics["sft/loss"]


def _cfg(tmp_path: Path, epochs: int, resume_from: str = "", **sft: object):
    cfg = tiny_sft_config(tmp_path)
    return msgspec.structs.replace(cfg, sft=msgspec.structs.replace(
        cfg.sft, epochs=epochs, batch_episodes=2, lr=1e-3, schedule="constant",
        resume_from=resume_from, **sft))


def _weights(ckpt: str) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in load_causal_lm(ckpt).state_dict().items()}


def test_resumed_after_whole_epochs_equals_one_run(tmp_path, one_thread):
    # 3 demonstrations, 2 per step: 2 steps per epoch (the second holds the odd one), so the
    # epoch's shuffle decides which demonstrations share a step: a resumed run that drew
    # the order afresh would train different steps.
    whole = _Log()
    ckpt_whole = train_stage(_cfg(tmp_path, 3), tmp_path / "whole", whole)
    first = _Log()
    ckpt_1 = train_stage(_cfg(tmp_path, 1), tmp_path / "first", first)
    rest = _Log()
    ckpt_3 = train_stage(_cfg(tmp_path, 3, resume_from=ckpt_1), tmp_path / "rest", rest)
    assert Path(ckpt_whole).name == Path(ckpt_3).name == "step-6"  # updates count on
    assert sorted(first.losses) == [1, 2] and sorted(rest.losses) == [3, 4, 5, 6]
    for step in range(1, 7):  # the same loss at every step
        got = (first.losses | rest.losses)[step]
        assert got == pytest.approx(whole.losses[step], abs=1e-6), step
    assert any("resumed from" in line and "1 of 3 epochs done" in line for line in rest.lines)
    want, got = _weights(ckpt_whole), _weights(ckpt_3)
    for name, w in want.items():
        torch.testing.assert_close(got[name], w, rtol=0, atol=1e-6)


def test_what_cannot_be_resumed_exactly_is_refused(tmp_path, one_thread):
    ckpt_1 = train_stage(_cfg(tmp_path, 1), tmp_path / "first", _Log())
    with pytest.raises(ValueError, match=r"sft.resume_from: .* has 1 epochs already, "
                                         r"sft.epochs is 1"):
        train_stage(_cfg(tmp_path, 1, resume_from=ckpt_1), tmp_path / "again", _Log())
    with pytest.raises(ValueError, match=r"trained on 3 demonstrations, this run has 2"):
        train_stage(_cfg(tmp_path, 2, resume_from=ckpt_1, num_demos=2), tmp_path / "b", _Log())
    with pytest.raises(ValueError, match=r"sft.resume_from: needs sft.schedule: constant"):
        msgspec.structs.replace(_cfg(tmp_path, 2, resume_from=ckpt_1).sft, schedule="linear")
