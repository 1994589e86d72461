"""What a flood of junk requests costs an actor's generation endpoint: an agent's call rate
with and without flooders, measured in one run.

    .venv/bin/python -m bench.bench_endpoint_flood                     # 3 rounds of 20 s arms
    .venv/bin/python -m bench.bench_endpoint_flood --rounds 5 --arm-s 30 --flooders 4

One endpoint over the real transformers engine on the tiny model (1 thread), serving an agent
that makes chat calls on its recorded session back to back, as a black-box agent does. The
arms alternate within each round so that machine load hits them alike:
- `quiet`: the agent alone;
- `strangers`: `--flooders` processes (other OS processes, as an attacker's are) post
  `--body-kb` chat bodies without a token, as fast as they are answered (401);
- `oversized`: the same bodies with a valid token of another session: each passes the
  token check and is refused as too long for `model.max_model_len` (400) before it is
  rendered or tokenized.
Printed per arm: the agent's calls/s in each round, the flooders' requests/s and status codes,
and the arm's rate over the same round's `quiet` rate (mean, and the range over rounds).
The flooders take CPU of their own on this 2-core machine; the ratio includes that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

FLOODER = r'''
import json, sys, time, urllib.request, urllib.error
url, token, kb, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
body = json.dumps({"messages": [{"role": "user", "content": "x" * (kb * 1024)}]}).encode()
headers = {"Content-Type": "application/json"}
if token:
    headers["Authorization"] = f"Bearer {token}"
codes, end = {}, time.monotonic() + seconds
while time.monotonic() < end:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=30) as r:
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    except OSError:
        code = 0
    codes[code] = codes.get(code, 0) + 1
print(json.dumps(codes))
'''


async def _arm(http: Any, endpoint: Any, service: Any, new_session: Any, arm: str,
               seconds: float, flooders: int, body_kb: int) -> dict[str, Any]:
    """One arm: the agent's calls/s over `seconds`, with the arm's flooders running."""
    agent = new_session()
    victim = new_session()  # the oversized arm's token is this session's
    url = f"{endpoint.url}/v1/chat/completions"
    token = {"quiet": None, "strangers": "", "oversized": victim.token}[arm]
    procs = [] if token is None else [
        subprocess.Popen([sys.executable, "-c", FLOODER, url, token, str(body_kb),
                          str(seconds + 1.0)], stdout=subprocess.PIPE, text=True)
        for _ in range(flooders)]
    await asyncio.sleep(0.5 if procs else 0.0)  # the flood is running when timing starts
    history = [{"role": "user", "content": "What is 3 plus 4?"}]
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        async with http.post(f"{endpoint.session_url(agent.session_id)}/chat/completions",
                             json={"messages": history[-1:]},
                             headers={"Authorization": f"Bearer {agent.token}"}) as r:
            assert r.status == 200, await r.text()
            await r.json()
        calls += 1
    elapsed = time.perf_counter() - t0
    codes: dict[str, int] = {}
    for p in procs:
        out, _ = await asyncio.to_thread(p.communicate)
        for code, n in json.loads(out or "{}").items():
            codes[code] = codes.get(code, 0) + n
    service.sessions.close(agent)
    service.sessions.close(victim)
    return {"calls_per_s": calls / elapsed, "flood_per_s": sum(codes.values()) / elapsed,
            "codes": codes}


async def _run(rounds: int, seconds: float, flooders: int, body_kb: int,
               max_new: int) -> list[dict[str, dict[str, Any]]]:
    import aiohttp

    from agent_r1_async.actors.endpoint.server import Endpoint
    from bench.endpoint_service import tiny_service

    _, engine, service, new_session = tiny_service(max_new)
    endpoint = Endpoint(service, "127.0.0.1", 0, None)
    await endpoint.start()
    results = []
    try:
        async with aiohttp.ClientSession() as http:
            await _arm(http, endpoint, service, new_session, "quiet", 2.0, 0, body_kb)  # warm
            for _ in range(rounds):
                results.append({arm: await _arm(http, endpoint, service, new_session, arm,
                                                seconds, flooders, body_kb)
                                for arm in ("quiet", "strangers", "oversized")})
    finally:
        await endpoint.stop()
        await engine.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm-s", type=float, default=20.0, help="seconds per arm")
    ap.add_argument("--flooders", type=int, default=4, help="flooding processes")
    ap.add_argument("--body-kb", type=int, default=300, help="size of each junk chat body")
    ap.add_argument("--max-new", type=int, default=16, help="tokens per agent call")
    ap.add_argument("--json", default="", help="write the per-round results here too")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    results = asyncio.run(_run(args.rounds, args.arm_s, args.flooders, args.body_kb,
                               args.max_new))
    print(f"{args.rounds} rounds of {args.arm_s:g} s per arm, {args.flooders} flooders of "
          f"{args.body_kb} KB chat bodies, agent calls of {args.max_new} tokens (tiny model, "
          f"transformers engine, 1 thread); load before: {os.getloadavg()[0]:.2f}")
    print(f"{'arm':<10} {'agent calls/s per round':<28} {'flood req/s':>11} "
          f"{'codes':<22} {'vs quiet (mean, range)':<24}")
    for arm in ("quiet", "strangers", "oversized"):
        rates = [r[arm]["calls_per_s"] for r in results]
        ratios = [r[arm]["calls_per_s"] / r["quiet"]["calls_per_s"] for r in results]
        codes: dict[str, int] = {}
        for r in results:
            for c, k in r[arm]["codes"].items():
                codes[c] = codes.get(c, 0) + k
        flood = statistics.mean(r[arm]["flood_per_s"] for r in results)
        print(f"{arm:<10} {' '.join(f'{x:6.2f}' for x in rates):<28} {flood:11.1f} "
              f"{json.dumps(codes):<22} {statistics.mean(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": results}, f, indent=1)


if __name__ == "__main__":
    main()
