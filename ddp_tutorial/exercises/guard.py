"""The guard around the attendee's code in the kernel, and strict answers (rows X01–X11 of the
third hostile sweep).

:func:`guarded` wraps a whole check: ``os._exit``/``os.abort`` raise :class:`Stop` instead of ending
the Jupyter kernel, and a check of code that runs in the kernel is stopped after a time bound
(SIGALRM). :class:`KernelState` saves, before each call of the attendee's function, what the graders
and the rest of the notebook rely on — torch's and this package's functions, the random generators,
the environment — and puts it back after. :func:`as_int`, :func:`as_number` and :func:`as_int_list`
take an answer only in the type a grader expects (a str, an array of two values or an object whose
``==`` is always True is not a number), and :func:`shown` writes any answer into a message.
"""

from __future__ import annotations

import numbers
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Optional


class Stop(BaseException):
    """Raised inside the attendee's code by the guards (the time bound, ``os._exit``): ``key`` and
    ``fields`` are the message that says why. A BaseException, so the attendee's ``except Exception``
    does not swallow it."""

    def __init__(self, key: str, **fields: object):
        super().__init__(key)
        self.key, self.fields = key, fields


# Strict answers: the type the grader expects, then the value (an object whose == is always True,
# a str, an array or a tensor of several values is never taken for a number) ---------------------

def kind_of(value: Any) -> str:
    """The name of ``value``'s type as a message shows it: ``str``, ``numpy.ndarray``, ``torch.Tensor``."""
    kind = type(value)
    if kind.__module__ in ("builtins", "__main__"):
        return kind.__name__
    return f"{kind.__module__.split('.')[0]}.{kind.__name__}"


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters (and never an error of its own)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the attendee's object may break even its __repr__
        text = f"<{kind_of(value)}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scalar(value: Any, kinds: tuple) -> Any:
    """A numpy scalar or a one-value tensor of ``kinds`` (numbers.Integral / Real) as a Python number."""
    module = type(value).__module__
    if module == "numpy" and isinstance(value, kinds) and not isinstance(value, bool):
        return value.item()
    torch = sys.modules.get("torch")
    if torch is not None and type(value) is torch.Tensor and value.dim() == 0 and value.dtype != torch.bool:
        if value.is_complex() or (numbers.Integral in kinds and value.is_floating_point()):
            return None
        return value.item()
    return None


def as_int(value: Any) -> Optional[int]:
    """``value`` as a Python int when it is a whole number (an int, a numpy integer, a one-value integer
    tensor; not a bool, a str or a float); else None."""
    if type(value) is int:
        return value
    number = _scalar(value, (numbers.Integral,))
    return number if type(number) is int else None


def as_number(value: Any) -> Optional[float]:
    """``value`` as a Python float when it is a number (int, float, numpy or one-value tensor); else None."""
    if type(value) in (int, float):
        return float(value)
    number = _scalar(value, (numbers.Real,))
    return float(number) if type(number) in (int, float) else None


def as_int_list(value: Any) -> Optional[list]:
    """``value`` as a list of Python ints when it is a list, tuple or range of whole numbers (or a 1-d
    integer array or tensor); else None."""
    if type(value).__module__ in ("numpy", "torch") and getattr(value, "ndim", None) == 1:
        value = value.tolist()
    if type(value) not in (list, tuple, range):
        return None
    items = [as_int(item) for item in value]
    return None if any(item is None for item in items) else items


# The kernel's state around the attendee's code ---------------------------------------------------

_GUARDED = ("torch", "torch.random", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.optim",
            "torch.utils.data", "torch.utils.data.distributed", "torch.utils.data.sampler", "math", "random",
            "builtins")


def _owners() -> list:
    """(label, module or class) whose functions and classes a check relies on: torch's, this package's."""
    modules = [(name, sys.modules[name]) for name in _GUARDED if name in sys.modules]
    modules += [(name, module) for name, module in list(sys.modules.items())
                if module is not None and (name == "ddp_tutorial" or name.startswith("ddp_tutorial."))]
    torch = sys.modules.get("torch")
    if torch is not None:
        from torch.utils.data import DataLoader, DistributedSampler
        modules += [(f"torch.{c.__name__}", c) for c in (torch.Tensor, torch.nn.Module, DistributedSampler, DataLoader)]
    return modules


class RuntimeState:
    """What an attempt can change besides functions, saved before it and put back after it: the random
    generators (torch's, CUDA's once started, Python's, numpy's), torch's default dtype and grad mode
    (``torch.set_grad_enabled(False)`` must not outlive the attempt), the environment (``os.environ``),
    the working directory (``os.chdir``) and ``sys.stdout``/``sys.stderr`` (replaced, every later print
    — the check's own sentence too — would go there). Used in the kernel (:class:`KernelState`) and on
    the engines kept between checks."""

    def __init__(self):
        import torch
        self.torch = torch
        self.rng = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.python = __import__("random").getstate()
        numpy = sys.modules.get("numpy")
        self.numpy = numpy.random.get_state() if numpy is not None else None
        self.dtype, self.grad = torch.get_default_dtype(), torch.is_grad_enabled()
        self.environ = dict(os.environ)
        try:
            self.cwd: Optional[str] = os.getcwd()
        except OSError:  # the folder was removed under us: nothing to go back to
            self.cwd = None
        self.stdout, self.stderr = sys.stdout, sys.stderr

    def restore(self) -> None:
        torch = self.torch
        sys.stdout, sys.stderr = self.stdout, self.stderr
        torch.set_rng_state(self.rng)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        __import__("random").setstate(self.python)
        if self.numpy is not None:
            sys.modules["numpy"].random.set_state(self.numpy)
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(self.grad)
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        if self.cwd is not None:
            try:
                if os.getcwd() != self.cwd:
                    os.chdir(self.cwd)
            except OSError:
                try:
                    os.chdir(self.cwd)
                except OSError:
                    pass


