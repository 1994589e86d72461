"""The bf16 working copy: bf16 weights, fp32 gradients accumulated into the master, refreshed
after the master changes in place."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch import nn

from agent_r1_async.learner.bf16_copy import Bf16Copy
from agent_r1_async.run.preflight.feasibility import cpp_compilers
from tests.gpu.gpu_helpers import check_bf16_against_fp32, tiny_random_llama


def _net() -> nn.Module:
    net = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 1, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        net[1].weight.copy_(torch.tensor([[0.5, -1.0]]))
    net.register_buffer("scale", torch.tensor([1.0 / 3.0]))
    return net


def test_weights_are_bf16_buffers_keep_their_dtype_and_gradients_reach_the_master_in_fp32():
    master = _net()
    copy = Bf16Copy(master)
    assert {p.dtype for p in copy.module.parameters()} == {torch.bfloat16}
    assert copy.module.scale.dtype == torch.float32  # buffers (e.g. rotary frequencies) stay
    assert {p.dtype for p in master.parameters()} == {torch.float32}
    assert copy.nbytes() == 6 * 2  # six weights, two bytes each

    # y = w1 · (W0 x); x = (1, 1): W0 x = (3, 7), y = 0.5·3 − 1·7 = −5.5.
    # dy/dW0 = w1ᵀ xᵀ = [[0.5, 0.5], [−1, −1]]; dy/dw1 = (W0 x)ᵀ = [3, 7]. Exact in bf16.
    x = torch.ones(1, 2, dtype=torch.bfloat16)
    y = copy.module(x).sum()
    assert y.item() == -5.5
    y.backward()
    assert master[0].weight.grad.dtype == torch.float32
    assert master[0].weight.grad.tolist() == [[0.5, 0.5], [-1.0, -1.0]]
    assert master[1].weight.grad.tolist() == [[3.0, 7.0]]
    assert all(p.grad is None for p in copy.module.parameters())  # freed once moved over

    # A second micro-batch accumulates in fp32: x = (2, 0): W0 x = (2, 6), dy/dw1 = (2, 6).
    copy.module(torch.tensor([[2.0, 0.0]], dtype=torch.bfloat16)).sum().backward()
    assert master[1].weight.grad.tolist() == [[5.0, 13.0]]
    assert master[0].weight.grad.tolist() == [[1.5, 0.5], [-3.0, -1.0]]


def test_refresh_copies_only_what_an_optimizer_step_changed():
    master = _net()
    master[1].weight.requires_grad_(False)  # frozen: no gradient, never stepped
    copy = Bf16Copy(master)
    assert copy.refresh() == 0  # nothing changed since the copy was made
    opt = torch.optim.SGD([master[0].weight], lr=0.25)
    copy.module(torch.ones(1, 2, dtype=torch.bfloat16)).sum().backward()
    assert master[1].weight.grad is None
    opt.step()  # W0 − 0.25 · [[0.5, 0.5], [−1, −1]] = [[0.875, 1.875], [3.25, 4.25]]
    assert copy.module[0].weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]  # stale until refresh
    assert copy.refresh() == 1
    assert copy.module[0].weight.tolist() == [[0.875, 1.875], [3.25, 4.25]]
    assert copy.refresh() == 0
    with torch.no_grad():  # any in-place change counts, e.g. a checkpoint restore
        master[1].weight.copy_(torch.tensor([[0.25, 0.75]]))
    assert copy.refresh() == 1
    assert copy.module[1].weight.tolist() == [[0.25, 0.75]]


def test_tied_weights_stay_tied_and_collect_both_uses():
    master = nn.Module()
    master.emb = nn.Embedding(3, 2)
    master.head = nn.Linear(2, 3, bias=False)
    master.head.weight = master.emb.weight  # tied, as SmolLM2's embedding and LM head
    with torch.no_grad():
        master.emb.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    copy = Bf16Copy(master)
    assert copy.module.head.weight is copy.module.emb.weight
    assert copy.nbytes() == 6 * 2  # one tensor, not two
    # logits = E · e_{id 1} = E · (0, 1) = (0, 1, 1); their sum's gradient: through the head
    # rowᵀ = e1 = (0, 1) on every row, plus through the lookup Σ_rows E[r] = (2, 2) on row 1.
    logits = copy.module.head(copy.module.emb(torch.tensor([1])))
    assert logits.tolist() == [[0.0, 1.0, 1.0]]
    logits.sum().backward()
    assert master.emb.weight.grad.tolist() == [[0.0, 1.0], [2.0, 3.0], [0.0, 1.0]]


def test_a_learner_step_on_the_copy_agrees_with_fp32_as_closely_as_autocast(tmp_path):
    """`PolicyTrainer` in bf16 on the CPU, with and without the copy, against its fp32 step:
    log-probs, loss, every gradient, grad norm. Measured (2026-11-26): autocast max |Δ log p|
    2.7e-3, grad rel. L2 6.4e-3; the copy 3.7e-3 and 7.9e-3 (its residual stream is bf16).
    Bounds: those of the CUDA test (tests/gpu/test_learner_cuda.py), 4x over the copy's."""
    path = tiny_random_llama(tmp_path / "tiny")
    for copy in (True, False):
        r = check_bf16_against_fp32(path, "cpu", bf16_copy=copy)
        assert r["logprob_max"] < 0.015 and r["logprob_mean"] < 5e-3
        assert r["loss_rel"] < 1e-3
        assert r["grad_rel_l2"] < 0.03 and r["grad_tensor_cos_min"] > 0.999
        assert r["grad_norm_rel"] < 2e-3


