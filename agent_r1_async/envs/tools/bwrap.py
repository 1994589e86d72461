"""The `python` tool's OS sandbox: bubblewrap (`bwrap`) run as an unprivileged user.

Each call runs `bwrap ... <python> -I -S -c <_sandbox_boot.py> <config>` where bwrap gives:

- its own user, pid, network, ipc, uts and cgroup namespaces (`--unshare-all`): no network
  at all (not even loopback), no view of or signal to any process outside the sandbox;
- a root file system built from read-only binds of `/usr` (and the merged-usr links `/bin`,
  `/lib`, `/lib64`, `/sbin`), `/etc/ld.so.cache` and the interpreter's install prefix; nothing
  else of the host (no `/etc/shadow`, no `/home`, no `/root`, no `/work`);
- a size-limited tmpfs on `/tmp` holding the per-call dir and `main.py` (copied in from a
  memfd): the code writes only there, never to the host's disk, and it vanishes with the call;
- `--die-with-parent --new-session`, and bwrap's pid-namespace init: when the call ends (or
  the group is killed) every process the code started dies with it.

The uid matters: bwrap started by root with `--uid 65534` still runs the code as *root*
outside its user namespace (it maps 65534 -> 0), so root-owned files (e.g. `/etc/shadow`)
stay readable. Here bwrap itself is started as `nobody` (65534) when the caller is root, so
the code's real uid on the host is 65534 and its namespace holds no capability on the host.
A non-root caller runs bwrap as itself (the code keeps that user's uid, but sees none of its
files beyond the read-only system binds).

Because the sandbox runs as `nobody`, the interpreter must be readable by `nobody`: the
running one is used when its install prefix is, else `/usr/bin/python3` (a pyenv install
under `/root`, mode 700, is not).
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

NOBODY_FALLBACK = 65534


@dataclass(frozen=True)
class BwrapPlan:
    """How bwrap is started on this machine (probed once per process)."""

    bwrap: str
    interpreter: str
    prefix: str
    """The interpreter's install prefix, bound read-only."""
    uid: int | None
    gid: int | None
    """The host user bwrap runs as (None: the caller's own)."""


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return NOBODY_FALLBACK, NOBODY_FALLBACK


def _world_reachable(path: str) -> bool:
    """True when every directory above `path` is world-searchable and `path` world-readable."""
    parts = os.path.realpath(path).split("/")
    for i in range(2, len(parts)):
        mode = os.stat("/".join(parts[:i]) or "/").st_mode
        if not mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


def _prefix(interpreter: str) -> str:
    """The install prefix of `<prefix>/bin/pythonX.Y`."""
    return os.path.dirname(os.path.dirname(os.path.realpath(interpreter)))


def _candidates(as_root: bool) -> list[str]:
    """Interpreters to try, best first: the running one, then the system's."""
    found = []
    for exe in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        if os.path.exists(exe) and exe not in found:
            if as_root and not _world_reachable(exe):
                continue  # nobody cannot run it (e.g. pyenv under /root)
            found.append(os.path.realpath(exe))
    return found


def bwrap_args(plan: BwrapPlan, workdir: str, code_fd: int, tmpfs_bytes: int) -> list[str]:
    """The bwrap command line up to (not including) the interpreter's argv."""
    args = [plan.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64", "/lib32", "/sbin"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    if plan.prefix != "/usr" and not plan.prefix.startswith("/usr/"):
        args += ["--ro-bind", plan.prefix, plan.prefix]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(tmpfs_bytes), "--tmpfs", "/tmp", "--dir", workdir,
             "--file", str(code_fd), os.path.join(workdir, "main.py"), "--chdir", workdir,
             "--"]
    return args


def popen_kwargs(plan: BwrapPlan, code_fd: int) -> dict[str, Any]:
    kw: dict[str, Any] = {"pass_fds": (code_fd,)}
    if plan.uid is not None:
        kw.update(user=plan.uid, group=plan.gid, extra_groups=[])
    return kw


def code_fd(code: str) -> int:
    """A memfd holding `code` (bwrap copies it into the sandbox's tmpfs)."""
    fd = os.memfd_create("pyexec-main", 0)
    data = code.encode("utf-8", errors="surrogatepass")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _works(plan: BwrapPlan) -> str | None:
    """None when `plan` runs Python as the expected user; else why not."""
    fd = code_fd("")
    try:
        cmd = [*bwrap_args(plan, "/tmp/probe", fd, 1 << 20), plan.interpreter, "-I", "-S",
               "-c", "import os; print(os.getuid())"]
        out = subprocess.run(cmd, capture_output=True, timeout=20, check=False,
                             env={"PATH": "/usr/bin:/bin"}, **popen_kwargs(plan, fd))
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        os.close(fd)
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        return (out.stderr or out.stdout).decode(errors="replace").strip()[-300:] or \
            f"exit status {out.returncode}"
    return None


@functools.cache
def bwrap_plan() -> BwrapPlan:
    """The working bwrap launch on this machine; RuntimeError (saying what to do) if none."""
    hint = ("install bubblewrap (`apt-get install bubblewrap`; scripts/setup.sh does it) or "
            "set env.args.sandbox: unsafe_inprocess to accept the weaker in-process "
            "audit-hook sandbox")
    exe = shutil.which("bwrap")
    if exe is None:
        raise RuntimeError(f"python tool: bubblewrap (bwrap) is not installed: {hint}")
    as_root = os.geteuid() == 0
    uid, gid = _nobody() if as_root else (None, None)
    errors = []
    for interp in _candidates(as_root):
        plan = BwrapPlan(exe, interp, _prefix(interp), uid, gid)
        why = _works(plan)
        if why is None:
            return plan
        errors.append(f"{interp}: {why}")
    tried = "; ".join(errors) or "no interpreter readable by the sandbox user"
    raise RuntimeError(f"python tool: bwrap does not work here ({tried}): {hint}")


__all__ = ["BwrapPlan", "bwrap_args", "bwrap_plan", "code_fd", "popen_kwargs"]
