"""Preemption and time limits: stop cleanly at a step boundary, checkpoint, come back.

SLURM can warn a job before its time limit (``#SBATCH --signal=B:USR1@90``) or before
preempting it. On SIGUSR1 this module sets a flag (:attr:`StopRequest.requested`); train.py's
stop vote reads it every few steps and all ranks agree through a tiny all-reduce (any rank's
signal stops everyone at the *same* step), rank 0 writes a checkpoint, and every process exits
with :data:`EXIT_REQUEUE`. The sbatch script sees that code and runs
``scontrol requeue $SLURM_JOB_ID``; the requeued job resumes from the checkpoint.
"""

from __future__ import annotations

import os
import signal

from .exits import REQUEUE as EXIT_REQUEUE  # 75, EX_TEMPFAIL in sysexits.h: "try again later"

# ddp_tutorial/__init__.py imports this module before anything else, and a training process installs
# remember_early_signal's handler right then: this module imports only what the interpreter has already
# loaded (os, signal) and exits.py, so that nothing stands between the interpreter's start and the handler.
EARLY_STOP_VARIABLE = "DDP_TUTORIAL_EARLY_STOP"  # "1": a launcher got SIGUSR1 before its children started


class Preempted(Exception):
    """Raised by the training loop after the checkpoint is written."""

    exit_code = EXIT_REQUEUE


_early = {"requested": False}


def remember_early_signal(signum: int = signal.SIGUSR1) -> None:
    """Catch SIGUSR1 from the very start of a training process (before torch is even imported),
    so that a warning arriving while the process starts is kept, not fatal (SIGUSR1's default
    action ends the process). :class:`StopRequest` picks it up when training installs it."""
    signal.signal(signum, lambda *_: _early.__setitem__("requested", True))


def early_signal() -> bool:
    """Did SIGUSR1 arrive before training installed its own handler (here, or at the launcher that
    started this process: :data:`EARLY_STOP_VARIABLE`)?"""
    return _early["requested"] or os.environ.get(EARLY_STOP_VARIABLE) == "1"


def _in_main_thread() -> bool:
    import threading  # here, not at the top: the early handler is installed before it is needed
    return threading.current_thread() is threading.main_thread()


class StopRequest:
    """A flag set by SIGUSR1 (or by :meth:`request`); train.py's stop vote asks all ranks about it."""

    def __init__(self):
        self.requested = early_signal()  # a SIGUSR1 while this process imported torch
        self._previous = None

    def request(self, *_):
        self.requested = True

    def install(self, signum: int = signal.SIGUSR1) -> "StopRequest":
        if _in_main_thread():
            self._previous = (signum, signal.signal(signum, self.request))
        return self

    def uninstall(self) -> None:
        """The handler before :meth:`install` again — unless a stop was asked for: then SIGUSR1 stays
        ignored (:meth:`settle`), so a second warning cannot kill the process on its way out."""
        if self.requested:
            self.settle()
        elif self._previous is not None:
            signal.signal(*self._previous)
        self._previous = None

    def settle(self, signum: int = signal.SIGUSR1) -> None:
        """The stop is decided: ignore SIGUSR1 from now on. (SLURM may send the warning twice; a
        Python handler is reset to the default action while the interpreter exits, and the default
        action of SIGUSR1 ends the process — exit 75 would become "killed by SIGUSR1".)"""
        if _in_main_thread():
            stop_listening(signum)
            self._previous = None


def stop_listening(signum: int = signal.SIGUSR1) -> None:
    """The stop is decided, or the run is over: ``signum`` (SLURM's warning) asks for nothing more. From now
    on it does nothing (a Python handler), and from the interpreter's exit on it is ignored (``SIG_IGN``, set by
    :mod:`atexit`: during the teardown Python resets its own handlers to the default action, which would end the
    process and turn exit 75 or 0 into 138). Not ``SIG_IGN`` at once: an ignored signal is inherited through
    ``exec``, so a process that goes on (a test, a kernel) would start every later shell with it ignored, and
    bash cannot even trap a signal ignored at its start (a batch script's preemption trap never ran: found by a
    clean-clone run at stop 52). Call from the main thread."""
    import atexit
    signal.signal(signum, _nothing_to_do)
    if signum not in _IGNORED_AT_EXIT:
        _IGNORED_AT_EXIT.add(signum)
        atexit.register(_ignore, signum)


_IGNORED_AT_EXIT: set = set()


def _nothing_to_do(signum, frame) -> None:
    """The warning after the stop was decided: nothing is left to do."""


def _ignore(signum: int) -> None:
    try:
        signal.signal(signum, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
