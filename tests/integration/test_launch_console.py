"""What a person watching `agent-r1-async launch` sees (run/output/console.py, run/output/events.py).

Real tiny launches (Ray, ZeroMQ, buffer, learner, two HF-engine actors):
- an actor's process is SIGKILLed after the first update: the console says, once each and in
  the launch's own words, which actor died and why, that Ray restarted it and at which
  version it rejoined; its own log file under RUN_DIR/logs/ holds both of its processes;
- under a pseudo-terminal the stage bars and the last-update panel render;
- off a terminal, every console line is the launch's own (no Ray prefixes, no third-party
  warnings).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.cli_runs import CLI, ROOT, cli_env
from tests.integration.test_launch import _await_updates, _start

OWN_LINE = re.compile(r"^(\[launch\] |v\d+ \| reward |\s*model |\s*-+|\s*before |\s*after )")


def _wait_file(path: Path, text: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in (content := path.read_text()):
            return content
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path} within {timeout_s:.0f} s")


@pytest.mark.slow
def test_a_killed_actor_is_named_with_its_cause_restart_and_rejoin(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--set", "learner.total_updates=1000",
                  "--set", "learner.checkpoint_every=1000")
    try:
        run_dir = _await_updates(proc, tmp_path, 1).parent
        log = run_dir / "logs" / "actor-0.log"
        first = re.search(r"actor-0 pid (\d+) started", log.read_text())
        assert first, log.read_text()[:2000]
        os.kill(int(first.group(1)), signal.SIGKILL)
        _wait_file(run_dir / "logs" / "events.log", "actor-0 rejoined at version", 240)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out[-3000:]
    lines = out.splitlines()
    died = [ln for ln in lines if "actor-0 died" in ln]
    assert died == [f"[launch] actor-0 died: killed by a signal (SIGKILL: `kill -9`, the kernel's "
                    f"OOM killer or a crash); log: {log}"], out[-3000:]
    restarted = [ln for ln in lines if ln.startswith(
        "[launch] actor-0 restarted by Ray (1 of 3 restarts); its loop runs again; discarded in "
        "flight: ")]
    assert len(restarted) == 1, out[-3000:]  # with what the buffer discarded of its work
    rejoined = [ln for ln in lines if "actor-0 rejoined at version" in ln]
    assert len(rejoined) == 1 and int(rejoined[0].rsplit(" ", 1)[1]) >= 1
    assert lines.index(died[0]) < lines.index(rejoined[0])
    starts = re.findall(r"actor-0 pid (\d+) started", log.read_text())
    assert len(starts) == 2 and starts[0] == first.group(1) != starts[1]  # both processes
    assert (run_dir / "logs" / "actor-1.log").exists() and (run_dir / "logs" / "learner-0.log").exists()
    foreign = [ln for ln in lines if ln.strip() and not OWN_LINE.match(ln)]
    assert not foreign, foreign[:10]  # no `(ActorHost pid=...)` paragraphs, no warnings


def test_progress_bars_render_when_stdout_is_a_terminal(tmp_path: Path) -> None:
    import pty

    parent, child = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "launch", "--config", str(ROOT / "configs/tiny.yaml"),
         "--set", f"launch.run_root={tmp_path}", "--set", "learner.total_updates=2"],
        stdout=child, stderr=child, env={**cli_env(), "COLUMNS": "120"}, cwd=ROOT)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(parent, 65536)
        except OSError:  # the launch closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(parent)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, screen[-3000:]
    assert "RL updates" in screen and "2/2" in screen and "━" in screen
    assert "staleness mean/max" in screen and "buffer ready/dropped" in screen  # the panel
    assert "[launch] done; checkpoint: " in screen
    assert "[dim]" not in screen  # the panel is styled text, never markup shown as is
