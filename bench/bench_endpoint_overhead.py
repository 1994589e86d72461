"""What a call through an actor's generation endpoint costs over the actor's in-process path.

    .venv/bin/python -m bench.bench_endpoint_overhead                  # 60 calls per arm
    .venv/bin/python -m bench.bench_endpoint_overhead --calls 200 --max-new 32

One process, one engine (the transformers backend on the tiny model: a fast engine shows the
overhead most plainly; the overhead does not depend on the engine), three arms on the same
prompts, alternating call by call so that machine load hits them alike:
- `in-process`: `await engine.generate(context)`, as the rollout loop calls it;
- `tito`: `POST /sessions/ID/inference/v1/generate` over loopback HTTP (aiohttp), the token-in
  token-out route, into a recorded session (each call becomes a step record);
- `chat`: `POST /sessions/ID/v1/chat/completions` with the conversation so far (a user
  message, then each answer and a new user message), rendered with the chat template and
  extended token for token, into a recorded session.
Each session takes `--turns` calls, then a new one opens. After each chat call the engine
alone generates from the context the endpoint rendered (`in-process@chat`: a chat context
grows turn by turn). Printed: each arm's median and p90 milliseconds per call, and the
endpoint's overhead: the median per-call difference from its in-process reference, and the
ratio of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

N_PROMPTS = 4


def _quantile(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


async def _run(calls: int, max_new: int, turns: int) -> dict[str, list[float]]:
    import aiohttp

    from agent_r1_async.actors.endpoint.server import Endpoint
    from bench.endpoint_service import tiny_service

    tok, engine, service, opened = tiny_service(max_new)
    questions = [f"Question {i}: what is {i} plus {i + 3}?" for i in range(N_PROMPTS)]
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": q}], tokenize=True,
                                            add_generation_prompt=True, return_dict=False))
               for q in questions]

    def new_session(_n: int) -> Any:
        return opened()

    endpoint = Endpoint(service, "127.0.0.1", 0, None)
    await endpoint.start()  # the client calls with the actor's token (actors/endpoint/auth.py)
    times: dict[str, list[float]] = {"in-process": [], "tito": [], "chat": [],
                                     "in-process@chat": []}
    try:
        async with aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {endpoint.token}"}) as http:
            tito = chat = None
            history: list[dict[str, str]] = []
            for i in range(calls + 3):  # 3 warm-up rounds, not timed
                if i % turns == 0:
                    tito, chat = new_session(2 * i), new_session(2 * i + 1)
                    history = [{"role": "user", "content": questions[i % N_PROMPTS]}]
                prompt = prompts[i % N_PROMPTS]
                t0 = time.perf_counter()
                await engine.generate(prompt, max_new)
                t1 = time.perf_counter()
                async with http.post(
                        f"{endpoint.session_url(tito.session_id).removesuffix('/v1')}/inference/v1/generate",
                        json={"token_ids": prompt, "sampling_params": {
                            "max_tokens": max_new, "temperature": 1.0}}) as r:
                    assert r.status == 200, await r.text()
                    await r.json()
                t2 = time.perf_counter()
                async with http.post(
                        f"{endpoint.session_url(chat.session_id)}/chat/completions",
                        json={"model": "tiny", "messages": history, "max_tokens": max_new,
                              "temperature": 1.0}) as r:
                    assert r.status == 200, await r.text()
                    body = await r.json()
                t3 = time.perf_counter()
                answer = body["choices"][0]["message"]["content"]
                await engine.generate(body["prompt_token_ids"], max_new)  # chat's own context
                t4 = time.perf_counter()
                history += [{"role": "assistant", "content": answer},
                            {"role": "user", "content": "And then?"}]
                if i >= 3:
                    times["in-process"].append(1e3 * (t1 - t0))
                    times["tito"].append(1e3 * (t2 - t1))
                    times["chat"].append(1e3 * (t3 - t2))
                    times["in-process@chat"].append(1e3 * (t4 - t3))
    finally:
        await endpoint.stop()
        await engine.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=60, help="timed calls per arm")
    ap.add_argument("--max-new", type=int, default=16, help="tokens generated per call")
    ap.add_argument("--turns", type=int, default=4, help="calls per session")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    times = asyncio.run(_run(args.calls, args.max_new, args.turns))
    print(f"{args.calls} calls per arm, {args.max_new} new tokens each, {args.turns} calls "
          "per session, tiny model on the transformers engine, 1 thread")
    print(f"{'arm':<16} {'median ms':>10} {'p90 ms':>8} {'vs':<16} {'overhead ms':>12} "
          f"{'ratio':>6}")
    for arm, ref in (("in-process", ""), ("tito", "in-process"),
                     ("in-process@chat", ""), ("chat", "in-process@chat")):
        med = statistics.median(times[arm])
        line = f"{arm:<16} {med:10.2f} {_quantile(times[arm], 0.9):8.2f}"
        if ref:  # paired per call: the same context on the engine alone
            extra = [a - b for a, b in zip(times[arm], times[ref], strict=True)]
            line += (f" {ref:<16} {statistics.median(extra):12.2f} "
                     f"{med / statistics.median(times[ref]):6.2f}")
        print(line)


if __name__ == "__main__":
    main()
