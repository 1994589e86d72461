"""Helpers for the reliability tests: hostile-frame strategies, id bookkeeping, a hanging env,
a scripted engine, and subprocess entry points (a buffer service to SIGKILL).

The strategies build frames the way an attacker or a broken peer would: random bytes, valid
frames cut short or with flipped bytes, valid msgpack of the wrong shape, messages of the wrong
family, structurally valid records with hostile values (NaN, huge, negative), and multipart
messages of the wrong length.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import strategies as st

from agent_r1_async.actors.engines.base import GenResult
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.envs.toolenv import Score, ToolEnv
from agent_r1_async.wire import messages as m

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS_DIR)

# --------------------------------------------------------------------------------------
# Hypothesis strategies for hostile frames
# --------------------------------------------------------------------------------------

# Cheap strategies on purpose: hypothesis' own overhead dominates a 10,000-case run, so values
# come from small pools of the interesting ones (bounds, signs, NaN, inf) plus raw draws.
_EDGE_INTS = [0, 1, 2, 3, -1, -2, 2**31, 2**63 - 1, -(2**63), 2**64 - 1]
_ints = st.sampled_from(_EDGE_INTS) | st.integers(-(2**63), 2**64 - 1)
_floats = st.sampled_from([0.0, -0.5, 1.0, math.nan, math.inf, -math.inf, 1e308, -0.0]) | (
    st.floats(allow_nan=True, allow_infinity=True)
)
_text = st.sampled_from(["", "e0", "g0", "a0", "x" * 40, "\u00e9\u6f22", "\x00"])
_small_list = st.lists(_ints, max_size=6)


# Composite strategies draw only from prebuilt strategies: building one inside a draw costs
# milliseconds (hypothesis labels it), which would dominate 10,000 cases.
_EPISODE_IDS = st.sampled_from(["e0", "e1", "e2", ""]) | _text
_GROUP_IDS = st.sampled_from(["g0", "g1"]) | _text
_SMALL_INDEX = st.integers(-2, 4) | _ints
_IDS_OF_LEN = [st.lists(_ints, min_size=n, max_size=n) for n in range(5)]
_FLOATS_OF_LEN = [st.lists(_floats, min_size=n, max_size=n) for n in range(5)]
_ANY_FLOATS = st.lists(_floats, max_size=6)
_TOKEN_VERSIONS = st.just([]) | st.lists(_ints, max_size=5)
_ACTORS = st.sampled_from(["a0", "evil"])
_STATUSES = st.sampled_from(["ok", "truncated", "timeout", "env_error"])
_METRICS = st.dictionaries(_text, _floats, max_size=3)
_GROUP_SIZES = st.integers(-1, 3) | _ints


@st.composite
def step_records(draw: Any) -> m.StepRecord:
    """A StepRecord with hostile values (decodes fine; the buffer must judge it)."""
    n = draw(st.integers(0, 4))
    return m.StepRecord(
        episode_id=draw(_EPISODE_IDS),
        group_id=draw(_GROUP_IDS),
        task_id=draw(_text),
        actor_id=draw(_ACTORS),
        env_name="fake",
        step_index=draw(_SMALL_INDEX),
        context_ids=draw(_small_list),
        action_ids=draw(_IDS_OF_LEN[n]),
        behavior_logprobs=draw(_FLOATS_OF_LEN[n] if draw(st.booleans()) else _ANY_FLOATS),
        policy_version=draw(_ints),
        process_reward=draw(_floats),
        done=draw(st.booleans()),
        token_versions=draw(_TOKEN_VERSIONS),
    )


@st.composite
def episode_ends(draw: Any) -> m.EpisodeEnd:
    return m.EpisodeEnd(
        episode_id=draw(_EPISODE_IDS),
        group_id=draw(_GROUP_IDS),
        task_id=draw(_text),
        actor_id="evil",
        env_name="fake",
        num_steps=draw(_SMALL_INDEX),
        outcome_reward=draw(_floats),
        status=draw(_STATUSES),
        group_size=draw(_GROUP_SIZES),
        metrics=draw(_METRICS),
    )


def _make_control_messages() -> st.SearchStrategy[msgspec.Struct]:
    return st.one_of(
        st.builds(m.Hello, schema_version=_ints,
                  role=st.sampled_from(["actor", "learner", "monitor"]), peer_id=_text),
        st.builds(m.CreditRequest, actor_id=_text, max_groups=_ints),
        st.builds(m.SampleRequest, num_groups=_ints, learner_version=_ints, timeout_s=_floats),
        st.builds(m.VersionUpdate, version=st.integers(-3, 3)),
        st.just(m.StatsRequest()),
        # Reply types sent as requests (a confused or malicious peer):
        st.builds(m.HelloAck, ok=st.booleans(), schema_version=_ints),
        st.builds(m.VersionAck, version=_ints),
        st.builds(m.ErrorReply, reason=_text),
        st.builds(m.CreditGrant, actor_id=_text, groups=_ints, learner_version=_ints),
    )


def _make_weights_headers() -> st.SearchStrategy[m.WeightsHeader]:
    meta = st.builds(
        m.TensorMeta,
        name=st.sampled_from(["w", "b", "", "w"]),  # duplicates too
        dtype=st.sampled_from(["float32", "bfloat16", "int64", "bool", "Tensor", "nope", ""]),
        shape=st.lists(st.sampled_from([-1, 0, 1, 2, 3, 4, 2**40]), max_size=3),
        nbytes=st.sampled_from([-1, 0, 1, 4, 8, 12, 16, 24, 32, 48, 64, 2**62]),
    )
    return st.builds(
        m.WeightsHeader,
        schema_version=st.sampled_from([m.SCHEMA_VERSION, m.SCHEMA_VERSION + 1, 0, -1]) | _ints,
        version=st.integers(-5, 1000),  # honest publishers in the tests use higher versions
        tensors=st.lists(meta, max_size=3),
        published_at=_floats,
    )


# Built once: hypothesis spends most of its time labelling freshly built strategies.
_CONTROL = _make_control_messages()
_HEADERS = _make_weights_headers()
_STEPS = step_records()
_ENDS = episode_ends()
_BATCHES = st.lists(_STEPS | _ENDS, max_size=3).map(m.Batch)  # empty ones too


def _control_messages() -> st.SearchStrategy[msgspec.Struct]:
    return _CONTROL


def _weights_headers() -> st.SearchStrategy[m.WeightsHeader]:
    return _HEADERS


_scalars = st.none() | st.booleans() | _ints | _floats | _text | st.binary(max_size=8)
_msgpack_values = _scalars | st.lists(_scalars, max_size=5) | st.dictionaries(
    _text, _scalars | st.lists(_scalars, max_size=3), max_size=4
)


_MANGLES = st.tuples(
    st.sampled_from(["truncate", "flip", "extend"]),
    st.integers(0, 2**16),
    st.integers(1, 255),
    st.binary(min_size=1, max_size=8),
)


def _mangle(frame: bytes, how: tuple[str, int, int, bytes]) -> bytes:
    """A valid frame truncated, with one byte flipped, or extended."""
    kind, pos, xor, tail = how
    if kind == "truncate" and frame:
        return frame[: pos % len(frame)]
    if kind == "flip" and frame:
        i = pos % len(frame)
        return frame[:i] + bytes([frame[i] ^ xor]) + frame[i + 1 :]
    return frame + tail


def mangled(frames: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.tuples(frames, _MANGLES).map(lambda t: _mangle(*t))


def hostile_frames(valid: st.SearchStrategy[msgspec.Struct]) -> st.SearchStrategy[list[bytes]]:
    """One multipart message as a hostile peer might send it on a socket expecting `valid`."""
    one = st.one_of(
        st.binary(max_size=64),  # random bytes
        _msgpack_values.map(msgspec.msgpack.encode),  # valid msgpack, wrong shape
        valid.map(m.encode),  # the right family with hostile values
        mangled(valid.map(m.encode)),  # truncated / flipped / extended
        _control_messages().map(m.encode),  # control messages in the wrong place
        _STEPS.map(m.encode),
        _weights_headers().map(m.encode),
    )
    return st.one_of(
        one.map(lambda f: [f]),
        st.lists(one, min_size=0, max_size=3).filter(lambda fs: len(fs) != 1),  # wrong count
    )


def data_frames() -> st.SearchStrategy[list[bytes]]:
    return hostile_frames(st.one_of(_STEPS, _ENDS, _BATCHES))


def control_frames() -> st.SearchStrategy[list[bytes]]:
    return hostile_frames(_control_messages())


_FIRST_FRAME = st.sampled_from(["as_is", "as_is", "mangled", "garbage"])
_GARBAGE = st.binary(max_size=32)
_COUNT = st.integers(0, 2)


@st.composite
def weights_messages(draw: Any) -> list[bytes]:
    """A header (often hostile) followed by tensor frames that may or may not fit it."""
    header = draw(_HEADERS)
    first = draw(_FIRST_FRAME)
    frame0 = m.encode(header)
    if first == "mangled":
        frame0 = _mangle(frame0, draw(_MANGLES))
    elif first == "garbage":
        frame0 = draw(_GARBAGE)
    n = [len(header.tensors), len(header.tensors) + 1, 0][draw(_COUNT)]
    fit = draw(st.booleans())
    frames = []
    for i in range(n):  # tensor frames: often exactly nbytes long, so later checks are reached
        want = header.tensors[i].nbytes if i < len(header.tensors) else 4
        frames.append(bytes(want if fit and 0 <= want <= 64 else (i * 3) % 17))
    return [frame0, *frames]


# --------------------------------------------------------------------------------------
# Id bookkeeping for fault tests
# --------------------------------------------------------------------------------------


@dataclass
class Ledger:
    """Which episode ids were sampled how often, and checks on every sampled episode."""

    sampled: Counter[str]
    groups: Counter[str]

    @classmethod
    def empty(cls) -> Ledger:
        return cls(Counter(), Counter())

    def add(self, batch: m.SampleBatch) -> None:
        for g in batch.groups:
            self.groups[g.group_id] += 1
            for ep in g.episodes:
                check_complete(ep)
                self.sampled[ep.end.episode_id] += 1


def check_complete(ep: m.Episode) -> None:
    """A sampled episode is whole: steps 0..n-1 of one episode, an end record that agrees."""
    end = ep.end
    assert end.status in m.TRAINABLE_STATUSES, end
    assert [s.step_index for s in ep.steps] == list(range(end.num_steps)), end.episode_id
    assert all(s.episode_id == end.episode_id and s.group_id == end.group_id for s in ep.steps)
    for s in ep.steps:
        assert len(s.behavior_logprobs) == len(s.action_ids)


def wait_for(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --------------------------------------------------------------------------------------
# A hanging env and a scripted engine (env: "fakes_reliability:HangingEnvDef")
# --------------------------------------------------------------------------------------

HANG_STEP = "hang-step"
"""Task whose env.step never returns: the episode must end with status "timeout"."""
HANG_TOOL = "hang-tool"
"""Task whose tool never returns: that call fails with a timeout, the episode goes on."""

TOOL_CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
ANSWER = "<answer>42</answer>"


class LookupTool:
    name = "lookup"
    description = "Look something up."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self, domain: HangingDomain) -> None:
        self.domain = domain

    async def call(self, **arguments: Any) -> str:
        if self.domain.task_id == HANG_TOOL:
            await asyncio.sleep(3600)
        return "found 42"


class HangingDomain:
    def __init__(self) -> None:
        self.task_id = ""
        self.tools = [LookupTool(self)]

    def system_prompt(self) -> str:
        return "Use the lookup tool, then answer in <answer></answer>."

    def score(self, task: Task, answer: str | None) -> Score:
        return Score(1.0 if answer == "42" else 0.0, {"em": float(answer == "42")})


class HangingEnv:
    """A ToolEnv whose step hangs for task HANG_STEP and whose tool hangs for HANG_TOOL."""

    def __init__(self, tool_timeout_s: float, max_turns: int) -> None:
        self.domain = HangingDomain()
        self.inner = ToolEnv(self.domain, max_turns=max_turns, tool_timeout_s=tool_timeout_s)

    async def reset(self, task: Task) -> Observation:
        self.domain.task_id = task.task_id
        return await self.inner.reset(task)

    async def step(self, action: str) -> StepResult:
        if self.domain.task_id == HANG_STEP:
            await asyncio.sleep(3600)
        return await self.inner.step(action)


class HangingEnvDef:
    """Env definition (registry protocol): tasks hang-step, hang-tool and ok-0..ok-3."""

    def __init__(self, args: Any, env_cfg: Any) -> None:
        self.env_cfg = env_cfg

    def make(self) -> HangingEnv:
        return HangingEnv(self.env_cfg.tool_timeout_s, self.env_cfg.max_turns)

    def tasks(self, split: str) -> list[Task]:
        names = [HANG_STEP, HANG_TOOL, "ok-0", "ok-1", "ok-2", "ok-3"]
        return [Task(n, f"Task {n}: look it up.") for n in names]


class ScriptedToolEngine:
    """Turn 0: a lookup tool call; turn 1: the answer (turn = assistant headers in context)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.version = 0
        self._ids = [
            [*tokenizer.encode(t, add_special_tokens=False), tokenizer.eos_token_id]
            for t in (TOOL_CALL, ANSWER)
        ]

    async def generate(self, context_ids: list[int], max_new_tokens: int | None = None) -> GenResult:
        await asyncio.sleep(0.01)
        turn = self.tokenizer.decode(context_ids).count("<|im_start|>assistant") - 1
        ids = self._ids[min(turn, 1)]
        return GenResult(list(ids), [-0.1] * len(ids), "stop", self.version)

    async def load_weights(self, version: int, state_dict: dict) -> None:
        self.version = version

    async def close(self) -> None:
        pass


