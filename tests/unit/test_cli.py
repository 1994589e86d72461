"""CLI: fast help, every command has --help, config errors exit 2 with the key."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from agent_r1_async.cli import build_parser, main


def test_help_is_fast_and_imports_nothing_heavy():
    code = ("import sys, agent_r1_async.cli as c\n"
            "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'vllm', 'ray', 'transformers') if m in sys.modules]\n"
            "print('HEAVY', heavy)\n")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    elapsed = time.monotonic() - t0
    assert "HEAVY []" in out.stdout
    for cmd in ("launch", "eval", "prepare-model", "envs", "report", "sft"):
        assert cmd in out.stdout
    assert elapsed < 2.0


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