class KernelState:
    """What a check saves before the attendee's code runs and puts back after it: every function and
    class of torch's modules (``torch.randperm``), of ``Tensor``/``Module``/``DistributedSampler``/
    ``DataLoader``, of ``math``/``random``/``builtins`` and of this package; and everything
    :class:`RuntimeState` saves (the random generators, torch's default dtype and grad mode, the
    environment, the working directory, ``sys.stdout``/``sys.stderr``)."""

    def __init__(self):
        self.saved = [(label, owner, dict(vars(owner))) for label, owner in _owners()]
        self.runtime = RuntimeState()

    def restore(self) -> list:
        """Put it all back; return the names of the functions and classes that had been replaced."""
        replaced = [f"{label}.{name}" for label, owner, saved in self.saved for name in put_back(owner, saved)]
        self.runtime.restore()
        return replaced


_ABSENT = object()


def put_back(owner: Any, saved: dict, ignore: Callable[[Any, Any], bool] = lambda value, old: False) -> list:
    """Put back the functions and classes of ``owner`` (a module or a class) that were replaced or
    deleted since ``saved = dict(vars(owner))``, and remove the methods added to a class (they would
    override inherited ones); return their names. A new value for which ``ignore(value, old)`` holds
    (``old``: the saved value, or None) is left (on the engines: torch's own doing, it wraps a few
    functions on first use)."""
    now, names = dict(vars(owner)), []
    for name, value in now.items():
        if saved.get(name, _ABSENT) is value or ignore(value, saved.get(name)):
            continue
        if name in saved and callable(saved[name]):
            setattr(owner, name, saved[name])
            names.append(name)
        elif name not in saved and isinstance(owner, type) and callable(value):
            delattr(owner, name)
            names.append(name)
    for name, value in saved.items():
        if name not in now and callable(value):
            setattr(owner, name, value)
            names.append(name)
    return names


def _refuse_exit(status: object = 0) -> None:
    """``os._exit`` while a check runs: ending the kernel is stopped, and said."""
    raise Stop("ex.why_os_exit", status=shown(status))


class StopButton:
    """Whether the stop button (SIGINT) was pressed during the last check: :meth:`Exercise.check`
    then stops a Run All too, after its sentence (a ``KeyboardInterrupt`` the attendee raised
    themselves is only explained)."""

    pressed = False


@contextmanager
def guarded(bound: Optional[float]):
    """Around a check: ``os._exit``/``os.abort`` cannot end the kernel, and with a ``bound`` (seconds)
    the check is stopped after that long (SIGALRM, once, in the main thread only; a timer already
    running, such as pytest-timeout's, is kept and re-armed with what it had left). A SIGINT (the
    stop button) is noted in :class:`StopButton` and then handled as before."""
    main = threading.current_thread() is threading.main_thread()
    before_int = signal.getsignal(signal.SIGINT) if main else None

    def pressed(signum, frame):
        StopButton.pressed = True
        if callable(before_int):
            return before_int(signum, frame)
        raise KeyboardInterrupt

    targets = [(module, name, getattr(module, name)) for module in (os, sys.modules.get("posix"))
               if module is not None for name in ("_exit", "abort") if hasattr(module, name)]
    timer = bool(bound) and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    previous, (left, interval), started = None, (0.0, 0.0), time.monotonic()
    if timer:
        previous, (left, interval) = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    outer_first = bool(left) and left < bound

    def ring(signum, frame):
        if outer_first and callable(previous):
            return previous(signum, frame)
        raise Stop("ex.why_time_up", seconds=bound)

    # A second alarm from a thread, a second after the bound: an attempt that cancels the interval timer
    # (signal.setitimer(ITIMER_REAL, 0), signal.alarm(0)) is stopped all the same (X22).
    finishing = threading.Lock()
    over = []

    def backup() -> None:
        with finishing:
            if not over:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)

    second = threading.Timer(bound + 1.0, backup) if timer and not outer_first else None
    if second is not None:
        second.daemon = True
    StopButton.pressed = False
    try:
        if main:
            signal.signal(signal.SIGINT, pressed)
        for module, name, _ in targets:
            setattr(module, name, _refuse_exit)
        if timer:
            signal.signal(signal.SIGALRM, ring)
            signal.setitimer(signal.ITIMER_REAL, min(bound, left) if left else bound)
        if second is not None:
            second.start()
        yield
    finally:
        try:  # the one-shot timer may ring here, once: what follows runs all the same
            if second is not None:
                with finishing:
                    over.append(True)
                second.cancel()
            if timer:
                signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            if main:
                signal.signal(signal.SIGINT, before_int if before_int is not None else signal.default_int_handler)
            for module, name, original in targets:
                setattr(module, name, original)
            if timer:
                signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
                if left:
                    signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - started), 0.001), interval)
