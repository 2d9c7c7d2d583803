"""The machinery of the checked exercises (in the spirit of Kaggle Learn's ``learntools``).

Every exercise is an :class:`Exercise`: the notebook defines what the exercise asks for (a
function or a value, under the exercise's ``name``), then calls

    ex.shard_indices.check()     # runs the attendee's code and says precisely what is wrong
    ex.shard_indices.hint()      # a first hint; hint() again (or hint(2)) is more concrete
    ex.shard_indices.solution()  # shows the code of a solution

``check()`` finds the attendee's definition in the notebook's namespace (or takes it as its
argument). The shipped placeholder — a function whose body is only ``...`` (or that raises
``NotImplementedError``), a value left at ``None`` or ``...`` — is reported as "not done yet" and
raises nothing, so *Run All* runs through. An exception inside the attendee's code is shown as
the attendee's own line and a one-line explanation, never as a traceback from inside torch —
``sys.exit()``, ``KeyboardInterrupt`` and ``os._exit`` included; a check of code that runs in the kernel
is stopped after :data:`GRADING_BOUND` seconds, and what the attendee's code replaced or reseeded is put
back (:mod:`.guard`).
Distributed exercises run the attendee's function on ipyparallel engines, inside a real gloo
process group (:func:`ddp_tutorial.ipp.run`).

Every text comes from the message files, in the notebook's language: the shared ones from ``[ex]``,
an exercise's own from its table ``[ex.<name>]`` (task, hints, solution, success, the placeholder's
docstring and the grader's diagnoses); the solution's comments are written ``⟪tr‖en⟫`` (as in the
notebooks' code cells) and shown in the notebook's language (:meth:`Exercise.solution_code`). The
notebook cells of an exercise are built from it (``=== exercise NAME`` in ``notebooks/src/*.cells``):
the task, :meth:`Exercise.placeholder` and the ``check()`` cell.
"""

from __future__ import annotations

import inspect
import linecache
import re
import textwrap
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from ..i18n import TutorialError, language, localize_code, t
from .guard import KernelState, Stop, StopButton, as_int, guarded, kind_of, shown

NOT_DONE, WRONG, CORRECT = "not-done", "wrong", "correct"
_MISSING = object()
GRADING_BOUND = 20
"""Seconds a check that runs the attendee's code in the kernel may take: a loop that never ends is stopped."""


def _stub():
    ...


def _stub_with_doc():
    """doc"""
    ...


_STUB_CODES = {_stub.__code__.co_code, _stub_with_doc.__code__.co_code}


@dataclass
class Outcome:
    """What a check found: ``status`` (not-done / wrong / correct), the text shown and, for a wrong
    answer, the key of the message that diagnosed it."""

    status: str
    text: str
    key: Optional[str] = None

    @property
    def correct(self) -> bool:
        return self.status == CORRECT

    def __str__(self) -> str:
        return self.text


class Wrong(Exception):
    """Raised by a grader: the attendee's answer is wrong; the message ``key`` says how."""

    def __init__(self, key: str, **fields: object):
        super().__init__(t(key, **fields))
        self.key = key


class NotDone(Exception):
    """Raised by a grader: the attendee has not started yet."""


class AttendeeError(Exception):
    """The attendee's own code raised; ``text`` is their line and a one-line explanation."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


class AttendeeStopped(AttendeeError):
    """The attendee's code was stopped (the stop button, :data:`GRADING_BOUND`, ``os._exit``): ``text``
    says where and why. A grader that counts an error as a refusal must let this one through."""


def is_placeholder(answer: Any) -> bool:
    """The shipped, not-yet-attempted form: ``None``, ``...``, or a function whose body is only ``...``/``pass``."""
    if answer is None or answer is Ellipsis:
        return True
    code = getattr(answer, "__code__", None)
    return code is not None and code.co_code in _STUB_CODES and not code.co_names


def where_it_failed(error: BaseException, filename: Optional[str]) -> Tuple[Optional[str], Optional[int]]:
    """The deepest frame of ``error``'s traceback in the attendee's file: (filename, line number)."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if filename is not None and f.filename == filename]
    if not own:
        own = [f for f in frames if "site-packages" not in f.filename and "ddp_tutorial" not in f.filename]
    if not own:
        return None, None
    return own[-1].filename, own[-1].lineno


