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
the attendee's own line and a one-line explanation, never as a traceback from inside torch.
Distributed exercises run the attendee's function on ipyparallel engines, inside a real gloo
process group (:func:`ddp_tutorial.ipp.run`).

Every text comes from the message files, in the notebook's language: the shared ones from ``[ex]``,
an exercise's own from its table ``[ex.<name>]`` (task, hints, solution, success and the
grader's diagnoses). The notebook cells of an exercise are built from it (``=== exercise NAME`` in
``notebooks/src/*.cells``): the task, :meth:`Exercise.placeholder` and the ``check()`` cell.
"""

from __future__ import annotations

import inspect
import linecache
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from ..i18n import TutorialError, t

NOT_DONE, WRONG, CORRECT = "not-done", "wrong", "correct"
_MISSING = object()


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


def explain_error(error_type: str, message: str, filename: Optional[str], lineno: Optional[int]) -> str:
    """The attendee's line (from this process's line cache) and a one-line explanation."""
    line = linecache.getline(filename, lineno).strip() if filename and lineno else ""
    first = (message or "").strip().splitlines()
    explanation = f"{error_type}: {first[0] if first else ''}".rstrip(": ")
    if line:
        return t("ex.your_error", line=lineno, code=line, error=explanation)
    return t("ex.your_error_noline", error=explanation)


def error_report(error: BaseException, function: Any) -> Dict[str, Any]:
    """A picklable description of an exception raised by the attendee's ``function``."""
    filename = getattr(getattr(function, "__code__", None), "co_filename", None)
    file, line = where_it_failed(error, filename)
    return {"type": type(error).__name__, "message": str(error), "file": file, "line": line,
            "not_implemented": isinstance(error, NotImplementedError)}


def call(function: Callable, *args, **kwargs):
    """Call the attendee's function here; an exception becomes :class:`AttendeeError` (or NotDone)."""
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise NotDone() from None
    except Exception as error:  # noqa: BLE001 - any error in the attendee's code is explained, not raised
        report = error_report(error, function)
        raise AttendeeError(explain_error(report["type"], report["message"], report["file"], report["line"])) from None


def call_for(shown: str, function: Callable, *args):
    """:func:`call`, and an error in the attendee's code names the input that caused it (``shown``)."""
    try:
        return call(function, *args)
    except AttendeeError as error:
        raise AttendeeError(t("ex.for_input", input=shown, text=error.text)) from None


def raise_if_failed(results: list) -> list:
    """Results from the engines: if a rank's call of the attendee's function raised, say so."""
    for rank, result in enumerate(results):
        if isinstance(result, dict) and "attendee_error" in result:
            report = result["attendee_error"]
            if report["not_implemented"]:
                raise NotDone()
            text = explain_error(report["type"], report["message"], report["file"], report["line"])
            raise AttendeeError(t("ex.on_rank", rank=rank, text=text))
    return results


def short_list(values, limit: int = 6) -> str:
    """``[3, 7, 1, …]``: the first few values of a list, for messages."""
    values = list(values)
    shown = ", ".join(str(v) for v in values[:limit])
    return f"[{shown}{', …' if len(values) > limit else ''}]"


class WrongAnswer(NamedTuple):
    """An exercise's typical wrong answer: source that defines the exercise's ``name`` the way many
    attendees first do, and the message key of the diagnosis its check must give (tested)."""

    code: str
    key: str


PARTS = ("title", "task", "hint1", "hint2", "solution", "correct")
"""The texts every exercise has in its own table ``[ex.<name>]`` of each message file; the messages a
grader fails with sit in the same table and are named by literal keys (``fail("ex.lr_for.wrong", …)``)."""


@dataclass
class Exercise:
    """One checked exercise, as data.

    ``name``: its one identifier: what the attendee defines in the notebook, and the table
    ``[ex.<name>]`` of its texts (:data:`PARTS`, and the grader's own messages);
    ``notebook``: where it lives (``"02"``); ``grade(answer)``: raises :class:`Wrong` (via
    :func:`fail`) or :class:`NotDone`, or returns the fields of the ``correct`` text; ``code``: the
    solution's source; ``wrong``: the typical wrong answer and the diagnosis it gets; ``doc``: the
    placeholder's docstring; ``stub(lang)``: the placeholder's code when the answer is not a
    function (``fixed_sbatch``).
    """

    name: str
    notebook: str
    grade: Callable[[Any], Optional[dict]]
    code: str
    wrong: WrongAnswer
    doc: str = ""
    stub: Optional[Callable[[Optional[str]], str]] = None
    distributed: bool = False
    _hints_shown: int = field(default=0, repr=False)

    # Its texts -------------------------------------------------------------------------
    def key(self, part: str) -> str:
        """The message key of one of its :data:`PARTS`: ``ex.<name>.<part>``."""
        if part not in PARTS:
            raise ValueError(f"{part!r} is not one of {PARTS}")
        return ".".join(("ex", self.name, part))

    def message_keys(self) -> Tuple[str, ...]:
        """The keys this exercise looks up by its name (:data:`PARTS`); every other message it shows
        is named by a literal key in its grader or in this module."""
        return tuple(self.key(part) for part in PARTS)

    def text(self, part: str, lang: Optional[str] = None, **fields: object) -> str:
        return t(self.key(part), lang=lang, **fields)

    def task(self, lang: Optional[str] = None) -> str:
        """The task, as the notebook's markdown cell shows it: its title as a heading, then its text."""
        return "### " + self.text("title", lang=lang) + "\n\n" + self.text("task", lang=lang)

    def placeholder(self, lang: Optional[str] = None) -> str:
        """The code of the notebook's exercise cell: ``# EXERCISE name`` and the shipped placeholder
        (the solution's ``def`` line, ``doc`` and ``...``) with its comment in ``lang``."""
        if self.stub is not None:
            body = self.stub(lang)
        else:
            signature = next(line for line in self.code.strip().splitlines() if line.startswith("def "))
            body = f'{signature}\n    """{self.doc}"""\n    ...  # ' + t("ex.your_code", lang=lang)
        return f"# EXERCISE {self.name}\n{body}"

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
        try:
            fields = self.grade(answer) or {}
        except NotDone:
            return Outcome(NOT_DONE, t("ex.not_done", title=title, name=self.name))
        except Wrong as wrong:
            return Outcome(WRONG, t("ex.wrong", title=title, text=str(wrong)), wrong.key)
        except AttendeeError as error:
            return Outcome(WRONG, t("ex.wrong", title=title, text=error.text))
        except TutorialError as error:  # e.g. a distributed run that failed: already a clear message
            return Outcome(WRONG, t("ex.wrong", title=title, text=str(error)), error.key)
        return Outcome(CORRECT, t("ex.correct", title=title, text=self.text("correct", **fields)))

    def check(self, answer: Any = _MISSING) -> None:
        """Run the attendee's code and print what is right or wrong (never raises)."""
        answer = self._answer(answer)
        print(self.evaluate(answer).text)

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
        print(t("ex.solution_title") + " " + self.text("solution") + "\n\n" + self.code.strip())

    def __repr__(self) -> str:
        return f"<exercise {self.name} ({self.notebook})>"


def fail(key: str, **fields: object) -> None:
    """Raise :class:`Wrong` with the message ``key`` (a literal ``ex.<name>.<what>``)."""
    raise Wrong(key, **fields)
