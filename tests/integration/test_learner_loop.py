"""The learner on the tiny model: a few updates from synthetic step records, real ZMQ weights.

The fake source returns groups of 1-2-step episodes with random (valid) token ids; episode 0
of each group wins, so GRPO advantages are non-zero. Behavior log-probs are −3 (≈ what any
policy gives random tokens would be unrelated), so importance weights exercise truncation.
The gradient-equivalence tests instead set them to the model's own log-probs (w = 1): with
w ≈ e^−7.8 the gradients would be ~4e-4 of their size and a broken one would pass.
"""

from __future__ import annotations

import math
import time

import msgspec
import pytest
import torch

from agent_r1_async import config, precision
from agent_r1_async.learner.loop import Learner
from agent_r1_async.models import tiny_model_dir
from agent_r1_async.weights.zmq import WeightSubscriber, ZmqWeightSender
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.learner import FakeSource
from tests.setup_needs import require_module

VOCAB = 49152


def _cfg(**algo) -> config.RunConfig:
    return config.config_from_dict({
        "model": {"name_or_path": tiny_model_dir()},
        "algorithm": {"group_size": 2, "batch_groups": 2, **algo},
        "learner": {"lr": 1e-3, "micro_batch_tokens": 64, "ppo_epochs": 2, "device": "cpu",
                    "checkpoint_every": 2, "bf16": False},  # fp32: exact comparisons
    })


@pytest.fixture
def transport():
    t = ZmqTransport()
    yield t
    t.close()