# torch.distributed's collectives that change their tensor in place and return None (without async_op=True).
_IN_PLACE = re.compile(r"\b(all_reduce|broadcast|all_gather|reduce_scatter|all_to_all|dist\.reduce)\s*\(")


def _used_the_none(error_type: str, message: str, filename: Optional[str], line: str) -> Optional[str]:
    """The collective whose result (None) the attendee's code used, where a ``TypeError`` about ``NoneType``
    comes from that: the failing line calls it (``return dist.all_reduce(t) / n``), or the attendee's code
    assigns its result (``total = dist.all_reduce(t)``)."""
    if error_type != "TypeError" or "NoneType" not in (message or ""):
        return None
    found = _IN_PLACE.search(line)
    if found is None and filename:
        assigned = re.compile(r"[^=!<>]=\s*[\w.]*?" + _IN_PLACE.pattern)
        found = next(filter(None, map(assigned.search, linecache.getlines(filename))), None)
    return found.group(1).rpartition(".")[2] if found else None


def explain_error(error_type: str, message: str, filename: Optional[str], lineno: Optional[int],
                  exited: bool = False) -> str:
    """The attendee's line (from this process's line cache) and a one-line explanation; ``exited``:
    the error was a ``SystemExit`` (``sys.exit()``), which ends a program instead of answering. A
    ``TypeError`` from using what an in-place collective returned (None) says so."""
    line = linecache.getline(filename, lineno).strip() if filename and lineno else ""
    first = (message or "").strip().splitlines()
    explanation = f"{error_type}: {first[0] if first else ''}".rstrip(": ")
    if exited:
        explanation = t("ex.why_exit", error=explanation)
    collective = _used_the_none(error_type, message, filename, line)
    if collective:
        explanation += " " + t("ex.in_place_none", collective=collective)
    if line:
        return t("ex.your_error", line=lineno, code=line, error=explanation)
    return t("ex.your_error_noline", error=explanation)


def error_report(error: BaseException, function: Any) -> Dict[str, Any]:
    """A picklable description of an exception raised by the attendee's ``function``."""
    filename = getattr(getattr(function, "__code__", None), "co_filename", None)
    file, line = where_it_failed(error, filename)
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - the attendee's own exception class may break even its __str__
        message = ""
    return {"type": type(error).__name__, "message": message, "file": file, "line": line,
            "not_implemented": isinstance(error, NotImplementedError), "exited": isinstance(error, SystemExit)}


def _stopped(stop: BaseException, function: Any, why: str) -> AttendeeStopped:
    filename = getattr(getattr(function, "__code__", None), "co_filename", None)
    file, line = where_it_failed(stop, filename)
    code = linecache.getline(file, line).strip() if file and line else ""
    return AttendeeStopped(t("ex.stopped", line=line, code=code, why=why) if code else t("ex.stopped_noline", why=why))


def _called(function: Callable, args: tuple, kwargs: dict):
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise NotDone() from None
    except Stop as stop:
        raise _stopped(stop, function, t(stop.key, **stop.fields)) from None
    except KeyboardInterrupt as stop:
        raise _stopped(stop, function, t("ex.why_interrupted")) from None
    except BaseException as error:  # noqa: BLE001 - Exception, SystemExit and the attendee's own BaseException
        report = error_report(error, function)
        raise AttendeeError(explain_error(report["type"], report["message"], report["file"], report["line"],
                                          report["exited"])) from None


