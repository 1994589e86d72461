"""The launch console (run/output/console.py): plain lines off a terminal, rich bars on one, events
said once, and the RL stage's ETA (the earlier of the update rate's and the budget's)."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from agent_r1_async.run.output.console import Console, RlProgress, clock, panel_rows

ROOT = Path(__file__).resolve().parents[4]


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _record(version: int) -> dict:
    return {"version": version, "reward/mean": 0.5, "env/success": 0.25, "staleness/mean": 1.25,
            "staleness/max": 2, "is_weight/mean": 0.98, "actors/tokens_per_s": 123.4,
            "learner/update_time_s": 31.0, "learner/idle_ratio": 0.1, "buffer/groups_ready": 3,
            "buffer/drops/stale": 2, "buffer/drops/expired_episode": 1}


def test_plain_console_prints_lines_events_once_and_one_line_per_update(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(tmp_path / "logs", live=False, stream=out)
    console.say("run directory: X")
    assert console.event("actor-0 died: killed", key="died 0 1")
    assert not console.event("actor-0 died: killed again", key="died 0 1")  # said once
    console.stage("rl", "RL updates", 10)  # silent off a terminal
    console.advance("rl", 3)
    console.update(_record(3))
    console.close()
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["[launch] run directory: X", "[launch] actor-0 died: killed"]
    assert lines[2].startswith("v3 | reward 0.500 | staleness 1.25/2 | IS w 0.98 | gen 123 tok/s")
    assert len(lines) == 3
    events = (tmp_path / "logs" / "events.log").read_text().splitlines()
    assert len(events) == 1 and events[0].endswith(" actor-0 died: killed")


def test_panel_rows_show_the_last_update() -> None:
    rows = dict(panel_rows(_record(7)))
    assert rows["update"] == "v7" and rows["reward"] == "0.500" and rows["success"] == "0.250"
    assert rows["staleness mean/max"] == "1.25 / 2" and rows["IS weight"] == "0.98"
    assert rows["gen tok/s"] == "123" and rows["learner s/update"] == "31.0"
    assert rows["learner idle"] == "10%" and rows["buffer ready/dropped"] == "3 / 3"  # 2 + 1
    assert dict(panel_rows({"version": 1}))["reward"] == "-"


def test_rl_eta_is_the_earlier_of_rate_and_budget() -> None:
    clk = _Clock()
    rl = RlProgress(Console(live=False, stream=io.StringIO()), start=0, total=40, budget_s=1500,
                    now=clk)
    assert rl.eta_s(0) == 1500  # no update yet: the budget is all there is
    clk.t += 30.0
    assert rl.eta_s(1) == 1170.0  # 39 updates x 30 s = 1170 < 1470 s left
    clk.t += 570.0  # 600 s for 10 updates: 60 s each, 30 left = 1800 s > 900 s of budget
    assert rl.eta_s(10) == 900.0
    assert not rl.out_of_time()
    clk.t += 901.0
    assert rl.out_of_time()
    resumed = RlProgress(Console(live=False, stream=io.StringIO()), start=20, total=40,
                         budget_s=0, now=clk)
    clk.t += 100.0
    assert resumed.eta_s(25) == 300.0  # 5 updates in 100 s since the resume: 15 left x 20 s
    assert clock(59) == "0:59" and clock(3725) == "1:02:05"


_LIVE_SCRIPT = """
import sys, time
from agent_r1_async.run.output.console import Console, RlProgress
c = Console()
c.say("run directory: X")
c.stage("eval-before", "held-out eval before", 8)
for i in range(1, 9):
    c.advance("eval-before", i)
c.finish("eval-before")
rl = RlProgress(c, 0, 10, 600)
c.update({"version": 3, "reward/mean": 0.5})
rl.advance(3)
time.sleep(0.6)
c.close()
"""


def test_progress_bars_render_under_a_pseudo_terminal() -> None:
    parent, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", _LIVE_SCRIPT], stdout=child, stderr=child,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"},
                            cwd=ROOT)
    os.close(child)
    chunks = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            data = os.read(parent, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(parent)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, screen
    assert "[launch] run directory: X" in screen
    assert "held-out eval before" in screen and "8/8" in screen
    assert "RL updates (budget" in screen and "3/10" in screen
    assert "━" in screen  # rich's bar glyph
    assert "\x1b[" in screen  # drawn with terminal control sequences
    assert "reward" in screen and "0.500" in screen  # the last-update panel
    assert "[dim]" not in screen  # cells are styled text, never markup shown as is


def test_launch_flags_verbose_and_force(monkeypatch) -> None:
    """`--verbose` turns `logging.verbose` on (every process's output on the console too);
    `--force` reaches the memory check."""
    from agent_r1_async import cli
    from agent_r1_async.run import launch as launch_mod

    seen = {}

    def fake_launch(cfg, address=None, resume=None, force=False, fresh=False):
        seen.update(verbose=cfg.logging.verbose, force=force)
        return 0

    monkeypatch.setattr(launch_mod, "launch", fake_launch)
    tiny = str(ROOT / "configs" / "tiny.yaml")
    assert cli.main(["launch", "--config", tiny, "--verbose", "--force"]) == 0
    assert seen == {"verbose": True, "force": True}
    assert cli.main(["launch", "--config", tiny]) == 0
    assert seen == {"verbose": False, "force": False}
