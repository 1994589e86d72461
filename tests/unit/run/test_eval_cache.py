"""The before-RL evaluation of a cached warm start is kept beside it and reused while every
setting that decides the evaluation is the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_r1_async.config import RunConfig, load_config
from agent_r1_async.run import eval_cache
from agent_r1_async.run.evaluate import evaluate_and_log

ROOT = Path(__file__).resolve().parents[3]


def _cfg(*overrides: str) -> RunConfig:
    return load_config(ROOT / "configs/default.yaml", ["engine.dtype=float32", *overrides])


def test_the_key_follows_tasks_seed_and_engine_not_the_rl_settings() -> None:
    base = eval_cache.eval_key(_cfg())
    assert len(base) == 16 and int(base, 16) >= 0
    same = ["eval.in_launch=false", "eval.every_updates=5", "learner.lr=3e-6",
            "buffer.max_staleness=0", "sft.num_demos=8", "launch.name=other"]
    for o in same:
        assert eval_cache.eval_key(_cfg(o)) == base, o
    different = ["eval.num_tasks=10", "eval.temperature=0.5", "eval.samples_per_task=2",
                 "launch.seed=1", "env.args.num_ops=2", "env.max_turns=2",
                 "env.eval_split=test", "engine.max_new_tokens=64", "engine.dtype=bfloat16",
                 "model.max_model_len=2048", "context.builder=last_k"]
    keys = {eval_cache.eval_key(_cfg(o)) for o in different}
    assert base not in keys and len(keys) == len(different)


def _entry(cache: Path, complete: bool = True) -> Path:
    ckpt = cache / "warm-start" / "0123456789abcdef" / "checkpoints" / "step-3"
    ckpt.mkdir(parents=True)
    if complete:
        (cache / "warm-start" / "0123456789abcdef" / ".complete").write_text("")
    return ckpt


def test_only_a_complete_cached_warm_start_has_a_cache_path(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "cache"))
    cfg = _cfg()
    ckpt = _entry(tmp_path / "cache")
    path = eval_cache.cache_path(cfg, str(ckpt))
    assert path == (tmp_path / "cache" / "warm-start" / "0123456789abcdef" / "evals"
                    / f"{eval_cache.eval_key(cfg)}.json").resolve()
    assert eval_cache.cache_path(cfg, str(tmp_path / "runs" / "x" / "step-3")) is None
    assert eval_cache.cache_path(cfg, "smollm2-135m-instruct") is None
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "other"))
    half = _entry(tmp_path / "other", complete=False)  # still being built
    assert eval_cache.cache_path(cfg, str(half)) is None


class _Logger:
    def __init__(self) -> None:
        self.logged: list[tuple[dict[str, Any], int]] = []
        self.lines: list[str] = []

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.logged.append((metrics, step))

    def console(self, line: str) -> None:
        self.lines.append(line)


def test_a_second_evaluation_logs_the_kept_result_without_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "cache"))
    cfg = _cfg()
    ckpt = str(_entry(tmp_path / "cache"))
    path = eval_cache.cache_path(cfg, ckpt)
    runs: list[str] = []

    def run(c: RunConfig, model: str, n: int) -> dict[str, float]:
        runs.append(model)
        return {"success": 0.25, "tool_calls": 3.0, "tool_errors": 1.0}

    first, second = _Logger(), _Logger()
    row1 = evaluate_and_log(cfg, ckpt, "before", first, 0, 4, "[launch]", run=run, cache=path)
    row2 = evaluate_and_log(cfg, ckpt, "before", second, 0, 4, "[launch]", run=run, cache=path)
    assert runs == [ckpt]  # the second did not run
    assert row1 == row2 == {"model": "before", "success": 0.25, "tool_calls": 3.0,
                            "tool_errors": 1.0, "valid_calls_per_episode": 2.0}
    assert first.logged == second.logged == [({
        "eval/before/success": 0.25, "eval/before/tool_calls": 3.0,
        "eval/before/tool_errors": 1.0, "eval/before/valid_calls_per_episode": 2.0}, 0)]
    assert "cached" in second.lines[0] and "cached" not in first.lines[0]
    # another seed is another evaluation
    other = _cfg("launch.seed=7")
    evaluate_and_log(other, ckpt, "before", _Logger(), 0, 4, "[launch]", run=run,
                     cache=eval_cache.cache_path(other, ckpt))
    assert runs == [ckpt, ckpt]


def test_an_unreadable_kept_result_is_evaluated_again(tmp_path: Path) -> None:
    path = tmp_path / "evals" / "k.json"
    path.parent.mkdir()
    path.write_text("{not json")
    assert eval_cache.load(path) is None
    eval_cache.save(path, {"success": 1.0}, 2.0)
    assert eval_cache.load(path) == {"success": 1.0}
    assert eval_cache.load(None) is None