def call(function: Callable, *args, **kwargs):
    """Call the attendee's function here. Whatever it raises (``sys.exit()``, ``KeyboardInterrupt``,
    any ``BaseException``) becomes :class:`AttendeeError` with their line (or NotDone), a stop
    :class:`AttendeeStopped`. Afterwards the random generators, the environment and every function
    or class of torch and this package that it replaced are put back (:class:`KernelState`): a
    reference computed after the call is untouched, and a replacement fails the answer."""
    saved = KernelState()
    try:
        result = _called(function, args, kwargs)
    finally:
        replaced = saved.restore()
    if replaced:
        fail("ex.replaced_here", names=", ".join(replaced))
    return result


def call_for(shown: str, function: Callable, *args):
    """:func:`call`, and an error in the attendee's code names the input that caused it (``shown``)."""
    try:
        return call(function, *args)
    except AttendeeError as error:
        raise type(error)(t("ex.for_input", input=shown, text=error.text)) from None


# What torch.distributed says when a collective's peers never came (gloo, NCCL, the store).
_COLLECTIVE_WORDS = ("gloo", "NCCL", "Connection closed", "Timed out", "timed out", "Socket Timeout")


def raise_if_failed(results: list) -> list:
    """Results from the engines: if a rank's call of the attendee's function raised, say so."""
    for rank, result in enumerate(results):
        if isinstance(result, dict) and "attendee_error" in result:
            report = result["attendee_error"]
            if report["not_implemented"]:
                raise NotDone()
            text = explain_error(report["type"], report["message"], report["file"], report["line"],
                                 report.get("exited", False))
            if report.get("hint"):  # what the exercise knows about this error (e.g. no GPU here)
                text += " " + report["hint"]
            elif report["type"] == "NameError":  # a name of the notebook's: the engines are other processes
                text += " " + t("ex.engine_name_error")
            returned = [str(other) for other, result in enumerate(results)
                        if not (isinstance(result, dict) and "attendee_error" in result)]
            if returned and any(word in report["message"] for word in _COLLECTIVE_WORDS):  # E07: a collective alone
                text += " " + t("ex.collective_alone", ranks=", ".join(returned))
            raise AttendeeError(t("ex.on_rank", rank=rank, text=text))
    return results


def short_list(values, limit: int = 6) -> str:
    """``[3, 7, 1, …]``: the first few values of a list, for messages."""
    values = list(values)
    shown = ", ".join(str(v) for v in values[:limit])
    return f"[{shown}{', …' if len(values) > limit else ''}]"


def fail_type(value: Any, want: str) -> None:
    """Fail with "returns a value of type X, not <want>" (``want``: a text such as ``t("ex.want_int")``)."""
    fail("ex.not_type", kind=kind_of(value), want=want, got=shown(value))


def expect_int(value: Any) -> int:
    """:func:`as_int`, or fail naming the type returned."""
    number = as_int(value)
    if number is None:
        fail_type(value, t("ex.want_int"))
    return number


class WrongAnswer(NamedTuple):
    """An exercise's typical wrong answer: source that defines the exercise's ``name`` the way many
    attendees first do, and the message key of the diagnosis its check must give (tested)."""

    code: str
    key: str


PARTS = ("title", "task", "hint1", "hint2", "solution", "correct")
"""The texts every exercise has in its own table ``[ex.<name>]`` of each message file; the messages a
grader fails with sit in the same table and are named by literal keys (``fail("ex.lr_for.wrong", …)``)."""

DOC = "doc"
"""The part an exercise whose answer is a function (no ``stub``) has besides :data:`PARTS`: the docstring
of its placeholder, in the notebook's language."""


