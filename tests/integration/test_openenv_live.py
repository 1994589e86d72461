"""The `openenv` env against real OpenEnv servers (examples/openenv_guess_server.py, built with
openenv-core's server API) on loopback: nothing is mocked at the protocol level.

A `Relay` (a TCP relay between the client and a server) cuts or stalls real sockets, as a
network or a server-side close would. Each test builds the env as a run does and plays
episodes: a GRPO group of 8 concurrent episodes gets 8 sessions and the oracle's results, a
socket dropped between episodes is replaced unnoticed, a drop or a stall mid-episode fails
that episode with one clear line, a server that exits or never starts is named, a server at
its max_concurrent_envs names that setting, and a started server dies with its process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs import host_loop
from agent_r1_async.envs.base import EnvError, StepResult, Task
from agent_r1_async.envs.openenv.session import Session, SessionRefused
from agent_r1_async.envs.registry import EnvSpec, get_env_spec
from examples.openenv_guess_server import MAX_GUESSES, Game, oracle, secret_for

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "examples" / "openenv_guess_server.py")

TASKS = {"train": {"seed_range": [0, 50]}, "dev": {"seed_range": [100, 110]}}
JUNK = "no idea"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            assert proc.poll() is None, "the guess server exited"
            time.sleep(0.1)
    raise AssertionError(f"the guess server did not listen within {timeout_s:g} s")


class Relay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target on a thread of its own. `cut()` aborts
    every relayed connection (no close frame, as when a server or a network drops it);
    `doom()` aborts the connections open now as soon as the client next sends on them;
    `stall()` stops forwarding. `seen` keeps the first bytes each connection sent upstream."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="relay").start()
        self.conns: list[tuple[asyncio.Transport, asyncio.Transport]] = []
        self.doomed: set[int] = set()
        self.seen: list[bytes] = []
        self.flowing = asyncio.Event()
        self.loop.call_soon_threadsafe(self.flowing.set)
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self.loop).result(10)
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer.transport, up_writer.transport)
        self.conns.append(pair)  # type: ignore[arg-type]
        first = bytearray()

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    if up and len(first) < 4096:
                        first.extend(data)
                    if up and id(pair) in self.doomed:
                        self._abort(pair)
                        return
                    await self.flowing.wait()
                    dst.write(data)
                    await dst.drain()
            self._abort(pair)

        self.seen.append(b"")
        index = len(self.seen) - 1
        up = asyncio.ensure_future(pump(reader, up_writer, True))
        down = asyncio.ensure_future(pump(up_reader, writer, False))
        await asyncio.wait([up, down])
        self.seen[index] = bytes(first)

    @staticmethod
    def _abort(pair: tuple[asyncio.Transport, asyncio.Transport]) -> None:
        for transport in pair:
            transport.abort()

    def _call(self, fn: Any) -> None:
        async def run() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def cut(self) -> None:
        self._call(lambda: [self._abort(p) for p in self.conns])

    def doom(self) -> None:
        self._call(lambda: self.doomed.update(id(p) for p in self.conns))

    def stall(self, on: bool = True) -> None:
        self._call(self.flowing.clear if on else self.flowing.set)

    def close(self) -> None:
        self.cut()
        self.loop.call_soon_threadsafe(self.server.close)


@pytest.fixture(scope="module")
def guess_server() -> Iterator[str]:
    """One guess server started by the test (for `url:` specs): its base URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--port", str(port), "--max-sessions", "16"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def relay(guess_server: str) -> Iterator[Relay]:
    r = Relay(int(guess_server.rsplit(":", 1)[1]))
    try:
        yield r
    finally:
        r.close()


_built: list[EnvSpec] = []


@pytest.fixture(autouse=True)
def _close_built() -> Iterator[None]:
    """Each test's sessions and started servers end with the test."""
    yield
    while _built:
        _built.pop().definition.close()


