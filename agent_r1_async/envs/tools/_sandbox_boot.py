"""Sandbox bootstrap: the first (and trusted) code of every `python` tool subprocess.

Not imported by the parent: `python_exec.py` reads this file's text and runs it with
`python -I -S -c <this source> <config json>` in a fresh temp dir holding `main.py`. In order:

1. hard limits: rlimits with soft == hard (CPU gets hard = soft + 1 so SIGXCPU comes first);
2. `SIGXFSZ` ignored, so a write past RLIMIT_FSIZE raises OSError(EFBIG) instead of killing;
3. unaudited dangerous functions are removed from `os`/`posix` and `_thread` (speed bumps,
   see python_exec.py for what `_imp` can undo), `_posixsubprocess.fork_exec` is replaced,
   `pidfd_send_signal` is removed;
4. the audit hook is installed (it can never be removed);
5. `main.py` runs as a fresh `__main__` module; an uncaught MemoryError exits with
   EXIT_MEMORY so the parent can tell "out of memory" from an ordinary error.

The hook is a closure built by `_make_hook`: every name it uses at call time (builtins, os
functions, the sandbox root) is a closure cell captured here, never a global lookup, so code
that patches `builtins`, `os.path` or this module's globals cannot change its decisions.
That does not make it a boundary: the hook's frame (and so its closure's mutable deny tables)
is reachable from the `__traceback__` of any refusal. In `bwrap` mode it is defense in depth
only (clear refusals for honest mistakes); the OS namespaces are the boundary.
"""

import json
import os
import resource
import signal
import sys

EXIT_MEMORY = 86
"""Exit status of a run ended by an uncaught MemoryError (mirrored in python_exec.py)."""

# Events refused outright. A prefix ending in "." refuses the whole family.
_DENY_PREFIXES = ("socket.", "ctypes.")
_DENY_EVENTS = {
    "subprocess.Popen": "process creation is disabled",
    "os.system": "process creation is disabled",
    "os.exec": "process creation is disabled",
    "os.spawn": "process creation is disabled",
    "os.posix_spawn": "process creation is disabled",
    "os.fork": "process creation is disabled",
    "os.forkpty": "process creation is disabled",
    "pty.spawn": "process creation is disabled",
    "os.killpg": "signalling other processes is disabled",
    "resource.setrlimit": "changing resource limits is disabled",
    "resource.prlimit": "changing resource limits is disabled",
    "sys.settrace": "tracing is disabled",  # a trace function can rewrite other frames' locals
    "sys.setprofile": "profiling is disabled",  # same write-back as settrace
    "gc.get_objects": "heap inspection is disabled",  # would reach the hook's closure
    "gc.get_referrers": "heap inspection is disabled",
    "gc.get_referents": "heap inspection is disabled",
    "code.__new__": "building code objects is disabled",  # crafted bytecode corrupts memory
    "cpython.PyInterpreterState_New": "sub-interpreters are disabled",  # they have no hook
    "sqlite3.connect": "sqlite3 is disabled",  # writes files from C, e.g. ATTACH
    "dbm.open": "dbm is disabled",
    "syslog.openlog": "syslog is disabled",
}
# Extension modules whose C code creates processes, files or sockets behind the hook's back.
_DENY_IMPORTS = frozenset({
    "_posixsubprocess", "_ctypes", "_sqlite3", "_dbm", "_gdbm", "readline", "_posixshmem",
    "_multiprocessing", "_xxsubinterpreters", "_xxinterpchannels", "syslog", "_ssl",
})
# Events whose path arguments must lie inside the sandbox root: (path position, position of
# that path's dir_fd or None). rename/link carry a dir_fd per path (src_dir_fd, dst_dir_fd).
_PATH_EVENTS = {
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)),
    "os.link": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),  # the link's target text is harmless; its location is not
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.utime": ((0, 3),),
    "os.truncate": ((0, None),),
    "os.setxattr": ((0, None),),
    "os.removexattr": ((0, None),),
    "os.chflags": ((0, None),),
    "os.lchflags": ((0, None),),
    "shutil.rmtree": ((0, 1),),
    "shutil.copyfile": ((1, None),),
    "shutil.copymode": ((1, None),),
    "shutil.copystat": ((1, None),),
    "shutil.move": ((0, None), (1, None)),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _make_hook(root: str, max_files: int):
    """The audit hook; `root` is the real path of the sandbox dir."""
    # Captured now: later patches of builtins/os cannot reach these cells.
    _len, _type, _str, _bytes, _int, _isinstance = len, type, str, bytes, int, isinstance
    _whole = slice(None)
    _PermissionError, _OSError = PermissionError, OSError
    _fspath, _lstat, _readlink, _getcwd, _getpid = (
        os.fspath, os.lstat, os.readlink, os.getcwd, os.getpid,
    )
    _deny_prefixes, _deny_events, _deny_imports = _DENY_PREFIXES, dict(_DENY_EVENTS), _DENY_IMPORTS
    _path_events, _write_flags = dict(_PATH_EVENTS), _WRITE_FLAGS
    created = [0]
    own_pid = _getpid()

    def text(p):
        """A path argument as an exact str, or None for a file descriptor."""
        if _type(p) is _int:
            return None
        if _type(p) is not _str and _type(p) is not _bytes:
            p = _fspath(p)  # path-like objects: converted once (see python_exec.py)
        if _isinstance(p, _bytes):
            return _bytes.decode(p, "utf-8", "surrogateescape")
        return _str.__getitem__(p, _whole)  # an exact str even for a str subclass

    def real(p):
        """os.path.realpath, rebuilt from captured C functions (symlinks resolved)."""
        if not p.startswith("/"):
            p = _getcwd() + "/" + p
        todo, done, hops = p.split("/")[::-1], [], 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            cand = "/" + "/".join([*done, part])
            try:
                is_link = (_lstat(cand).st_mode & 0o170000) == 0o120000
            except _OSError:
                is_link = False
            if not is_link:
                done.append(part)
                continue
            hops += 1
            if hops > 40:
                raise _PermissionError("sandbox: too many symlinks in " + p)
            target = _readlink(cand)
            if target.startswith("/"):
                done = []
            todo.extend(target.split("/")[::-1])
        return "/" + "/".join(done)

    def inside(p, dir_fd):
        s = text(p)
        if s is None:
            return True  # an fd the process already holds
        if dir_fd is not None and dir_fd != -1 and not s.startswith("/"):
            return False  # relative to a dir fd we cannot see: refuse
        r = real(s)
        return r == root or r.startswith(root + "/")

    def refuse(event, why):
        raise _PermissionError("sandbox: " + why + " (" + event + ")")

    def check_open(args):
        path, mode, flags = args[0], args[1], args[2]
        s = text(path)
        if s is None:
            return
        if not (flags & _write_flags):
            r = real(s)  # reads are allowed, except other processes' /proc entries
            parts = r.split("/")
            if (_len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit()
                    and _int(parts[2]) != own_pid):
                refuse("open", "reading other processes' /proc entries is disabled")
            return
        # os.open passes mode None and may carry a dir_fd the event does not show
        if not inside(path, None if mode is not None else 0):
            refuse("open", "writing outside the sandbox directory is disabled")
        created[0] += 1
        if created[0] > max_files:
            refuse("open", "too many files opened for writing")

    def hook(event, args):
        why = _deny_events.get(event)
        if why is not None:
            refuse(event, why)
        if event.startswith(_deny_prefixes):
            refuse(event, "network access is disabled" if event[0] == "s" else "ctypes is disabled")
        if event == "open":
            check_open(args)
        elif event == "import":
            name = _str.__getitem__(args[0], _whole) if _isinstance(args[0], _str) else ""
            if name in _deny_imports:
                refuse(event, "module " + name + " is disabled")
        elif event == "os.kill":
            if args[0] != own_pid:
                refuse(event, "signalling other processes is disabled")
        elif event in _path_events:
            for i, fd_pos in _path_events[event]:
                dir_fd = args[fd_pos] if fd_pos is not None and fd_pos < _len(args) else None
                if not inside(args[i], dir_fd):
                    refuse(event, "changing files outside the sandbox directory is disabled")
            if event == "os.mkdir":
                created[0] += 1
                if created[0] > max_files:
                    refuse(event, "too many files created")

    return hook


