"""SFT with a real (tiny) model: it fits a handful of oracle demonstrations, the checkpoint is
the learner's format and reproduces the trained logits, and the `sft` command runs end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from agent_r1_async.config import config_from_dict
from agent_r1_async.learner import checkpoint
from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.models import load_causal_lm, load_tokenizer, tiny_model_dir
from agent_r1_async.sft.demos import DemoStats
from agent_r1_async.sft.train import (
    demo_pairs,
    fit,
    load_demos,
    sft_micro_batches,
    trainer_config,
)


def _cfg(tmp_path: Path, **sft):
    return config_from_dict({
        "model": {"name_or_path": tiny_model_dir(), "max_model_len": 512},
        # One-digit problems: fewer distinct tokens to memorize, so 50 steps suffice.
        "env": {"name": "arithmetic", "max_turns": 3, "args": {"digits": 1}},
        "engine": {"backend": "hf", "dtype": "float32", "max_new_tokens": 8},
        "learner": {"betas": [0.9, 0.95], "micro_batch_tokens": 2048},
        "logging": {"wandb_mode": "disabled", "console": True},
        "launch": {"run_root": str(tmp_path / "runs"), "name": "sft"},
        "sft": sft,
    })


def test_tiny_model_fits_demonstrations_and_checkpoint_reproduces_logits(tmp_path, one_thread):
    cfg = _cfg(tmp_path, lr=3e-3, num_demos=3, epochs=80, batch_episodes=3,
               schedule="constant", eval_before=False, eval_after=False)
    path = cfg.model.name_or_path
    demos = load_demos(cfg, load_tokenizer(path), DemoStats())
    assert len(demos) == 3 and all(len(d.steps) == 2 for d in demos)
    torch.manual_seed(0)
    trainer = PolicyTrainer(trainer_config(cfg), path)
    assert trainer.optimizer.param_groups[0]["lr"] == 3e-3  # sft.lr, not learner.lr
    history = fit(trainer, demos, cfg.sft.epochs, cfg.sft.batch_episodes, schedule="constant")
    losses = [m["loss"] for m in history]
    # A random init predicts ~uniformly over the 49152-token vocabulary: CE ≈ ln 49152 = 10.80.
    assert losses[0] == pytest.approx(math.log(49152), abs=0.1)
    # One step per epoch over the same 6 rows: the model memorizes them (loss near zero).
    # (80 epochs: with the calculator's schema in the system prompt the contexts are ~120
    # tokens longer; 50 epochs ended at loss 0.054, 60 still mispredicted one action token.)
    assert len(losses) == 80 and losses[-1] < 0.05, losses[::5]
    assert history[-1]["action_tokens"] == sum(len(s.action_ids) for d in demos for s in d.steps)

    ckpt = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 0, "updates": 80,
                                                               "samples_drawn": 0})
    assert Path(ckpt).name == "step-80"
    assert checkpoint.latest_checkpoint(str(tmp_path)) == str(Path(ckpt).resolve())
    mb = sft_micro_batches(demo_pairs(demos), 2048, trainer.pad_id)[0]
    trainer.model.eval()
    loaded = load_causal_lm(ckpt).eval()
    with torch.no_grad():
        want = trainer.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
        got = loaded(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # The trained model's greedy choice at every action position is the demonstrated token.
    pred = want[:, :-1].argmax(-1)[mb.action_mask[:, 1:]]
    assert pred.tolist() == mb.input_ids[:, 1:][mb.action_mask[:, 1:]].tolist()


def test_sft_command_end_to_end(tmp_path, capsys):
    from agent_r1_async.cli import main

    cfg_file = tmp_path / "sft.yaml"
    cfg_file.write_text(json.dumps({  # JSON is YAML
        "model": {"name_or_path": tiny_model_dir(), "max_model_len": 512},
        "env": {"name": "arithmetic", "max_turns": 2},
        "engine": {"backend": "hf", "dtype": "float32", "max_new_tokens": 8},
        "logging": {"wandb_mode": "disabled"},
        "launch": {"run_root": str(tmp_path / "runs"), "name": "sft"},
        "sft": {"num_demos": 4, "epochs": 2, "batch_episodes": 2, "lr": 1e-3,
                "eval_before": False, "eval_after": True, "eval_num_tasks": 2},
    }))
    assert main(["sft", "--config", str(cfg_file)]) == 0
    out = capsys.readouterr().out
    assert "[sft] step 4/4" in out
    # the formats this machine resolves the config to: the engine's as configured
    assert "[sft] precision: engine float32, learner " in out
    table = [line.split() for line in out.splitlines() if line.strip()]
    assert any(cells[0] == "after" and cells[1] == "2" for cells in table)  # model, episodes
    (run_dir,) = (tmp_path / "runs").iterdir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "sft/loss" in r]
    assert [r["update"] for r in steps] == [1, 2, 3, 4]  # 4 demos / 2 per step × 2 epochs
    evals = [r for r in records if "eval/after/episodes" in r]
    assert len(evals) == 1 and evals[0]["eval/after/episodes"] == 2
    latest = run_dir / "checkpoints" / "latest"
    state = json.loads((latest / "learner_state.json").read_text())
    assert state["version"] == 0 and state["updates"] == 4 and state["sft_demos"] == 4
    # `model.init_from` accepts it: an HF model directory with its tokenizer.
    assert load_tokenizer(str(latest)).eos_token_id == 2
