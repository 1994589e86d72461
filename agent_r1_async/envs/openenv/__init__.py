"""OpenEnv environments as an env: `env.name: openenv`.

An OpenEnv server (openenv-core, `create_app(Environment, Action, Observation,
max_concurrent_envs=N)`) serves Environments with `reset(seed, episode_id, **kwargs)`,
`step(action)` and `state`. Each episode of this env plays one episode of one of them over
a WebSocket session of its own (`/ws`): the server builds one Environment per session.

    env:
      name: openenv
      max_turns: 5
      args:
        name: guess                                   # named in every error
        command: [python, examples/openenv_guess_server.py, --port, "{port}"]
        # url: https://my-space.hf.space              # instead of command: a running server
        # headers_env: {Authorization: OPENENV_AUTH}  # header -> variable holding its value
        action_field: message        # the Action field that gets the action text
        observation_field: message   # the Observation field the agent reads
        metric_fields: [solved]      # numeric Observation fields logged as env/<name>
        outcome: last                # or sum
        tasks:
          train: {seed_range: [0, 5000]}
          dev: {seed_range: [5000, 5200]}
          test: {seeds: [9000, 9001], prompts: ["..."]}   # prompts go to reset as `prompt`
        oracle: examples.openenv_guess_server:oracle     # for envs check and warm starts

What happens:
- A `command` server is started by every process that plays episodes (each actor, the
  evaluator, `envs check`, the launch's preflight) on a free loopback port written where
  "{port}" is, and must answer GET /health within `start_timeout_s`; it stops when that
  process exits (also when it is killed: the kernel's parent-death signal). A `url` server
  must answer GET /health when the env is built. Both are then checked against GET /schema:
  a field that `env.args` names and the Action or Observation lacks is a config error naming
  the key and listing the fields there are.
- The action text, exactly as decoded from the policy's tokens, becomes the Action's
  `action_field` (plus the constant `action_extra` fields). The Observation's
  `observation_field` is the user message (after `system_prompt`, when set), cut at
  `max_observation_chars` with the cut marked (a message over `max_message_mb` fails its
  episode, naming that key); a task's
  `Task.prompt` is only its label ("seed 17", or its prompt) in reports.
- Rewards: each step's `reward` (none: 0). `outcome: last`: the final step's reward is the
  outcome (none there fails the episode: openenv-core's server writes a NaN reward as null,
  which must not score 0) and earlier ones are process rewards; `outcome: sum`: the outcome is their sum
  and process rewards are 0. The episode's metrics hold `return` (the sum) and the
  `metric_fields` of the last observation.
- Concurrency: every episode in flight holds a session, so the server's
  `max_concurrent_envs` must cover `actors.groups_in_flight x algorithm.group_size` per
  process (a command server serves one process; a URL server the sum over every process).
  A refused session (CAPACITY_REACHED) fails its episode with a line naming that setting;
  `launch`'s preflight and `envs check` hold that many sessions at once first
  (`OpenEnvEnv.probe_capacity`) and refuse a server that cannot, naming the keys.
  An ended episode's session is kept (`max_idle_sessions`) for the next reset.

Failures, each one `EnvError` line naming the server (the episode ends as env_error; the
actor goes on with its next episode):
- the session drops mid-episode: the episode fails (the Environment's state lived in the
  session; actions are not replayed onto a new one); the next episode opens a new session;
- the session drops between episodes (an idle session died): the next reset opens a new one
  and nobody notices; a reset whose session drops is sent once more on a new session;
- a reset or step takes longer than `timeout_s` (below `env.step_timeout_s`): that episode
  fails and its session is closed;
- the server answers with an error (its Environment raised, the Action did not validate):
  that episode fails with the server's message;
- a command server exits: the episode in flight fails with its exit code and the last line
  it printed, and the next episode starts it again (at most `restarts` times per process).
A server that does not start (exits, or no /health answer in time) or cannot be reached
fails the build: `envs check` and the launch's preflight print that line.

Modules: args.py (`env.args`), server.py (start or reach the server, /health, /schema),
session.py (one WebSocket session and its messages), pool.py (the sessions of a process),
env.py (the definition and the per-episode `Env`). Connections live on the process's host
loop (envs/host_loop.py); the client needs only `websockets`, and openenv-core is needed
only by servers.
"""

from agent_r1_async.envs.openenv.args import OpenEnvArgs, SplitTasks
from agent_r1_async.envs.openenv.env import OpenEnvEnv, OpenEnvEpisode, OpenEnvServerUnavailable

__all__ = ["OpenEnvArgs", "OpenEnvEnv", "OpenEnvEpisode", "OpenEnvServerUnavailable",
           "SplitTasks"]