class SlowStepsEnv:
    """Every episode takes exactly `turns` steps whatever the agent says, each step 0.2 s."""

    def __init__(self, turns: int) -> None:
        self.turns, self.steps = turns, 0

    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        await asyncio.sleep(0.2)  # a slow tool: episodes spend most of their time mid-way
        self.steps += 1
        done = self.steps >= self.turns
        more = [] if done else [{"role": "user", "content": f"Step {self.steps} done. Go on."}]
        return StepResult(Observation(more), 0.0, done, outcome_reward=float(len(action) % 2))


class SlowStepsEnvDef:
    """Env definition: multi-step episodes regardless of the policy (a random model never
    calls a tool, so real envs end its episodes after one step: nothing to kill mid-way)."""

    def __init__(self, args: Any, env_cfg: Any) -> None:
        self.turns = env_cfg.max_turns

    def make(self) -> SlowStepsEnv:
        return SlowStepsEnv(self.turns)

    def tasks(self, split: str) -> list[Task]:
        return [Task(f"count-{i}", f"Count to {i}, one number per turn.") for i in range(8)]


# --------------------------------------------------------------------------------------
# Subprocesses: a buffer service that a test can SIGKILL
# --------------------------------------------------------------------------------------

_BUFFER_MAIN = """
import sys, threading, msgspec
from agent_r1_async.buffers.service import BufferService
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire.zmq import ZmqTransport
buf = msgspec.json.decode(sys.argv[1].encode(), type=BufferConfig)
algo = msgspec.json.decode(sys.argv[2].encode(), type=AlgorithmConfig)
service = BufferService(buf, algo, ZmqTransport(), sys.argv[3], sys.argv[4], snapshot_dir=sys.argv[5])
print("ready", service.restored, flush=True)
service.serve_forever(threading.Event())
"""


def start_buffer_process(
    buf: Any, algo: Any, data_ep: str, control_ep: str, snapshot_dir: str
) -> subprocess.Popen:
    """A BufferService in its own process on fixed endpoints; returns once it has bound."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _BUFFER_MAIN, msgspec.json.encode(buf).decode(),
         msgspec.json.encode(algo).decode(), data_ep, control_ep, snapshot_dir],
        stdout=subprocess.PIPE, cwd=REPO, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ready"), f"buffer process did not start: {line!r}"
    return proc


def free_tcp_endpoint() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"
