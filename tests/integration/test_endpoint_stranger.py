"""A local stranger cannot write into training through the generation endpoint.

The drill as an attacker runs it: an agent process holds its session's base URL in its argv
(as a command-line agent does), and an unprivileged process that is not part of the run
(uid 65534, nobody, where the test runs as root; else a second process of this user) reads
`/proc/*/cmdline`, finds the URL and calls it: without a token, with the session id as the
token, with a made-up key. Every call is answered 401; no step is recorded and the engine
never runs. The agent's own token (its environment, never its argv) then records a step.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_r1_async.models import load_tokenizer, tiny_model_dir
from tests.fakes.engine import FakeEngine
from tests.unit.actors.endpoint.serving import make_service, post, recorded_session, serving

NOBODY = 65534
STRANGER = r'''
import json, os, re, urllib.request, urllib.error
found, answers = [], []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        continue
    found += re.findall(r"http://[0-9.:]+/sessions/[A-Za-z0-9_-]+/v1", argv)
body = json.dumps({"messages": [{"role": "user", "content": "injected"}]}).encode()
for url in sorted(set(found)):
    sid = url.split("/sessions/")[1].split("/")[0]
    root = url.split("/sessions/")[0]
    for target in (f"{url}/chat/completions", f"{root}/v1/chat/completions"):
        for key in (None, sid, "unused", "EMPTY"):
            headers = {"Content-Type": "application/json", "X-Session-Id": sid}
            if key is not None:
                headers["Authorization"] = f"Bearer {key}"
            req = urllib.request.Request(target, body, headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    answers.append(r.status)
            except urllib.error.HTTPError as e:
                answers.append(e.code)
print(json.dumps({"uid": os.getuid(), "found": sorted(set(found)), "answers": answers}))
'''


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on a thread of its own, so the endpoint serves while the test waits on
    processes."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def _stranger_argv() -> tuple[list[str], dict[str, Any]]:
    """How to run the stranger: as nobody with the system's python where this runs as root
    (the project's interpreter may sit in a directory nobody cannot enter)."""
    if os.geteuid() == 0 and shutil.which("python3", path="/usr/bin:/bin"):
        return [shutil.which("python3", path="/usr/bin:/bin") or "", "-c", STRANGER], {
            "user": NOBODY, "group": NOBODY, "extra_groups": [], "cwd": "/"}
    return [sys.executable, "-c", STRANGER], {}


def test_a_stranger_who_reads_the_session_url_from_argv_records_nothing(loop):
    tok = load_tokenizer(tiny_model_dir())
    engine = FakeEngine.repeating([*tok.encode("ok", add_special_tokens=False), 2])
    service = make_service(engine, tok)
    session, _ = recorded_session(service, max_calls=None)
    ready: asyncio.Future[Any] = asyncio.run_coroutine_threadsafe(_serve(service, session), loop)
    try:
        url, token, done = ready.result(30)
        agent = subprocess.Popen(  # an agent with its base URL on its command line
            [sys.executable, "-c", "import sys, time; time.sleep(120)", "--base-url", url],
            env={**os.environ, "OPENAI_API_KEY": token})
        try:
            argv, kw = _stranger_argv()
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True,
                                 **kw)
        finally:
            agent.kill()
            agent.wait()
        seen = json.loads(out.stdout)
        if os.geteuid() == 0:
            assert seen["uid"] == NOBODY
        assert url in seen["found"]  # the session id is no secret: the stranger has it
        assert seen["answers"] and set(seen["answers"]) == {401}, seen
        assert session.recorder.recorded == 0 and engine.calls == []
        # The agent, with its token, records its step.
        status = asyncio.run_coroutine_threadsafe(done(), loop).result(30)
        assert status == 200 and session.recorder.recorded == 1
        assert service.counters.endpoint_requests["401"] == len(seen["answers"])
    finally:
        asyncio.run_coroutine_threadsafe(_stop(), loop).result(30)


_STOP: asyncio.Event | None = None


async def _serve(service: Any, session: Any) -> tuple[str, str, Any]:
    """Start serving until `_stop`; (the session's base URL, its token, a coroutine function
    that makes the agent's own call and gives its status)."""
    global _STOP
    _STOP = asyncio.Event()
    started: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()

    async def run() -> None:
        async with serving(service, key=None) as (endpoint, http):
            started.set_result((endpoint.session_url(session.session_id), http))
            assert _STOP is not None
            await _STOP.wait()

    asyncio.get_running_loop().create_task(run())
    url, http = await started

    async def agent_call() -> int:
        status, _ = await post(http, f"{url}/chat/completions",
                               {"messages": [{"role": "user", "content": "hi"}]},
                               Authorization=f"Bearer {session.token}")
        return status

    return url, session.token, agent_call


async def _stop() -> None:
    if _STOP is not None:
        _STOP.set()
    await asyncio.sleep(0.2)
