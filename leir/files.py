"""Writing files so that a crash, a full disk or a kill never leaves half of
one: the new text goes to a temporary file beside the target, which then
replaces it in one ``os.replace``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def user_cache_home() -> Path:
    """``$XDG_CACHE_HOME``, or ``~/.cache`` when it is unset or relative
    (the XDG spec: a relative path is invalid). Callers add their own folder."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"


def write_atomic(path: str | os.PathLike, text: str, *, durable: bool = False) -> None:
    """Replace ``path``'s contents with ``text`` (UTF-8, newlines as given)
    all at once. A file that existed keeps its permissions; a new one gets
    the usual ``0666 & ~umask`` (mkstemp's 0600 would hide it from other
    users). ``durable``: fsync before the rename, for records a build resumes
    from after a power cut."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    """The process's umask, read where Linux shows it: setting it to read it
    back (``os.umask``) would, for that moment, apply to files that other
    threads create (the server writes from several)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask
