"""The package layout's rules, read from the source with `ast` (docs/architecture.md, "Layout").

Every `import` and `from ... import` statement of every module under `agent_r1_async/` counts,
wherever it is: at the top, inside a function (lazy imports), under `if TYPE_CHECKING:` (a
type-only import still couples the two packages), relative or absolute. `importlib` calls
with computed names (the env registry's entry points) are not statements and are not seen.

Rules
- no import cycle among the package's modules;
- `actors`, `buffers` and `learner` never import each other: they meet on `wire/`;
- `wire/` imports none of the packages that meet on it (nor `run/`, `envs/`, `sft/`,
  `weights/`), nor torch or vLLM;
- `weights/` (the weight seam and its backends) is imported only by `actors/`, `learner/`,
  `run/` and itself, and imports none of `actors/`, `buffers/`, `learner/`, `run/`, `envs/`,
  `sft/`;
- `ray` is imported only in `run/processes/` and `cli.py`; `zmq` only in `wire/`;
- `run/` (the edge) is imported only by `run/` and `cli.py`;
- `envs` is imported only by `actors/`, `sft/`, `run/`, `envs/` itself and `cli.py` (the
  `envs list` command, an edge like `run/`), and imports none of `actors/`, `learner/`,
  `buffers/`, `weights/`, `run/`: the actor reads the envs' contracts, never the reverse;
- layers, bottom up (`LAYERS`): an import between two areas (subpackages or top-level modules)
  goes from a higher layer to a lower one, never up and never across a layer;
- no import loop between areas (the package-level graph has no cycle).

A second check keeps docs/architecture.md's doors true: its "Seams" section lists every
Protocol class of the package with its file, and every path its "Who owns what" table names
exists.

The checker is tested on synthetic sources too, so that a checker that finds nothing cannot
pass by accident. A second group of tests keeps the documentation inside the repository:
every relative link in README.md, BENCHMARKS.md and docs/*.md names a file of the repository,
and every repository path the documents quote in backticks exists.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "agent_r1_async"

MEETING = ("actors", "buffers", "learner")
"""Subpackages that must never import each other."""
ONLY_IN = {"ray": ("run/processes/", "cli.py"), "zmq": ("wire/",)}
"""Third-party top-level modules and the only places that may import them: a folder of the
package (`run/processes/`, ending in `/`) or a module (`cli.py`)."""
ENVS_IMPORTERS = ("actors", "sft", "run", "envs", "cli")
"""Who may import `envs` (subpackages, or `cli` for the module cli.py)."""
WIRE_MUST_NOT_IMPORT = ("actors", "buffers", "learner", "run", "envs", "sft", "weights")
WIRE_LIGHT = ("torch", "vllm")
"""Heavy libraries the schema package never imports (every process, the buffer included, loads it)."""
WEIGHTS_IMPORTERS = ("actors", "learner", "run", "weights")
"""Who may import `weights/` (the seam and its backends): the two sides it joins and the edge."""
WEIGHTS_MUST_NOT_IMPORT = ("actors", "buffers", "learner", "run", "envs", "sft")
RUN_IMPORTERS = ("run", "cli")
"""run/ (Ray, processes, the launch) is the edge: the library below it never imports it."""
ENVS_MUST_NOT_IMPORT = ("actors", "learner", "buffers", "weights", "run")
"""envs/ (tasks, tools, rewards, the agent contract) knows none of the processes that run it."""
LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "config", "models", "sampling", "disk", "returns"),
    ("bf16",),
    ("precision", "wire"),
    ("weights", "envs"),
    ("actors", "buffers", "learner"),
    ("sft",),
    ("run",),
    ("cli",),
)
"""The package's areas ("" is the package's own `__init__`), bottom up: an area imports only
areas of lower layers."""


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    """A module of the package, or a third-party top-level name ("ray", "torch")."""
    line: int

    def where(self) -> str:
        return f"{self.importer} (line {self.line})"


# --------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------


def module_sources(root: Path, package: str = PACKAGE) -> dict[str, str]:
    """{dotted module name: source} for every .py file of `package` under `root`."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path.read_text()
    return out


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """`from ..x import y` inside `importer` -> the absolute module it names."""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    if level - 1 > len(base) - 1:
        raise ImportError(f"{importer}: relative import beyond the top-level package")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _target(name: str, sources: Mapping[str, str], package: str, attribute_ok: bool) -> str:
    """The module of `package` an import names, or the third-party top-level name.

    `import a.b.c` names module a.b.c; `from a.b import c` names module a.b.c when there is
    one, else module a.b (c is one of its attributes). The package's parents (`a.b` for
    a.b.c) are not edges: Python runs their `__init__` first, but a package init that imports
    its own submodules is the normal shape, not a cycle. A name of the package that is no
    module is an error (of the source or of this checker), never silently skipped.
    """
    if name != package and not name.startswith(package + "."):
        return name.split(".")[0]
    if name in sources:
        return name
    parent = name.rpartition(".")[0]
    if attribute_ok and parent in sources:
        return parent
    raise AssertionError(f"imports {name}, which is no module of {package}")