@dataclass
class Exercise:
    """One checked exercise, as data.

    ``name``: its one identifier: what the attendee defines in the notebook, and the table
    ``[ex.<name>]`` of its texts (:data:`PARTS`, and the grader's own messages);
    ``notebook``: where it lives (``"02"``); ``grade(answer)``: raises :class:`Wrong` (via
    :func:`fail`) or :class:`NotDone`, or returns the fields of the ``correct`` text; ``code``: the
    solution's source, its comments written ``⟪tr‖en⟫`` (:meth:`solution_code` gives one language);
    ``wrong``: the typical wrong answer and the diagnosis it gets; ``stub(lang)``: the placeholder's
    code when the answer is not a function (``fixed_sbatch``); otherwise the placeholder is the
    solution's ``def`` line with the docstring ``ex.<name>.doc`` (:data:`DOC`).
    """

    name: str
    notebook: str
    grade: Callable[[Any], Optional[dict]]
    code: str
    wrong: WrongAnswer
    stub: Optional[Callable[[Optional[str]], str]] = None
    distributed: bool = False
    _hints_shown: int = field(default=0, repr=False)
    _passed: Any = field(default=None, repr=False)  # the last answer whose check passed

    # Its texts -------------------------------------------------------------------------
    def key(self, part: str) -> str:
        """The message key of one of its :data:`PARTS` (or :data:`DOC`): ``ex.<name>.<part>``."""
        if part not in (*PARTS, DOC):
            raise ValueError(f"{part!r} is not one of {(*PARTS, DOC)}")
        return ".".join(("ex", self.name, part))

    def message_keys(self) -> Tuple[str, ...]:
        """The keys this exercise looks up by its name (:data:`PARTS`, and :data:`DOC` when its answer
        is a function); every other message it shows is named by a literal key in its grader or in
        this module."""
        return tuple(self.key(part) for part in (PARTS if self.stub is not None else (*PARTS, DOC)))

    def text(self, part: str, lang: Optional[str] = None, **fields: object) -> str:
        return t(self.key(part), lang=lang, **fields)

    def task(self, lang: Optional[str] = None) -> str:
        """The task, as the notebook's markdown cell shows it: its title as a heading, then its text."""
        return "### " + self.text("title", lang=lang) + "\n\n" + self.text("task", lang=lang)

    def placeholder(self, lang: Optional[str] = None) -> str:
        """The code of the notebook's exercise cell: ``# EXERCISE name`` and the shipped placeholder
        (the solution's ``def`` line, the docstring ``ex.<name>.doc`` and ``...``), all in ``lang``."""
        if self.stub is not None:
            body = self.stub(lang)
        else:
            signature = next(line for line in self.code.strip().splitlines() if line.startswith("def "))
            body = (f"{signature}\n{docstring(self.text(DOC, lang=lang))}\n    ...  # "
                    + t("ex.your_code", lang=lang))
        return f"# EXERCISE {self.name}\n{body}"

    def solution_code(self, lang: Optional[str] = None) -> str:
        """The solution's source in ``lang`` (default: the notebook's): its ``⟪tr‖en⟫`` comments resolved."""
        return localize_code(self.code.strip(), lang or language())

    # The attendee's side ---------------------------------------------------------------
    def _answer(self, answer: Any, depth: int = 2) -> Any:
        if answer is not _MISSING:
            return answer
        frame = inspect.currentframe()
        try:
            for _ in range(depth):
                frame = frame.f_back
            namespace = frame.f_globals
        finally:
            del frame
        return namespace.get(self.name)

    def evaluate(self, answer: Any = _MISSING) -> Outcome:
        """Grade ``answer`` (default: ``self.name`` from the caller's namespace) without printing."""
        answer = self._answer(answer)
        title = t("ex.title", name=self.name)
        if is_placeholder(answer):
            return Outcome(NOT_DONE, t("ex.not_done", title=title, name=self.name))
        in_kernel = not self.distributed  # the attendee's code runs here, not on the engines
        saved = KernelState() if in_kernel else None
        try:
            with guarded(GRADING_BOUND if in_kernel else None):
                return self._graded(answer, title)
        except Stop as stop:  # the guards stopped the grader's own work (an answer's __repr__ looping …)
            why = t(stop.key, **stop.fields)
        except KeyboardInterrupt:  # the stop button, while the grader's own code ran
            why = t("ex.why_interrupted")
        finally:
            if saved is not None:
                saved.restore()
        return Outcome(WRONG, t("ex.wrong", title=title, text=t("ex.check_stopped", why=why)), "ex.check_stopped")

    def _graded(self, answer: Any, title: str) -> Outcome:
        try:
            fields = self.grade(answer) or {}
        except NotDone:
            return Outcome(NOT_DONE, t("ex.not_done", title=title, name=self.name))
        except Wrong as wrong:
            return Outcome(WRONG, t("ex.wrong", title=title, text=str(wrong)), wrong.key)
        except AttendeeStopped as error:
            return Outcome(WRONG, t("ex.wrong", title=title, text=error.text), "ex.stopped")
        except AttendeeError as error:
            return Outcome(WRONG, t("ex.wrong", title=title, text=error.text))
        except TutorialError as error:  # e.g. a distributed run that failed: already a clear message
            return Outcome(WRONG, t("ex.wrong", title=title, text=str(error)), error.key)
        except Exception as error:  # noqa: BLE001 - the attendee's object broke the grader (its __len__ …)
            report = error_report(error, answer)
            if report["file"] is None or "ddp_tutorial" in report["file"]:
                raise  # no line of the attendee's in it: a bug of the grader, shown as one
            return Outcome(WRONG, t("ex.wrong", title=title, text=explain_error(
                report["type"], report["message"], report["file"], report["line"])))
        self._passed = answer
        return Outcome(CORRECT, t("ex.correct", title=title, text=self.text("correct", **fields)))

    def passed(self, answer: Any) -> bool:
        """Whether ``answer`` (this very object) passed its last check."""
        return answer is not None and answer is self._passed

    def check(self, answer: Any = _MISSING) -> None:
        """Run the attendee's code and print what is right or wrong. It raises nothing of the
        attendee's or the grader's; only the stop button, after its sentence, stops a Run All here
        too (a bare ``KeyboardInterrupt``, this frame hidden from IPython's traceback)."""
        __tracebackhide__ = True  # noqa: F841 - read by IPython
        answer = self._answer(answer)
        print(self.evaluate(answer).text)
        if StopButton.pressed:
            StopButton.pressed = False
            raise KeyboardInterrupt from None

    def hint(self, level: Optional[int] = None) -> None:
        """Print a hint: the first call (or ``hint(1)``) a nudge, the next (or ``hint(2)``) more concrete.
        ``hint(1)`` also starts the sequence again: the next ``hint()`` is the second."""
        if level is None:
            level = self._hints_shown + 1
        level = 1 if level < 2 else 2
        self._hints_shown = level
        print(t("ex.hint_title", level=level) + " " + self.text(("hint1", "hint2")[level - 1]))

    def solution(self) -> None:
        """Print a solution: a one-line explanation and the code."""
        print(t("ex.solution_title") + " " + self.text("solution") + "\n\n" + self.solution_code())

    def __repr__(self) -> str:
        return f"<exercise {self.name} ({self.notebook})>"


def docstring(text: str, indent: int = 4, width: int = 100) -> str:
    """``text`` as a function's docstring: one line when it fits in ``width``, else wrapped, the
    closing quotes on a line of their own (a notebook's code lines stay within 100 characters)."""
    pad = " " * indent
    if len(pad) + len(text) + 6 <= width:
        return f'{pad}"""{text}"""'
    return textwrap.fill(text, width=width, initial_indent=pad + '"""', subsequent_indent=pad) + f'\n{pad}"""'


def fail(key: str, **fields: object) -> None:
    """Raise :class:`Wrong` with the message ``key`` (a literal ``ex.<name>.<what>``)."""
    raise Wrong(key, **fields)