def spec_for(**args: Any) -> EnvSpec:
    a = {"name": "fx", "tasks": TASKS, "metric_fields": ["solved"], "timeout_s": 20.0,
         "oracle": "examples.openenv_guess_server:oracle", **args}
    if "url" not in a:
        a.setdefault("command", [sys.executable, SERVER, "--port", "{port}"])
    cfg = EnvConfig(name="openenv", max_turns=MAX_GUESSES, step_timeout_s=60.0,
                    tool_timeout_s=10.0, args=a)
    spec = get_env_spec(cfg)
    _built.append(spec)
    return spec


@pytest.fixture(scope="module")
def started() -> Iterator[EnvSpec]:
    """One spec whose server the env started (`command:`), shared by the tests that keep it
    alive."""
    spec = spec_for()
    _built.remove(spec)
    try:
        yield spec
    finally:
        spec.definition.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def play(spec: EnvSpec, seed: int, actions: list[str]) -> list[StepResult]:
    task = next(t for t in spec.tasks("train") + spec.tasks("dev")
                if t.meta["reset"]["seed"] == seed)
    return await play_task(spec, task, actions)


async def play_task(spec: EnvSpec, task: Task, actions: list[str]) -> list[StepResult]:
    env = spec.make()
    await env.reset(task)
    out = []
    for action in actions:
        out.append(await env.step(action))
        if out[-1].done:
            break
    return out


def expected(seed: int, actions: list[str]) -> list[tuple[float, bool, float]]:
    """(process reward, done, outcome) of each step, from the game played here."""
    game, out = Game(secret_for(seed)), []
    for action in actions:
        _, reward, done = game.play(action)
        out.append((0.0, True, reward) if done else (reward, False, 0.0))
        if done:
            break
    return out


def summary(results: list[StepResult]) -> list[tuple[float, bool, float]]:
    return [(round(r.reward, 6), r.done, round(r.outcome_reward, 6)) for r in results]


def test_outcome_sum_pays_the_whole_return_at_the_end(guess_server: str):
    spec = spec_for(url=guess_server, outcome="sum", system_prompt="Reply with a number.",
                    reset_kwargs={"level": 2},
                    tasks={"train": {"seeds": [9], "prompts": ["guess well"]}})
    actions = [JUNK, *oracle({"seed": 9})]

    async def episode() -> tuple[Any, list[StepResult]]:
        env = spec.make()
        obs = await env.reset(spec.tasks("train")[0])
        return obs, [await env.step(a) for a in actions]

    obs, results = run(episode())
    assert obs.messages[0] == {"role": "system", "content": "Reply with a number."}
    game = Game(secret_for(9))
    rewards = [game.play(a)[1] for a in actions]  # 4 oracle guesses: the 5th action wins
    assert [r.reward for r in results] == [0.0] * len(actions)
    assert results[-1].outcome_reward == pytest.approx(sum(rewards))
    assert results[-1].metrics["return"] == pytest.approx(sum(rewards))
    prompt_task = spec.tasks("train")[1]  # a prompt goes to reset as `prompt`
    assert spec.definition.reset_kwargs(prompt_task) == {"level": 2, "prompt": "guess well"}
    assert run(play_task(spec, prompt_task, [JUNK]))[0].reward == 0.0


# ---------------------------------------------------------------------------------- groups


def test_reset_and_steps_follow_the_game(started: EnvSpec):
    async def episode() -> tuple[Any, list[StepResult]]:
        env = started.make()
        obs = await env.reset(started.tasks("train")[3])
        actions = oracle({"seed": 3})
        return obs, [await env.step(a) for a in actions]

    obs, results = run(episode())
    assert obs.messages == [{"role": "user", "content": Game(0).intro()}]
    assert summary(results) == expected(3, oracle({"seed": 3}))
    assert results[-1].outcome_reward == 1.0 and results[-1].observation.messages == []
    assert results[-1].metrics == {"solved": 1.0, "return": pytest.approx(
        1.0 + 0.1 * (len(results) - 1))}
    if len(results) > 1:
        assert results[0].observation.messages[0]["content"].startswith(("Higher", "Lower"))


