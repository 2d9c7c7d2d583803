"""SLURM's compressed host lists, expanded: ``gpu[01-03,07],cpu5`` → gpu01 gpu02 gpu03 gpu07 cpu5.

SLURM puts the job's nodes in ``SLURM_JOB_NODELIST`` in this compressed form. The first
host is where rank 0 runs, so it is the natural ``MASTER_ADDR``. We parse the form
ourselves (it is a tiny grammar) so the package works where ``scontrol`` is not on the
PATH; ``scontrol show hostnames`` gives the same answer and the tests compare the two.

Grammar: a comma-separated list of host expressions; each expression is text with
zero or more bracket groups; a bracket group is a comma-separated list of numbers or
``lo-hi`` ranges, zero-padded to the width of ``lo`` (``[01-10]`` → 01 … 10).
Several groups multiply: ``r[1-2]n[1-2]`` → r1n1 r1n2 r2n1 r2n2.
"""

from __future__ import annotations

import itertools
import re
import sys
from typing import List

from .i18n import TutorialError


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 100_000


def _split_top_level(text: str) -> List[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise TutorialError("hostlist.malformed", text=text, why="nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise TutorialError("hostlist.malformed", text=text, why="']' without '['")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise TutorialError("hostlist.malformed", text=text, why="'[' without ']'")
    parts.append("".join(current))
    return parts


def _expand_group(text: str, group: str) -> List[str]:
    values: List[str] = []
    for item in group.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise TutorialError("hostlist.malformed", text=text, why=f"bad range {item!r}")
        low, high = match.group(1), match.group(2)
        if high is None:
            values.append(low)
            continue
        if int(high) < int(low):
            raise TutorialError("hostlist.malformed", text=text, why=f"range {item!r} runs backwards")
        if int(high) - int(low) >= MAX_HOSTS:
            raise TutorialError("hostlist.malformed", text=text, why=f"range {item!r} is too large")
        width = len(low)
        values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return values


def expand_hostlist(text: str) -> List[str]:
    """All host names of a SLURM host list, in order."""
    if text is None or not text.strip():
        raise TutorialError("hostlist.malformed", text=text, why="empty")
    hosts: List[str] = []
    for expression in _split_top_level(text.strip()):
        if not expression:
            raise TutorialError("hostlist.malformed", text=text, why="empty element")
        pieces = re.split(r"(\[[^\]]*\])", expression)
        choices = []
        for piece in pieces:
            if piece.startswith("["):
                choices.append(_expand_group(text, piece[1:-1]))
            elif piece:
                if any(c in piece for c in "[] \t"):
                    raise TutorialError("hostlist.malformed", text=text, why=f"bad text {piece!r}")
                choices.append([piece])
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
        if len(hosts) > MAX_HOSTS:
            raise TutorialError("hostlist.malformed", text=text, why="too many hosts")
    return hosts


def first_host(text: str) -> str:
    """The first host of a host list: where rank 0 runs, i.e. MASTER_ADDR."""
    return expand_hostlist(text)[0]


if __name__ == "__main__":  # python -m ddp_tutorial.hostlist 'gpu[01-03]'  → one host per line
    for host in expand_hostlist(sys.argv[1]):
        print(host)
