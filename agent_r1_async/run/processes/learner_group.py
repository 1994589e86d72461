"""The learner ranks as one supervised unit: `learner.world_size` LearnerHost Ray actors in one
placement group, started, called and killed together (a rank that dies leaves the others in a
collective, so the group is rebuilt as a whole).

A resumed group says on the console which checkpoint it skipped as corrupt and which it
resumed from (learner/checkpoint.py `resume_intact`), one line; with none intact its start
fails with `NoIntactCheckpoint`, raised here as itself (one line naming the run directory),
not as Ray's task error."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from agent_r1_async.config import RunConfig
from agent_r1_async.run.processes.ray_cluster import ENV
from agent_r1_async.wire.curve import RunKeys, keys_for
from agent_r1_async.wire.roles import LEARNER


class LearnerGroup:
    """`learner.world_size` LearnerHost ranks in a placement group, started as one unit."""

    def __init__(self, cfg: RunConfig, run_dir: Path, control_endpoint: str, resume: bool,
                 curve: RunKeys | None, wait: bool = True) -> None:
        """`wait` False: return once rank 0's weights endpoint is bound, while the ranks still
        load the model (`wait_started` waits for that): the launcher starts the actors
        meanwhile."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from agent_r1_async.learner import memory_savers
        from agent_r1_async.run.processes.hosts import LearnerHost

        lc = cfg.learner
        self.ray = ray
        self.resume = resume
        bundle = {"CPU": lc.num_cpus, **({"GPU": lc.num_gpus} if lc.num_gpus else {}),
                  **lc.resources}
        self.pg = placement_group([dict(bundle) for _ in range(lc.world_size)], strategy="PACK")
        ray.get(self.pg.ready())
        cls = ray.remote(num_cpus=lc.num_cpus, num_gpus=lc.num_gpus, max_concurrency=2)(LearnerHost)
        proc_env = memory_savers.learner_process_env(lc.allocator)  # set at process start
        env = {"runtime_env": {"env_vars": {**ENV, **proc_env}}}
        self.ranks = [
            cls.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=r), **env).remote(
                cfg, r, str(run_dir), keys_for(curve, LEARNER, binds=True))
            for r in range(lc.world_size)
        ]
        master = ray.get(self.ranks[0].rendezvous.remote())
        self.leader = self.ranks[0]
        ray.get(self.leader.connect.remote(control_endpoint))
        # All at once: joining the process group blocks until every rank is in.
        self._starting = [r.start.remote(master, control_endpoint, resume) for r in self.ranks]
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Until every rank has built its Learner; raises as one rank fails."""
        from agent_r1_async.learner.checkpoint import NoIntactCheckpoint

        try:
            self._wait(self._starting)
        except self.ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, NoIntactCheckpoint):
                raise NoIntactCheckpoint(str(e.cause)) from None
            raise
        note = self.ray.get(self.leader.resume_note.remote()) if self.resume else ""
        if note:
            print(f"[launch] {note}", file=sys.stderr, flush=True)

    def call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """Run `method` on every rank (a collective); rank 0's result. Raises as one
        rank fails (the others may then wait in a collective for good: `kill` them), and
        `TimeoutError` when a rank has not answered within `timeout_s`."""
        return self._wait([getattr(r, method).remote(*args) for r in self.ranks],
                          timeout_s, what=f"learner {method}")

    def _wait(self, refs: list[Any], timeout_s: float | None = None, what: str = "") -> Any:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending = list(refs)
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = self.ray.wait(pending, num_returns=1, timeout=left)
            if not done:
                raise TimeoutError(f"{what}: no answer within {timeout_s:g} s")
            self.ray.get(done[0])
        return self.ray.get(refs[0])

    def submit(self, method: str) -> list[Any]:
        return [getattr(r, method).remote() for r in self.ranks]

    def kill(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for r in self.ranks:
            with contextlib.suppress(Exception):
                self.ray.kill(r, no_restart=True)
        with contextlib.suppress(Exception):
            remove_placement_group(self.pg)