def test_the_trainer_keeps_a_copy_only_with_bf16_on_and_bf16_copy_set(tmp_path):
    from agent_r1_async.config import LearnerConfig, RunConfig
    from agent_r1_async.learner.trainer import PolicyTrainer

    path = tiny_random_llama(tmp_path / "tiny")
    for bf16, keep, expected in ((True, True, True), (True, False, False), (False, True, False)):
        cfg = RunConfig(learner=LearnerConfig(device="cpu", bf16=bf16, bf16_copy=keep))
        trainer = PolicyTrainer(cfg, path)
        assert (trainer.bf16_copy is not None) is expected
        assert {p.dtype for p in trainer.net.parameters()} == {torch.float32}  # the master
        if expected:
            work = trainer.bf16_copy.module
            assert {p.dtype for p in work.parameters()} == {torch.bfloat16}
            assert work.lm.get_output_embeddings().weight is work.lm.get_input_embeddings().weight


@pytest.mark.skipif(
    not any(shutil.which(c) for c in cpp_compilers()),
    reason="no C++ compiler on PATH: inductor cannot build CPU kernels (launch refuses "
           "learner.compile there, tests/unit/run/preflight/test_feasibility.py)")
def test_compiled_layers_train_the_same_step_as_eager_ones(tmp_path):
    """`learner.compile` on the bf16 copy: the same log-probs, loss and gradients as eager, up
    to fused kernels' roundings (measured 2026-11-26: max |Δ log p| 3.9e-3, loss rel. 8.6e-5,
    grad rel. L2 7.2e-3), and module names unchanged (checkpoints and publishing read them)."""
    from tests.gpu.gpu_helpers import learner_step

    path = tiny_random_llama(tmp_path / "tiny")
    eager = learner_step(path, "cpu", bf16=True)
    compiled = learner_step(path, "cpu", bf16=True, compile=True)
    assert set(compiled["grads"]) == set(eager["grads"])
    assert not any("_orig_mod" in name for name in compiled["grads"])
    assert (compiled["logprobs"] - eager["logprobs"]).abs().max().item() < 0.015
    assert abs(compiled["loss"] - eager["loss"]) <= 1e-3 * abs(eager["loss"])
    g_e = torch.cat([g.flatten() for g in eager["grads"].values()])
    g_c = torch.cat([compiled["grads"][n].flatten() for n in eager["grads"]])
    assert ((g_c - g_e).norm() / g_e.norm()).item() < 0.03
