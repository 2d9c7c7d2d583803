"""How a command-line process ends: a user error → its message and exit code 2, a preemption → 75,
a lost peer → 3 (codes in :mod:`ddp_tutorial.exits`). No torch import."""

from __future__ import annotations

import errno
import os
import sys
import threading

from . import collector, exits
from .i18n import TutorialError, t
from .preemption import stop_listening


def run_and_exit(function, *args) -> int:
    """Run ``function(*args)`` and return the process's exit code; print a user error in one line."""
    collector.resume()  # what the process imported is frozen; its run's garbage is collected (collector.py)
    try:
        return _run(function, *args)
    finally:
        _run_is_over()


def _run_is_over() -> None:
    """The run is over, whatever its end: SLURM's SIGUSR1 now asks for nothing (see
    :func:`ddp_tutorial.preemption.stop_listening`: harmless from now on, ignored during the exit)."""
    if threading.current_thread() is threading.main_thread():
        try:
            stop_listening()
        except (ValueError, OSError):
            pass


def _run(function, *args) -> int:
    try:
        function(*args)
        return exits.OK
    except TutorialError as error:
        rank = getattr(error, "rank", None)  # set by train() in a run of several processes
        where = f" (rank {rank})" if rank is not None else ""
        if not getattr(error, "said", False):  # a lost peer says so before the group is torn down
            print(f"{t('error.prefix')}{where}: {error}", file=sys.stderr, flush=True)
        if rank is not None or error.exit_code == exits.LOST_PEER:
            # In a run of several processes, the process group's threads may still wait in a broken
            # collective or rendezvous; a normal interpreter exit can then hang or abort and hide our
            # exit code. Checkpoints and results are already on disk: a rank that has said its error
            # leaves at once.
            sys.stdout.flush()
            os._exit(error.exit_code)
        return error.exit_code
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except OSError as error:  # EMFILE anywhere (an import, a socket, a file): named, with the way out
        if error.errno != errno.EMFILE:
            raise
        import resource
        print(f"{t('error.prefix')}: {t('open_files.emfile', limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0])}",
              file=sys.stderr, flush=True)
        return exits.USER_ERROR
    except Exception as error:
        code = getattr(error, "exit_code", None)  # preemption.Preempted: exits.REQUEUE
        if code is None:
            raise
        return code
