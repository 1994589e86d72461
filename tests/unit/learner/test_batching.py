"""Batching: rows, masks, alignment and micro-batch packing, checked by hand."""

from __future__ import annotations

import pytest
import torch

from agent_r1_async import returns as ret
from agent_r1_async.learner import advantages as adv
from agent_r1_async.learner import batching
from tests.fakes.records import episode, sample_batch, step

PAD = 0


def _two_step_batch():
    """One group: episode A has 2 steps, episode B has 1.

    A step 0: context [11, 12]            action [21, 22]      (logp −0.1, −0.2; version 3)
    A step 1: context [11, 12, 21, 22, 31] action [23]         (31 is tool output; version 4)
    B step 0: context [11, 12]            action [24, 25, 26]  (version 4, per-token 4,4,5)
    """
    a0 = step("A", "g", 0, context_ids=[11, 12], action_ids=[21, 22], version=3,
              behavior_logprobs=[-0.1, -0.2], process_reward=0.5)
    a1 = step("A", "g", 1, context_ids=[11, 12, 21, 22, 31], action_ids=[23], version=4,
              behavior_logprobs=[-0.3])
    b0 = step("B", "g", 0, context_ids=[11, 12], action_ids=[24, 25, 26], version=4,
              behavior_logprobs=[-0.4, -0.5, -0.6], token_versions=[4, 4, 5])
    # Steps arrive out of order: batching sorts them by step_index.
    return sample_batch([[episode("A", "g", [a1, a0], 1.0), episode("B", "g", [b0], 0.0)]])


def _rows():
    groups = batching.trainable_groups(_two_step_batch())
    rewards = batching.episode_rewards([g for g, _ in groups])
    returns = [[ret.discounted_returns(ep, 1.0) for ep in g] for g in rewards]
    advs = adv.grpo_advantages(returns, credit="step", std_normalize=False)
    return batching.build_rows(groups, advs, rewards)


def test_rows_rewards_and_step_advantages():
    # A: r = [0.5, 1.0] → G = [1.5, 1.0]; B: r = [0.0] → G = [0.0]. Step 0 baseline
    # mean(1.5, 0) = 0.75; step 1 was reached by A alone → advantage 0.
    rows = _rows()
    assert [(r.episode_index, r.step_index) for r in rows] == [(0, 0), (0, 1), (1, 0)]
    assert [r.reward for r in rows] == pytest.approx([0.5, 1.0, 0.0])
    assert [r.advantage for r in rows] == pytest.approx([0.75, 0.0, -0.75])
    assert rows[0].token_versions == [3, 3]  # policy_version broadcast
    assert rows[2].token_versions == [4, 4, 5]  # per-token versions kept


def test_trained_sequences_end_at_the_last_step_with_a_gradient():
    rows = _rows()  # advantages 0.75, 0, -0.75: A's step 1 was reached by A alone
    assert batching.training_sequences(rows, pack=True) == [[0, 1], [2]]
    assert batching.trained_sequences(rows, [[0, 1], [2]]) == [[0], [2]]
    assert batching.trained_sequences(rows, [[0], [1], [2]]) == [[0], [2]]
    # A zero step before a trained one stays: it is that step's prefix, computed anyway.
    rows[0].advantage, rows[1].advantage = 0.0, 0.3
    assert batching.trained_sequences(rows, [[0, 1], [2]]) == [[0, 1], [2]]
    rows[2].advantage = 0.0
    assert batching.trained_sequences(rows, [[0, 1], [2]]) == [[0, 1]]
    rows[1].advantage = 0.0
    assert batching.trained_sequences(rows, [[0, 1], [2]]) == []
    # The denominators count every step and action token: 3 steps, 2 + 1 + 3 tokens.
    assert batching.batch_counts(rows) == (3, 6)