def _receive(sub: WeightSubscriber, version: int, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = sub.poll(timeout_ms=200)
        if got is not None and got[0].version == version:
            return got
    raise AssertionError(f"version {version} never arrived")


def test_updates_publish_identical_weights_and_resume(tmp_path, transport):
    # Every step computed (a lone episode's step 1 has advantage 0 and would be left out), so
    # the 64-token budget splits each batch into micro-batches whose gradients accumulate.
    cfg = _cfg()
    cfg.learner.skip_zero_advantage = False
    sender = ZmqWeightSender(transport)
    sub = WeightSubscriber(transport, sender.endpoint)
    source = FakeSource(VOCAB, group_size=2, not_ready_first=1)
    try:
        time.sleep(0.3)  # PUB/SUB: let the subscription reach the PUB socket first
        learner = Learner(cfg, source, sender, str(tmp_path))
        before = {k: v.clone() for k, v in learner.trainer.published_state_dict().items()}
        metrics = [learner.update() for _ in range(2)]
        assert learner.version == 2 and source.versions_set == [1, 2]
        for m in metrics:
            assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"])
            assert m["grad_norm"] > 0 and m["micro_batches"] > 1  # 64-token budget splits it
        # Data is one version stale after the first update (FakeSource stamps version − 1).
        assert metrics[0]["staleness_max"] == 0 and metrics[1]["staleness_mean"] == 1.0
        # Behavior log-probs −3 vs the tiny model's ≈ −ln(49152) ≈ −10.8: w = e^−7.8, tiny.
        assert metrics[0]["is_weight_mean"] < 0.01 and metrics[0]["mismatch_kl"] > 1
        _, got = _receive(sub, 2)
        # Published in the engines' dtype (engine.dtype auto: bf16 where it measures faster on
        # this CPU), cast once from the fp32 master weights the checkpoint keeps.
        sent = learner.trainer.publish_dtype
        assert sent == getattr(torch, precision.engine_dtype(cfg.engine, model=cfg.model.name_or_path))
        assert all(v.dtype == sent for v in got.values() if v.is_floating_point())
        assert list(got) == list(learner.trainer.published_state_dict())
        mine = learner.trainer.published_state_dict(sent)
        assert all(torch.equal(got[k], mine[k]) for k in mine)  # bit for bit
        mine = learner.trainer.published_state_dict()
        assert any(not torch.equal(before[k], mine[k]) for k in mine)  # training moved them

        ckpt = learner.save_checkpoint()
        assert ckpt.endswith("step-2") and (tmp_path / "checkpoints" / "latest").is_symlink()
        resumed = Learner.from_checkpoint(cfg, source, sender, str(tmp_path))
        assert resumed.version == 2 and resumed.updates == 2 and resumed.samples_drawn == 2
        res = resumed.trainer.published_state_dict()
        assert all(torch.equal(res[k], mine[k]) for k in mine)
        # Optimizer moments survive the restart.
        s0 = learner.trainer.optimizer.state_dict()["state"]
        s1 = resumed.trainer.optimizer.state_dict()["state"]
        assert all(torch.equal(s0[i]["exp_avg"], s1[i]["exp_avg"]) for i in s0)
        resumed.update()
        assert resumed.version == 3 and source.versions_set[-1] == 3
        assert _receive(sub, 3)[0].version == 3
    finally:
        sub.close()
        sender.close()


@pytest.mark.parametrize("algo", [
    {"name": "ppo", "gamma": 0.9},
    {"name": "rloo", "credit": "token", "loss_agg": "seq-mean-token-sum"},
    {"name": "reinforce_pp", "kl_coef": 0.1, "entropy_coef": 0.01, "is_mask_high": 2.0},
])
def test_other_algorithms_run(algo):
    cfg = _cfg(**algo)
    learner = Learner(cfg, FakeSource(VOCAB, group_size=2), None, None)
    m = learner.update()
    assert math.isfinite(m["loss"]) and learner.version == 1
    if algo["name"] == "ppo":
        assert math.isfinite(m["value_loss"]) and m["value_loss"] > 0
    if "kl_coef" in algo:
        assert m["kl_ref"] >= 0 and m["entropy"] > 0
        assert m["masked_frac"] == 0.0  # w ≪ 1 here, none above 2


def _prepared_rows(cfg, trainer, seed: int, groups: int) -> list:
    """Rows of a synthetic batch through `Learner._prepare`, reusing `trainer`'s model, with
    behavior log-probs = the model's own (on-policy: every importance weight is 1)."""
    from agent_r1_async.learner import batching

    learner_like = Learner.__new__(Learner)  # no second model
    learner_like.cfg, learner_like.trainer, learner_like.version = cfg, trainer, 0
    rows, _ = learner_like._prepare(FakeSource(VOCAB, group_size=2, seed=seed).sample(groups, 0, 0.0))
    with torch.no_grad():
        for mb in batching.make_micro_batches(rows, 10_000, trainer.pad_id):
            lp = trainer.forward(mb).logprobs
            for b, i in enumerate(mb.row_index.tolist()):
                rows[i].behavior_logprobs = lp[b, len(rows[i].context_ids):rows[i].length].tolist()
    return rows


def _flat_grad(trainer) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in trainer.trainable_parameters()])


def assert_same_gradient(got: torch.Tensor, want: torch.Tensor, tol: float = 1e-5) -> None:
    """Relative difference of the whole gradient below `tol` (fp32 rounding of different
    shapes, not a different gradient: a 1 % error is 1e-2)."""
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < tol, f"relative gradient difference {rel:.2e}"


