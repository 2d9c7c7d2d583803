"""Define a function the way a notebook cell does, for the exercise tests."""

from __future__ import annotations

import itertools
import linecache
import textwrap

_numbers = itertools.count(1)


def cell(source: str, name: str):
    """``name`` as defined by a notebook cell with ``source`` (in ``__main__``, its source in linecache,
    so that a check can quote the attendee's own line)."""
    source = textwrap.dedent(source).strip() + "\n"
    filename = f"/tmp/ipykernel_test/cell{next(_numbers)}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]
