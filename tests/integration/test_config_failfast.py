"""Config fail-fast at the command line: three launches that used to fail late (a Ray actor's
truncated `__init__` error, a `FileNotFoundError` traceback, a silent start from scratch) exit
within seconds, before Ray is imported, with one line naming the key or flag.

Each runs the real CLI in a subprocess with a `ray` package first on PYTHONPATH that ends the
process with exit code 99 on import: had the CLI imported Ray (let alone started it), the
exit code would be 99, not 2. That, not a stopwatch, is what "in seconds" is checked by.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.cli_runs import ROOT, cli_env

TINY = ROOT / "configs" / "tiny.yaml"
BIND_HINT = "use an address of one of this machine's interfaces, e.g. 127.0.0.1"


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    noray = tmp_path / "noray" / "ray"
    noray.mkdir(parents=True, exist_ok=True)
    (noray / "__init__.py").write_text("import os\nos._exit(99)\n")
    env = cli_env(PYTHONPATH=f"{tmp_path / 'noray'}:{ROOT}")
    return subprocess.run([sys.executable, "-m", "agent_r1_async.cli", "launch", *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def _one_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stdout + out.stderr
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


@pytest.mark.parametrize(("host", "reason"), [
    ("203.0.113.9", "Cannot assign requested address"),
    ("not a host", "No such device: ZeroMQ binds an IPv4 address, an interface name, "
                   "localhost or *, not a host name or an IPv6 address"),
])
def test_an_unbindable_bind_host_fails_in_seconds_naming_the_key(tmp_path: Path, host: str,
                                                                 reason: str) -> None:
    out = _cli(tmp_path, "--config", str(TINY), "--set", f"launch.bind_host={host}",
               "--set", f"launch.run_root={tmp_path / 'runs'}")
    assert _one_line(out) == (f"agent-r1-async: config error: launch.bind_host: cannot bind "
                              f"{host!r} on this machine ({reason}); {BIND_HINT}")
    assert not (tmp_path / "runs").exists()


def test_a_run_root_under_proc_fails_in_seconds_naming_the_key(tmp_path: Path) -> None:
    out = _cli(tmp_path, "--config", str(TINY), "--set", "launch.run_root=/proc/runs")
    line = _one_line(out)
    assert line in (
        f"agent-r1-async: config error: launch.run_root: cannot write in '/proc/runs': {why}; "
        "choose a writable directory" for why in ("No such file or directory", "Permission denied"))
    assert not Path("/proc/runs").exists()


def test_resuming_a_run_directory_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "tiny-20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    cfg = yaml.safe_load(TINY.read_text())
    cfg["launch"]["run_root"] = str(tmp_path / "runs")
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = _cli(tmp_path, "--resume", str(run))
    assert _one_line(out) == (
        f"agent-r1-async: config error: --resume: {run} has no checkpoint to resume from "
        "(checkpoints/ is empty); pass --fresh to train it from scratch in that directory")
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"]
    assert list((run / "checkpoints").iterdir()) == []
