"""A hung env step and a hung tool inside a real actor loop: timeouts end (only) what hangs.

One actor runs six groups at once on `tests.fakes.envs:HangingEnvDef` (a ToolEnv): the env of
task "hang-step" never answers a step, the tool of task "hang-tool" never returns, the four
"ok-*" tasks behave. The engine is scripted (a tool call, then the answer) so the test needs
no model weights, only the tiny model's tokenizer. Every record goes over real ZeroMQ.

Expected, with env.tool_timeout_s = 0.3 s and env.step_timeout_s = 2 s:
- hang-step: both episodes end with status "timeout" (0 steps), not before the 2 s;
- hang-tool: the call fails with a timeout *response* and the episode goes on to answer
  ("ok", 2 steps, no step timed out): a hung tool costs one call, not the episode;
- ok-* and hang-tool: all end before the hung step times out (the order the ends arrive in),
  so nothing hung blocks the other episodes of the actor.
No duration is held to an upper bound: the hangs never end on their own, so the ends and their
order show what cut them.
"""

from __future__ import annotations

import threading
import time

from agent_r1_async.actors.actor import Actor
from agent_r1_async.config import config_from_dict
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.checks import Stream
from tests.fakes.engine import FakeEngine
from tests.fakes.envs import ANSWER, HANG_STEP, HANG_TOOL, TOOL_CALL
from tests.fakes.services import buffer_service

STEP_TIMEOUT_S = 2.0
TOOL_TIMEOUT_S = 0.3


def test_hung_step_times_out_and_hung_tool_fails_one_call_without_blocking_others() -> None:
    cfg = config_from_dict({
        "model": {"name_or_path": "tiny-random-llama", "max_model_len": 512},
        "engine": {"backend": "hf", "max_new_tokens": 64},
        "env": {"name": "tests.fakes.envs:HangingEnvDef", "max_turns": 2,
                "tool_timeout_s": TOOL_TIMEOUT_S, "step_timeout_s": STEP_TIMEOUT_S},
        "actors": {"groups_in_flight": 6, "stats_interval_s": 0.5},
        "algorithm": {"group_size": 2},
    })
    tokenizer = load_tokenizer(tiny_model_dir())
    transport = ZmqTransport()
    sink = transport.puller("tcp://127.0.0.1:0")
    credits = buffer_service(transport, algo=cfg.algorithm, start=True)
    # Every task: turn 0 calls the lookup tool, turn 1 answers.
    engine = FakeEngine.by_turn(tokenizer, {"": [TOOL_CALL, ANSWER]}, delay_s=0.01)
    actor = Actor(cfg, "actor-0", transport, sink.endpoint, credits.control_endpoint, None,
                  engine=engine)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            actor.run(max_groups=6)  # one pass over the six tasks
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    stream = Stream()
    ends: list[tuple[float, m.EpisodeEnd]] = []
    try:
        thread.start()
        t0 = time.monotonic()
        while True:
            assert time.monotonic() - t0 < STEP_TIMEOUT_S + 30, "actor did not finish"
            frames = sink.recv(200)
            if frames is None:
                if not thread.is_alive():
                    break  # its pusher lingered until everything was delivered
                continue
            for msg in stream.add(frames):
                if isinstance(msg, m.EpisodeEnd):
                    ends.append((time.monotonic() - t0, msg))
        thread.join(10)
    finally:
        sink.close()
        credits.stop()
        transport.close()
    assert not errors, errors
    stream.check(group_size=2)  # contiguous steps, one end per episode, whole groups
    by_task: dict[str, list[tuple[float, m.EpisodeEnd]]] = {}
    for t, end in ends:
        by_task.setdefault(end.task_id, []).append((t, end))
    assert sorted(by_task) == sorted([HANG_STEP, HANG_TOOL, "ok-0", "ok-1", "ok-2", "ok-3"])

    hung = by_task[HANG_STEP]
    assert [e.status for _, e in hung] == ["timeout", "timeout"]
    assert all(e.num_steps == 0 and "env.step_timeout_s=2.0" in e.error for _, e in hung)
    assert all(e.wall_time_s >= STEP_TIMEOUT_S - 0.1 for _, e in hung)  # not before it
    first_timeout = min(t for t, _ in hung)

    for t, e in by_task[HANG_TOOL]:
        assert (e.status, e.num_steps, e.outcome_reward) == ("ok", 2, 1.0)
        assert e.metrics["tool_errors"] == 1.0  # the one hung call, answered with an error
        assert e.wall_time_s >= TOOL_TIMEOUT_S - 0.05  # not before the tool timeout
        assert t < first_timeout  # cut by the tool timeout, long before a step timeout
        second = stream.steps[e.episode_id][1]
        assert "lookup timed out after 0.3 s" in tokenizer.decode(second.context_ids)

    for task in ("ok-0", "ok-1", "ok-2", "ok-3"):
        for t, e in by_task[task]:
            assert (e.status, e.num_steps, e.outcome_reward) == ("ok", 2, 1.0)
            assert t < first_timeout  # done before the hung step even timed out