def test_a_group_of_8_concurrent_episodes_gets_8_sessions(started: EnvSpec):
    """Half the group plays the oracle and half junk, step by step in lockstep on the same
    task: sessions that were shared would mix their games."""
    d = started.definition
    host_loop.run_sync(d.pool.close_all(), 30)
    seed = 7
    plans = [oracle({"seed": seed}) if i % 2 == 0 else [JUNK] * MAX_GUESSES for i in range(8)]
    sessions: list[Any] = []

    async def group() -> list[list[StepResult]]:
        envs = [started.make() for _ in plans]
        task = started.tasks("train")[seed]
        await asyncio.gather(*(env.reset(task) for env in envs))
        sessions.extend(env.lease.session for env in envs)
        results: list[list[StepResult]] = [[] for _ in envs]
        for turn in range(MAX_GUESSES):
            live = [i for i, r in enumerate(results) if turn < len(plans[i])
                    and not (r and r[-1].done)]
            if not live:
                break
            steps = await asyncio.gather(*(envs[i].step(plans[i][turn]) for i in live))
            for i, res in zip(live, steps, strict=True):
                results[i].append(res)
        return results

    results = run(group())
    assert len({id(s) for s in sessions}) == 8
    for plan, res in zip(plans, results, strict=True):
        assert summary(res) == expected(seed, plan)
        assert res[-1].done and res[-1].outcome_reward == (1.0 if plan[0] != JUNK else 0.0)
    assert len(d.pool.idle) == 8  # every session went back for the next group


# ------------------------------------------------------------------------------ drops


def test_a_socket_closed_between_episodes_is_replaced_unnoticed(started: EnvSpec):
    d = started.definition
    host_loop.run_sync(d.pool.close_all(), 30)
    first = run(play(started, 1, oracle({"seed": 1})))
    assert first[-1].outcome_reward == 1.0
    (idle,) = d.pool.idle
    host_loop.run_sync(idle.ws.close(), 10)  # the client's own socket, closed while idle
    second = run(play(started, 2, oracle({"seed": 2})))
    assert summary(second) == expected(2, oracle({"seed": 2}))
    assert d.pool.idle and d.pool.idle[0] is not idle


def test_a_socket_cut_between_episodes_is_replaced_unnoticed(relay: Relay):
    spec = spec_for(url=relay.url)
    assert run(play(spec, 1, oracle({"seed": 1})))[-1].outcome_reward == 1.0
    relay.cut()  # the idle session's socket dies under it
    assert summary(run(play(spec, 2, oracle({"seed": 2})))) == expected(2, oracle({"seed": 2}))


def test_a_reset_whose_session_drops_is_sent_again_on_a_new_one(relay: Relay):
    spec = spec_for(url=relay.url)
    run(play(spec, 1, oracle({"seed": 1})))
    (idle,) = spec.definition.pool.idle
    assert idle.alive
    relay.doom()  # the idle socket looks alive; it dies when the reset is sent on it
    assert summary(run(play(spec, 2, oracle({"seed": 2})))) == expected(2, oracle({"seed": 2}))
    assert not idle.alive


def test_a_drop_mid_episode_fails_that_episode_and_the_next_one_plays(relay: Relay):
    spec = spec_for(url=relay.url)

    async def episode() -> EnvError:
        env = spec.make()
        await env.reset(spec.tasks("train")[5])
        await env.step(JUNK)
        relay.doom()
        with pytest.raises(EnvError) as err:
            await env.step(JUNK)
        return err.value

    err = run(episode())
    assert str(err) == (f"OpenEnv server 'fx' ({relay.url}): its WebSocket session dropped "
                        "during step 2: the socket closed without a close frame; the episode's "
                        "state lived in that session, so the episode fails and the next one "
                        "opens a new session")
    assert summary(run(play(spec, 5, oracle({"seed": 5})))) == expected(5, oracle({"seed": 5}))


