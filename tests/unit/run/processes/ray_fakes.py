"""Fakes of Ray for the supervision tests: actor handles that record their calls, a `ray`
whose `get` runs them in order, the buffer's supervision as calls, and Ray's death texts."""

from __future__ import annotations

import types

import ray.exceptions as rex

from agent_r1_async.run.processes.actor_group import ActorGroup

SIGKILLED = ("The actor died unexpectedly before finishing this task.\n\tclass_name: LearnerHost"
             "\n\tpid: 1234\nThe actor is dead because its worker process has died. Worker "
             "exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
             "connection error code 2. End of file.")
OOM = ("Task was killed due to the node running low on memory.\nMemory on the node (IP: "
       "10.0.0.1) where the task was running was 22.5GB / 23.4GB (0.96), which exceeds the "
       "memory usage threshold of 0.95. Ray killed this worker because it was the most "
       "recently scheduled task")


def died(text: str) -> rex.ActorDiedError:
    """An ActorDiedError with the text Ray gives it (the cause is a protobuf in real life)."""
    e = rex.ActorDiedError()
    e.error_msg = text
    return e


class Handle:
    """A Ray actor handle whose `.method.remote()` runs `method` when `ray.get` asks."""

    def __init__(self, name: str, calls: list[str], fail: dict[str, BaseException]) -> None:
        self.name, self.calls, self.fail = name, calls, fail
        self.args: dict[str, tuple] = {}

    def __getattr__(self, method: str):
        def run():
            if method in self.fail:
                raise self.fail[method]
            if method == "where":
                return {"node_id": "n0", "ip": "127.0.0.1"}
            return f"{self.name}.{method}"

        def remote(*args):
            self.calls.append(f"{self.name}.{method}")
            self.args[method] = args
            return run
        return types.SimpleNamespace(remote=remote)


class Call:
    """A Ray actor method whose `.remote()` is its answer (with `ray.get` patched to identity)."""

    def __init__(self, value) -> None:
        self.value = value

    def remote(self, *args):
        return self.value


class OrderRay:
    exceptions = rex

    def get(self, ref, timeout=None):
        return [r() for r in ref] if isinstance(ref, list) else ref()

    def wait(self, refs, timeout=None, num_returns=1):
        return list(refs), []


class BufferCalls:
    """`SupervisedBuffer.call`, noted in `calls`; `reclaim` answers `reclaimed`."""

    def __init__(self, calls: list[str], reclaimed: dict[str, int] | None = None) -> None:
        self.calls, self.reclaimed = calls, reclaimed or {"credits": 0, "episodes": 0}

    def call(self, method: str, *args, timeout=None, learner_version=None):
        self.calls.append(" ".join(["buffer." + method, *map(str, args)]))
        return self.reclaimed if method == "reclaim" else None

    def seen(self, stats) -> None:
        pass


class Pending:
    """A Ray reference that is ready once `ready` is set."""

    def __init__(self, value, ready: bool) -> None:
        self.value, self.ready = value, ready


class ProbeRay(OrderRay):
    def wait(self, refs, timeout=None, num_returns=1):
        done = [r for r in refs if not isinstance(r, Pending) or r.ready]
        return done, [r for r in refs if r not in done]

    def get(self, ref, timeout=None):
        return ref.value if isinstance(ref, Pending) else super().get(ref, timeout)


def bare_actor_group(ray, cfg, handles: list, liveness, buffers, events, endpoints: dict,
                     place, run_dir) -> ActorGroup:
    """An ActorGroup over recorded `handles`, no processes: its supervision logic only."""
    group = ActorGroup.__new__(ActorGroup)
    group.ray, group.cfg, group.run_dir, group.endpoints = ray, cfg, run_dir, endpoints
    group.buffers, group.events, group.liveness, group.place = buffers, events, liveness, place
    group.handles = handles
    group.runs, group.restarts, group.replacing, group.discarded = {}, [0] * len(handles), {}, {}
    return group
