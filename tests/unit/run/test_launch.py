"""`launch`'s loop logs each update once, also when the learner redoes updates after a restart
from an older checkpoint (in the run) or after `--resume` of a run that crashed."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent_r1_async.config import config_from_dict
from agent_r1_async.run.launch import _train
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events
from agent_r1_async.run.output.metrics_file import last_logged_update


class _Supervisor:
    """Versions as a learner restarted from checkpoints would produce them."""

    def __init__(self, start: int, versions: list[int]) -> None:
        self.start, self.versions = start, list(versions)

    def version(self) -> int:
        return self.start

    def update(self, stop=None) -> dict | None:
        if not self.versions:  # no batch comes: the learner waits until the launch stops it
            while not stop():
                time.sleep(0.01)
            return None
        return {"metrics": {"version": self.versions.pop(0), "loss": 0.5},
                "staleness_hist": {}}

    def buffer_stats(self) -> dict:
        return {"groups_ready": 1}

    def check_failures(self, buffer: dict) -> None:
        pass


class _Logger:
    def __init__(self, run_dir: Path, fails_at: int | None = None) -> None:
        self.run_dir, self.steps = run_dir, []
        self.fails_at = fails_at  # the update whose line finds the disk full
        self.write_failure: str | None = None

    def log(self, record: dict, step: int, histograms: dict | None = None) -> None:
        if step == self.fails_at:
            self.write_failure = f"disk full: {self.run_dir}/metrics.jsonl (0 bytes free): ..."
            return
        self.steps.append(step)
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"update": step, **record}) + "\n")

    def log_table(self, key: str, columns: list, data: list, step: int) -> str | None:
        return None



def _cfg(total: int):
    return config_from_dict({"learner": {"total_updates": total}})


def _run(cfg, sup: _Supervisor, logger: _Logger) -> tuple[int, str]:
    """`_train` with the plain (non-terminal) console: one progress line per update."""
    console = Console(None, live=False)
    return _train(cfg, sup, logger, console, Events(console, logger.run_dir, 1, 1000))


def test_updates_redone_after_a_learner_restart_are_logged_once(tmp_path, capsys):
    # Checkpoint at 2; updates 3, 4 logged; the learner dies and restarts from step-2.
    logger = _Logger(tmp_path)
    version, why = _run(_cfg(6), _Supervisor(0, [1, 2, 3, 4, 3, 4, 5, 6]), logger)
    assert (version, why) == (6, "done")
    assert logger.steps == [1, 2, 3, 4, 5, 6]
    lines = capsys.readouterr().out.splitlines()
    assert [line.endswith(" (redone)") for line in lines] == [
        False, False, False, False, True, True, False, False]


def test_a_metrics_write_that_fails_stops_the_loop_at_that_update(tmp_path):
    logger = _Logger(tmp_path, fails_at=3)
    assert _run(_cfg(6), _Supervisor(0, [1, 2, 3, 4, 5, 6]), logger) == (3, "metrics write failed")
    assert logger.steps == [1, 2]


def test_resume_after_a_crash_does_not_log_updates_twice(tmp_path):
    # The crashed run logged 1..5 (plus an eval-before record at 0 and a line cut short by
    # the crash); its latest checkpoint is step-3, so the resumed learner starts at 3.
    lines = [json.dumps({"update": 0, "eval/before/success": 0.1})]
    lines += [json.dumps({"update": u, "version": u}) for u in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"update": 6, "vers')
    assert last_logged_update(tmp_path / "metrics.jsonl") == 5
    logger = _Logger(tmp_path)
    _run(_cfg(7), _Supervisor(3, [4, 5, 6, 7]), logger)
    assert logger.steps == [6, 7]
    assert last_logged_update(tmp_path / "metrics.jsonl") == 7
    assert last_logged_update(tmp_path / "missing.jsonl") == 0


def test_the_wall_clock_budget_stops_an_update_that_waits_for_its_batch(tmp_path, capsys):
    """Long episodes: an update can wait for its batch longer than the whole budget. The loop
    stops when the budget runs out, not when the update ends (it never does here)."""
    cfg = config_from_dict({"learner": {"total_updates": 5}, "launch": {"max_wall_time_s": 0.2}})
    logger = _Logger(tmp_path)
    assert _run(cfg, _Supervisor(0, [1]), logger) == (1, "max_wall_time_s")
    assert logger.steps == [1]
    assert "wall-clock limit reached (launch.max_wall_time_s = 0 s) after 1 updates" in \
        capsys.readouterr().out