def test_a_stalled_step_fails_at_the_timeout_and_the_next_episode_plays(relay: Relay):
    spec = spec_for(url=relay.url, timeout_s=1.0)

    async def episode() -> tuple[EnvError, float]:
        env = spec.make()
        await env.reset(spec.tasks("train")[6])
        relay.stall()  # until the test lets it flow again: only the timeout can end the step
        t0 = time.perf_counter()
        with pytest.raises(EnvError) as err:
            await asyncio.wait_for(env.step(JUNK), 60)  # a guard against a hang, not a bound
        return err.value, time.perf_counter() - t0

    err, took = run(episode())
    assert took >= 1.0  # not before the timeout
    assert str(err) == f"OpenEnv server 'fx' ({relay.url}): it did not answer step 1 within timeout_s=1"
    relay.stall(False)
    assert spec.definition.pool.idle == []  # the stalled session is not reused
    assert summary(run(play(spec, 6, oracle({"seed": 6})))) == expected(6, oracle({"seed": 6}))


def test_auth_headers_come_from_the_environment(relay: Relay, monkeypatch):
    monkeypatch.setenv("FX_TOKEN", "Bearer s3cret")
    spec = spec_for(url=relay.url, headers_env={"Authorization": "FX_TOKEN"})
    run(play(spec, 1, [JUNK]))
    relay.cut()
    time.sleep(0.2)
    requests = [s for s in relay.seen if s]
    assert any(s.startswith(b"GET /health ") for s in requests)  # the build's check
    assert any(s.startswith(b"GET /ws ") for s in requests)      # the session
    assert all(b"\r\nAuthorization: Bearer s3cret\r\n" in s for s in requests)


# ------------------------------------------------------------------- errors and the server


def test_a_field_the_server_lacks_is_a_config_error_naming_the_key(guess_server: str):
    with pytest.raises(ConfigError) as err:
        spec_for(url=guess_server, action_field="guess")
    assert str(err.value) == (f"config key `env.args.action_field`: 'guess' is not a field of "
                              f"the Action of OpenEnv server 'fx' ({guess_server}); its fields: "
                              "message, metadata")
    with pytest.raises(ConfigError, match=r"^config key `env.args.metric_fields`: 'score' is not "
                                          r"a field of the Observation of .*; its fields: "
                                          r"guesses_left, high, low, message, solved$"):
        spec_for(url=guess_server, metric_fields=["score"])


def test_a_server_error_answer_fails_the_episode_with_its_message(guess_server: str):
    spec = spec_for(url=guess_server, action_extra={"metadata": "not an object"})

    async def episode() -> EnvError:
        env = spec.make()
        await env.reset(spec.tasks("train")[0])
        with pytest.raises(EnvError) as err:
            await env.step("8")
        return err.value

    err = run(episode())
    assert str(err).startswith(f"OpenEnv server 'fx' ({guess_server}): it answered step 1 with "
                               "VALIDATION_ERROR: Invalid message (metadata: Input should be a "
                               "valid dictionary)")
    assert str(err).endswith("(the action goes into its Action as env.args.action_field="
                             "'message'; its fields: GET /schema)")


