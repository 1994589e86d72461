"""A hung actor during one tiny launch: noticed, named, its credits reclaimed, replaced.

The real console script in a subprocess (as test_launch.py), two HF actors with up to 4 groups
in flight each. A drill froze
actor-1 with SIGSTOP at v14 of 40: it kept its admission credits, the healthy actor got none,
0 updates came in 180 s, and nothing said which actor hung (the stall would have lasted until
`buffer.episode_timeout_s`, 600 s). Here, with `launch.unresponsive_s` shortened to 10 s:

- the test stops actor-1 (by the pid its process wrote, RUN_DIR/actor-1.pid) at a moment the
  buffer says it holds 3 credits (CurveZMQ is off so that the test can ask the buffer's
  control socket for its stats, as any peer may). Admission's budget is (max_staleness 1 +
  version + 1) x batch_groups 2 = 4 groups beyond the trained ones, so with 3 of them frozen
  the learner, which needs 2 ready groups, gets at most 1 more: the drill's stall;
- the launch names it once: `actor-1 unresponsive for N s: last report at vK, ... credits
  held; reclaimed C credits and E unfinished episodes; killing its process ...`, with C >= 3
  (it may have been granted more on the way);
- the buffer's counts say the same: `buffer/drops/reclaimed_credit` = C and
  `buffer/drops/reclaimed_episode` = E in the last metrics record (nothing else reclaims in
  this run: the killed process is stopped, so it sends nothing more);
- Ray restarts the killed process (a new pid in actor-1.pid) and the launcher re-runs its
  loop: `actor-1 died: killed by the launcher: unresponsive for N s`, then `restarted by Ray`;
- the run goes on with the restarted actor: updates keep coming after the restart line,
  each logged exactly once. The test then stops the launch (SIGTERM: exit 130 after the final
  checkpoint). A fixed update count cannot carry this: the freeze comes when actor-1 happens
  to hold 3 credits (anywhere from v3 to past v20), and once its credits are back the healthy
  actor alone may finish a short run before Ray has the new process up.

The test resumes (SIGCONT) the process it stopped if it still exists, and ends only the
launch it started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport
from tests.integration.test_kill_drill import _Output, _updates
from tests.integration.test_launch import _await_updates, _start

TOTAL = 1000  # never reached: the test stops the launch
AFTER = 2  # updates logged after the restart line before the test stops the launch
BOUND_S = 10
HELD = 3


def stopped(pid: int) -> bool:
    """Whether `pid` exists and is stopped (state T)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def freeze_while_holding_credits(run_dir: Path, actor_id: str, held: int,
                                 timeout_s: float = 180) -> int:
    """SIGSTOP `actor_id` right after the buffer reports it holding `held` credits; its pid."""
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    transport = ZmqTransport()
    client = BufferClient(transport, endpoints["control"], "actor", "fault-test", timeout_s=5.0)
    try:
        client.connect()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if client.stats().actor_credits.get(actor_id, 0) >= held:
                pid = int((run_dir / f"{actor_id}.pid").read_text())
                os.kill(pid, signal.SIGSTOP)
                return pid
            time.sleep(0.05)
        raise AssertionError(f"{actor_id} never held {held} credits in {timeout_s:.0f} s")
    finally:
        client.close()
        transport.close()


def test_a_frozen_actor_is_named_its_credits_reclaimed_and_the_run_goes_on(tmp_path: Path):
    proc = _start(tmp_path, "--set", f"learner.total_updates={TOTAL}",
                  "--set", "learner.checkpoint_every=100", "--set", "launch.curve=false",
                  "--set", "actors.groups_in_flight=4",
                  "--set", f"launch.unresponsive_s={BOUND_S}",
                  "--set", "env.step_timeout_s=3", "--set", "env.tool_timeout_s=2")
    out = _Output(proc)
    frozen = None
    try:
        metrics = _await_updates(proc, tmp_path, 3)
        run_dir = metrics.parent
        mark = len(out.lines)
        frozen = freeze_while_holding_credits(run_dir, "actor-1", HELD)
        line = out.wait_for(proc, "[launch] actor-1 unresponsive for ", mark, timeout_s=120)
        out.wait_for(proc, "[launch] actor-1 restarted by Ray", mark, timeout_s=300)
        restarted_at = len(_updates(metrics))
        _await_updates(proc, tmp_path, restarted_at + AFTER)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=400)
    finally:
        if frozen is not None and stopped(frozen):
            os.kill(frozen, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = out.text()
    (metrics.parent / "launch-output.log").write_text(stdout)  # kept for a post-mortem
    assert proc.returncode == 130, stdout[-5000:]

    found = re.fullmatch(
        r"\[launch\] actor-1 unresponsive for (\d+) s: last report at v\d+, \d+ episodes? in "
        r"flight, (\d+) credits held; reclaimed (\d+) credits and (\d+) unfinished "
        r"episodes?; killing its process for Ray to restart", line)
    assert found, line
    silent, held, credits, episodes = map(int, found.groups())
    assert BOUND_S <= silent <= BOUND_S + 5  # judged at the stats poll after the bound
    assert held == credits >= HELD
    assert stdout.count("[launch] actor-1 unresponsive for ") == 1  # said once
    assert "[launch] actor-0 unresponsive" not in stdout  # the healthy actor is never judged
    assert (f"[launch] actor-1 died: killed by the launcher: unresponsive for {silent} s; "
            "log: ") in stdout
    assert "[launch] actor-1 restarted by Ray (1 of 3 restarts); its loop runs again" in stdout
    assert int((run_dir / "actor-1.pid").read_text()) != frozen  # Ray started a new process
    assert not stopped(frozen)  # the frozen one was killed, not left behind

    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert len(records) >= restarted_at + AFTER
    assert [r["update"] for r in records] == list(range(1, len(records) + 1))
    last = records[-1]
    assert last["buffer/drops/reclaimed_credit"] == credits
    assert last.get("buffer/drops/reclaimed_episode", 0) == episodes
    assert "Traceback" not in stdout, stdout[-5000:]
