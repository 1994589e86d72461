"""Text made one console line: an exception as the console says it, a message's first line."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def first_line(text: str, limit: int = 160) -> str:
    """The first non-blank line of `text`, terminal colour codes dropped, cut at `limit`."""
    line = next((ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message` (Ray's errors run to dozens of lines). An exception a
    Ray task raised is told as itself (`TimeoutError: no batch ...`), not as Ray's wrapper
    (`RayTaskError(TimeoutError): ray::LearnerHost.update() (pid=...)`); terminal colour
    codes are dropped. An error class with `full_line` (`checkpoint.NoIntactCheckpoint`)
    wrote its message as one line for the console: it is not cut at 160 characters."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        return one_line(cause)
    if getattr(exc, "full_line", False):  # a message written as one line, kept whole
        return f"{type(exc).__name__}: {first_line(str(exc), 4000)}"
    return f"{type(exc).__name__}: {first_line(str(exc))}".rstrip(": ")