def test_a_server_at_its_max_concurrent_envs_names_that_setting():
    spec = spec_for(command=[sys.executable, SERVER, "--port", "{port}", "--max-sessions", "2"])

    async def three() -> EnvError:
        held = [spec.make() for _ in range(2)]
        for env in held:
            await env.reset(spec.tasks("train")[0])
        with pytest.raises(EnvError) as err:
            await spec.make().reset(spec.tasks("train")[1])
        # The refusal is read even when the server closed the socket before the request.
        server = spec.definition.server
        late = await Session.open(server.ws_url, {}, 5.0, 2**20, False)
        for _ in range(200):  # the server's error frame and close arrive unread
            if not late.alive:
                break
            await asyncio.sleep(0.05)
        assert not late.alive
        with pytest.raises(SessionRefused, match=r"^CAPACITY_REACHED: Server at capacity"):
            await late.request({"type": "reset", "data": {}}, 5.0)
        for env in held:  # the held episodes are unharmed
            assert (await env.step(JUNK)).done is False
        return err.value

    err = run(three())
    label = f"OpenEnv server 'fx' ({sys.executable} {SERVER} --port {{port}} --max-sessions 2)"
    assert str(err).startswith(f"{label}: it refused a new session: CAPACITY_REACHED: Server at "
                               "capacity: 2/2 sessions active. Cannot accept new connections; "
                               "raise the server's max_concurrent_envs")


def test_a_server_that_exits_is_named_restarted_then_given_up():
    spec = spec_for(restarts=1)
    server = spec.definition.server

    async def killed_mid_episode() -> EnvError:
        env = spec.make()
        await env.reset(spec.tasks("train")[0])
        await env.step(JUNK)
        os.kill(server.proc.pid, signal.SIGKILL)
        with pytest.raises(EnvError) as err:
            await env.step(JUNK)
        return err.value

    label = f"OpenEnv server 'fx' ({sys.executable} {SERVER} --port {{port}})"
    first_pid = server.proc.pid
    err = str(run(killed_mid_episode()))
    assert err.startswith(f"{label}: exited with code -9 during step 2"), err
    # the next episode starts it again (restart 1 of restarts=1) and plays
    assert summary(run(play(spec, 4, oracle({"seed": 4})))) == expected(4, oracle({"seed": 4}))
    assert server.proc.pid != first_pid
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)
    with pytest.raises(EnvError) as err:
        run(play(spec, 4, [JUNK]))
    assert str(err.value).startswith(f"{label} exited with code -9")
    assert str(err.value).endswith("; it is not restarted again (restarts=1 used)")


def test_a_server_that_never_starts_is_one_line_naming_it_within_the_timeout():
    # It never listens (it sleeps an hour): the error can only come from start_timeout_s.
    with pytest.raises(ConfigError) as err:
        spec_for(command=["python", "-c", "import time, sys; time.sleep(3600)", "{port}"],
                 start_timeout_s=2.0, connect_timeout_s=1.0)
    assert str(err.value).startswith(
        "OpenEnv server 'fx' (python -c import time, sys; time.sleep(3600) {port}) did not "
        "start: no answer to GET /health within start_timeout_s=2 (last: GET /health: "
        "ConnectionRefusedError")
    with pytest.raises(ConfigError) as err:
        spec_for(command=["python", "-c", "import sys; sys.exit('no model file')", "{port}"])
    assert str(err.value) == ("OpenEnv server 'fx' (python -c import sys; sys.exit('no model "
                              "file') {port}) did not start: it exited with code 1; output: no "
                              "model file")
    port = free_port()  # nothing listens there
    with pytest.raises(ConfigError, match=rf"^OpenEnv server 'fx' \(http://127.0.0.1:{port}\) "
                                          r"could not be reached: GET /health: "
                                          r"ConnectionRefusedError"):
        spec_for(url=f"http://127.0.0.1:{port}")


_OWNER = textwrap.dedent("""
    import sys, time
    from agent_r1_async.config import EnvConfig
    from agent_r1_async.envs.registry import get_env_spec
    spec = get_env_spec(EnvConfig(name="openenv", max_turns=5, args={
        "command": [sys.executable, sys.argv[1], "--port", "{port}"],
        "tasks": {"train": {"seeds": [1]}}}))
    print(spec.definition.server.proc.pid, flush=True)
    if sys.argv[2] == "wait":
        time.sleep(600)
""")


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (exited, not yet collected)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.mark.parametrize("how", ["exits", "killed"])
def test_a_started_server_ends_with_the_process_that_started_it(how: str):
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, SERVER,
                              "wait" if how == "killed" else "exit"],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        if how == "killed":
            os.kill(owner.pid, signal.SIGKILL)  # no atexit: the kernel's parent-death signal
        owner.wait(30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.05)
        assert not _running(pid)
    finally:
        if owner.poll() is None:
            owner.kill()


