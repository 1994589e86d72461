"""The working directory is importable for every command, and
`@register_env` names resolve from the command line through `env.import`.

The CLI runs as the installed console script does: from a script outside the working
directory (so Python puts the script's directory, not the working directory, on sys.path).
Without that, `eval` and `sft` (and `launch`'s in-process steps) fail with
`No module named 'unit_env'`, and a `@register_env` name is unknown: nothing imports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

UNIT_ENV = '''
from agent_r1_async.envs.arithmetic import ArithmeticEnv
from agent_r1_async.envs.registry import register_env


@register_env("units")
class UnitsEnv(ArithmeticEnv):
    """Unit conversion (test env)."""
'''

SHIM = '''
import sys
from agent_r1_async.cli import main
from agent_r1_async.run.processes.child import in_subprocess
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.config import EnvConfig

if __name__ == "__main__" and sys.argv[1] == "spawn":
    # a spawned child (held-out evals, warm start) resolves it too
    main(["config", "show"])  # any command: sets up the working directory
    spec = in_subprocess(get_env_spec, EnvConfig(name="unit_env:UnitsEnv"))
    print("SPAWNED", spec.name)
elif __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "unit_env.py").write_text(UNIT_ENV)
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "shim.py").write_text(SHIM)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(tmp_path / "bin" / "shim.py"), *argv],
                          capture_output=True, text=True, cwd=work, env=env, timeout=120)


def test_module_in_the_working_directory_resolves_for_every_command(tmp_path):
    out = _cli(tmp_path, "envs", "check", "unit_env:UnitsEnv", "--split", "dev")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[1] == "  import  unit_env:UnitsEnv"
    out = _cli(tmp_path, "spawn")
    assert out.returncode == 0 and "SPAWNED unit_env:UnitsEnv" in out.stdout, out.stderr[-2000:]


def test_register_env_names_resolve_through_env_import(tmp_path):
    out = _cli(tmp_path, "envs", "check", "units", "--split", "dev")
    assert out.returncode == 1 and "  FAILED  env.name: unknown env 'units'" in out.stdout
    out = _cli(tmp_path, "envs", "check", "units", "--split", "dev", "--set", "env.import=[unit_env]")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[1] == "  import  unit_env:UnitsEnv"
    out = _cli(tmp_path, "envs", "list", "--set", "env.import=[unit_env]")
    assert "units                Unit conversion (test env)." in out.stdout.splitlines()
    out = _cli(tmp_path, "config", "show", "--set", "env.import=[no_such_mod]")
    assert out.returncode == 2
    assert "env.import: cannot import 'no_such_mod': No module named 'no_such_mod'" in out.stderr
