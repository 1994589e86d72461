"""What the `textworld_express` env needs on a machine: the `textworld_express` package (its
Java program ships in the wheel) and a Java runtime (`java` on PATH).

`missing()` says in one line what is absent and how to install it; the env's definition
raises it as a `ConfigError` when it is built, so `launch`, `eval`, `sft` and `envs check`
refuse to start with that line. `scripts/setup.sh` installs the package where `java` is.
"""

from __future__ import annotations

import importlib.util
import shutil

from agent_r1_async.config import ConfigError

PACKAGE_PIN = "textworld-express==1.1.0"
"""The version this env is written and tested against (the `twx` extra pins it too)."""
PIP_HINT = f"pip install {PACKAGE_PIN}"
JAVA_HINT = "apt-get install openjdk-17-jre-headless"


def missing() -> str:
    """One line naming what is missing and how to install it ("" when nothing is)."""
    need: list[str] = []
    if importlib.util.find_spec("textworld_express") is None:
        need.append(f"the textworld_express package (`{PIP_HINT}`)")
    if shutil.which("java") is None:
        need.append(f"a Java runtime, `java` on PATH (`{JAVA_HINT}`)")
    if not need:
        return ""
    return f"env textworld_express needs {' and '.join(need)}"


def require() -> None:
    """Raise `ConfigError` with `missing()`'s line when something is missing."""
    line = missing()
    if line:
        raise ConfigError(line)
