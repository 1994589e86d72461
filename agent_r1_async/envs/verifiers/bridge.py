"""The verifiers side of the `verifiers` env: run by the verifiers environment's Python
(`.venv-verifiers/bin/python bridge.py ...`), never imported by the trainer.

verifiers 0.4 pins `openai<3` and `mcp==2.0.0`, which the trainer's venv (vLLM) cannot hold,
so it lives in an environment of its own and this script is the whole of what runs there:

    bridge.py tasks SPEC     print the taskset's tasks, one JSON object per line
    bridge.py serve SPEC     serve the env with verifiers' own EnvServer (ZeroMQ ROUTER,
                             msgpack) on a free loopback port; print "ready ADDRESS" once bound

SPEC is one JSON object: {"env": verifiers EnvConfig data, "max_concurrent": n}. It uses
only verifiers' public entry points (`load_taskset`, `serve_env`), so what it serves is
exactly what `vf-eval` or prime-rl would serve. This file imports nothing of agent_r1_async.
"""

from __future__ import annotations

import json
import sys


class _PrintAddress:
    """What serve_env reports the bound address to: one line on stdout."""

    def put(self, address: str) -> None:
        print(f"ready {address}", flush=True)


def _tasks(spec: dict) -> None:
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    config = resolve_env_config(spec["env"])
    for task in load_taskset(config.taskset):
        sys.stdout.write(json.dumps(task.data.model_dump(mode="json")) + "\n")
    sys.stdout.flush()


def _serve(spec: dict) -> None:
    from verifiers.v1.serve.pool import serve_env
    from verifiers.v1.utils.loaders import resolve_env_config

    config = resolve_env_config(spec["env"])
    serve_env(max_workers=1, address="tcp://127.0.0.1:0", address_queue=_PrintAddress(),
              config=config, max_concurrent=spec.get("max_concurrent"))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("tasks", "serve"):
        print("usage: bridge.py tasks|serve SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    (_tasks if argv[0] == "tasks" else _serve)(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
