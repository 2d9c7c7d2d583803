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
import math
import re
import sys
from typing import List, Tuple

from .i18n import TutorialError, t


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 100_000


def _split_top_level(text: str) -> List[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.nested"))
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.close_without_open"))
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.open_without_close"))
    parts.append("".join(current))
    return parts


def _group_values(text: str, group: str) -> List[Tuple[int, int, int]]:
    """A bracket group as ``(low, high, width)`` ranges, checked and counted, nothing expanded yet."""
    ranges: List[Tuple[int, int, int]] = []
    for item in group.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.bad_range", item=repr(item)))
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.backwards", item=repr(item)))
        ranges.append((int(low), int(high), len(low)))
    return ranges


def _count(ranges: List[Tuple[int, int, int]]) -> int:
    return sum(high - low + 1 for low, high, _ in ranges)


def _expand_group(ranges: List[Tuple[int, int, int]]) -> List[str]:
    return [str(n).zfill(width) for low, high, width in ranges for n in range(low, high + 1)]


def expand_hostlist(text: str) -> List[str]:
    """All host names of a SLURM host list, in order."""
    if text is None or not text.strip():
        raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.empty"))
    hosts: List[str] = []
    for expression in _split_top_level(text.strip()):
        if not expression:
            raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.empty_element"))
        if expression.startswith("["):  # '[1-3]' would make hosts named 1, 2, 3
            raise TutorialError("hostlist.malformed", text=text, why=t("hostlist_why.starts_with_bracket"))
        pieces = re.split(r"(\[[^\]]*\])", expression)
        groups = []
        for piece in pieces:
            if piece.startswith("["):
                groups.append(_group_values(text, piece[1:-1]))
            elif piece:
                if any(c in piece for c in "[] \t"):
                    raise TutorialError("hostlist.malformed", text=text,
                                        why=t("hostlist_why.bad_text", piece=repr(piece)))
                groups.append(piece)
        # Count first, build after: 'n[0-9999]x[0-9999]' is 10^8 names (gigabytes) before any check.
        count = math.prod(_count(g) for g in groups if not isinstance(g, str))
        if len(hosts) + count > MAX_HOSTS:
            raise TutorialError("hostlist.malformed", text=text,
                                why=t("hostlist_why.too_many", limit=MAX_HOSTS, count=len(hosts) + count))
        choices = [[g] if isinstance(g, str) else _expand_group(g) for g in groups]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts


def first_host(text: str) -> str:
    """The first host of a host list: where rank 0 runs, i.e. MASTER_ADDR."""
    return expand_hostlist(text)[0]


def main(argv: List[str]) -> int:
    """``python -m ddp_tutorial.hostlist 'gpu[01-03]'`` → one host per line (exit 2 and one line
    in the user's language for a malformed list, never a traceback)."""
    if len(argv) != 1:
        print(f"{t('error.prefix')}: {t('hostlist.usage')}", file=sys.stderr)
        return 2
    try:
        hosts = expand_hostlist(argv[0])
    except TutorialError as error:
        print(f"{t('error.prefix')}: {error}", file=sys.stderr)
        return error.exit_code
    print("\n".join(hosts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
