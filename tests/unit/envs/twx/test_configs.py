"""configs/twx_coin.yaml and configs/twx_cooking.yaml: `envs check` passes on them, their
oracles fit `env.max_turns`, and the context builder keeps every step within the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_r1_async.config import load_config
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.run.preflight.env_check import check_env
from agent_r1_async.run.preflight.prompt_budget import prompt_budget

pytestmark = pytest.mark.usefixtures("twx_ready")
ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(("name", "game", "max_turns"), [
    ("twx_coin.yaml", "coin", 20), ("twx_cooking.yaml", "cooking", 40)])
def test_envs_check_passes_and_oracles_fit_the_horizon(name: str, game: str, max_turns: int):
    cfg = load_config(ROOT / "configs" / name)
    assert cfg.env.args["game"] == game and cfg.env.max_turns == max_turns
    # truncate keeps the prompt and the newest turns within what leaves room for an action
    assert cfg.context.builder == "truncate"
    assert cfg.context.max_tokens == cfg.model.max_model_len - cfg.engine.max_new_tokens
    budget, note = prompt_budget(cfg)
    ok, lines = check_env(cfg.env, ["train", "dev"], 1, budget, note)
    assert ok, "\n".join(lines)
    spec = get_env_spec(cfg.env)
    for split in ("train", "dev"):
        for task in spec.tasks(split)[:25]:
            assert len(spec.oracle(task)) <= max_turns, task.task_id