def import_edges(sources: Mapping[str, str], package: str = PACKAGE) -> list[Edge]:
    """Every import of every module: to a module of `package`, or to a third-party top level."""
    edges = []
    for importer, source in sources.items():
        is_package = any(m.startswith(importer + ".") for m in sources)
        for node in ast.walk(ast.parse(source, filename=importer)):
            names: list[tuple[str, bool]] = []  # (name, may be an attribute of its parent)
            if isinstance(node, ast.Import):
                names = [(a.name, False) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = _resolve_relative(importer, is_package, node.level, node.module)
                names = [(f"{base}.{a.name}", True) if a.name != "*" else (base, False)
                         for a in node.names]
            for name, attribute_ok in names:
                try:
                    target = _target(name, sources, package, attribute_ok)
                except AssertionError as e:
                    raise AssertionError(f"{importer} (line {node.lineno}) {e}") from None
                if target != importer:
                    edges.append(Edge(importer, target, node.lineno))
    return list(dict.fromkeys(edges))  # `from m import a, b` is one edge


def find_cycles(modules: Iterable[str], edges: Iterable[Edge]) -> list[tuple[list[str], list[str]]]:
    """(a shortest cycle path [a, b, ..., a], all its component's modules) for each strongly
    connected component of more than one module: no cycle goes unreported, and each report
    names a path to break."""
    graph: dict[str, list[str]] = {m: [] for m in modules}
    for e in edges:
        if e.imported in graph and e.imported not in graph[e.importer]:
            graph[e.importer].append(e.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package's graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [(_cycle_path(comp, graph), comp) for comp in components]


def _cycle_path(component: list[str], graph: Mapping[str, list[str]]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start, inside = component[0], set(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w not in inside:
                    continue
                if w == start:  # v closes the loop: walk the parents back to start
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{component} is not a cycle")


def _area(module: str, package: str = PACKAGE) -> str:
    """The subpackage (or top-level module) of the package a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycle_lines(kind: str, cycles: list[tuple[list[str], list[str]]]) -> list[str]:
    lines = []
    for path, component in cycles:
        line = f"{kind}: " + " -> ".join(path)
        if len(component) > len(path) - 1:
            line += f" (one of the cycles among {', '.join(component)})"
        lines.append(line)
    return lines


def _layer(area: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if area in layer), None)


def _layer_problem(e: Edge, src: str, dst: str) -> str:
    """Why an import from area `src` to area `dst` breaks the layers ("" when it does not)."""
    name = {a: a or "__init__" for a in (src, dst)}
    for area in (src, dst):
        if _layer(area) is None:
            return (f"{e.where()} imports {e.imported}: {name[area]} has no layer; place it "
                    "in LAYERS (tests/unit/test_layout.py) and docs/architecture.md")
    i, j = _layer(src), _layer(dst)
    assert i is not None and j is not None
    if i == j:
        return (f"{e.where()} imports {e.imported}: {name[src]} and {name[dst]} share a layer "
                "and import neither")
    if i < j:
        return (f"{e.where()} imports {e.imported}: {name[src]} sits below {name[dst]}; "
                "imports go down the layers only")
    return ""


def area_cycles(edges: Iterable[Edge], package: str = PACKAGE) -> list[tuple[list[str], list[str]]]:
    """`find_cycles` on the package-level graph: one node per area (subpackage or top-level
    module), an edge where a module of one imports a module of another."""
    area_edges = [Edge(_area(e.importer, package), _area(e.imported, package), e.line)
                  for e in edges if e.imported.startswith(package + ".")]
    areas = sorted({a for e in area_edges for a in (e.importer, e.imported)})
    return find_cycles(areas, [e for e in area_edges if e.importer != e.imported])


def _inside(module: str, places: Iterable[str], package: str = PACKAGE) -> bool:
    """Is `module` in one of `places` (`ONLY_IN`: a folder `run/processes/` or a module
    `cli.py`, relative to the package)?"""
    path = "/".join(module.split(".")[1:])
    return any(path + ".py" == p or (path + "/").startswith(p) for p in places)


def layout_violations(sources: Mapping[str, str], package: str = PACKAGE) -> list[str]:
    """Every broken rule, one readable line each (empty when the layout holds). An import that
    breaks a named rule is not reported again for the layers it crosses."""
    edges = import_edges(sources, package)
    cycles = _cycle_lines("import cycle", find_cycles(sources, edges))
    cycles += _cycle_lines("package import loop", area_cycles(edges, package))
    problems = []
    for e in edges:
        named = len(problems)
        internal = e.imported.startswith(package + ".")
        src = _area(e.importer, package)
        dst = _area(e.imported, package) if internal else ""
        if internal and src in MEETING and dst in MEETING and src != dst:
            problems.append(
                f"{e.where()} imports {e.imported}: {src}/ and {dst}/ must not import each "
                "other (they meet on wire/)"
            )
        if internal and src == "wire" and dst in WIRE_MUST_NOT_IMPORT:
            problems.append(
                f"{e.where()} imports {e.imported}: wire/ is neutral ground and imports "
                f"none of {', '.join(WIRE_MUST_NOT_IMPORT)}"
            )
        if internal and dst == "run" and src not in RUN_IMPORTERS:
            problems.append(
                f"{e.where()} imports {e.imported}: run/ is the edge; only "
                f"{', '.join(RUN_IMPORTERS)} may import it"
            )
        if not internal and src == "wire" and e.imported in WIRE_LIGHT:
            problems.append(
                f"{e.where()} imports {e.imported}: wire/ stays light (messages and transports; "
                "tensors belong in weights/)"
            )
        if internal and dst == "weights" and src not in WEIGHTS_IMPORTERS:
            problems.append(
                f"{e.where()} imports {e.imported}: only {', '.join(WEIGHTS_IMPORTERS)} may "
                "import weights"
            )
        if internal and src == "weights" and dst in WEIGHTS_MUST_NOT_IMPORT:
            problems.append(
                f"{e.where()} imports {e.imported}: weights/ sits between the learner and "
                f"the engines and imports none of {', '.join(WEIGHTS_MUST_NOT_IMPORT)}"
            )
        if internal and dst == "envs" and src not in ENVS_IMPORTERS:
            problems.append(
                f"{e.where()} imports {e.imported}: only {', '.join(ENVS_IMPORTERS)} may "
                "import envs"
            )
        if internal and src == "envs" and dst in ENVS_MUST_NOT_IMPORT:
            problems.append(
                f"{e.where()} imports {e.imported}: envs/ imports none of "
                f"{', '.join(ENVS_MUST_NOT_IMPORT)} (the actor reads the envs' contracts, "
                "never the reverse)"
            )
        allowed = ONLY_IN.get(e.imported)
        if not internal and allowed is not None and not _inside(e.importer, allowed, package):
            problems.append(
                f"{e.where()} imports {e.imported}: {e.imported} belongs in "
                f"{' or '.join(allowed)} only"
            )
        if internal and src != dst and len(problems) == named:
            layered = _layer_problem(e, src, dst)
            if layered:
                problems.append(layered)
    return cycles + sorted(set(problems))


# --------------------------------------------------------------------------------------
# The package's own layout
# --------------------------------------------------------------------------------------


def test_the_package_keeps_its_layout_rules() -> None:
    sources = module_sources(ROOT)
    assert len(sources) > 40 and f"{PACKAGE}.wire.messages" in sources  # the real tree was read
    problems = layout_violations(sources)
    assert not problems, "layout rules broken:\n  " + "\n  ".join(problems)


def test_the_package_graph_has_the_edges_the_rules_are_about() -> None:
    """The rules are not vacuous here: the graph holds the kinds of import they constrain,
    the lazy ones inside functions included."""
    sources = module_sources(ROOT)
    edges = import_edges(sources)
    areas = {(_area(e.importer), _area(e.imported) if e.imported.startswith(PACKAGE) else e.imported)
             for e in edges}
    for meeting in MEETING:
        assert (meeting, "wire") in areas
    assert ("wire", "zmq") in areas and ("run", "ray") in areas and ("actors", "envs") in areas
    assert ("actors", "weights") in areas and ("learner", "weights") in areas
    assert ("weights", "wire") in areas
    lazy = {
        (module, node.lineno)
        for module, source in sources.items()
        for fn in ast.walk(ast.parse(source))
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE)
    }
    assert len(lazy) > 10  # launch preflight, hosts, actor setup, cli commands, ...
    assert lazy <= {(e.importer, e.line) for e in edges}


# --------------------------------------------------------------------------------------
# The checker on synthetic packages: each rule fires, with a message that says where
# --------------------------------------------------------------------------------------


def _pkg(**modules: str) -> dict[str, str]:
    """Synthetic sources: keyword `wire__x` is module pkg.wire.x; every package gets an init."""
    out = {"pkg": ""}
    for key, src in modules.items():
        parts = key.split("__")
        for n in range(1, len(parts)):
            out.setdefault(".".join(["pkg", *parts[:n]]), "")
        out[".".join(["pkg", *parts])] = src
    return out


def test_checker_reports_a_two_module_cycle_with_its_path() -> None:
    sources = _pkg(
        wire__a="from pkg.wire import b\n",
        wire__b="def f():\n    import pkg.wire.a\n",  # lazy: still a cycle
        wire__c="from pkg.wire.a import X\n",  # leads into the cycle, is not part of it
    )
    assert layout_violations(sources, "pkg") == [
        "import cycle: pkg.wire.a -> pkg.wire.b -> pkg.wire.a"
    ]


def test_checker_reports_a_three_module_cycle_through_relative_imports() -> None:
    sources = _pkg(
        run__a="from . import b\n",
        run__b="from .c import thing\n",
        run__c="from ..run import a\n",
    )
    assert find_cycles(sources, import_edges(sources, "pkg")) == [
        (["pkg.run.a", "pkg.run.b", "pkg.run.c", "pkg.run.a"], ["pkg.run.a", "pkg.run.b", "pkg.run.c"])
    ]


def test_checker_names_every_module_of_a_tangle() -> None:
    """A factory and two backends that import each other: one component, one report."""
    sources = _pkg(
        actors__engine="def make():\n    from pkg.actors import hf, vllm\n",
        actors__hf="from pkg.actors.engine import Engine\n",
        actors__vllm="from pkg.actors.engine import Engine\n",
    )
    assert layout_violations(sources, "pkg") == [
        "import cycle: pkg.actors.engine -> pkg.actors.hf -> pkg.actors.engine (one of the "
        "cycles among pkg.actors.engine, pkg.actors.hf, pkg.actors.vllm)"
    ]


def test_checker_reports_forbidden_imports_with_the_rule_they_break() -> None:
    sources = _pkg(
        actors__actor="import zmq\nfrom pkg.learner.loop import Learner\n",
        learner__loop="x = 1\n",
        buffers__service="def f():\n    from pkg.envs import base\n",
        envs__base="",
        wire__weights="from pkg.actors import actor\n",
        run__processes__hosts="import ray\n",
        run__launch="def f():\n    import ray\n",
        models="import ray.util\n",
        sft__train="from pkg.run.processes.hosts import make_run_dir\n",
        weights__seam="",
        weights__zmq="from pkg.learner import loop\n",
        buffers__store="from pkg.weights.seam import Applied\n",
        wire__frames="def f():\n    import torch\n",
    )
    assert layout_violations(sources, "pkg") == [
        "pkg.actors.actor (line 1) imports zmq: zmq belongs in wire/ only",
        "pkg.actors.actor (line 2) imports pkg.learner.loop: actors/ and learner/ must not "
        "import each other (they meet on wire/)",
        "pkg.buffers.service (line 2) imports pkg.envs.base: only actors, sft, run, envs, "
        "cli may import envs",
        "pkg.buffers.store (line 1) imports pkg.weights.seam: only actors, learner, run, "
        "weights may import weights",
        "pkg.models (line 1) imports ray: ray belongs in run/processes/ or cli.py only",
        "pkg.run.launch (line 2) imports ray: ray belongs in run/processes/ or cli.py only",
        "pkg.sft.train (line 1) imports pkg.run.processes.hosts: run/ is the edge; only run, "
        "cli may import it",
        "pkg.weights.zmq (line 1) imports pkg.learner.loop: weights/ sits between the "
        "learner and the engines and imports none of actors, buffers, learner, run, envs, sft",
        "pkg.wire.frames (line 2) imports torch: wire/ stays light (messages and "
        "transports; tensors belong in weights/)",
        "pkg.wire.weights (line 1) imports pkg.actors.actor: wire/ is neutral ground and "
        "imports none of actors, buffers, learner, run, envs, sft, weights",
    ]


def test_checker_accepts_a_clean_package() -> None:
    sources = _pkg(
        wire__messages="import msgspec\n",
        wire__zmq="import zmq\nfrom pkg.wire import messages\n",
        actors__actor="from pkg.wire.messages import StepRecord\nfrom pkg.envs import base\n",
        learner__loop="from pkg.wire import messages\n",
        envs__base="",
        run__processes__hosts=("import ray\nfrom pkg.actors.actor import A\n"
                               "from pkg.learner.loop import L\n"),
        cli="import ray\n",
        weights__seam="",
        weights__zmq="from pkg.wire import messages\nfrom pkg.weights.seam import A\n",
        learner__publish="from pkg.weights.zmq import S\n",
    )
    assert layout_violations(sources, "pkg") == []


def test_checker_keeps_envs_below_the_processes() -> None:
    """An env module that reaches into the actor (here lazily, for its context builder) is
    named with the envs rule, once: not again for the layer it climbs."""
    sources = _pkg(
        actors__context="from pkg.envs.base import Env\n",
        envs__base="",
        envs__check="def budget():\n    from pkg.actors.context import History\n",
        envs__pool="from pkg.run.hosts import on_this_node\n",
        run__hosts="",
    )
    assert layout_violations(sources, "pkg") == [
        "package import loop: actors -> envs -> actors",
        "pkg.envs.check (line 2) imports pkg.actors.context: envs/ imports none of actors, "
        "learner, buffers, weights, run (the actor reads the envs' contracts, never the "
        "reverse)",
        "pkg.envs.pool (line 1) imports pkg.run.hosts: envs/ imports none of actors, learner, "
        "buffers, weights, run (the actor reads the envs' contracts, never the reverse)",
        "pkg.envs.pool (line 1) imports pkg.run.hosts: run/ is the edge; only run, cli may "
        "import it",
    ]


def test_checker_reports_an_import_up_or_across_the_layers() -> None:
    """Imports no named rule covers still go down the layers only; an area with no layer is
    refused until it is placed."""
    sources = _pkg(
        models="from pkg.precision import choose\n",  # up: models sits below precision
        precision="",
        sampling="import pkg.models\n",  # across: one layer
        buffers__store="from pkg.sft.demos import load\n",  # up
        sft__demos="from pkg.cli import main\n",  # up
        cli="",
        learner__loop="from pkg.plugins.x import y\n",  # plugins has no layer
        plugins__x="",
    )
    assert layout_violations(sources, "pkg") == [
        "pkg.buffers.store (line 1) imports pkg.sft.demos: buffers sits below sft; imports go "
        "down the layers only",
        "pkg.learner.loop (line 1) imports pkg.plugins.x: plugins has no layer; place it in "
        "LAYERS (tests/unit/test_layout.py) and docs/architecture.md",
        "pkg.models (line 1) imports pkg.precision: models sits below precision; imports go "
        "down the layers only",
        "pkg.sampling (line 1) imports pkg.models: sampling and models share a layer and "
        "import neither",
        "pkg.sft.demos (line 1) imports pkg.cli: sft sits below cli; imports go down the "
        "layers only",
    ]


def test_checker_finds_a_package_level_loop_of_modules_that_form_no_cycle() -> None:
    """Four modules, no module cycle (a -> b, c -> d), yet actors and buffers import each
    other: the package-level graph has the loop, and says which areas it joins."""
    sources = _pkg(
        actors__a="from pkg.buffers import b\n",
        buffers__b="",
        buffers__c="from pkg.sft.d import x\n",
        sft__d="def f():\n    from pkg.actors import e\n",
        actors__e="",
    )
    edges = import_edges(sources, "pkg")
    assert find_cycles(sources, edges) == []
    assert area_cycles(edges, "pkg") == [
        (["actors", "buffers", "sft", "actors"], ["actors", "buffers", "sft"])
    ]
    assert layout_violations(sources, "pkg")[0] == (
        "package import loop: actors -> buffers -> sft -> actors"
    )


@pytest.mark.parametrize("source", ["import pkg.gone\n", "from pkg.gone import x\n"])
def test_checker_refuses_an_import_of_a_module_that_does_not_exist(source: str) -> None:
    with pytest.raises(AssertionError, match=r"pkg.run.a \(line 1\) imports pkg.gone"):
        import_edges(_pkg(run__a=source), "pkg")


# --------------------------------------------------------------------------------------
# Documentation stays inside the repository
# --------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...
_QUOTED_PATH = re.compile(
    r"`((?:agent_r1_async|tests|bench|configs|docs|examples|scripts)/[\w./-]*?\.\w+)(?:::[^`]*)?`"
)
_QUOTED_MODULE = re.compile(
    r"`((?:wire|weights|actors|buffers|learner|envs|sft|run)/[\w./-]*?\.py)`"
)
"""A module path relative to the package (`run/launch.py`), as docs/architecture.md writes them."""


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]


def relative_links(text: str) -> list[str]:
    """Link targets that are paths (not URLs, not same-page anchors), outside code."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = _INLINE_LINK.findall(prose) + _REF_LINK.findall(prose)
    return [t for t in targets if not _EXTERNAL.match(t) and not t.startswith("#")]


def broken_links(doc: Path, root: Path) -> list[str]:
    problems = []
    for target in relative_links(doc.read_text()):
        path = target.split("#", 1)[0]
        resolved = (root / path.lstrip("/")) if path.startswith("/") else (doc.parent / path)
        resolved = resolved.resolve()
        name = doc.relative_to(root)
        if path.startswith("/") or not resolved.is_relative_to(root):
            problems.append(f"{name}: link {target!r} leaves the repository")
        elif not resolved.exists():
            problems.append(f"{name}: link {target!r} names no file of the repository")
    return problems


def test_link_checker_finds_links_and_refuses_bad_ones(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "there.md").write_text("")
    doc = tmp_path / "docs" / "a.md"
    doc.write_text(
        "[up](../there.md#part) [out](../../shared/DESIGN.md) [gone](missing.md)\n"
        "![pic](img.png) [web](https://example.org/x) [anchor](#section) [abs](/etc/passwd)\n"
        "`[in code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n[ref]: ../there.md\n"
    )
    assert relative_links(doc.read_text()) == [
        "../there.md#part", "../../shared/DESIGN.md", "missing.md", "img.png", "/etc/passwd",
        "../there.md",
    ]
    assert broken_links(doc, tmp_path) == [
        "docs/a.md: link '../../shared/DESIGN.md' leaves the repository",
        "docs/a.md: link 'missing.md' names no file of the repository",
        "docs/a.md: link 'img.png' names no file of the repository",
        "docs/a.md: link '/etc/passwd' leaves the repository",
    ]


def test_document_links_stay_inside_the_repository_and_resolve() -> None:
    docs = documents()
    assert (ROOT / "docs" / "architecture.md") in docs
    problems = [p for doc in docs for p in broken_links(doc, ROOT)]
    assert not problems, "\n".join(problems)


def test_repository_paths_quoted_in_the_documents_exist() -> None:
    """A path in backticks (`agent_r1_async/wire/messages.py`, `tests/unit/x.py::test`, or
    `run/launch.py` inside the package) names a file that exists: a move must update the
    documents that point at it."""
    problems = []
    for doc in documents():
        text = doc.read_text()
        quoted = [(p, ROOT / p) for p in _QUOTED_PATH.findall(text)]
        quoted += [(p, ROOT / PACKAGE / p) for p in _QUOTED_MODULE.findall(text)]
        for path, where in sorted(set(quoted)):
            if not where.exists():
                problems.append(f"{doc.relative_to(ROOT)}: `{path}` does not exist")
    assert not problems, "\n".join(problems)


def test_the_architecture_document_names_every_wire_message() -> None:
    """Each struct of the wire schema has its row in docs/architecture.md ("Messages")."""
    tree = ast.parse((ROOT / PACKAGE / "wire" / "messages.py").read_text())
    structs = [
        c.name for c in tree.body
        if isinstance(c, ast.ClassDef) and not c.name.startswith("_")
        and any(isinstance(b, ast.Name) and b.id == "_Wire" for b in c.bases)
    ]
    assert {"StepRecord", "CreditGrant", "WeightsHeader", "Group"} <= set(structs)
    text = (ROOT / "docs" / "architecture.md").read_text()
    messages_section = text[text.index("## Messages"):text.index("## Who owns what")]
    missing = [name for name in structs if f"`{name}`" not in messages_section]
    assert not missing, f"docs/architecture.md, section Messages, does not describe {missing}"


# --------------------------------------------------------------------------------------
# docs/architecture.md's module listing against the tree
# --------------------------------------------------------------------------------------


def listed_modules(doc_text: str) -> set[str]:
    """The module paths (relative to the package) of the "Package layout" section's listing:
    the first fenced block after that heading, one `path.py` at the start of each line."""
    section = doc_text.split("## Package layout", 1)[1]
    block = section.split("```", 2)[1]
    return set(re.findall(r"^\s+([\w/]+\.py)\b", block, re.MULTILINE))


def modules_on_disk(root: Path, package: str = PACKAGE) -> set[str]:
    """Every module file of the package but `__init__.py`, relative to the package."""
    base = root / package
    return {p.relative_to(base).as_posix() for p in base.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def listing_problems(doc_text: str, on_disk: set[str]) -> list[str]:
    listed = listed_modules(doc_text)
    return ([f"{m}: in the package, missing from the listing" for m in sorted(on_disk - listed)]
            + [f"{m}: listed, not in the package" for m in sorted(listed - on_disk)])


def test_the_architecture_listing_is_the_package() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert listing_problems(doc, modules_on_disk(ROOT)) == []


def test_the_listing_check_names_a_missing_and_a_stale_module() -> None:
    doc = ("# A\n\n## Package layout\n\n```\npkg/\n  cli.py       the command line\n"
           "  wire/zmq.py  transport\n  wire/old.py  gone\n```\n\n```\n  later.py  not the listing\n```\n")
    assert listed_modules(doc) == {"cli.py", "wire/zmq.py", "wire/old.py"}
    assert listing_problems(doc, {"cli.py", "wire/zmq.py", "wire/messages.py"}) == [
        "wire/messages.py: in the package, missing from the listing",
        "wire/old.py: listed, not in the package",
    ]


# --------------------------------------------------------------------------------------
# docs/architecture.md's seams and owners against the tree
# --------------------------------------------------------------------------------------


def _section(doc_text: str, heading: str) -> str:
    """The text of a `## heading` section, up to the next `## ` heading."""
    return doc_text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def protocols_on_disk(root: Path, package: str = PACKAGE) -> set[tuple[str, str]]:
    """(class, module path relative to the package) of every class that has `Protocol` among
    its bases (`Protocol` or `typing.Protocol`), at any depth of any module."""
    out = set()
    base = root / package
    for path in sorted(base.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id == "Protocol")
                or (isinstance(b, ast.Attribute) and b.attr == "Protocol") for b in node.bases
            ):
                out.add((node.name, path.relative_to(base).as_posix()))
    return out


def listed_protocols(doc_text: str) -> set[tuple[str, str]]:
    """The (Protocol, file) rows of the "Seams" section's table: `| `Name` | `path.py` | ...`."""
    rows = re.findall(r"^\|\s*`(\w+)`\s*\|\s*`([\w/]+\.py)`\s*\|", _section(doc_text, "Seams"),
                      re.MULTILINE)
    return set(rows)


def seam_problems(doc_text: str, on_disk: set[tuple[str, str]]) -> list[str]:
    listed = listed_protocols(doc_text)
    return ([f"{c} ({f}): a Protocol of the package, missing from the Seams section"
             for c, f in sorted(on_disk - listed)]
            + [f"{c} ({f}): listed in the Seams section, no such Protocol in that file"
               for c, f in sorted(listed - on_disk)])


def owner_paths(doc_text: str) -> set[str]:
    """The paths the "Who owns what" table names: backticked, relative to the package, each a
    module (`buffers/store.py`) or a folder (`envs/`)."""
    return set(re.findall(r"`([\w/]+(?:\.py|/))`", _section(doc_text, "Who owns what")))


def owner_problems(doc_text: str, root: Path, package: str = PACKAGE) -> list[str]:
    return [f"`{p}`: named in Who owns what, not in the package"
            for p in sorted(owner_paths(doc_text)) if not (root / package / p).exists()]


def test_the_seams_section_lists_every_protocol_of_the_package() -> None:
    on_disk = protocols_on_disk(ROOT)
    assert ("Transport", "wire/transport.py") in on_disk and len(on_disk) > 20
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert seam_problems(doc, on_disk) == []


def test_the_paths_who_owns_what_names_exist() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert {"buffers/admission.py", "envs/", "config.py"} <= owner_paths(doc)
    assert owner_problems(doc, ROOT) == []


def test_the_doc_checks_name_a_missing_and_a_stale_entry(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "wire").mkdir(parents=True)
    (tmp_path / "pkg" / "wire" / "transport.py").write_text(
        "import typing\nfrom typing import Protocol\n\n"
        "class Pusher(Protocol): ...\nclass Poller(typing.Protocol): ...\n"
        "class ZmqPusher: ...\n"
        "def f():\n    class _Local(Protocol): ...\n"
    )
    (tmp_path / "pkg" / "envs").mkdir()
    on_disk = protocols_on_disk(tmp_path, "pkg")
    assert on_disk == {("Pusher", "wire/transport.py"), ("Poller", "wire/transport.py"),
                       ("_Local", "wire/transport.py")}
    doc = ("# A\n\n## Who owns what\n\n| concept | owner |\n|---|---|\n"
           "| sockets | `wire/transport.py`, `wire/gone.py`, `CreditGrant.group_ids` |\n"
           "| tasks | `envs/`, `learner/` |\n\n"
           "## Seams\n\n| Protocol | file |\n|---|---|\n"
           "| `Pusher` | `wire/transport.py` | the data channel |\n"
           "| `_Local` | `wire/transport.py` | |\n"
           "| `ZmqPusher` | `wire/transport.py` | a class, no Protocol |\n"
           "| `Engine` | `actors/engines/base.py` | |\n\n"
           "## Later\n\n| `Poller` | `wire/transport.py` | outside the section |\n")
    assert seam_problems(doc, on_disk) == [
        "Poller (wire/transport.py): a Protocol of the package, missing from the Seams section",
        "Engine (actors/engines/base.py): listed in the Seams section, no such Protocol in "
        "that file",
        "ZmqPusher (wire/transport.py): listed in the Seams section, no such Protocol in that "
        "file",
    ]
    assert owner_paths(doc) == {"wire/transport.py", "wire/gone.py", "envs/", "learner/"}
    assert owner_problems(doc, tmp_path, "pkg") == [
        "`learner/`: named in Who owns what, not in the package",
        "`wire/gone.py`: named in Who owns what, not in the package",
    ]