def test_collate_masks_alignment_and_padding():
    rows = _rows()
    mb = batching.collate(rows, [0, 1, 2], PAD)
    # Lengths 4, 6, 5 → T = 6, right padding.
    assert mb.input_ids.tolist() == [
        [11, 12, 21, 22, 0, 0],
        [11, 12, 21, 22, 31, 23],
        [11, 12, 24, 25, 26, 0],
    ]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1, 0, 0], [1] * 6, [1, 1, 1, 1, 1, 0]]
    # Only the step's own action is trained: in row 1 the earlier action (21, 22) and the tool
    # output (31) are context and masked.
    assert mb.action_mask.int().tolist() == [
        [0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 0, 1],
        [0, 0, 1, 1, 1, 0],
    ]
    torch.testing.assert_close(mb.behavior_logprobs, torch.tensor([
        [0, 0, -0.1, -0.2, 0, 0],
        [0, 0, 0, 0, 0, -0.3],
        [0, 0, -0.4, -0.5, -0.6, 0],
    ]), atol=1e-7, rtol=0)
    assert mb.token_versions.tolist() == [[0, 0, 3, 3, 0, 0], [0, 0, 0, 0, 0, 4], [0, 0, 4, 4, 5, 0]]
    torch.testing.assert_close(mb.advantages, torch.tensor([
        [0, 0, 0.75, 0.75, 0, 0],
        [0, 0, 0, 0, 0, 0],
        [0, 0, -0.75, -0.75, -0.75, 0],
    ]), atol=1e-7, rtol=0)
    assert mb.value_index.tolist() == [1, 4, 1]  # last context token of each step
    assert mb.num_action_tokens == 6


def test_micro_batch_plan_respects_token_budget():
    # Lengths 10, 3, 7, 7, 2 with budget 16: sorted 10 | 7, 7 (14) | 3, 2 (3·2 = 6)
    plan = batching.plan_micro_batches([10, 3, 7, 7, 2], 16)
    assert plan == [[0], [2, 3], [1, 4]]
    for idx in plan:
        assert max([10, 3, 7, 7, 2][i] for i in idx) * len(idx) <= 16
    # A row longer than the budget still gets a micro-batch of its own.
    assert batching.plan_micro_batches([100, 1], 16) == [[0], [1]]
    mbs = batching.make_micro_batches(_rows(), 12, PAD)
    assert sorted(i for mb in mbs for i in mb.row_index.tolist()) == [0, 1, 2]
    assert all(mb.input_ids.numel() <= 12 for mb in mbs)


def test_failed_episodes_are_dropped_and_bad_steps_rejected():
    ok = episode("A", "g", [step("A", "g", 0, context_ids=[1], action_ids=[2])], 1.0)
    bad = episode("B", "g", [step("B", "g", 0, context_ids=[1], action_ids=[2])], 0.0,
                  status="env_error")
    groups = batching.trainable_groups(sample_batch([[ok, bad]]))
    assert [e.end.episode_id for g, _ in groups for e in g.episodes] == ["A"]
    short = step("C", "g", 0, context_ids=[1], action_ids=[2, 3], behavior_logprobs=[-1.0])
    groups = batching.trainable_groups(sample_batch([[episode("C", "g", [short], 1.0)]]))
    with pytest.raises(ValueError, match="1 behavior_logprobs for 2 action tokens"):
        batching.build_rows(groups, [[[0.0]]], [[[1.0]]])
    empty_ctx = step("D", "g", 0, context_ids=[], action_ids=[2])
    groups = batching.trainable_groups(sample_batch([[episode("D", "g", [empty_ctx], 1.0)]]))
    with pytest.raises(ValueError, match="empty context_ids"):
        batching.build_rows(groups, [[[0.0]]], [[[1.0]]])


def test_sft_collate_places_weights_on_action_tokens():
    t = batching.collate_pairs([([5, 6], [7]), ([5], [8, 9])],
                               {"weights": ([[2.0], [1.0, 0.5]], torch.float32)}, PAD)
    assert t["input_ids"].tolist() == [[5, 6, 7], [5, 8, 9]]
    assert t["weights"].tolist() == [[0, 0, 2.0], [0, 1.0, 0.5]]
    assert t["action_mask"].int().tolist() == [[0, 0, 1], [0, 1, 1]]


