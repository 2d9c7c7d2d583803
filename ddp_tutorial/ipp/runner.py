"""Running one function on every engine and waiting for all of them, with failure detection.

While it waits it streams rank 0's output into the notebook and draws rank 0's progress bar;
when a rank dies, raises or runs too long it stops every engine (a rank blocked in a
collective cannot be interrupted any other way) and raises one clear error naming the cause.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, List, Optional

from ..i18n import TutorialError, language, t
from ..failures import classify_failure
from . import engines as es
from .progress import RankZeroBar
from .remote import Place

POLL_SECONDS = 0.2      # how often the kernel looks at the engines while it waits
OUTPUT_SECONDS = 5.0    # after rank 0's result: the longest wait for what it printed and published before
GRACE_SECONDS = 3.0     # after a first failure: time for the other ranks to report their own


def remote_error_text(error: BaseException) -> str:
    """``Name: first line of the message`` of an error raised on an engine."""
    name = getattr(error, "ename", type(error).__name__)
    value = str(getattr(error, "evalue", error)).strip()
    lines = [line.strip() for line in value.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return f"{name}: {first[:500].rstrip('.')}"


class Rank0Stream:
    """Writes here what rank 0 printed since the last look."""

    def __init__(self, result):
        self.result = result
        self.shown = {"stdout": 0, "stderr": 0}

    def __call__(self) -> None:
        for name, target in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            text = getattr(self.result, name) or ""
            if len(text) > self.shown[name]:
                target.write(text[self.shown[name]:])
                target.flush()
                self.shown[name] = len(text)


class AllRanksStream:
    """Writes here what every rank printed since the last look, each whole line as ``[rank r] line``."""

    def __init__(self, results: dict):
        self.results = results
        self.shown = {(rank, name): 0 for rank in results for name in ("stdout", "stderr")}

    def __call__(self, final: bool = False) -> None:
        for (rank, name), done in self.shown.items():
            text = getattr(self.results[rank], name) or ""
            new = text[done:]
            if not final:
                new = new[:new.rfind("\n") + 1]  # whole lines only, until the end
            if new:
                target = sys.stdout if name == "stdout" else sys.stderr
                target.write("".join(f"[rank {rank}] {line}" for line in new.splitlines(keepends=True)))
                if final and not new.endswith("\n"):
                    target.write("\n")
                target.flush()
                self.shown[(rank, name)] = done + len(new)


OUTPUTS = ("rank0", "all", "none")


def _stream_for(output: str, pending: dict) -> Callable[..., None]:
    """What shows the ranks' prints here while they run: rank 0's, all (``[rank r]``), or none."""
    if output == "all":
        return AllRanksStream(dict(pending))
    if output == "none":
        return lambda final=False: None
    shown_rank0 = Rank0Stream(pending[0])
    return lambda final=False: shown_rank0()


def _look(engines: es.EngineSet, pending: dict, results: dict, failures: list) -> None:
    """One look at every rank still running: a dead engine, a result, or a remote error."""
    ids, pids = engines.ids, engines.pids

    def died(rank: int) -> tuple:
        return (0, t("ipp.cause_died", rank=rank, engine=ids[rank], pid=pids[rank], how=engines.describe_loss(rank)))

    for rank in list(pending):
        ar = pending[rank]
        if not engines.alive(rank):  # first: a dead engine is the cause, not a symptom
            del pending[rank]
            failures.append(died(rank))
        elif ar.ready():
            del pending[rank]
            try:
                results[rank] = ar.get()
            except Exception as error:  # noqa: BLE001 - a remote error, reported below
                text = remote_error_text(error)
                if not engines.alive(rank):  # it died after the first look (ipyparallel said so first): the cause
                    failures.append(died(rank))
                elif engines.is_stopped(rank):  # ipyparallel's heartbeat calls a stopped engine dead: it is not
                    failures.append((-1, t("ipp.cause_silent", rank=rank, engine=ids[rank], pid=pids[rank],
                                           how=t("ipp.silent_stopped"))))
                elif classify_failure(text) == "lost_peer":  # a symptom of another rank's failure
                    failures.append((2, t("ipp.cause_lost", rank=rank, engine=ids[rank])))
                else:
                    failures.append((1, t("ipp.cause_raised", rank=rank, engine=ids[rank], error=text)))


def _silent(engines: es.EngineSet, pending: dict, failures: list) -> list:
    """The ranks that never answered, named before the engines are stopped."""
    ids, pids = engines.ids, engines.pids
    stopped = [rank for rank in sorted(pending) if engines.is_stopped(rank)]
    if stopped:  # a stopped engine (SIGSTOP): the cause, whatever its peers did while waiting for it
        return [(-1, t("ipp.cause_silent", rank=rank, engine=ids[rank], pid=pids[rank], how=t("ipp.silent_stopped")))
                for rank in stopped]
    if min(order for order, _ in failures) == 2:  # only lost peers reported: the silent ones are the cause
        return [(1, t("ipp.cause_silent", rank=rank, engine=ids[rank], pid=pids[rank], how=t("ipp.silent_running")))
                for rank in sorted(pending)]
    return []


def _fail(engines: es.EngineSet, n: int, failures: list) -> None:
    """Kill every engine (they may be blocked inside a collective: only that frees them) and raise one
    error: the cause first (dead engines, then errors, then lost peers), the rest after it."""
    if es.current() is engines:
        es.keep(None)
    leftover = engines.stop(force=True)
    failures.sort(key=lambda f: f[0])
    cause = failures[0][1]
    if len(failures) > 1:
        cause += "; " + t("ipp.also", rest="; ".join(f[1] for f in failures[1:]))
    if leftover:
        cause += "; " + t("ipp.leftover", pids=leftover)
    raise TutorialError("ipp.failed", n=n, cause=cause)


def check_none_stopped(engines: es.EngineSet, n: int) -> None:
    """Before a call: an engine stopped since the last one (SIGSTOP, Ctrl-Z) cannot take part; named as
    such at once (it would otherwise be called dead by ipyparallel's heartbeat, half a minute later)."""
    ids, pids = engines.ids, engines.pids
    stopped = [rank for rank in range(n) if engines.is_stopped(rank)]
    if stopped:
        _fail(engines, n, [(0, t("ipp.cause_stopped", rank=rank, engine=ids[rank], pid=pids[rank]))
                           for rank in stopped])


def run_everywhere(engines: es.EngineSet, n: int, make_call: Callable[[int], tuple],
                   timeout: Optional[float], output: str = "rank0") -> list:
    """Send ``make_call(rank)`` = (function, args) to the first ``n`` engines; wait for all of
    them; return the results in rank order or raise one clear error (after killing every
    engine) when a rank dies, raises or runs too long. ``output``: whose prints are shown here while
    it runs — ``rank0``, ``all`` (each line after ``[rank r]``) or ``none``."""
    client, ids = engines.client, engines.ids[:n]
    pending = {rank: client[eid].apply_async(*_call(make_call, rank)) for rank, eid in enumerate(ids)}
    results: Dict[int, Any] = {}
    failures: List[tuple] = []  # (order, text): dead engines first, then errors, then lost peers
    began, failed_at = time.monotonic(), None
    bar, rank0, stream = RankZeroBar(), pending[0], _stream_for(output, pending)
    try:
        while pending:
            _look(engines, pending, results, failures)
            if not engines.controller_alive():
                failures.append((0, t("ipp.cause_controller", pid=engines.cluster.controller.pid)))
                break
            now = time.monotonic()
            ended = engines.ended() if pending else None
            if ended:
                failures.append((0, ended))
                break
            bar.show(rank0.data)
            stream()
            failed_at = now if failures and failed_at is None else failed_at
            if failed_at is not None and now - failed_at > GRACE_SECONDS:
                break
            if timeout is not None and now - began > timeout and not failures:
                failures.append((3, t("ipp.cause_timeout", timeout=timeout, ranks=sorted(pending))))
                break
            if pending:
                time.sleep(POLL_SECONDS)
        if rank0.ready():  # its result can come before its last printed lines and bars: wait for those
            rank0.wait_for_output(OUTPUT_SECONDS)
        bar.show(rank0.data)
    finally:
        bar.close()
        stream(final=True)
    if failures and pending:
        failures += _silent(engines, pending, failures)
    if failures:
        _fail(engines, n, failures)
    return [results[rank] for rank in range(n)]


def _call(make_call: Callable[[int], tuple], rank: int) -> tuple:
    """(function, *args) for apply_async, from make_call's (function, args)."""
    function, args = make_call(rank)
    return (function, *args)


def launch(engines: es.EngineSet, n: Optional[int], keep: bool, timeout: Optional[float],
           task: Callable[[Place], tuple], output: str = "rank0") -> list:
    """Give every engine its :class:`Place` (rank, local rank, master address and one free port),
    run ``task(place)`` (a (function, args) pair) everywhere, and stop the engines afterwards
    unless ``keep``."""
    n = engines.size if n is None else n
    check_none_stopped(engines, n)
    port, lang, use_cuda = engines.master_port(), language(), engines.device == "cuda"

    def place(rank: int) -> Place:
        return Place(rank=rank, world_size=n, local_rank=engines.local_rank(rank),
                     nproc_per_node=engines.per_node(rank, n), master_addr=engines.master_addr,
                     master_port=port, lang=lang, use_cuda=use_cuda)
    try:
        return run_everywhere(engines, n, lambda rank: task(place(rank)), timeout, output)
    except KeyboardInterrupt:  # the stop button of the notebook
        es.stop(force=True)
        raise
    finally:
        if es.current() is not None and not keep:
            es.stop()
