"""Env registry: names -> env definitions, and `EnvSpec`, the handle the actor and eval use.

An *env definition* is a class registered with `@register_env("name")` in a module listed in
`env.import` (or exposed through the entry-point group `agent_r1_async.envs`, or named in a
config as `package.module:Class`). Names resolve in this order: `module:Class` paths, names
registered by imported modules, built-ins, entry points. Every command makes the working
directory importable (cli.py), so a module next to the config works everywhere:

    @register_env("my_env")
    class MyEnv:
        '''One-line description shown by `agent-r1-async envs list`.'''
        Args = MyArgs                  # msgspec.Struct(forbid_unknown_fields=True); optional
        def __init__(self, args: MyArgs, env_cfg: EnvConfig): ...  # shared resources, once
        def make(self) -> Env: ...                  # a fresh env for one episode
        def tasks(self, split: str) -> list[Task]: ...
        def oracle(self, task: Task) -> list[str] | None: ...      # optional
            # an `Untrained` action (base.py) is played and shown in a demonstration, not
            # trained on: a deliberate mistake the next action recovers from

The definition is built once per `EnvSpec` (a corpus index is loaded once per actor, not per
episode); `make()` is cheap. `env.args` is validated against `Args`; errors name
`env.args.<key>`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agent_r1_async.config import ConfigError, EnvConfig, with_choices
from agent_r1_async.envs.base import Env, EnvError, Task

ENTRY_POINT_GROUP = "agent_r1_async.envs"
# Built-ins are found by import path (imported on first use), not by import side effects.
_BUILTINS = {
    "multihop_qa": "agent_r1_async.envs.multihop.env:MultihopQAEnv",
    "arithmetic": "agent_r1_async.envs.arithmetic:ArithmeticEnv",
    "python_tool": "agent_r1_async.envs.tools.python_env:PythonToolEnv",
    "mcp_tools": "agent_r1_async.envs.mcp.env:McpToolsEnv",
    "openenv": "agent_r1_async.envs.openenv.env:OpenEnvEnv",
    "blackbox": "agent_r1_async.envs.blackbox:BlackboxEnv",
    "verifiers": "agent_r1_async.envs.verifiers.env:VerifiersEnv",
    "textworld_express": "agent_r1_async.envs.twx.env:TwxEnv",
    "world": "agent_r1_async.envs.world.env:WorldEnv",
}
_REGISTRY: dict[str, type] = {}


class UnknownEnvError(KeyError):
    """No env of that name; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class _NoArgs(msgspec.Struct, forbid_unknown_fields=True):
    """Args of a definition that declares none: any key is unknown."""


def register_env(name: str) -> Callable[[type], type]:
    """Class decorator: register an env definition under `name`."""
    if not name or ":" in name:
        raise ValueError(f"env name {name!r}: must be non-empty and contain no ':'")

    def deco(cls: type) -> type:
        prev = _REGISTRY.get(name)
        if prev is not None and prev is not cls and _qualname(prev) != _qualname(cls):
            raise ValueError(f"env {name!r} is already registered by {_qualname(prev)}")
        _REGISTRY[name] = cls
        cls.env_name = name  # type: ignore[attr-defined]
        return cls

    return deco