def test_chain_steps_packs_only_contexts_that_extend_the_previous_step():
    def row(g, e, t, ctx, act):
        return batching.Row(ctx, act, [-1.0] * len(act), [0] * len(act), 0.5 * t, 0.0, 1.0,
                            g, e, t, ("g", "e"))

    rows = [
        row(0, 0, 0, [1, 2], [3]),
        row(0, 0, 1, [1, 2, 3, 9, 9], [4, 5]),   # extends step 0: ctx + action + tool reply
        row(0, 0, 2, [1, 2, 3, 9, 9, 4, 5], [6]),  # extends step 1
        row(0, 1, 0, [1, 2], [7]),
        row(0, 1, 1, [1, 2, 8, 9], [4]),          # episode 1's action was 7, not 8: new sequence
        row(1, 0, 0, [1, 2, 3, 9, 9, 4, 5], [6]),  # same tokens, other group: never chained
    ]
    assert batching.chain_steps(rows) == [[0, 1, 2], [3], [4], [5]]
    mb = batching.collate_sequences(rows, [[0, 1, 2], [3]], PAD)
    assert mb.input_ids.tolist() == [[1, 2, 3, 9, 9, 4, 5, 6], [1, 2, 7, PAD, PAD, PAD, PAD, PAD]]
    assert mb.action_mask.int().tolist() == [[0, 0, 1, 0, 0, 1, 1, 1], [0, 0, 1, 0, 0, 0, 0, 0]]
    # each step's advantage (0.5 * step index) sits on its own action tokens only
    assert mb.advantages.tolist() == [[0, 0, 0.0, 0, 0, 0.5, 0.5, 1.0], [0] * 8]
    assert mb.steps == 4
    # one V(s_t) per step, at its own last context token, in its own sequence
    assert mb.row_index.tolist() == [0, 1, 2, 3]
    assert mb.value_seq.tolist() == [0, 0, 0, 1]
    assert mb.value_index.tolist() == [1, 4, 6, 1]
    # PPO's per-step advantages (GAE) land on each step's own action tokens only
    mb.set_advantages(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert mb.advantages.tolist() == [[0, 0, 1, 0, 0, 2, 2, 3], [0, 0, 4, 0, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match=r"\(3,\) advantages for 4 steps"):
        mb.set_advantages(torch.zeros(3))


def _long_episode(e: int, steps: int, instruction: int, action: int, observation: int):
    """An episode of `steps` steps, each context the previous context + action + observation
    (the `full` builder's shape): token ids 100 + e, actions 1, observations 2."""
    rows, context = [], [100 + e] * instruction
    for t in range(steps):
        act = [1] * action
        rows.append(batching.Row(context, act, [-1.0] * action, [0] * action, 0.0, 0.0, 1.0,
                                 0, e, t, ("g", f"e{e}")))
        context = [*context, *act, *[2] * observation]
    return rows


def test_packed_long_episodes_stay_within_a_budget_of_the_longest_sequence():
    # 100-step episodes of 3 + 99 x (1 + 2) + 1 = 301 and 3 + 99 x (1 + 1) + 1 = 202 tokens,
    # and a 1-step one of 4: packed, three sequences as long as their last steps.
    rows = [*_long_episode(0, 100, 3, 1, 2), *_long_episode(1, 100, 3, 1, 1),
            *_long_episode(2, 1, 3, 1, 0)]
    seqs = batching.training_sequences(rows, pack=True)
    assert [len(s) for s in seqs] == [100, 100, 1]
    assert [rows[s[-1]].length for s in seqs] == [301, 202, 4]
    # A piece of a packed sequence ending at step t holds step t's whole context: cutting the
    # 301-token episode anywhere leaves a piece of 301 tokens.
    assert max(batching.collate_sequences(rows, [s], PAD).num_tokens
               for s in (seqs[0][:50], seqs[0][50:])) == 301
    # The budget a launch accepts (at least the longest sequence) holds every micro-batch:
    # 301 | 202 + 4 padded to 2 x 202 = 404 > 301, so 202 | 4.
    mbs = batching.sequences_to_micro_batches(rows, seqs, 301, PAD)
    assert [mb.num_tokens for mb in mbs] == [301, 202, 4]
    assert sorted(i for mb in mbs for i in mb.row_index.tolist()) == list(range(len(rows)))
    assert sum(mb.num_action_tokens for mb in mbs) == 201
    # At 410 tokens the 202- and 4-token sequences share one (2 x 202 = 404).
    assert [mb.num_tokens for mb in batching.make_micro_batches(rows, 410, PAD, pack=True)] == [
        301, 404]
    # Below the longest sequence its micro-batch is over the budget: what a launch refuses.
    assert max(mb.num_tokens for mb in batching.make_micro_batches(rows, 256, PAD, pack=True)) == 301
