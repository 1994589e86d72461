"""Running the project's own commands from a bench: the venv's Python, `agent-r1-async`
subcommands with `--set` overrides, and one logged subprocess at a time."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_exe() -> str:
    """The project's venv Python, else the one running the bench."""
    venv = ROOT / ".venv/bin/python"
    return str(venv) if venv.exists() else sys.executable


def cli(*args: str) -> list[str]:
    """The command line of `agent-r1-async ARGS`."""
    return [python_exe(), "-m", "agent_r1_async.cli", *args]


def sets(overrides: list[str]) -> list[str]:
    """`--set k=v` for each override."""
    return [a for o in overrides for a in ("--set", o)]


def run_logged(cmd: list[str], log: Path) -> str:
    """Run `cmd` in the repository root, its stdout and stderr to `log`; its stdout. A
    failure ends the bench with the log's path and the output's tail."""
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(out.stdout + "\n--- stderr ---\n" + out.stderr)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
        raise SystemExit(f"failed ({out.returncode}); log: {log}")
    print(f"  done in {time.monotonic() - t0:.0f} s (log: {log})", flush=True)
    return out.stdout