def _refuse_threads(*args, **kwargs):
    raise PermissionError("sandbox: threads are disabled (_thread.start_new_thread)")


def _refuse_fork_exec(*args, **kwargs):
    raise PermissionError("sandbox: process creation is disabled (_posixsubprocess)")


def _excepthook(etype, value, tb) -> None:
    """The default report minus this bootstrap's frames (hook and _main: `File "<string>"`)."""
    try:
        import traceback

        lines = traceback.format_exception(etype, value, tb)
        sys.stderr.write("".join(x for x in lines if not x.startswith('  File "<string>"')))
    except Exception:  # the code broke what traceback needs (patched builtins, ...)
        sys.__excepthook__(etype, value, tb)


def _set_limits(cfg: dict) -> None:
    cpu = cfg["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for name, key in (("RLIMIT_AS", "memory_bytes"), ("RLIMIT_FSIZE", "file_bytes"),
                      ("RLIMIT_NOFILE", "max_open_files"), ("RLIMIT_NPROC", "nproc")):
        resource.setrlimit(getattr(resource, name), (cfg[key], cfg[key]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _neuter_modules() -> None:
    import _posixsubprocess  # imported now so later imports of it can be refused
    import _thread
    import posix

    for mod in (os, posix):
        for name in ("mknod", "mkfifo", "memfd_create", "chroot", "pidfd_open"):  # unaudited
            if hasattr(mod, name):
                delattr(mod, name)
            if name in os.__all__:
                os.__all__.remove(name)
    import _signal

    for mod in (signal, _signal):  # not audited: signals any process it can name
        if hasattr(mod, "pidfd_send_signal"):
            delattr(mod, "pidfd_send_signal")
    _thread.start_new_thread = _thread.start_new = _refuse_threads
    _posixsubprocess.fork_exec = _refuse_fork_exec


def _main() -> None:
    cfg = json.loads(sys.argv[1])
    root = os.path.realpath(cfg["root"])
    with open(os.path.join(root, "main.py"), encoding="utf-8") as f:
        source = f.read()
    _set_limits(cfg)
    _neuter_modules()
    import types

    sys.addaudithook(_make_hook(root, cfg["max_files"]))
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    sys.modules["__main__"] = main
    sys.argv = ["main.py"]
    sys.excepthook = _excepthook
    try:
        code = compile(source, "main.py", "exec")  # relative: tracebacks show source lines
        exec(code, main.__dict__)
    except MemoryError:
        sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_MEMORY)


_main()
