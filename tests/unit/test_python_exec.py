"""The `python` tool's sandbox: each limit holds and each escape is refused.

Escapes are tried twice where an OS layer could hide a broken audit hook: once with the
strongest launch this machine supports (`default`) and once with the hook alone (`hook`:
no namespace, no privilege drop), so the hook itself is shown to refuse them.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid

import pytest

from agent_r1_async.envs.base import Task, Tool
from agent_r1_async.envs.tools import PythonExecTool, SandboxLimits, format_exec_result

LIMITS = SandboxLimits(cpu_s=1, wall_s=3.0, memory_mb=256, max_output_bytes=1000)


@pytest.fixture(scope="module", params=["default", "hook"])
def tool(request: pytest.FixtureRequest) -> PythonExecTool:
    if request.param == "hook":
        return PythonExecTool(LIMITS, use_namespaces=False, drop_privileges=False)
    return PythonExecTool(LIMITS)


@pytest.fixture(scope="module")
def hook_tool() -> PythonExecTool:
    return PythonExecTool(LIMITS, use_namespaces=False, drop_privileges=False)


def run(tool: PythonExecTool, code: str) -> dict:
    return asyncio.run(tool.call(code=code))


def refused(result: dict, what: str) -> bool:
    return result["status"] == "error" and f"sandbox: {what}" in result["stderr"]


def test_protocol_and_normal_run(hook_tool: PythonExecTool) -> None:
    assert isinstance(hook_tool, Tool) and hook_tool.name == "python"
    # 2**100 = 1267650600228229401496703205376; sum(range(10)) = 45
    r = run(hook_tool, "print(2**100)\nprint(sum(range(10)))")
    assert r["status"] == "ok" and r["exit_code"] == 0 and not r["truncated"]
    assert r["stdout"] == "1267650600228229401496703205376\n45\n" and r["stderr"] == ""
    assert format_exec_result(r) == "1267650600228229401496703205376\n45"


def test_error_reports_traceback_without_sandbox_frames(hook_tool: PythonExecTool) -> None:
    r = run(hook_tool, "x = 1\n1 / 0\n")
    assert r["status"] == "error" and r["exit_code"] == 1
    assert 'File "main.py", line 2' in r["stderr"] and "ZeroDivisionError" in r["stderr"]
    assert "<string>" not in r["stderr"]
    assert run(hook_tool, "raise SystemExit(3)")["exit_code"] == 3


def test_cpu_limit_stops_infinite_loop(hook_tool: PythonExecTool) -> None:
    t0 = time.monotonic()
    r = run(hook_tool, "while True:\n    pass\n")
    # RLIMIT_CPU 1 s -> SIGXCPU (24); the 3 s wall limit is the backstop on a busy box
    assert r["status"] == "timeout" and r["timeout"] and r["killed"]
    assert time.monotonic() - t0 < LIMITS.wall_s + 1.0


def test_wall_clock_limit_kills_sleeper() -> None:
    tool = PythonExecTool(SandboxLimits(wall_s=0.5), use_namespaces=False,
                          drop_privileges=False)
    t0 = time.monotonic()
    r = run(tool, "import time\nprint('start', flush=True)\ntime.sleep(60)")
    assert r["status"] == "timeout" and r["signal"] == 9 and r["stdout"] == "start\n"
    assert time.monotonic() - t0 < 2.0


def test_memory_limit(hook_tool: PythonExecTool) -> None:
    r = run(hook_tool, "x = bytearray(2 * 1024**3)\nprint('allocated')")
    assert r["status"] == "memory" and r["memory"] and "MemoryError" in r["stderr"]
    assert r["stdout"] == ""


def test_output_truncated_and_flood_killed(hook_tool: PythonExecTool) -> None:
    r = run(hook_tool, "import sys\nsys.stdout.write('x' * 10_000_000)")
    head, _, marker = r["stdout"].partition("\n[output truncated:")
    assert head == "x" * 1000 and r["truncated"] and marker
    assert r["status"] == "output_limit" and r["killed"]  # killed after 1 MiB, not 10 MB
    # a little over the cap: kept to the cap, the program finishes normally
    r = run(hook_tool, "print('y' * 1500)\nprint('done')")
    assert r["status"] == "ok" and r["truncated"]
    assert r["stdout"].startswith("y" * 1000 + "\n[output truncated: 1506 bytes")


def test_network_refused(tool: PythonExecTool) -> None:
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))\n"
        r = run(tool, code + "print('connected')")
        assert r["status"] == "error" and "connected" not in r["stdout"]
        if "netns" not in tool.layers:
            assert refused(r, "network access is disabled")
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection ever arrived
        assert refused(run(tool, "import socket\nsocket.getaddrinfo('localhost', 80)"),
                       "network access is disabled")
    finally:
        listener.close()


def test_writes_outside_temp_dir_refused(tool: PythonExecTool) -> None:
    target = f"/tmp/escape-{uuid.uuid4().hex}"
    attempts = [
        f"open({target!r}, 'w').write('x')",
        f"import pathlib\npathlib.Path({target!r}).write_text('x')",
        f"import os\nos.close(os.open({target!r}, os.O_CREAT | os.O_WRONLY))",
        # a dir fd outside + a relative name the event cannot place
        f"import os\nd = os.open('/tmp', os.O_RDONLY)\n"
        f"os.open({os.path.basename(target)!r}, os.O_CREAT | os.O_WRONLY, dir_fd=d)",
        # a symlink inside pointing outside: the real path counts
        f"import os\nos.symlink('/tmp', 'lnk')\nopen('lnk/{os.path.basename(target)}', 'w')",
        f"open('../{os.path.basename(target)}', 'w')",
        f"import os\nos.mkdir({target!r})",
        f"import shutil\nshutil.copyfile('/etc/hostname', {target!r})",
        # patching what a naive hook would call does not help
        "import builtins, os, posixpath\nbuiltins.isinstance = lambda *a: True\n"
        "os.path.realpath = posixpath.realpath = lambda p, **k: os.getcwd()\n"
        f"open({target!r}, 'w')",
    ]
    for code in attempts:
        r = run(tool, code)
        assert refused(r, "writing outside") or refused(r, "changing files outside"), code
        assert not os.path.exists(target), code
    # moving or hard-linking an outside file into the dir is refused too
    assert refused(run(tool, "import os\nos.link('/etc/hostname', 'h')"), "changing files")
    assert refused(run(tool, "import os\nos.rename('/etc/hostname', 'h')"), "changing files")


def test_writes_inside_temp_dir_work_and_dir_is_removed(tool: PythonExecTool) -> None:
    code = (
        "import os, tempfile, json\n"
        "os.makedirs('a/b')\n"
        "with open('a/b/f.txt', 'w') as f:\n    f.write('hello')\n"
        "os.rename('a/b/f.txt', 'g.txt')\n"
        "fd, p = tempfile.mkstemp()\nos.close(fd)\n"
        "print(json.dumps([open('g.txt').read(), p.startswith(os.getcwd()), os.getcwd()]))"
    )
    r = run(tool, code)
    assert r["status"] == "ok", r["stderr"]
    text, tmp_inside, cwd = json.loads(r["stdout"])
    assert text == "hello" and tmp_inside
    assert not os.path.exists(cwd)  # the per-call dir is gone


def test_process_creation_refused(tool: PythonExecTool) -> None:
    cases = {
        "import subprocess\nsubprocess.run(['true'])": "process creation is disabled",
        "import os\nos.system('true')": "process creation is disabled",
        "import os\nos.fork()": "process creation is disabled",
        "import os\nos.execv('/bin/true', ['true'])": "process creation is disabled",
        "import os\nos.posix_spawn('/bin/true', ['true'], {})": "process creation is disabled",
        "import _posixsubprocess\n_posixsubprocess.fork_exec()": "process creation is disabled",
        "import threading\nthreading.Thread(target=print).start()": "threads are disabled",
    }
    for code, why in cases.items():
        assert refused(run(tool, code), why), code


def test_other_escapes_refused(tool: PythonExecTool) -> None:
    cases = {
        "import ctypes": "module _ctypes is disabled",
        "import sqlite3": "module _sqlite3 is disabled",
        "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))":
            "changing resource limits",
        "import os\nos.kill(os.getppid(), 0)": "signalling other processes",
        "import gc\ngc.get_objects()": "heap inspection",
        "import sys\nsys.settrace(lambda *a: None)": "tracing is disabled",
        "import os\nopen(f'/proc/{os.getppid()}/environ').read()": "reading other processes",
        "(lambda: 0).__code__.replace(co_consts=(1,))": "building code objects",
    }
    for code, why in cases.items():
        assert refused(run(tool, code), why), code
    r = run(tool, "import os\nprint(hasattr(os, 'mknod'), hasattr(os, 'mkfifo'))")
    assert r["stdout"] == "False False\n"


def test_no_inherited_secrets(hook_tool: PythonExecTool, monkeypatch: pytest.MonkeyPatch
                              ) -> None:
    monkeypatch.setenv("AGENT_SECRET_TOKEN", "s3cr3t-value")
    r = run(hook_tool, "import os\nprint(sorted(os.environ))\nprint(os.environ.get("
            "'AGENT_SECRET_TOKEN'))")
    assert r["stdout"] == "['HOME', 'LANG', 'PATH', 'TMPDIR']\nNone\n"


def test_concurrent_calls_and_cancellation(tmp_path) -> None:
    tool = PythonExecTool(LIMITS, use_namespaces=False, drop_privileges=False,
                          workdir_root=str(tmp_path))

    async def main() -> tuple[list[dict], float]:
        calls = [tool.call(code=f"print({i} * {i})") for i in range(4)]
        results = await asyncio.gather(*calls)
        # a caller-side timeout (ToolEnv's wait_for) must still kill the child
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(tool.call(code="import time\ntime.sleep(30)"), 0.3)
        return results, time.monotonic() - t0

    results, waited = asyncio.run(main())
    assert [r["stdout"] for r in results] == ["0\n", "1\n", "4\n", "9\n"]
    assert waited < 1.5
    assert os.listdir(tmp_path) == []  # every per-call dir removed, the cancelled one too


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"SandboxLimits\.cpu_s"):
        SandboxLimits(cpu_s=0)
    tool = PythonExecTool(SandboxLimits(max_code_bytes=10), use_namespaces=False,
                          drop_privileges=False)
    r = run(tool, "print('a long program')")
    assert r["status"] == "error" and "code longer than 10 bytes" in r["stderr"]
    with pytest.raises(TypeError, match="code must be a str"):
        run(tool, 42)  # type: ignore[arg-type]


def test_python_tool_env_oracle_episode() -> None:
    from agent_r1_async.config import EnvConfig
    from agent_r1_async.envs.registry import get_env_spec
    from agent_r1_async.envs.tools import python_env

    # primes below 100: 2 3 5 7 11 13 17 19 23 29 31 37 41 43 47 53 59 61 67 71 73 79 83 89 97
    assert sum(python_env._prime_flags()[:100]) == 25
    spec = get_env_spec(EnvConfig(name="python_tool", tool_timeout_s=10.0,
                                  args={"num_train": 3, "num_dev": 4, "num_test": 2}))
    tasks = spec.tasks("dev")
    assert len(tasks) == 4 and len({t.prompt for t in tasks}) == 4

    async def episode(task: Task) -> tuple:
        env = spec.make()
        obs = await env.reset(task)
        call, answer = spec.oracle(task)
        step1 = await env.step(call)
        step2 = await env.step(answer)
        return obs, step1, step2

    for task in tasks:
        obs, step1, step2 = asyncio.run(episode(task))
        assert "python" in obs.messages[0]["content"]
        # the reference code run in the sandbox prints exactly the gold answer
        assert step1.observation.messages[0]["content"] == (
            f"<tool_response>\n{task.answer}\n</tool_response>")
        assert step2.done and step2.outcome_reward == 1.0