def test_logprobs_match_full_logits_and_accumulation_equals_full_batch():
    """Action log-probs equal log_softmax(logits[:, :-1]).gather(ids[:, 1:]) of the full model
    output, and gradients accumulated over micro-batches equal the single-batch gradient."""
    from agent_r1_async.learner import batching
    from agent_r1_async.learner.trainer import PolicyTrainer

    cfg = _cfg()
    trainer = PolicyTrainer(cfg, tiny_model_dir())
    rows = _prepared_rows(cfg, trainer, seed=3, groups=2)
    full = batching.make_micro_batches(rows, 10_000, trainer.pad_id)
    split = batching.make_micro_batches(rows, 64, trainer.pad_id)
    assert len(full) == 1 and len(split) > 1

    mb = full[0]
    with torch.no_grad():
        logits = trainer.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
        ref = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, mb.input_ids[:, 1:, None])
        ref = torch.nn.functional.pad(ref.squeeze(-1), (1, 0)) * mb.action_mask
        got = trainer.forward(mb).logprobs
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)

    from agent_r1_async.learner.losses import ppo_loss

    grads, losses = [], []
    for mbs in (full, split):
        trainer.proximal_pass(mbs)
        trainer.optimizer.zero_grad()
        denom = sum(m.num_action_tokens for m in mbs)
        total = 0.0
        for m in mbs:
            out = trainer.forward(m)
            loss, metrics = ppo_loss(out.logprobs, m.proximal_logprobs, m.behavior_logprobs,
                                     m.advantages, m.action_mask, trainer.algo, denominator=denom)
            assert (metrics["is_weight_sum"] / metrics["tokens"]).item() == pytest.approx(1, abs=1e-5)
            loss.backward()
            total += loss.item()
        grads.append(_flat_grad(trainer))
        losses.append(total)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert_same_gradient(grads[1], grads[0])


@pytest.mark.parametrize("recompute", ["all", "pointwise"])
@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.8, 0.9)])
def test_chunked_head_and_checkpointing_equal_the_one_piece_forward(temperature, top_p, recompute):
    """The memory settings (`learner.gradient_checkpointing` with either
    `learner.checkpoint_recompute`, the head in checkpointed chunks of
    `learner.head_chunk_tokens`, here 3 so a micro-batch has several) give the one-piece,
    no-checkpointing log-probs and entropies to 1e-6 relative and the whole gradient to 1e-5
    (the head's weight gradient sums over tokens, and chunks change the order of that sum in
    the CPU's BLAS: 3e-6 on a CPU without AMX), at T = 1 and under temperature / top-p."""
    from agent_r1_async.learner import batching
    from agent_r1_async.learner.trainer import PolicyTrainer

    got = []
    for learner in ({"head_chunk_tokens": 0}, {"head_chunk_tokens": 3, "gradient_checkpointing": True,
                                               "checkpoint_recompute": recompute}):
        cfg = config.config_from_dict({
            "model": {"name_or_path": tiny_model_dir()},
            "engine": {"temperature": temperature, "top_p": top_p},
            "learner": {"device": "cpu", "bf16": False, **learner}})
        trainer = PolicyTrainer(cfg, tiny_model_dir())
        rows = _prepared_rows(cfg, trainer, seed=5, groups=2)
        (mb,) = batching.make_micro_batches(rows, 10_000, trainer.pad_id)
        assert mb.num_action_tokens > 3
        out = trainer.forward(mb, entropy=True)
        w = torch.randn(out.logprobs.shape, generator=torch.Generator().manual_seed(0))
        ((out.logprobs + out.entropy) * w * mb.action_mask).sum().backward()
        got.append((out.logprobs.detach(), out.entropy.detach(), _flat_grad(trainer)))
    (lp0, ent0, g0), (lp1, ent1, g1) = got
    torch.testing.assert_close(lp1, lp0, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent1, ent0, rtol=1e-6, atol=1e-6)
    assert_same_gradient(g1, g0)


