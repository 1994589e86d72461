"""CLI: fast help, every command has --help, config errors exit 2 with the key; `launch
--resume` of a directory without a checkpoint refused unless `--fresh`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_r1_async.cli import build_parser, main

HEAVY = ("torch", "vllm", "ray", "transformers", "numpy", "yaml", "zmq", "msgspec", "wandb")


def test_help_is_fast_because_it_imports_nothing_heavy():
    """Help is fast because it imports none of the packages whose import takes seconds (or
    anything they would pull in): checked by name, not timed."""
    code = ("import sys, agent_r1_async.cli as c\n"
            "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
            "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    assert "HEAVY []" in out.stdout
    for cmd in ("launch", "eval", "prepare-model", "envs", "report", "sft"):
        assert cmd in out.stdout


@pytest.mark.parametrize("argv", [["launch", "--help"], ["eval", "--help"],
                                  ["prepare-model", "--help"], ["envs", "list", "--help"],
                                  ["sft", "--help"], ["report", "--help"]])
def test_every_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 0
    assert "usage: agent-r1-async" in capsys.readouterr().out


def test_config_error_exits_2_and_names_key(capsys):
    assert main(["config", "show", "--set", "buffer.max_stalenes=1"]) == 2
    assert "unknown config key `buffer.max_stalenes`" in capsys.readouterr().err


def test_config_show_applies_override(capsys):
    assert main(["config", "show", "--set", "buffer.max_staleness=0"]) == 0
    assert "max_staleness: 0" in capsys.readouterr().out


def test_prepare_model_list(capsys):
    assert main(["prepare-model", "--list"]) == 0
    assert "smollm2-135m-instruct" in capsys.readouterr().out


def test_launch_help_documents_fresh(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["launch", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert ("--fresh with --resume: RUN_DIR has no checkpoint yet (its launch stopped before "
            "the first one); train it from update 0 in that directory") in out


def test_fresh_without_resume_is_one_config_error_line(capsys):
    assert main(["launch", "--fresh"]) == 2
    assert capsys.readouterr().err == (
        "agent-r1-async: config error: --fresh: only with --resume RUN_DIR (a launch without "
        "--resume always starts from scratch in a new run directory)\n")


def _resume_dir(tmp_path: Path) -> Path:
    """A run directory a launch left before its first checkpoint: its config, no checkpoint."""
    from agent_r1_async.config import dump_config, load_config

    run = tmp_path / "tiny-20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml",
                      [f"launch.run_root={tmp_path}"])
    (run / "config.yaml").write_text(dump_config(cfg))
    return run


def test_resume_without_a_checkpoint_is_refused_and_fresh_passes_it_on(tmp_path, capsys,
                                                                       monkeypatch):
    import agent_r1_async.run.launch as launch_module

    def no_ray(*args, **kwargs):
        raise AssertionError("the refusal comes before Ray starts")

    monkeypatch.setattr(launch_module, "start_ray", no_ray)
    run = _resume_dir(tmp_path)
    assert main(["launch", "--resume", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"agent-r1-async: config error: --resume: {run} has no checkpoint to resume from "
        "(checkpoints/ is empty); pass --fresh to train it from scratch in that directory\n")
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"]

    calls: list[dict] = []
    monkeypatch.setattr(launch_module, "launch", lambda cfg, **kw: calls.append(kw) or 0)
    assert main(["launch", "--resume", str(run), "--fresh"]) == 0
    assert calls == [{"address": None, "resume": str(run), "force": False, "fresh": True}]
