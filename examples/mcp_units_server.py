"""A small real MCP server (written with the `mcp` SDK): unit conversion, plus its task set.

Run it as a server (the `mcp_tools` env starts it itself from configs/mcp_example.yaml):

    python examples/mcp_units_server.py                       # stdio
    python examples/mcp_units_server.py --http --port 8765    # streamable HTTP at /mcp

Its tools are read-only (no per-session state), so a config may share one session between
episodes (`shared: true`). `tasks(split)` builds the conversion questions the env trains on;
each task carries the oracle's tool call, so `agent-r1-async envs check` can play it.
"""

from __future__ import annotations

import argparse
import random
import zlib
from typing import Any

# unit -> (dimension, factor to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0), "km": ("length", 1000.0), "cm": ("length", 0.01),
    "mm": ("length", 0.001), "mi": ("length", 1609.344), "ft": ("length", 0.3048),
    "in": ("length", 0.0254),
    "g": ("mass", 1.0), "kg": ("mass", 1000.0), "lb": ("mass", 453.59237),
    "oz": ("mass", 28.349523125),
    "s": ("time", 1.0), "min": ("time", 60.0), "h": ("time", 3600.0), "day": ("time", 86400.0),
}


def convert_value(value: float, from_unit: str, to_unit: str) -> float:
    """`value` in `from_unit`, expressed in `to_unit`, rounded to 4 decimals."""
    for unit in (from_unit, to_unit):
        if unit not in UNITS:
            raise ValueError(f"unknown unit {unit!r}; known: {', '.join(UNITS)}")
    (dim_a, fa), (dim_b, fb) = UNITS[from_unit], UNITS[to_unit]
    if dim_a != dim_b:
        raise ValueError(f"cannot convert {dim_a} ({from_unit}) to {dim_b} ({to_unit})")
    return round(value * fa / fb, 4)


def tasks(split: str, n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """Conversion questions of a split (train 3,000, dev/test 100 unless `n`), disjoint splits.

    Each is {"id", "prompt", "answer", "oracle"}: the oracle calls `convert` and answers."""
    n = n or {"train": 3000, "dev": 100, "test": 100}[split]
    rng = random.Random(zlib.crc32(f"{seed}/{split}/units".encode()))
    offset = {"train": 0, "dev": 1, "test": 2}[split]
    by_dim: dict[str, list[str]] = {}
    for unit, (dim, _) in UNITS.items():
        by_dim.setdefault(dim, []).append(unit)
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, str, str]] = set()
    while len(out) < n:
        units = by_dim[rng.choice(sorted(by_dim))]
        a, b = rng.sample(units, 2)
        value = rng.randrange(1, 300) * 3 + offset  # value mod 3 separates the splits
        if (value, a, b) in seen:
            continue
        seen.add((value, a, b))
        answer = convert_value(value, a, b)
        call = {"name": "convert", "arguments": {"value": value, "from_unit": a, "to_unit": b}}
        out.append({"id": f"units-{split}-{len(out)}",
                    "prompt": f"How many {b} are {value} {a}? Answer with the number.",
                    "answer": answer, "oracle": [call]})
    return out


def build_server() -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("units", log_level="WARNING")

    @server.tool()
    def convert(value: float, from_unit: str, to_unit: str) -> float:
        """Convert a value between units of the same dimension (length, mass, time)."""
        try:
            return convert_value(value, from_unit, to_unit)
        except ValueError as e:  # the agent reads the reason
            raise ToolError(str(e)) from None

    @server.tool()
    def list_units() -> dict[str, list[str]]:
        """The known units, by dimension."""
        out: dict[str, list[str]] = {}
        for unit, (dim, _) in UNITS.items():
            out.setdefault(dim, []).append(unit)
        return out

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    opts = parser.parse_args()
    server = build_server()
    if opts.http:
        server.run("streamable-http", host=opts.host, port=opts.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
