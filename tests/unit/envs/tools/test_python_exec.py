"""The `python` tool's sandbox: each limit holds and each escape is refused.

Limits and escapes are tried in both modes: `bwrap` (the default: OS isolation) and `hook`
(`unsafe_inprocess` with no namespace and no privilege drop: the audit hook alone), so the
hook itself is shown to refuse what it claims to. The escapes an audit hook cannot stop
(dst_dir_fd, the hook's locals via `__traceback__`, pidfd_send_signal, reading /etc/shadow
as root) are tried against `bwrap` with the hook first disarmed from inside the sandboxed
program, so the OS layer alone is shown to hold.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from agent_r1_async.envs.base import Task, Tool
from agent_r1_async.envs.tools import PythonExecTool, SandboxLimits, format_exec_result

LIMITS = SandboxLimits(cpu_s=1, wall_s=3.0, memory_mb=256, max_output_bytes=1000)


HOOK_ONLY = {"sandbox": "unsafe_inprocess", "use_namespaces": False, "drop_privileges": False}
HAS_BWRAP = shutil.which("bwrap") is not None


def make_tool(mode: str, limits: SandboxLimits = LIMITS, **kw: object) -> PythonExecTool:
    if mode == "hook":
        return PythonExecTool(limits, **HOOK_ONLY, **kw)  # type: ignore[arg-type]
    if not HAS_BWRAP:
        pytest.skip("bubblewrap not installed (scripts/setup.sh installs it)")
    return PythonExecTool(limits, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=["bwrap", "hook"])
def tool(request: pytest.FixtureRequest) -> PythonExecTool:
    return make_tool(request.param)


@pytest.fixture(scope="module")
def bwrap_tool() -> PythonExecTool:
    return make_tool("bwrap")


def run(tool: PythonExecTool, code: str) -> dict:
    return asyncio.run(tool.call(code=code))


def refused(result: dict, what: str) -> bool:
    return result["status"] == "error" and f"sandbox: {what}" in result["stderr"]


def test_protocol_and_normal_run(tool: PythonExecTool) -> None:
    assert isinstance(tool, Tool) and tool.name == "python"
    # 2**100 = 1267650600228229401496703205376; sum(range(10)) = 45
    r = run(tool, "print(2**100)\nprint(sum(range(10)))")
    assert r["status"] == "ok" and r["exit_code"] == 0 and not r["truncated"]
    assert r["stdout"] == "1267650600228229401496703205376\n45\n" and r["stderr"] == ""
    assert format_exec_result(r) == "1267650600228229401496703205376\n45"


def test_error_reports_traceback_without_sandbox_frames(tool: PythonExecTool) -> None:
    r = run(tool, "x = 1\n1 / 0\n")
    assert r["status"] == "error" and r["exit_code"] == 1
    assert 'File "main.py", line 2' in r["stderr"] and "ZeroDivisionError" in r["stderr"]
    assert "<string>" not in r["stderr"]
    assert run(tool, "raise SystemExit(3)")["exit_code"] == 3


def test_cpu_limit_stops_infinite_loop(tool: PythonExecTool) -> None:
    r = run(tool, "while True:\n    pass\n")  # it ends at all only because a limit ended it
    # RLIMIT_CPU 1 s -> SIGXCPU (24); the 3 s wall limit is the backstop on a busy box
    assert r["status"] == "timeout" and r["timeout"] and r["killed"]


@pytest.mark.parametrize("mode", ["bwrap", "hook"])
def test_wall_clock_limit_kills_sleeper(mode: str) -> None:
    tool = make_tool(mode, SandboxLimits(wall_s=0.5))
    t0 = time.monotonic()
    r = run(tool, "import time\nprint('start', flush=True)\ntime.sleep(3600)")
    # killed (SIGKILL) at the wall limit: the hour's sleep never ended
    assert r["status"] == "timeout" and r["signal"] == 9 and r["stdout"] == "start\n"
    assert time.monotonic() - t0 >= 0.5  # not before the limit


def test_memory_limit(tool: PythonExecTool) -> None:
    r = run(tool, "x = bytearray(2 * 1024**3)\nprint('allocated')")
    assert r["status"] == "memory" and r["memory"] and "MemoryError" in r["stderr"]
    assert r["stdout"] == ""


def test_output_truncated_and_flood_killed(tool: PythonExecTool) -> None:
    r = run(tool, "import sys\nsys.stdout.write('x' * 10_000_000)")
    head, _, marker = r["stdout"].partition("\n[output truncated:")
    assert head == "x" * 1000 and r["truncated"] and marker
    assert r["status"] == "output_limit" and r["killed"]  # killed after 1 MiB, not 10 MB
    # a little over the cap: kept to the cap, the program finishes normally
    r = run(tool, "print('y' * 1500)\nprint('done')")
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
    assert not os.path.exists(cwd)  # the per-call dir is gone (bwrap: never on the host)


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


def test_no_inherited_secrets(tool: PythonExecTool, monkeypatch: pytest.MonkeyPatch
                              ) -> None:
    monkeypatch.setenv("AGENT_SECRET_TOKEN", "s3cr3t-value")
    r = run(tool, "import os\nprint(sorted(os.environ))\nprint(os.environ.get("
            "'AGENT_SECRET_TOKEN'))")
    names = ["HOME", "LANG", "PATH", *(["PWD"] if tool.sandbox == "bwrap" else []), "TMPDIR"]
    assert r["stdout"] == f"{names}\nNone\n"  # bwrap sets PWD (its --chdir)


def _live_children() -> set[int]:
    """This process's children that have not exited (zombies left out)."""
    me, pids = os.getpid(), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if int(ppid) == me and state != "Z":
            pids.add(int(stat.parent.name))
    return pids


