"""CPython's cycle collector in the processes the package starts: off while torch is imported, then what was
imported is frozen.

Importing torch makes some 300 000 objects (modules, functions, types, operator tables) that live until the process
ends. CPython's cycle collector walks them again and again while they are made, and once more, all of them, when
the process exits normally: a third of the CPU-s of a process that imports torch and ``torch._dynamo`` and exits
(3.5 → 2.3 CPU-s at torch 2.14 on 2 cores, 2026-12-07; ``benchmarks/collector.py`` repeats it). Not one of them is
garbage. So a process that runs one of the package's commands:

1. turns the collector off from its first line (``ddp_tutorial/__init__.py`` calls :func:`pause` where
   :func:`runs_a_command`),
2. when its run begins (:func:`ddp_tutorial.entry.run_and_exit`, or ``cli.main`` once the command line is read)
   freezes what it has made (``gc.freeze``: moved where the collector never looks) and turns the collector back
   on (:func:`resume`): the run's own garbage is collected as usual,
3. and freezes again as it exits, before the interpreter's last collections (an ``atexit`` function :func:`pause`
   registers before torch registers its own, so it runs after them).

An ipyparallel engine (a process the package starts too) imports torch for its first rank the same way
(:func:`loading` in ``ipp/remote.py``'s ``warm_up``). A notebook's Jupyter kernel, once ``notebook.setup()`` ran in
its first cell, runs each cell with the collector off (:func:`pause` before the cell, :func:`resume` after it)
until a cell has imported torch (``ddp_tutorial.notebook.pause_collector_until_torch``).

The server the ranks are forked from does 1 and 2 around its imports (``server_start.py`` first, ``server_exit.py``
last): what Python's documentation of ``gc.freeze`` advises for a process that forks, so that the collector of a
rank never touches the pages it shares with the server. The cost: a cycle that became garbage while the collector
was off stays in memory until the process ends (5–6 MB of 780 for torch's import).
"""

from __future__ import annotations

import atexit
import contextlib
import gc

_state = {"paused": False, "frozen_at_exit": False}
#: ``python -m NAME``: the package's commands that import torch; each resumes the collector when its run begins
#: (cli, train, spawn) or ends within seconds (gpu). ``ddp-tutorial …`` (the console script) is cli's.
COMMANDS = ("ddp_tutorial", "ddp_tutorial.train", "ddp_tutorial.spawn", "ddp_tutorial.gpu")


def runs_a_command(argv) -> bool:
    """Is the process whose command line (``sys.orig_argv``) this is one of the package's :data:`COMMANDS`?"""
    argv = list(argv)
    if any(a == "-m" and b in COMMANDS for a, b in zip(argv, argv[1:])):
        return True
    return any(a.endswith("/ddp-tutorial") or a == "ddp-tutorial" for a in argv[1:2])


def pause() -> None:
    """The collector off until :func:`resume`; everything frozen at the exit."""
    if _state["paused"]:
        return
    gc.disable()
    _state["paused"] = True
    if not _state["frozen_at_exit"]:
        atexit.register(gc.freeze)
        _state["frozen_at_exit"] = True


def resume() -> None:
    """What the process has made so far is frozen, and the collector is on again (nothing if not paused)."""
    if not _state["paused"]:
        return
    _state["paused"] = False
    gc.freeze()
    gc.enable()


@contextlib.contextmanager
def loading():
    """``with loading(): import torch …``: :func:`pause` for the imports, :func:`resume` after them (an engine's
    :func:`ddp_tutorial.ipp.remote.warm_up`)."""
    pause()
    try:
        yield
    finally:
        resume()