def test_update_under_temperature_top_p_stays_finite_with_tokens_outside_the_kept_set():
    """At T = 0.8, top-p = 0.9 some random tokens fall outside the tiny model's kept set (their
    log-prob is the finite floor); two optimizer steps with KL and entropy stay finite."""
    from agent_r1_async.learner.losses import OUTSIDE_TOP_P_LOGPROB
    from agent_r1_async.learner.trainer import PolicyTrainer

    cfg = _cfg(name="reinforce_pp", kl_coef=0.1, entropy_coef=0.01)
    cfg = msgspec.structs.replace(
        cfg, engine=msgspec.structs.replace(cfg.engine, temperature=0.8, top_p=0.9))
    trainer = PolicyTrainer(cfg, tiny_model_dir())
    learner_like = Learner.__new__(Learner)
    learner_like.cfg, learner_like.trainer, learner_like.version = cfg, trainer, 0
    _, mbs = learner_like._prepare(FakeSource(VOCAB, group_size=2, seed=7).sample(2, 0, 0.0))
    trainer.proximal_pass(mbs)
    prox = torch.cat([mb.proximal_logprobs[mb.action_mask] for mb in mbs])
    outside = (prox == OUTSIDE_TOP_P_LOGPROB).sum().item()
    assert 0 < outside < prox.numel()
    for _ in range(2):
        m = trainer.optimize(mbs)
        assert all(math.isfinite(v) for v in m.values()), m
        assert m["grad_norm"] > 0 and m["entropy"] > 0
        assert abs(m["loss"]) < 10 and m["kl_ref"] < 10  # not e^(ref + 50) (`kl_reference`)
        assert m["masked_frac"] > 0  # tokens outside the proximal kept set are rejected
        # ≤ 49 per token (≈ 49 + proximal where current is outside), never e^(current + 50)
        assert m["approx_kl"] < 50
    assert all(torch.isfinite(p).all() for p in trainer.trainable_parameters())


def test_lora_publishes_merged_weights():
    require_module("peft")
    cfg = config.config_from_dict({
        "model": {"name_or_path": tiny_model_dir()},
        "algorithm": {"group_size": 2, "batch_groups": 1},
        "learner": {"lr": 1e-2, "device": "cpu", "bf16": False,
                    "lora": {"enabled": True, "rank": 4}},
    })
    learner = Learner(cfg, FakeSource(VOCAB, group_size=2), None, None)
    base = {k: v.clone() for k, v in learner.trainer.published_state_dict().items()}
    assert not any("lora" in k or "base_layer" in k for k in base)
    learner.update()
    merged = learner.trainer.published_state_dict()
    assert list(merged) == list(base)
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed and all("_proj" in k for k in changed)  # only adapted projections move
    # The merged weights reproduce the adapted model's outputs.
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
    plain.load_state_dict(merged, strict=False)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        want = learner.trainer.model(input_ids=ids).logits
        torch.testing.assert_close(plain(input_ids=ids).logits, want, atol=1e-4, rtol=0)


def _per_row(trainer, rows, mbs):
    """Row index -> its action log-probs, read at its own positions of its sequence."""
    out = {}
    for mb in mbs:
        lp = trainer.forward(mb).logprobs
        for b, i in zip(mb.value_seq.tolist(), mb.row_index.tolist(), strict=True):
            out[i] = lp[b, len(rows[i].context_ids):rows[i].length]
    return out


def test_packed_steps_and_skipped_proximal_pass_give_the_unpacked_gradient():
    """Packing an episode's chained steps into one sequence, and taking the proximal log-probs
    from the training forward instead of a separate no-grad pass, change neither the
    per-token log-probs, nor the loss, nor the gradient; only the tokens computed."""
    from agent_r1_async.learner import batching
    from agent_r1_async.learner.trainer import PolicyTrainer

    cfg = _cfg()  # no gradient clipping: it would rescale a gradient that is off by a factor
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(cfg.learner, grad_clip=0.0))
    trainer = PolicyTrainer(cfg, tiny_model_dir())
    rows = _prepared_rows(cfg, trainer, seed=5, groups=3)
    plain = batching.make_micro_batches(rows, 10_000, trainer.pad_id)
    packed = batching.make_micro_batches(rows, 10_000, trainer.pad_id, pack=True)
    multi = [r for r in rows if r.step_index == 1]
    assert multi, "the synthetic batch should hold two-step episodes"
    # one sequence per episode; every step's action tokens still trained once
    assert packed[0].input_ids.shape[0] == len(rows) - len(multi)
    assert packed[0].steps == plain[0].steps == len(rows)
    assert packed[0].num_action_tokens == plain[0].num_action_tokens
    assert packed[0].num_tokens < plain[0].num_tokens

    with torch.no_grad():
        a, b = _per_row(trainer, rows, plain), _per_row(trainer, rows, packed)
    assert sorted(a) == sorted(b) == list(range(len(rows)))
    for i in a:
        torch.testing.assert_close(a[i], b[i], atol=1e-5, rtol=0)

    assert not trainer.needs_proximal_pass(1) and trainer.needs_proximal_pass(2)
    grads, losses = [], []
    for mbs, prox in ((plain, True), (packed, False)):
        if prox:
            trainer.proximal_pass(mbs)
        state = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        opt_state = trainer.optimizer.state_dict()
        m = trainer.optimize(mbs)
        assert m["is_weight_mean"] == pytest.approx(1, abs=1e-5)  # on-policy rows
        grads.append(_flat_grad(trainer))
        losses.append(m["loss"])
        trainer.model.load_state_dict(state)  # undo the step: compare both from one point
        trainer.optimizer.load_state_dict(opt_state)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert_same_gradient(grads[1], grads[0])


def test_ppo_packed_reads_each_steps_value_and_gives_the_unpacked_gradient():
    """PPO on packed steps: V(s_t) read at each step's last context token inside the episode's
    one sequence equals the unpacked row's, so GAE, the loss and the gradient (policy and
    value head) are the unpacked ones."""
    from agent_r1_async.learner import batching
    from agent_r1_async.learner.loop import fill_gae
    from agent_r1_async.learner.trainer import PolicyTrainer

    cfg = _cfg(name="ppo", gamma=0.9)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(cfg.learner, grad_clip=0.0))
    trainer = PolicyTrainer(cfg, tiny_model_dir())
    with torch.no_grad():  # a critic that is not constant: V(s_t) differs from step to step
        trainer.value_head.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    rows = _prepared_rows(cfg, trainer, seed=5, groups=3)
    assert any(r.step_index == 1 for r in rows), "the synthetic batch should hold two-step episodes"
    plain = batching.make_micro_batches(rows, 10_000, trainer.pad_id)
    packed = batching.make_micro_batches(rows, 10_000, trainer.pad_id, pack=True)
    assert packed[0].input_ids.shape[0] < packed[0].steps == len(rows)

    grads, losses, values, advantages = [], [], [], []
    for mbs in (plain, packed):
        trainer.proximal_pass(mbs)
        fill_gae(rows, mbs, cfg.algorithm)
        values.append({i: v for mb in mbs
                       for i, v in zip(mb.row_index.tolist(), mb.old_values.tolist(), strict=True)})
        advantages.append([r.advantage for r in rows])
        state = {k: v.clone() for k, v in trainer.net.state_dict().items()}
        opt_state = trainer.optimizer.state_dict()
        m = trainer.optimize(mbs)
        grads.append(_flat_grad(trainer))  # the value head's parameters included
        losses.append((m["loss"], m["value_loss"]))
        trainer.net.load_state_dict(state)  # undo the step: compare both from one point
        trainer.optimizer.load_state_dict(opt_state)
    assert sorted(values[0]) == sorted(values[1]) == list(range(len(rows)))
    for i in values[0]:
        assert values[1][i] == pytest.approx(values[0][i], abs=1e-5)
    assert len(set(round(v, 4) for v in values[0].values())) > 1  # the critic was not constant
    assert advantages[1] == pytest.approx(advantages[0], abs=1e-5)
    assert losses[1][0] == pytest.approx(losses[0][0], rel=1e-5)
    assert losses[1][1] == pytest.approx(losses[0][1], rel=1e-5) and losses[0][1] > 0
    assert_same_gradient(grads[1], grads[0])