def test_concurrent_calls_and_cancellation(tmp_path) -> None:
    tool = make_tool("hook", workdir_root=str(tmp_path))

    async def main() -> list[dict]:
        calls = [tool.call(code=f"print({i} * {i})") for i in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    assert [r["stdout"] for r in results] == ["0\n", "1\n", "4\n", "9\n"]
    before = _live_children()
    # A caller-side timeout (ToolEnv's wait_for) must still kill the child: it sleeps an hour,
    # so a child still alive after the cancellation would be this one.
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(tool.call(code="import time\ntime.sleep(3600)"), 0.3))
    deadline = time.monotonic() + 60  # a guard against a hang, not a bound
    while _live_children() - before:
        assert time.monotonic() < deadline, f"the child lives on: {_live_children() - before}"
        time.sleep(0.05)
    assert os.listdir(tmp_path) == []  # every per-call dir removed, the cancelled one too


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"SandboxLimits\.cpu_s"):
        SandboxLimits(cpu_s=0)
    tool = make_tool("hook", SandboxLimits(max_code_bytes=10))
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


# ------------------------------------------------------------------------------------------
# Escapes an audit hook cannot stop: the OS layer must.
# ------------------------------------------------------------------------------------------

# The disarming: from a refusal's traceback, reach the hook's frame and empty
# its mutable deny tables. Afterwards the hook lets fork/system/rename/... through.
DISARM = """
import os, sys
def _disarm():
    try:
        import socket
        socket.socket()
    except PermissionError as e:
        tb = e.__traceback__
    cleared = 0
    while tb is not None:
        loc = tb.tb_frame.f_locals
        for name in ("_deny_events", "_path_events"):
            if isinstance(loc.get(name), dict):
                loc[name].clear()
                cleared += 1
        tb = tb.tb_next
    return cleared
print("disarmed", _disarm(), flush=True)
"""


def test_the_hook_really_is_disarmed_by_its_traceback() -> None:
    """The premise of the tests below: DISARM empties the hook's tables (2 of them)."""
    r = run(make_tool("hook"), DISARM + "import os\nprint(os.system('true'))")
    assert r["stdout"] == "disarmed 2\n0\n", r["stderr"]


@pytest.mark.parametrize("mode", ["bwrap", "hook"])
def test_rename_replace_link_with_an_outside_dst_dir_fd_cannot_touch_host_files(
        mode: str) -> None:
    victim_dir = tempfile.mkdtemp(prefix="victim-")
    try:
        os.chmod(victim_dir, 0o777)  # even a world-writable host dir stays out of reach
        victim = Path(victim_dir, "victim")
        victim.write_text("original")
        name = f"escape-{uuid.uuid4().hex}"
        attempts = []
        for op in ("rename", "replace", "link"):
            for d in (victim_dir, "/tmp", "/usr/lib", "/"):
                for dst in ("victim", name):
                    attempts.append(
                        f"try:\n    open('f', 'w').write('pwned')\n"
                        f"    d = os.open({d!r}, os.O_RDONLY | os.O_DIRECTORY)\n"
                        f"    os.{op}('f', {dst!r}, dst_dir_fd=d)\n    print('done', {d!r})\n"
                        f"except OSError as e:\n    print('failed', type(e).__name__)\n")
        prelude = DISARM if mode == "bwrap" else "import os\n"
        r = run(make_tool(mode), prelude + "".join(attempts))
        assert r["status"] == "ok" or refused(r, "changing files outside"), r["stderr"]
        if mode == "bwrap":
            assert r["stdout"].startswith("disarmed 2\n")  # only the OS stood in the way
            assert "done" not in r["stdout"].replace("done /tmp\n", "")  # /tmp: its own tmpfs
        assert victim.read_text() == "original" and os.listdir(victim_dir) == ["victim"]
        for d in ("/tmp", "/usr/lib", "/"):
            assert not os.path.exists(os.path.join(d, name))
    finally:
        shutil.rmtree(victim_dir)