def test_an_observation_over_max_observation_chars_is_cut_and_marked(guess_server: str):
    spec = spec_for(url=guess_server, max_observation_chars=64)
    intro = Game(secret_for(0)).intro()
    assert len(intro) > 64  # the guess game's intro: cut at 64 characters

    async def reset() -> str:
        obs = await spec.make().reset(spec.tasks("train")[0])
        return obs.messages[-1]["content"]

    text = run(reset())
    assert text == (f"{intro[:64]}\n[truncated by the OpenEnv client: {len(intro) - 64} of "
                    f"{len(intro)} characters cut (server 'fx', max_observation_chars=64)]")


def test_capacity_below_the_episodes_in_flight_is_refused_naming_the_key():
    """A server with 2 sessions under 2 groups of 2 per process (4 episodes at once) is
    refused before a run starts; one with 16 holds the 4, and closes them afterwards."""
    small = spec_for(command=[sys.executable, SERVER, "--port", "{port}", "--max-sessions", "2"])
    with pytest.raises(ConfigError) as err:
        small.definition.probe_capacity(4, 3)
    assert str(err.value).startswith(
        "config key `actors.groups_in_flight`: 4 episodes at once (actors.groups_in_flight x "
        "algorithm.group_size) need 4 sessions of the server, and OpenEnv server 'fx' (")
    assert "CAPACITY_REACHED" in str(err.value) and "max_concurrent_envs" in str(err.value)
    roomy = spec_for(command=[sys.executable, SERVER, "--port", "{port}", "--max-sessions", "4"])
    assert roomy.definition.probe_capacity(4, 3) == 4
    assert roomy.definition.pool.open == set()  # none kept: the run needs them all
    assert roomy.definition.probe_capacity(4, 3) == 4  # and the server has them back


def test_a_nan_outcome_from_openenv_core_is_refused_not_scored_zero():
    """openenv-core's server writes a NaN reward as null: with `outcome: last` the final
    step's null reward fails the episode in one line instead of scoring it 0."""
    nan_server = str(ROOT / "tests" / "integration" / "openenv_nan_server.py")
    spec = spec_for(command=[sys.executable, nan_server, "--port", "{port}"], oracle="",
                    metric_fields=[])

    async def episode() -> EnvError:
        env = spec.make()
        await env.reset(spec.tasks("train")[0])
        with pytest.raises(EnvError) as err:
            await env.step("hello")
        return err.value

    err = run(episode())
    assert "step 1: the final step's reward is the outcome (env.args.outcome: last), and the " \
           "server sent none (null; openenv-core's server also writes a NaN reward as null)" \
        in str(err)


def test_launch_preflight_refuses_a_server_with_less_capacity_than_the_episodes_in_flight():
    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.preflight.checks import env_preflight

    env = {"name": "openenv", "max_turns": MAX_GUESSES, "step_timeout_s": 60.0, "args": {
        "name": "fx", "tasks": TASKS, "timeout_s": 20.0,
        "command": [sys.executable, SERVER, "--port", "{port}", "--max-sessions", "2"]}}
    cfg = config_from_dict({"env": env, "actors": {"groups_in_flight": 1},
                            "algorithm": {"group_size": 4, "batch_groups": 1},
                            "eval": {"in_launch": False}})
    with pytest.raises(ConfigError, match=r"^config key `actors.groups_in_flight`: 4 episodes at "
                                          r"once .* CAPACITY_REACHED"):
        env_preflight(cfg, "launch")
    env_preflight(cfg, "eval")  # an evaluation plays one episode at a time: no probe
