"""Shared-prefix training (learner/prefix_tree.py): the planner's token counts by hand, and the
tree rows' log-probs, V(s_t), loss and gradient against flat rows on a tiny random Llama.

Bound. fp32 rounds each operation to a relative u = 2^-24 ≈ 6e-8. The tree and the flat rows
compute the same sums in another order and blocking (attention over a longer row whose extra
keys weigh exactly 0; a prefix's gradient summed once over its members instead of once per
flat row), so a result moves by the rounding of its sums: about √n·u (random-signed errors),
at worst n·u, of the magnitudes summed, for sums of n terms. An entry's magnitudes summed are
those of its tensor's largest entries (a small gradient entry is a difference of large terms),
so the bound is per tensor: |a − b| ≤ 1e-5 · max(1, max |b|), absolute for tensors within 1,
relative to the largest entry above (the PPO value loss's gradients here reach 183). The longest
sums (a gradient over ≤ 200 tokens × hidden 32) have n ≈ 6,400: √n·u ≈ 5e-6 < 1e-5. Measured
over the scenarios below, in units of that scale: log-probs 1.1e-7, V(s_t) 2.4e-7, the loss
2.3e-7, gradients 6.1e-7, a sixteenth of the bound or less.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from agent_r1_async import config
from agent_r1_async.learner import batching, prefix_tree
from agent_r1_async.learner import distributed as dist_util
from agent_r1_async.learner.batching import MicroBatch, Row
from agent_r1_async.learner.trainer import PolicyTrainer

VOCAB = 97
PAD = 0
TOL = 1e-5


# ----------------------------------------------------------------------------------------
# The planner, by hand
# ----------------------------------------------------------------------------------------


def test_common_prefix_compares_token_by_token():
    assert prefix_tree.common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert prefix_tree.common_prefix([1, 2], [1, 2, 3]) == 2
    assert prefix_tree.common_prefix([5], [6]) == 0
    assert prefix_tree.common_prefix([], [1]) == 0


def test_eight_members_with_a_100_token_prefix_compute_100_plus_108_tokens():
    prompt = list(range(3, 103))  # P = 100
    seqs = [prompt + [200 + k] + [7] * (9 + k) for k in range(8)]  # suffixes of 10..17 tokens
    (tree,) = prefix_tree.plan_subtrees(seqs, [0] * 8, max_tokens=4096)
    assert tree.prefix == 100 and sorted(tree.members) == list(range(8))
    assert tree.tokens == 100 + sum(range(10, 18)) == 208
    assert sum(len(s) for s in seqs) == 8 * 100 + 108 == 908
    # The same through the learner's batching: one step per member, the action its suffix.
    rows = [_row(s[:100], s[100:], 0, e) for e, s in enumerate(seqs)]
    (mb,) = batching.make_micro_batches(rows, 4096, PAD, shared_prefix=True)
    assert mb.tree is not None
    assert (mb.computed_tokens, mb.flat_tokens, mb.num_tokens) == (208, 908, 208)
    (flat,) = batching.make_micro_batches(rows, 4096, PAD)
    assert flat.tree is None and flat.num_tokens == 8 * 117 and flat.computed_tokens == 908


def test_members_that_share_nothing_stay_flat_rows():
    seqs = [[1, 2, 3], [4, 2, 3], [5, 5]]
    trees = prefix_tree.plan_subtrees(seqs, [0, 0, 0], 64)
    assert sorted(t.members for t in trees) == [(0,), (1,), (2,)]
    assert all(t.prefix == len(seqs[t.members[0]]) == t.tokens for t in trees)
    rows = [_row(s[:1], s[1:], 0, e) for e, s in enumerate(seqs)]
    assert all(mb.tree is None for mb in batching.make_micro_batches(rows, 64, PAD,
                                                                     shared_prefix=True))


def test_identical_members_and_a_member_that_is_a_prefix_of_another():
    same = prefix_tree.plan_subtrees([[1, 2, 3], [1, 2, 3], [1, 2, 3]], [0, 0, 0], 64)
    assert same == [prefix_tree.SubTree((0, 1, 2), 3, 3)]  # P is the whole sequence
    nested = prefix_tree.plan_subtrees([[1, 2, 3, 4, 5], [1, 2, 3]], [0, 0], 64)
    # sorted by tokens, the shorter first; P = 3, the longer's suffix 2 tokens, the shorter's 0
    assert nested == [prefix_tree.SubTree((1, 0), 3, 5)]


def test_only_members_with_one_key_share_a_row():
    trees = prefix_tree.plan_subtrees([[1, 2, 3], [1, 2, 4], [1, 2, 5]], ["g0", "g1", "g0"], 64)
    assert sorted((t.members, t.prefix, t.tokens) for t in trees) == [
        ((0, 2), 2, 4), ((1,), 3, 3)]


def test_a_group_over_the_budget_splits_into_sub_trees_within_it():
    prompt = list(range(3, 23))  # P = 20
    seqs = [prompt + [30 + k] * 6 for k in range(6)]  # 6 members, 26 tokens each
    # One row would be 20 + 6 × 6 = 56 tokens; a budget of 40 holds 20 + 3 × 6 = 38.
    trees = prefix_tree.plan_subtrees(seqs, [0] * 6, 40)
    assert [(len(t.members), t.prefix, t.tokens) for t in trees] == [(3, 20, 38), (3, 20, 38)]
    rows = [_row(s[:20], s[20:], 0, e) for e, s in enumerate(seqs)]
    mbs = batching.make_micro_batches(rows, 40, PAD, shared_prefix=True)
    assert [mb.num_tokens for mb in mbs] == [38, 38]
    assert sum(mb.steps for mb in mbs) == 6


def test_joining_stops_where_it_would_compute_more_tokens():
    # a, b share 10 tokens; c shares 1 with b. Joining c would cost 2·1 < 1·10: c stays apart.
    a = [*range(3, 13), 50, 51]
    b = [*range(3, 13), 60, 61]
    c = [3, 90, 91, 92]
    trees = prefix_tree.plan_subtrees([a, b, c], [0, 0, 0], 64)
    assert sorted((t.members, t.prefix) for t in trees) == [((0, 1), 10), ((2,), 4)]


def test_joining_weighs_the_row_s_attention_pairs():
    # Two members share a 470-token prompt. With ρ = 3.25e-4 (SmolLM2-135M) and 1,000-token
    # suffixes one row of 2,470 costs 2,470 + ρ·2,470² = 4,453 against 2 × (1,470 + ρ·1,470²)
    # = 4,345 apart: they stay apart. With 600-token suffixes 1,670 + ρ·1,670² = 2,576 against
    # 2 × (1,070 + ρ·1,070²) = 2,884: they join. Without ρ both join (the prompt is shared).
    rho = 3.25e-4
    prompt = list(range(3, 473))
    for suffix, joins in ((1000, False), (600, True)):
        a = [*prompt, *[500] * suffix]
        b = [*prompt, *[600] * suffix]
        trees = prefix_tree.plan_subtrees([a, b], [0, 0], 8192, rho)
        assert (len(trees) == 1) is joins, suffix
        assert len(prefix_tree.plan_subtrees([a, b], [0, 0], 8192)) == 1
    assert prefix_tree.row_cost(2470, rho) == pytest.approx(2470 + rho * 2470 ** 2, abs=1e-9)


def test_the_attention_cost_of_a_model_by_hand(model_dir):
    # The tiny Llama: per layer q 32·32 + k, v 32·16 each + o 32·32 = 3,072, MLP 3 · 32·64 =
    # 6,144, two norms 64: 9,280; 2 layers 18,560. ρ = 4 · (4 heads · 8) · 2 / (2 · 18,560).
    tr = _trainer(_cfg(model_dir), model_dir)
    assert tr.attention_cost == pytest.approx(256 / 37120, rel=1e-12)
    # SmolLM2-135M's shape: hidden 576 = 9 heads · 64, 30 layers of 3,540,096 parameters
    assert prefix_tree.attention_cost(576, 30, 30 * 3_540_096) == pytest.approx(3.254e-4,
                                                                               rel=1e-3)


def test_tree_rows_positions_segments_and_reads_by_hand():
    # Members [1 2 3 4] (action 4) and [1 2 5 6] (action 5 6): P = [1 2], suffixes [3 4], [5 6].
    rows = [_row([1, 2, 3], [4], 0, 0), _row([1, 2], [5, 6], 0, 1)]
    (mb,) = batching.make_micro_batches(rows, 64, PAD, shared_prefix=True)
    t = mb.tree
    assert t is not None
    assert t.input_ids.tolist() == [[1, 2, 3, 4, 5, 6]]
    assert t.position_ids.tolist() == [[0, 1, 2, 3, 2, 3]]
    assert t.segments.tolist() == [[0, 0, 1, 1, 2, 2]]
    # Action tokens in the flat layout: member 0's 4 at j = 3, member 1's 5, 6 at j = 2, 3.
    # Predicted from flat j − 1 = 2 (tree 2), and 1 (inside P: 1), 2 (member 1's suffix: 4).
    assert list(zip(t.predict_row.tolist(), t.predict_pos.tolist(), strict=True)) == [(0, 2), (0, 1), (0, 4)]
    assert list(zip(t.value_row.tolist(), t.value_pos.tolist(), strict=True)) == [(0, 2), (0, 1)]
    mask = prefix_tree.attention_mask(t.segments)[0, 0] == 0
    assert mask.int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],  # member 1's suffix: P and itself, never member 0's suffix
        [1, 1, 0, 0, 1, 1],
    ]


def test_padding_in_a_batch_of_tree_rows_is_masked_and_never_empty():
    seg = torch.tensor([[0, 0, 1, 2], [0, 1, -1, -1]])
    allowed = prefix_tree.attention_mask(seg)[:, 0] == 0
    assert allowed[1].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]]
    assert not allowed[1, :2, 2:].any()  # no real token sees padding
    assert allowed.any(-1).all()  # every query sees at least itself


# ----------------------------------------------------------------------------------------
# Tree rows against flat rows on a tiny model
# ----------------------------------------------------------------------------------------


def _row(context: list[int], action: list[int], group: int, episode: int, step: int = 0,
         advantage: float = 1.0, rng: random.Random | None = None) -> Row:
    rng = rng or random.Random(episode)
    return Row(context_ids=list(context), action_ids=list(action),
               behavior_logprobs=[-rng.uniform(2.0, 6.0) for _ in action],
               token_versions=[0] * len(action), advantage=advantage, reward=0.0,
               sample_weight=1.0 + 0.25 * group, group_index=group, episode_index=episode,
               step_index=step, ids=(f"g{group}", f"e{group}-{episode}"))


def _episode(rng: random.Random, prompt: list[int], group: int, episode: int,
             actions: list[list[int]]) -> list[Row]:
    """An episode's step rows: each context the previous context + action + a 3-token reply."""
    rows, ctx = [], list(prompt)
    for t, act in enumerate(actions):
        rows.append(_row(ctx, act, group, episode, t, rng.gauss(0.0, 1.0), rng))
        ctx = ctx + act + [rng.randrange(3, VOCAB) for _ in range(3)]
    return rows


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def _case(name: str) -> tuple[list[Row], int]:
    """(rows in build_rows order, micro_batch_tokens) of one scenario."""
    rng = random.Random(name)
    rows: list[Row] = []
    budget = 4096
    if name == "groups":  # 2 groups × 4 episodes of 1-3 steps, each group its own prompt
        for g in range(2):
            prompt = [10 + g, *_tokens(rng, 15)]
            for e in range(4):
                acts = [_tokens(rng, rng.randint(2, 5)) for _ in range(rng.randint(1, 3))]
                rows += _episode(rng, prompt, g, e, acts)
    elif name == "diverge_at_0":  # the members' first tokens differ: nothing shared
        for e in range(3):
            rows += _episode(rng, [3 + e, *_tokens(rng, 9)], 0, e, [_tokens(rng, 3)] * 2)
    elif name == "identical":  # three copies of one episode
        prompt, acts = _tokens(rng, 12), [_tokens(rng, 4), _tokens(rng, 3)]
        replies = random.Random(7)
        for e in range(3):
            replies.seed(7)  # the same tool replies too
            rows += _episode(replies, prompt, 0, e, acts)
    elif name == "prefix_member":  # episode 0 = episode 1's first step; episode 2 differs
        prompt, a0 = _tokens(rng, 12), _tokens(rng, 4)
        rows += _episode(rng, prompt, 0, 0, [a0])
        rows += _episode(rng, prompt, 0, 1, [a0, _tokens(rng, 3)])
        rows += _episode(rng, prompt, 0, 2, [_tokens(rng, 5)])
    elif name == "split":  # one group whose row exceeds the budget: sub-trees
        prompt = _tokens(rng, 20)
        for e in range(6):
            rows += _episode(rng, prompt, 0, e, [_tokens(rng, 4), _tokens(rng, 3)])
        budget = 64  # one packed episode: 20 + 4 + 3 + 3 = 30 tokens; the group's row: 80
    else:
        raise ValueError(name)
    return rows, budget


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """A 2-layer Llama, hidden 32, 4 heads over 2 KV heads (grouped as SmolLM2's), fp32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, pad_token_id=PAD, bos_token_id=1,
                      eos_token_id=2, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return str(out)


def _cfg(model_dir: str, algo: str = "grpo", **learner) -> config.RunConfig:
    return config.config_from_dict({
        "model": {"name_or_path": model_dir, "max_model_len": 512},
        "algorithm": {"name": algo, "group_size": 2},
        "learner": {"lr": 1e-3, "grad_clip": 0.0, "bf16": False, "device": "cpu",
                    "seed": 0, **learner},
    })


def _trainer(cfg: config.RunConfig, model_dir: str) -> PolicyTrainer:
    torch.manual_seed(0)
    tr = PolicyTrainer(cfg, model_dir)
    tr.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]  # grads stay
    if tr.value_head is not None:  # a random critic: zero-initialised it reads 0 everywhere
        with torch.no_grad():
            tr.value_head.weight.normal_(0.0, 0.5)
            tr.value_head.bias.fill_(0.1)
    return tr


def _per_step(rows: list[Row], mbs: list[MicroBatch], logprobs: list[torch.Tensor]
              ) -> dict[int, torch.Tensor]:
    """{row index: its action tokens' log-probs} from [B, T] log-probs in the flat layout."""
    out = {}
    for mb, lp in zip(mbs, logprobs, strict=True):
        for v, i in enumerate(mb.row_index.tolist()):
            b, start = int(mb.value_seq[v]), int(mb.value_index[v]) + 1
            out[i] = lp[b, start:start + len(rows[i].action_ids)]
    return out


def _run(tr: PolicyTrainer, rows: list[Row], mbs: list[MicroBatch]) -> dict:
    """Log-probs and V(s_t) per step (no grad), then one optimize: loss and gradients."""
    ppo = tr.value_head is not None
    with torch.no_grad():
        outs = [tr.forward(mb, values=ppo) for mb in mbs]
    values = {}
    if ppo:
        for mb, o in zip(mbs, outs, strict=True):
            values.update(zip(mb.row_index.tolist(), o.values, strict=True))
        tr.proximal_pass(mbs)
        targets = torch.tensor([r.advantage + 0.5 for r in rows])
        for mb in mbs:
            ix = mb.row_index
            mb.set_advantages(torch.tensor([rows[i].advantage for i in ix.tolist()]))
            mb.value_targets = targets[ix]
    metrics = tr.optimize(mbs, 0)
    return {"logprobs": _per_step(rows, mbs, [o.logprobs for o in outs]), "values": values,
            "loss": metrics["loss"], "value_loss": metrics.get("value_loss"),
            "grads": {n: p.grad.detach().clone() for n, p in tr.net.named_parameters()
                      if p.grad is not None}}


def _close(got: torch.Tensor | float, want: torch.Tensor | float, what: str) -> None:
    """|a − b| ≤ 1e-5 · max(1, max |b|) over the tensor (the module docstring's bound)."""
    got, want = torch.as_tensor(got), torch.as_tensor(want)
    assert got.shape == want.shape, what
    bound = TOL * max(1.0, float(want.abs().max()))
    diff = float((got - want).abs().max())
    assert diff <= bound, f"{what}: |a − b| = {diff:.3g} > {bound:.3g}"


def _compare(tree: dict, flat: dict) -> None:
    assert set(tree["logprobs"]) == set(flat["logprobs"])
    for i, lp in flat["logprobs"].items():
        _close(tree["logprobs"][i], lp, f"log-probs of step row {i}")
    assert set(tree["values"]) == set(flat["values"])
    for i, v in flat["values"].items():
        _close(tree["values"][i], v, f"V(s_t) of step row {i}")
    _close(tree["loss"], flat["loss"], "loss")
    if flat["value_loss"] is not None:
        _close(tree["value_loss"], flat["value_loss"], "value loss")
    assert set(tree["grads"]) == set(flat["grads"])
    for name, g in flat["grads"].items():
        _close(tree["grads"][name], g, f"gradient of {name}")


CASES = ["groups", "diverge_at_0", "identical", "prefix_member", "split"]


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
@pytest.mark.parametrize("pack", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("case", CASES)
def test_tree_rows_give_the_flat_log_probs_values_loss_and_gradient(model_dir, case, pack, algo):
    rows, budget = _case(case)
    tr = _trainer(_cfg(model_dir, algo, micro_batch_tokens=budget), model_dir)
    flat_mbs = batching.make_micro_batches(rows, budget, tr.pad_id, pack=pack)
    tree_mbs = batching.make_micro_batches(rows, budget, tr.pad_id, pack=pack,
                                           shared_prefix=True)
    shared = [mb for mb in tree_mbs if mb.tree is not None]
    seqs = batching.training_sequences(rows, pack)
    trees = batching.plan_trees(rows, seqs, budget, shared_prefix=True)
    episodes = [{rows[i].episode_index for m in t.members for i in seqs[m]} for t in trees]
    if case == "diverge_at_0":  # no row spans two episodes (unpacked: an episode's steps do)
        assert all(len(e) == 1 for e in episodes) and bool(shared) == (not pack)
    else:
        assert shared and any(len(e) > 1 for e in episodes)
    assert all(mb.num_tokens <= budget for mb in tree_mbs)
    if case == "split":
        assert sum(int(mb.tree.input_ids.shape[0]) for mb in shared) > 1  # sub-trees
    flat_tokens = sum(mb.flat_tokens for mb in flat_mbs)
    assert sum(mb.flat_tokens for mb in tree_mbs) == flat_tokens
    assert sum(mb.computed_tokens for mb in tree_mbs) < flat_tokens or not shared
    _compare(_run(tr, rows, tree_mbs), _run(tr, rows, flat_mbs))


@pytest.mark.parametrize("extra", [
    {"head_chunk_tokens": 3, "gradient_checkpointing": True},
    {"gradient_checkpointing": True, "checkpoint_recompute": "pointwise"},
], ids=["head-chunks+checkpointing", "pointwise-recompute"])
def test_tree_rows_compose_with_head_chunks_and_gradient_checkpointing(model_dir, extra):
    rows, budget = _case("groups")
    tr = _trainer(_cfg(model_dir, "ppo", **extra), model_dir)
    flat = batching.make_micro_batches(rows, budget, tr.pad_id, pack=True)
    tree = batching.make_micro_batches(rows, budget, tr.pad_id, pack=True, shared_prefix=True)
    _compare(_run(tr, rows, tree), _run(tr, rows, flat))


def test_sampling_temperature_top_p_and_entropy_read_the_same_positions(model_dir):
    rows, budget = _case("groups")
    cfg = config.config_from_dict({
        "model": {"name_or_path": model_dir, "max_model_len": 512},
        "engine": {"temperature": 0.7, "top_p": 0.9},
        "algorithm": {"name": "grpo", "group_size": 2, "entropy_coef": 0.01},
        "learner": {"lr": 1e-3, "grad_clip": 0.0, "bf16": False, "device": "cpu"},
    })
    tr = _trainer(cfg, model_dir)
    flat = batching.make_micro_batches(rows, budget, tr.pad_id, pack=True)
    tree = batching.make_micro_batches(rows, budget, tr.pad_id, pack=True, shared_prefix=True)
    with torch.no_grad():
        ef = _per_step(rows, flat, [tr.forward(mb, entropy=True).entropy for mb in flat])
        et = _per_step(rows, tree, [tr.forward(mb, entropy=True).entropy for mb in tree])
    for i, e in ef.items():
        _close(et[i], e, f"entropy of step row {i}")
    _compare(_run(tr, rows, tree), _run(tr, rows, flat))


def test_the_bf16_working_copy_runs_tree_rows_within_bf16_rounding(model_dir):
    """bf16 rounds at 2^-8 relative: tree and flat agree to its rounding, not to 1e-5."""
    rows, budget = _case("groups")
    tr = _trainer(_cfg(model_dir, bf16=True), model_dir)
    assert tr.bf16_copy is not None
    flat = batching.make_micro_batches(rows, budget, tr.pad_id, pack=True)
    tree = batching.make_micro_batches(rows, budget, tr.pad_id, pack=True, shared_prefix=True)
    got, want = _run(tr, rows, tree), _run(tr, rows, flat)
    for i, lp in want["logprobs"].items():
        torch.testing.assert_close(got["logprobs"][i], lp, atol=0.05, rtol=0.02)
    assert got["loss"] == pytest.approx(want["loss"], rel=0.02, abs=0.02)
    for name, g in want["grads"].items():  # the master's fp32 gradients
        scale = float(g.abs().max()) + 1e-3
        assert float((got["grads"][name] - g).abs().max()) <= 0.05 * scale, name


def test_the_trainer_turns_trees_off_where_the_attention_takes_no_4d_mask(model_dir):
    tr = _trainer(_cfg(model_dir), model_dir)
    assert tr.shared_prefix  # sdpa on CPU
    assert not _trainer(_cfg(model_dir, shared_prefix=False), model_dir).shared_prefix
    tr.attn_implementation = "flash_attention_2"  # as on CUDA with flash-attn installed
    assert not tr.shared_prefix


def test_the_learner_logs_tokens_computed_against_flat(model_dir):
    from agent_r1_async.learner.loop import Learner, batch_metrics
    from tests.fakes.records import episode, sample_batch, step

    prompt = list(range(3, 23))
    eps = [episode(f"e{k}", "g", [step(f"e{k}", "g", 0, context_ids=prompt,
                                       action_ids=[30 + k, 31, 32], done=True)], float(k % 2))
           for k in range(4)]
    cfg = _cfg(model_dir)
    learner = Learner(cfg, None, None, None, trainer=_trainer(cfg, model_dir))
    rows, mbs = learner._prepare(sample_batch([eps]))
    m = batch_metrics(rows, mbs, 0)
    assert (m["tokens_computed"], m["tokens_flat"]) == (20 + 4 * 3, 4 * 23)


# ----------------------------------------------------------------------------------------
# FSDP2: a tree row is a row
# ----------------------------------------------------------------------------------------


WORLD = 2


def _fsdp_worker(rank: int, port: int, model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    dist_util.init_group(rank, WORLD, "127.0.0.1", port, "gloo", timeout_s=120)
    try:
        rows, budget = _case("groups")
        tr = _trainer(_cfg(model_dir, "ppo", world_size=WORLD), model_dir)
        assert tr.sharded
        seqs = batching.training_sequences(rows, True)
        trees = batching.plan_trees(rows, seqs, budget, shared_prefix=True)
        mine = dist_util.balance([t.tokens for t in trees], WORLD)[rank]
        mbs = batching.trees_to_micro_batches(rows, seqs, [trees[i] for i in mine], budget,
                                              tr.pad_id)
        tr.proximal_pass(mbs)
        for mb in mbs:
            ix = mb.row_index
            mb.set_advantages(torch.tensor([rows[i].advantage for i in ix.tolist()]))
            mb.value_targets = torch.tensor([rows[i].advantage + 0.5 for i in ix.tolist()])
        metrics = tr.optimize(mbs, 0)
        grads = {n: p.grad.full_tensor() for n, p in tr.net.named_parameters()
                 if p.grad is not None}
        if rank == 0:
            torch.save({"loss": metrics["loss"], "grads": grads, "trees": len(mine),
                        "shared": sum(mb.tree is not None for mb in mbs)}, out)
    finally:
        dist_util.destroy_group()


def test_two_fsdp2_ranks_with_tree_rows_give_the_flat_single_process_gradient(model_dir,
                                                                               tmp_path: Path):
    rows, budget = _case("groups")
    tr = _trainer(_cfg(model_dir, "ppo"), model_dir)
    flat = _run(tr, rows, batching.make_micro_batches(rows, budget, tr.pad_id, pack=True))
    out = tmp_path / "rank0.pt"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_fsdp_worker, args=(dist_util.free_port(), model_dir, str(out)), nprocs=WORLD,
             join=True)
    got = torch.load(out, weights_only=False)
    assert got["trees"] == 1 and got["shared"] == 1  # one group's tree on each rank
    _close(got["loss"], flat["loss"], "loss")
    assert set(got["grads"]) == set(flat["grads"])
    for name, g in flat["grads"].items():
        _close(got["grads"][name], g, f"gradient of {name}")