def _marked_processes(marker: str) -> dict[int, int]:
    """pid -> real uid of every host process whose command line holds `marker`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker.encode() not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uid_line = next(x for x in status.splitlines() if x.startswith("Uid:"))
        found[int(entry)] = int(uid_line.split()[1])
    return found


def test_disarmed_hook_fork_and_system_run_as_nobody_and_die_with_the_call(
        bwrap_tool: PythonExecTool) -> None:
    marker = f"outlive-{uuid.uuid4().hex}"
    code = DISARM + (
        "os.system('id')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', "
        f"{marker!r}])\n"
        "print('forked', flush=True)\n"
        "import time\n"
        "time.sleep(1.5)\n"
    )
    seen: dict[int, int] = {}

    async def main() -> dict:
        call = asyncio.ensure_future(bwrap_tool.call(code=code))
        while not call.done():  # watch the escaped process from the host while it lives
            seen.update(_marked_processes(marker))
            await asyncio.sleep(0.05)
        return call.result()

    r = asyncio.run(main())
    left = _marked_processes(marker)
    for pid in left:  # started by this test (through the sandbox): end it before failing
        os.kill(pid, signal.SIGKILL)
    assert r["status"] == "ok", r["stderr"]
    assert r["stdout"].startswith("disarmed 2\n") and "forked" in r["stdout"]
    assert "uid=65534" in r["stdout"] and "uid=0" not in r["stdout"]
    assert seen and set(seen.values()) == {65534}  # the host sees nobody, not root
    assert left == {}  # nothing outlived the call


def test_pidfd_send_signal_cannot_reach_a_host_process(bwrap_tool: PythonExecTool) -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        code = DISARM + (
            "import signal, _signal\n"
            "send = getattr(signal, 'pidfd_send_signal', None) or "
            "getattr(_signal, 'pidfd_send_signal', None)\n"
            "print('has', send is not None)\n"
            "try:\n"
            f"    fd = os.pidfd_open({victim.pid}) if hasattr(os, 'pidfd_open') else "
            f"os.open('/proc/{victim.pid}', os.O_RDONLY | os.O_DIRECTORY)\n"
            "    send(fd, signal.SIGKILL)\n"
            "    print('sent')\n"
            "except (OSError, TypeError) as e:\n"
            "    print('failed', type(e).__name__)\n"
        )
        r = run(bwrap_tool, code)
        assert r["status"] == "ok", r["stderr"]
        assert "sent" not in r["stdout"] and "failed" in r["stdout"]
        time.sleep(0.1)
        assert victim.poll() is None  # still alive: outside the sandbox's pid namespace
    finally:
        victim.kill()
        victim.wait()


def test_etc_shadow_and_host_files_are_unreadable(bwrap_tool: PythonExecTool) -> None:
    code = DISARM + (
        "for p in ('/etc/shadow', '/proc/1/root/etc/shadow', '/root', '/home', "
        f"{os.getcwd()!r}):\n"
        "    try:\n"
        "        print(p, len(open(p).read()) if not os.path.isdir(p) else os.listdir(p))\n"
        "    except OSError as e:\n"
        "        print(p, 'refused', type(e).__name__)\n"
        "print(os.getuid(), os.geteuid())\n"
    )
    r = run(bwrap_tool, code)
    assert r["status"] == "ok", r["stderr"]
    lines = r["stdout"].splitlines()
    assert lines[0] == "disarmed 2" and lines[-1] == "65534 65534"
    assert all(" refused " in line for line in lines[1:-1]), r["stdout"]


def test_bwrap_missing_is_a_clear_error_naming_the_config_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_r1_async.envs.tools import bwrap

    bwrap.bwrap_plan.cache_clear()
    monkeypatch.setattr(bwrap.shutil, "which", lambda name: None)
    try:
        with pytest.raises(RuntimeError, match=r"bubblewrap.*env\.args\.sandbox: "
                                               r"unsafe_inprocess"):
            PythonExecTool(LIMITS)
    finally:
        bwrap.bwrap_plan.cache_clear()
    with pytest.raises(ValueError, match="sandbox must be one of"):
        PythonExecTool(LIMITS, sandbox="none")


def test_python_tool_env_sandbox_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_r1_async.config import ConfigError, EnvConfig
    from agent_r1_async.envs.registry import get_env_spec
    from agent_r1_async.envs.tools import bwrap

    def spec(sandbox: str) -> object:
        return get_env_spec(EnvConfig(name="python_tool", tool_timeout_s=10.0,
                                      args={"num_train": 1, "sandbox": sandbox}))

    with pytest.raises(ConfigError, match=r"^config key `env\.args\.sandbox`: Invalid enum value "
                                          r"'off' \(one of bwrap, unsafe_inprocess\)$"):
        spec("off")
    bwrap.bwrap_plan.cache_clear()
    monkeypatch.setattr(bwrap.shutil, "which", lambda name: None)
    try:
        with pytest.raises(ConfigError, match=r"env\.args\.sandbox: python tool: bubblewrap"):
            spec("bwrap")
        assert spec("unsafe_inprocess") is not None  # the explicit opt-in still works
    finally:
        bwrap.bwrap_plan.cache_clear()
