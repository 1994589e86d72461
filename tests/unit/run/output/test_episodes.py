"""Episode samples on disk and in W&B (run/output/episodes.py) and the terminal viewer
(run/output/episode_view.py, `agent-r1-async episodes`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_r1_async import cli
from agent_r1_async.run.output import episodes as ep_out
from agent_r1_async.run.output.episode_view import find_episode
from agent_r1_async.run.output.episodes import TABLE_COLUMNS, EpisodeLog, enrich, sample_files


def _row(eid: str, step: int, **kw: Any) -> dict[str, Any]:
    """A row as the learner makes it (learner/episode_sample.py)."""
    row = {
        "update": 4, "episode_id": eid, "group_id": "g-7", "task_id": "train-12",
        "env_name": "arithmetic", "actor_id": "actor-0", "pick": "best", "num_steps": 2,
        "outcome_reward": 1.0, "return": 1.3, "status": "ok", "error": "", "metrics": {},
        "canaries": [], "step": step, "context_tokens": 120,
        "context_tail": "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n",
        "action": "", "action_tokens": 9, "observation": "", "process_reward": 0.0,
        "advantage": 0.7, "versions": [3], "staleness": 1, "is_weight_mean": 1.01,
        "is_weight_max": 1.2, "is_weight_min": 0.9, "finish_reason": "stop",
        "num_tool_calls": 0,
    }
    row.update(kw)
    return row


CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'
RESPONSE = "<|im_end|>\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n"


def _sample() -> list[dict[str, Any]]:
    good = [
        _row("ep-good", 0, action=f"I compute it. {CALL}", observation=RESPONSE,
             process_reward=0.3, num_tool_calls=1),
        _row("ep-good", 1, action="<answer>84</answer>", versions=[3, 4], staleness=1,
             is_weight_max=6.5, process_reward=0.0),
    ]
    low = [_row("ep-low", 0, pick="worst", num_steps=1, outcome_reward=0.0, **{"return": -0.1},
                action="<answer>80</answer>", process_reward=-0.1, advantage=-0.7)]
    failed = [
        _row("ep-fail", 0, pick="failed", status="env_error", outcome_reward=0.0,
             **{"return": 0.0}, error="ToolError: calculator timed out after 10 s",
             action=CALL, observation=RESPONSE, versions=[2], staleness=2, advantage=None,
             is_weight_mean=None, is_weight_max=None, is_weight_min=None, num_tool_calls=1),
        _row("ep-fail", 1, pick="failed", status="env_error", outcome_reward=0.0,
             **{"return": 0.0}, error="ToolError: calculator timed out after 10 s",
             action=CALL, versions=[3], staleness=1, advantage=None, is_weight_mean=None,
             is_weight_max=None, is_weight_min=None, finish_reason="length",
             num_tool_calls=1),
    ]
    return good + low + failed


class _Sinks:
    def __init__(self, table_error: str | None = None) -> None:
        self.tables: list[tuple[str, list[str], list[list[Any]], int]] = []
        self.said: dict[str, str] = {}
        self.table_error = table_error

    def log_table(self, key: str, columns: list[str], data: list[list[Any]],
                  step: int) -> str | None:
        self.tables.append((key, columns, data, step))
        return self.table_error

    def say_once(self, text: str, key: str) -> None:
        self.said.setdefault(key, text)


def _write(run_dir: Path, rows: list[dict[str, Any]], keep: int = 20,
           sinks: _Sinks | None = None) -> Path | None:
    sinks = sinks or _Sinks()
    return EpisodeLog(run_dir, keep, sinks.log_table, sinks.say_once).write(rows, step=5)


def test_tool_calls_and_results_are_read_from_the_text():
    row = enrich(_row("e", 0, action=f"ok {CALL}", observation=RESPONSE))
    assert row["tool_calls"] == [{"name": "calculator", "arguments": {"expression": "12*7"}}]
    assert row["tool_results"] == ["84"]
    assert enrich(_row("e", 0, action="<tool_call>not json</tool_call>"))["tool_calls"] == []


def test_a_sample_goes_to_its_file_and_to_one_table_row_per_step(tmp_path):
    sinks = _Sinks()
    path = _write(tmp_path, _sample(), sinks=sinks)
    assert path == tmp_path / "episodes" / "update-4.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 5 and rows[0]["tool_calls"][0]["name"] == "calculator"
    ((key, columns, data, step),) = sinks.tables
    assert (key, columns, step) == ("episodes/sample", TABLE_COLUMNS, 5)
    cell = dict(zip(columns, data[1], strict=True))
    assert cell["versions"] == "[3, 4]" and cell["is_weight_max"] == 6.5  # lists as JSON text
    assert cell["step"] == 1 and cell["episode_id"] == "ep-good"
    assert sinks.said == {} and not list((tmp_path / "episodes").glob(".*"))


def test_old_sample_files_are_pruned_to_the_newest(tmp_path):
    for update in range(1, 6):
        _write(tmp_path, [_row("e", 0, update=update)], keep=2)
    assert [u for u, _ in sample_files(tmp_path)] == [4, 5]
    _write(tmp_path, [_row("e", 0, update=6)], keep=0)  # 0: keep all
    assert [u for u, _ in sample_files(tmp_path)] == [4, 5, 6]


def test_a_sample_is_cut_at_whole_rows_past_the_size_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(ep_out, "MAX_FILE_BYTES", 3000)
    path = _write(tmp_path, _sample())
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert 0 < len(rows) < 5 and path.stat().st_size <= 3000 + 200
    assert rows[-1]["cut"].endswith("more steps past 3000 bytes")


def test_failures_to_write_are_one_line_each_and_stop_nothing(tmp_path):
    (tmp_path / "episodes").write_text("a file where the folder should be")
    sinks = _Sinks(table_error="CommError: W&B is down")
    for _ in range(3):
        assert _write(tmp_path, _sample(), sinks=sinks) is None
    assert set(sinks.said) == {"episodes-file", "episodes-wandb"}
    assert "cannot write" in sinks.said["episodes-file"]
    assert "W&B is down" in sinks.said["episodes-wandb"]
    assert len(sinks.tables) == 3  # W&B still gets each sample


def test_metrics_logger_table_failure_is_a_line_not_a_write_failure(tmp_path):
    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.output.metrics import MetricsLogger

    logger = MetricsLogger(config_from_dict({"logging": {"wandb_mode": "disabled"}}), tmp_path)
    assert logger.log_table("episodes/sample", ["a"], [[1]], 1) is None  # W&B off

    class _Down:
        def log(self, *a: Any, **kw: Any) -> None:
            raise ConnectionError("W&B is down")

    logger._wandb = _Down()
    line = logger.log_table("episodes/sample", ["a"], [[1]], 1)
    assert line is not None and "W&B is down" in line and logger.write_failure is None
    logger._wandb = None
    logger.close()


# ---------------------------------------------------------------------------- the viewer

def _run(tmp_path: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["episodes", str(tmp_path), "--color", "never", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_failed_prints_the_failed_episode_turn_by_turn(tmp_path, capsys):
    _write(tmp_path, _sample())
    code, out, _ = _run(tmp_path, "--failed", capsys=capsys)
    assert code == 0
    assert out.splitlines() == [
        "update 4 · episode ep-fail · group g-7 · arithmetic task train-12 · picked: failed",
        "status env_error · outcome +0.00 · return +0.00 · 2 steps · versions v2→3 "
        "(changed mid-episode)",
        "error: ToolError: calculator timed out after 10 s",
        "── step 0 · v2 · staleness 2 · reward +0.00 · adv - · stop",
        "  context (tail):",
        "    <|im_start|>user",
        "    What is 12 * 7?<|im_end|>",
        "    <|im_start|>assistant",
        "  action:",
        f"    {CALL}",
        '  tool call: calculator {"expression": "12*7"}',
        "  tool result: 84",
        "── step 1 · v3 (was v2) · staleness 1 · reward +0.00 · adv - · length",
        "  action:",
        f"    {CALL}",
        '  tool call: calculator {"expression": "12*7"}',
    ]


def test_worst_id_list_and_the_default(tmp_path, capsys):
    _write(tmp_path, _sample())
    _, out, _ = _run(tmp_path, "--worst", capsys=capsys)
    assert out.startswith("update 4 · episode ep-low ") and "reward -0.10" in out
    _, out, _ = _run(tmp_path, capsys=capsys)  # the sample's first episode
    assert out.startswith("update 4 · episode ep-good ")
    assert "v3→4 (new weights within the action)" in out
    assert "IS w mean 1.01 max 6.50 min 0.90 (outside [0.2, 5])" in out  # the band: 1/c_max, c_max
    assert "IS w mean 1.01 max 1.20 · reward +0.30" in out  # inside: plain
    _, out, _ = _run(tmp_path, "--id", "ep-lo", capsys=capsys)
    assert out.startswith("update 4 · episode ep-low ")
    _, out, _ = _run(tmp_path, "--list", capsys=capsys)
    assert out.splitlines()[0] == "update 4: 3 episodes" and "ep-fail" in out.splitlines()[3]


def test_a_step_the_learner_left_out_says_so(tmp_path, capsys):
    rows = _sample()
    rows[0].update(advantage=0.0, is_weight_mean=None, is_weight_max=None, is_weight_min=None)
    _write(tmp_path, rows)
    _, out, _ = _run(tmp_path, capsys=capsys)
    assert "── step 0 · v3 · staleness 1 · left out (advantage 0) · reward +0.30 · adv +0.00" in out


def test_the_band_is_the_runs_own(tmp_path, capsys):
    _write(tmp_path, _sample())
    (tmp_path / "config.yaml").write_text("algorithm:\n  c_max: 8.0\n  is_mask_high: 10.0\n")
    _, out, _ = _run(tmp_path, capsys=capsys)
    assert "outside" not in out  # 6.5 is inside [1/8, 10]


def test_color_marks_tool_calls_rewards_versions_and_weights(tmp_path, capsys):
    _write(tmp_path, _sample())
    cli.main(["episodes", str(tmp_path), "--color", "always"])
    out = capsys.readouterr().out
    assert "\033[36;1m  tool call: calculator" in out
    assert "\033[32m+0.30\033[0m" in out  # a positive reward in green
    assert "\033[33mv3→4 (new weights within the action)\033[0m" in out
    assert "\033[31;1mIS w mean 1.01 max 6.50" in out


def test_nothing_to_show_is_exit_1_with_a_reason(tmp_path, capsys):
    code, _, err = _run(tmp_path, capsys=capsys)
    assert code == 1 and "no episode samples" in err and "logging.episodes_every" in err
    _write(tmp_path, _sample()[:3])
    code, _, err = _run(tmp_path, "--failed", capsys=capsys)
    assert code == 1 and "no failed episode" in err
    code, _, err = _run(tmp_path, "--update", "9", capsys=capsys)
    assert code == 1 and "no sample of update 9" in err and "samples: 4" in err


def test_failed_searches_older_samples_too(tmp_path):
    _write(tmp_path, _sample())
    _write(tmp_path, [_row("ep-new", 0, update=8)])
    update, rows, _ = find_episode(tmp_path, only_failed=True)
    assert (update, rows[0]["episode_id"]) == (4, "ep-fail")
    assert find_episode(tmp_path)[0] == 8
