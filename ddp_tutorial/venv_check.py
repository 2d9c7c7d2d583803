"""P1: can another user run the class environment? ``ddp-tutorial site-check --venv DIR`` (or
``DDP_TUTORIAL_VENV``) asks it of ``DIR/bin/python``, the way an attendee's JupyterLab will run it.

A venv's ``python`` is a link to the interpreter it was built from: when that lies in a folder closed to
others (a Python in the instructor's home, mode 700) the instructor's checks are green and every attendee gets
"bad interpreter: Permission denied". :func:`closed_folder` walks the links and the folders above each;
:func:`check`, as root, also runs the interpreter as ``nobody``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Optional, Tuple

from .i18n import t

NOBODY = 65534  # "another user" for the class environment's run (setpriv, as root)


def _open_to_others(path: str) -> bool:
    """Others may pass the folder (o+x), or run the file (o+x; a missing one counts as closed)."""
    try:
        return bool(os.stat(path).st_mode & 0o001)
    except OSError:
        return False


def closed_folder(python: Path) -> Optional[str]:
    """The first folder (or file) on the way to ``python`` that other users cannot pass: every link of the
    chain ``bin/python → python3 → …/python3.11`` is looked up in its own folder, so every folder above each
    of them, as written and resolved, needs o+x; the interpreter itself o+x. ``pyvenv.cfg``'s ``home`` (where
    the standard library lies) too. None when all are open."""
    hops, here = [], str(python)
    for _ in range(40):
        hops.append(here)
        if not os.path.islink(here):
            break
        here = os.path.normpath(os.path.join(os.path.dirname(here), os.readlink(here)))
    homes = []
    try:
        config = (python.parent.parent / "pyvenv.cfg").read_text(errors="replace")
    except OSError:  # none, or closed: the folders above say which
        config = ""
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            homes.append(os.path.join(value.strip(), "."))
    for hop in hops + homes:
        for start in dict.fromkeys([os.path.dirname(hop), os.path.realpath(os.path.dirname(hop))]):
            folder = Path(start)
            for above in [*reversed(folder.parents), folder]:
                if not _open_to_others(str(above)):
                    return str(above)
    final = os.path.realpath(python)
    return None if _open_to_others(final) else final


def check(folder: Path, timeout: float = 60) -> Tuple[bool, str, Dict[str, object]]:
    """P1: can another user run the class environment? Its ``bin/python`` and every folder on the way to
    the interpreter it links to are open to others (:func:`closed_folder`); as root, ``bin/python -c 1`` really
    runs as ``nobody`` (setpriv: no groups of ours, the folder ``/``). Returns site-check's line: (ok, its
    ``site.venv_*`` message key, the fields)."""
    python = folder / "bin" / "python"
    fields = dict(folder=folder, python=python)
    if not os.path.lexists(python):  # a link that leads nowhere reachable is the next check's
        return (False, "site.venv_missing", fields)
    fields["python"] = os.path.realpath(python)
    closed = closed_folder(python)
    if closed:
        try:
            mode = oct(os.stat(closed).st_mode & 0o777)[2:]
        except OSError:  # beyond another closed folder
            mode = "?"
        return (False, "site.venv_private", dict(fields, closed=closed, mode=mode))
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return (True, "site.venv_ok", dict(fields, how=t("site.venv_by_modes")))
    try:
        done = subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                               str(python), "-c", "1"], cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        ran = done.returncode == 0
    except subprocess.TimeoutExpired:
        ran, why = False, t("site.venv_no_end", seconds=f"{timeout:.0f}")
    except OSError as error:
        ran, why = False, str(error)
    user = f"nobody ({NOBODY})"
    if not ran:
        return (False, "site.venv_other_fails", dict(fields, user=user, why=why))
    return (True, "site.venv_ok", dict(fields, how=t("site.venv_ran_as", user=user)))
