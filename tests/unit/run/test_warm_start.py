"""launch.warm_start: the cache key follows what changes the weights; one training per key."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from agent_r1_async import precision
from agent_r1_async.config import RunConfig, config_from_dict, load_config
from agent_r1_async.run import warm_start as ws

ROOT = Path(__file__).resolve().parents[3]


def _cfg(*overrides: str) -> RunConfig:
    return load_config(ROOT / "configs/default.yaml", list(overrides))


def test_key_changes_with_what_trains_the_weights_only():
    base = ws.warm_start_key(_cfg())
    assert len(base) == 16 and int(base, 16) >= 0
    same = [  # RL-only and eval-only settings
        "learner.lr=3e-6", "learner.total_updates=7", "sft.eval_num_tasks=5",
        "sft.eval_before=false", "eval.num_tasks=10", "buffer.max_staleness=0",
        "actors.num_actors=3", "launch.name=other", "engine.temperature=0.7",
    ]
    for o in same:
        assert ws.warm_start_key(_cfg(o)) == base, o
    different = [
        "sft.lr=1e-4", "sft.num_demos=8", "sft.epochs=2", "learner.seed=1",
        "env.args.num_ops=2", "env.max_turns=2", "model.max_model_len=2048",
        "model.name_or_path=tiny-random-llama", "context.builder=last_k",
        "sft.demo_seed=0", "sft.demo_offset=32", "sft.max_wall_time_s=60",
    ]
    keys = {ws.warm_start_key(_cfg(o)) for o in different}
    assert base not in keys and len(keys) == len(different)
    # bf16 trains other weights; `auto` is keyed as what it resolves to on this machine
    on, off = ws.warm_start_key(_cfg("learner.bf16=true")), ws.warm_start_key(_cfg("learner.bf16=false"))
    assert on != off
    auto = ws.warm_start_key(_cfg("learner.bf16=auto"))
    cfg = _cfg()
    assert auto == (on if precision.learner_bf16(cfg.learner, model=cfg.model.name_or_path) else off)


def test_a_regenerated_multihop_corpus_trains_a_new_warm_start(tmp_path):
    import shutil

    from agent_r1_async.envs.multihop.loaders import SHIPPED_DIR

    data = tmp_path / "data"
    shutil.copytree(SHIPPED_DIR, data)

    def key() -> str:
        return ws.warm_start_key(load_config(ROOT / "configs/multihop.yaml",
                                             [f"env.args.data_dir={data}"]))

    first = key()
    (data / "VERSION").write_text("99\n")  # the oracle demonstrations come from other data
    assert key() != first
    (data / "VERSION").write_text((SHIPPED_DIR / "VERSION").read_text())
    assert key() == first


def test_trains_once_then_reuses_and_never_leaves_partial_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "cache"))
    calls: list[Path] = []

    def fake_stage(cfg: RunConfig, run_dir: Path, logger: object) -> str:
        calls.append(run_dir)
        step = run_dir / "checkpoints" / "step-3"
        step.mkdir(parents=True)
        (step / "model.safetensors").write_bytes(b"w")
        os.symlink("step-3", run_dir / "checkpoints" / "latest")
        return str(step)

    import agent_r1_async.sft.train as train

    monkeypatch.setattr(train, "train_stage", fake_stage)
    cfg = _cfg("logging.wandb_mode=disabled")
    lines: list[str] = []
    first = ws.warm_start(cfg, lines.append)
    key = ws.warm_start_key(cfg)
    entry = tmp_path / "cache" / "warm-start" / key
    assert first == str((entry / "checkpoints" / "step-3").resolve())
    assert (entry / ".complete").exists() and (entry / "config.json").exists()
    assert len(calls) == 1 and calls[0] != entry  # trained in a temporary directory
    assert ws.warm_start(cfg, lines.append) == first and len(calls) == 1
    assert "training" in lines[0] and first in lines[1] and "cached" in lines[2]

    def failing_stage(cfg: RunConfig, run_dir: Path, logger: object) -> str:
        raise RuntimeError("killed mid-training")

    monkeypatch.setattr(train, "train_stage", failing_stage)
    other = msgspec.structs.replace(cfg, sft=msgspec.structs.replace(cfg.sft, lr=1e-4))
    with pytest.raises(RuntimeError, match="killed"):
        ws.warm_start(other, lines.append)
    leftovers = sorted(p.name for p in (tmp_path / "cache" / "warm-start").iterdir())
    assert leftovers == sorted([key, f"{key}.lock", f"{ws.warm_start_key(other)}.lock"])


def test_a_cached_warm_start_is_found_without_a_child_process(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "cache"))
    cfg = _cfg("logging.wandb_mode=disabled")
    entry = tmp_path / "cache" / "warm-start" / ws.warm_start_key(cfg)
    (entry / "checkpoints" / "step-3").mkdir(parents=True)
    os.symlink("step-3", entry / "checkpoints" / "latest")
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def no_child(*args: object, **kwargs: object) -> str:
        raise AssertionError("a cached warm start needs no child process")

    monkeypatch.setattr(ws.child, "in_subprocess", no_child)
    assert not ws.is_cached(cfg)  # no .complete marker: not cached
    (entry / ".complete").write_text("ok\n")
    messages: list[tuple] = []
    out = ws.prepare_start(cfg, run_dir, on_message=messages.append)
    step = str((entry / "checkpoints" / "step-3").resolve())
    assert out.model.init_from == step
    assert messages == [("say", f"[launch] warm start: cached {entry}"),
                        ("say", f"[launch] warm start: RL starts from {step}")]
    assert f"init_from: {step}" in (run_dir / "config.yaml").read_text()


def test_the_key_of_a_config_without_the_newer_sft_settings_is_unchanged():
    """demo_seed / demo_offset / max_wall_time_s / resume_from at their defaults, and the compact
    and truncate builders' context settings under another builder, leave the key as it was before they existed: the
    key of a config whose sections lack them (by hand: the same hash of the same parts)."""
    import hashlib
    import json

    from agent_r1_async.actors.context import PROMPT_LAYOUT

    cfg = _cfg()
    learner = msgspec.to_builtins(cfg.learner)
    learner["bf16"] = precision.learner_bf16(cfg.learner, model=cfg.model.name_or_path)
    sft = {k: v for k, v in msgspec.to_builtins(cfg.sft).items()
           if k not in ("eval_before", "eval_after", "eval_num_tasks", "log_every",
                        "demo_seed", "demo_offset", "max_wall_time_s", "resume_from")}
    parts = {
        "model": [cfg.model.name_or_path, cfg.model.dtype, cfg.model.max_model_len],
        "env": msgspec.to_builtins(cfg.env),
        "context": {k: v for k, v in msgspec.to_builtins(cfg.context).items()
                    if k not in ("summary_max_tokens", "summary_prompt",  # not compact
                                 "truncate_to")},  # not truncate
        "sft": sft, "learner": {k: learner[k] for k in ws._LEARNER_KEYS},
        "prompt_layout": PROMPT_LAYOUT,
    }
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    assert ws.warm_start_key(cfg) == hashlib.sha256(blob).hexdigest()[:16]


def test_each_training_step_line_reaches_the_launch_console(tmp_path, monkeypatch, capsys):
    """The stage's step lines go to the launch (child.say), so a console that draws no bar
    (stdout not a terminal) still shows the warm start's steps, loss and tokens/s."""
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "cache"))

    def fake_stage(cfg: RunConfig, run_dir: Path, logger: object) -> str:
        from agent_r1_async.sft.train import progress

        for step in (1, 2):
            logger.console(progress({"step": step, "total_steps": 2, "epoch": step / 2,  # type: ignore[attr-defined]
                                     "loss": 0.5 / step, "grad_norm": 1.0,
                                     "tokens_per_s": 300.0, "step_time_s": 4.0}))
        ckpt = run_dir / "checkpoints" / "step-2"
        ckpt.mkdir(parents=True)
        os.symlink("step-2", run_dir / "checkpoints" / "latest")
        return str(ckpt)

    import agent_r1_async.sft.train as train

    monkeypatch.setattr(train, "train_stage", fake_stage)
    ws.warm_start(_cfg("logging.wandb_mode=disabled"), lambda line: None)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "[launch] warm start: step 1/2 | epoch 0.50 | loss 0.5000 | grad 1.00 | 300 tok/s | 4.0 s/step",
        "[launch] warm start: step 2/2 | epoch 1.00 | loss 0.2500 | grad 1.00 | 300 tok/s | 4.0 s/step",
    ]


def test_truncate_to_keys_the_warm_start_only_when_set_under_truncate():
    def key(*overrides: str) -> str:
        return ws.warm_start_key(config_from_dict({}, ["learner.bf16=false", *overrides]))

    truncate = ("context.builder=truncate", "context.max_tokens=900")
    assert key("context.truncate_to=500") == key()
    assert key(*truncate, "context.truncate_to=0") == key(*truncate)
    assert key(*truncate, "context.truncate_to=500") not in {key(*truncate), key()}