def _qualname(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def describe(cls: type) -> str:
    """`cls.description`, else the first line of its docstring."""
    desc = getattr(cls, "description", None)
    if isinstance(desc, str) and desc:
        return desc
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _lookup(path: str) -> Any:
    """The object `module:attr` (or `module:attr.sub`) names; ImportError or AttributeError
    when there is none."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def import_callable(path: str, key: str) -> Callable[..., Any]:
    """The callable `module:function` names, for `env.args.<key>` (a ConfigError naming that
    key when it cannot be imported or is not callable)."""
    try:
        obj = _lookup(path)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"config key `env.args.{key}`: cannot import {path!r}: {e}") from None
    if not callable(obj):
        raise ConfigError(f"config key `env.args.{key}`: {path!r} is not callable")
    fn: Callable[..., Any] = obj
    return fn


def _import_path(path: str) -> type:
    try:
        obj = _lookup(path)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"env.name: cannot import {path!r}: {e}") from None
    if not isinstance(obj, type):
        raise ConfigError(f"env.name: {path!r} is not a class")
    return obj


def resolve(name: str) -> type:
    """The definition class for a registered name, an entry point or `package.module:Class`."""
    if ":" in name:
        return _import_path(name)
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _BUILTINS:
        return _import_path(_BUILTINS[name])
    eps = _entry_points()
    if name in eps:
        cls = eps[name].load()
        if not isinstance(cls, type):
            raise ConfigError(f"env.name: entry point {name!r} ({eps[name].value}) is not a class")
        return _REGISTRY.setdefault(name, cls)
    known = sorted({*_REGISTRY, *_BUILTINS, *eps})
    raise UnknownEnvError(
        f"unknown env {name!r}; known envs: {', '.join(known) or '(none)'} "
        f"(or give a class as 'package.module:Class'); {_import_hint(name)}"
    )


_HINT_MAX_FILES = 500
_HINT_MAX_BYTES = 1 << 20


def registering_modules(name: str, root: Path | None = None) -> list[str]:
    """Modules under `root` (default: the working directory, and its packages one level
    down) whose source registers `name` with `@register_env`: what `env.import` must list.
    Reads at most `_HINT_MAX_FILES` files of at most 1 MiB each; imports nothing."""
    root = Path.cwd() if root is None else root
    pattern = re.compile(r"""register_env\(\s*(["'])""" + re.escape(name) + r"""\1\s*\)""")
    found: list[str] = []
    files = [*sorted(root.glob("*.py")), *sorted(root.glob("*/*.py"))][:_HINT_MAX_FILES]
    for path in files:
        try:
            if path.stat().st_size > _HINT_MAX_BYTES:
                continue
            text = path.read_text("utf-8", "replace")
        except OSError:
            continue
        if pattern.search(text):
            parts = path.relative_to(root).with_suffix("").parts
            found.append(".".join(p for p in parts if p != "__init__"))
    return found


def _import_hint(name: str) -> str:
    """How to make a `@register_env(name)` class known (for the unknown-env message)."""
    modules = registering_modules(name)
    if modules:
        return (f"module {' and '.join(modules)} registers {name!r} but nothing imports it: "
                f"add it to env.import (--set env.import=[{modules[0]}])")
    return ("a name registered with @register_env needs its module in env.import "
            "(--set env.import=[my_module])")


def list_envs() -> list[tuple[str, str]]:
    """(name, one-line description) of every built-in, registered and entry-point env."""
    rows = {name: describe(_import_path(path)) for name, path in _BUILTINS.items()}
    rows.update({name: describe(cls) for name, cls in _REGISTRY.items()})
    for name, ep in _entry_points().items():
        if name not in rows:
            try:
                rows[name] = describe(ep.load())
            except Exception as e:  # a broken plugin must not hide the others
                rows[name] = f"(failed to load {ep.value}: {type(e).__name__}: {e})"
    return sorted(rows.items())


def parse_args(cls: type, args: dict[str, Any]) -> Any:
    """Validate `env.args` against the definition's `Args` struct.

    Errors name `env.args.<key>`; an `Args.__post_init__` names its key by starting its
    message with "<key>: ".
    """
    args_type = getattr(cls, "Args", _NoArgs)
    try:
        return msgspec.convert(args, args_type)
    except (msgspec.ValidationError, ValueError) as e:
        raise ConfigError(_args_error(str(e), args_type)) from None


def _args_error(msg: str, args_type: type) -> str:
    head, sep, path = msg.rpartition(" - at `")
    if not sep:
        head, path = msg, ""
    dict_key = path.startswith("key` in `")  # msgspec's path for a bad key of a dict
    key = path.removeprefix("key` in `").rstrip("`").removeprefix("$").removeprefix(".")
    if dict_key:
        return f"config key `env.args.{key}`: a key: {with_choices(head, args_type, key + '{}')}"
    if head.startswith("Object contains unknown field"):
        field = head.split("`")[1]
        return f"unknown config key `env.args.{f'{key}.' if key else ''}{field}`"
    m = re.match(r"([A-Za-z_]\w*): (.*)", head, re.DOTALL)
    if not key and m:
        key, head = m.group(1), m.group(2)
    return f"config key `env.args{'.' + key if key else ''}`: {with_choices(head, args_type, key)}"


class EnvSpec:
    """A configured env: make episodes, list tasks, get oracle actions."""

    def __init__(self, name: str, definition_cls: type, env_cfg: EnvConfig) -> None:
        self.name = name
        self.description = describe(definition_cls)
        self.env_cfg = env_cfg
        self.args = parse_args(definition_cls, env_cfg.args)
        self.definition = definition_cls(self.args, env_cfg)

    def make(self) -> Env:
        env = self.definition.make()
        if not isinstance(env, Env):
            raise EnvError(f"{self.name}: make() returned {type(env).__name__}, not an Env")
        return env

    def tasks(self, split: str) -> list[Task]:
        return self.definition.tasks(split)

    def oracle(self, task: Task) -> list[str] | None:
        fn = getattr(self.definition, "oracle", None)
        return None if fn is None else fn(task)


def import_env_modules(env_cfg: EnvConfig) -> None:
    """Import the modules listed in `env.import` (their `@register_env` classes register)."""
    for module in env_cfg.import_:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"env.import: cannot import {module!r}: {e}") from None


def get_env_spec(env_cfg: EnvConfig) -> EnvSpec:
    """Import `env.import`, resolve `env_cfg.name` and build its definition with `env_cfg.args`."""
    import_env_modules(env_cfg)
    cls = resolve(env_cfg.name)
    return EnvSpec(env_cfg.name, cls, env_cfg)
