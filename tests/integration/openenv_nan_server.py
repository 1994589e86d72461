"""An openenv-core server whose Environment ends every episode with a NaN reward, for the
test that such an outcome is refused (openenv-core serialises it as null).

    python tests/integration/openenv_nan_server.py --port PORT
"""

from __future__ import annotations

import argparse
from typing import Any


def build_app() -> Any:
    from openenv.core.env_server import Action, Environment, Observation, State, create_app
    from pydantic import Field

    class EchoAction(Action):
        message: str = Field(..., description="Anything")

    class EchoObservation(Observation):
        message: str = Field("", description="What the agent reads")

    class NanEnvironment(Environment[EchoAction, EchoObservation, State]):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._state = State(episode_id=None, step_count=0)

        def reset(self, seed: int | None = None, episode_id: str | None = None,
                  **kwargs: Any) -> EchoObservation:
            self._state = State(episode_id=episode_id, step_count=0)
            return EchoObservation(message="Say anything.", reward=None, done=False)

        def step(self, action: EchoAction, timeout_s: float | None = None,
                 **kwargs: Any) -> EchoObservation:
            self._state.step_count += 1
            return EchoObservation(message="", reward=float("nan"), done=True)

        @property
        def state(self) -> State:
            return self._state

    return create_app(NanEnvironment, EchoAction, EchoObservation, env_name="nan",
                      max_concurrent_envs=4)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    opts = parser.parse_args()
    import uvicorn

    uvicorn.run(build_app(), host="127.0.0.1", port=opts.port, log_level="warning")
