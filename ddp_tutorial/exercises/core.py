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

Every text comes from the ``[ex]`` section of the message files, in the notebook's language.
"""

from __future__ import annotations

import inspect
import linecache
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

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
    """What a check found: ``status`` (not-done / wrong / correct) and the text shown."""

    status: str
    text: str

    @property
    def correct(self) -> bool:
        return self.status == CORRECT

    def __str__(self) -> str:
        return self.text


class Wrong(Exception):
    """Raised by a grader: the attendee's answer is wrong; the text says how (already translated)."""


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


@dataclass
class Exercise:
    """One checked exercise.

    ``key``: the message prefix (``ex.<key>_task``, ``_hint1``, ``_hint2``, ``_solution``);
    ``name``: what the attendee defines in the notebook; ``grade(answer)``: raises :class:`Wrong`
    (translated text) or :class:`NotDone`, returns the success text's fields; ``code``: the
    solution's source (defines ``name``); ``notebook``: where the exercise lives.
    """

    key: str
    name: str
    notebook: str
    grade: Callable[[Any], Optional[dict]]
    code: str
    distributed: bool = False
    _hints_shown: int = field(default=0, repr=False)

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
            return Outcome(WRONG, t("ex.wrong", title=title, text=str(wrong)))
        except AttendeeError as error:
            return Outcome(WRONG, t("ex.wrong", title=title, text=error.text))
        except TutorialError as error:  # e.g. a distributed run that failed: already a clear message
            return Outcome(WRONG, t("ex.wrong", title=title, text=str(error)))
        return Outcome(CORRECT, t("ex.correct", title=title, text=t(f"ex.{self.key}_correct", **fields)))

    def check(self, answer: Any = _MISSING) -> None:
        """Run the attendee's code and print what is right or wrong (never raises)."""
        answer = self._answer(answer)
        print(self.evaluate(answer).text)

    def hint(self, level: Optional[int] = None) -> None:
        """Print a hint: the first call (or ``hint(1)``) a nudge, the next (or ``hint(2)``) more concrete."""
        if level is None:
            self._hints_shown = min(self._hints_shown + 1, 2)
            level = self._hints_shown
        level = 1 if level < 2 else 2
        print(t("ex.hint_title", level=level) + " " + t(f"ex.{self.key}_hint{level}"))

    def solution(self) -> None:
        """Print a solution: a one-line explanation and the code."""
        print(t("ex.solution_title") + " " + t(f"ex.{self.key}_solution") + "\n\n" + self.code.strip())

    def task(self) -> str:
        return t(f"ex.{self.key}_task")

    def __repr__(self) -> str:
        return f"<exercise {self.name} ({self.notebook})>"


def fail(key: str, **fields: object) -> None:
    """Raise :class:`Wrong` with the message ``ex.<key>``."""
    raise Wrong(t(f"ex.{key}", **fields))
