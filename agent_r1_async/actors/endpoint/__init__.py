"""Each actor's generation endpoint: agents we did not write, trained through it.

An actor whose env is an agent's (`blackbox`, `verifiers`: envs/agent.py) serves HTTP on its
own event loop (`endpoint.host`, loopback by default) in front of its engine:

- `POST /inference/v1/generate`: token-in/token-out in vLLM's request and response shape;
  the response adds the policy version of every token (the `agent_r1` field);
- `POST /v1/chat/completions`: OpenAI chat completions rendered with the model's chat
  template by the actor's own context builder, each session keeping its token history so a
  multi-turn conversation extends the previous turn's exact tokens.

Each episode opens a session, hands the agent's function a base URL whose calls land in it,
and turns those calls into the episode's step records (context ids, the exact action ids,
per-token versions, behavior log-probs); the function's return value is the outcome reward.

Modules, one job each:
    auth.py       who may call: loopback, or the actor's bearer token
    params.py     a request's sampling parameters against the engine's
    calls.py      one generation call and its token-level record (`agent_r1`)
    tito.py       vLLM's /inference/v1/generate shapes
    chat.py       OpenAI's /v1/chat/completions shapes, canonical messages
    toolcalls.py  tool calls in an action's text as OpenAI `tool_calls`
    segments.py   a session's chat token histories and which one a request extends
    sessions.py   sessions: how requests name them, what ends their episode
    recorder.py   a session's calls as `StepRecord`s
    service.py    generation on the actor's engine, recorded per session
    server.py     the aiohttp server and its routes
    episodes.py   a black-box agent's episodes: one session each (the episode runner,
                  actors/runner.py, opens it)
"""
