"""Why pip could not install torch from a package index, in one line (``scripts/setup.sh``, issue 49 P5).

``setup.sh`` installs the pinned torch build from the index of its build (``download.pytorch.org/whl/cu126``
for TRUBA: :mod:`ddp_tutorial.gpu`), or from ``--index-url``. Where pip fails there, pip's own last line
(``ResolutionImpossible``, after five connection retries) names neither the index nor what to do. So
``setup.sh`` then asks this module::

    python -m ddp_tutorial.torch_index URL VERSION [--variant cu126] [--again "ARGS"]

It reads the index's page for torch itself (:data:`TIMEOUT` seconds at most) and prints one line saying
which of three it is, and what to do:

* the index cannot be reached from this machine (and why): run where it can, or give a mirror;
* it answers, but lists no torch ``VERSION`` (``+VARIANT``) wheel for this Python: use a Python it has
  wheels for, or another index;
* it lists that wheel: pip's own lines above say what failed (disk space, a proxy, a broken download).

The line is in ``DDP_TUTORIAL_LANG`` (``tr`` or ``en``), or in both when it is unset, as ``setup.sh``'s own
lines are. No torch import: torch is what could not be installed.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, Optional, Sequence, Tuple

from .i18n import LANG_VARIABLE, LANGUAGES, t

TIMEOUT = 15.0  # seconds for the index's answer: pip itself gave up after its retries already


def python_tag() -> str:
    """The wheel tag of this Python: ``cp311`` for CPython 3.11."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def lists_wheel(page: str, version: str, variant: str = "", tag: Optional[str] = None) -> bool:
    """Whether an index page (PEP 503: one link per file) lists a torch ``version`` wheel (of the build
    ``variant``, or of any build when it is empty) for the Python ``tag`` (default: this Python's). The
    local part's ``+`` may be written ``%2B``."""
    names = re.findall(r"torch-[^\"'<>#?/\s]+?\.whl", urllib.parse.unquote(page))
    tag = tag or python_tag()
    for name in names:
        parts = name[:-len(".whl")].split("-")  # torch, 2.14.1+cu126, cp311, cp311, platform
        if len(parts) < 5 or parts[2] != tag:
            continue
        release, _, local = parts[1].partition("+")
        if release == version and (not variant or local == variant):
            return True
    return False


def ask_index(url: str, timeout: float = TIMEOUT) -> Tuple[Optional[str], str]:
    """The index's page for torch (``URL/torch/``) and ``""``, or ``None`` and why it could not be read."""
    page = url.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(page, timeout=timeout) as answer:  # noqa: S310 (the URL setup.sh used)
            return answer.read().decode("utf-8", "replace"), ""
    except urllib.error.HTTPError as error:
        if error.code == 404:  # the index answers: it has no torch at all
            return "", ""
        return None, f"HTTP {error.code} {error.reason}"
    except urllib.error.URLError as error:
        reason = error.reason
        return None, str(reason.strerror if isinstance(reason, OSError) and reason.strerror else reason)
    except (OSError, ValueError) as error:  # a timeout, a reset connection, a URL urllib cannot open
        return None, str(error) or type(error).__name__


def diagnose(url: str, version: str, variant: str = "", again: str = "bash scripts/setup.sh",
             timeout: float = TIMEOUT) -> Tuple[str, Dict[str, object]]:
    """The message key and its fields: why pip could not install torch ``version`` from ``url``."""
    retry = re.sub(r"\s*--index-url(?:=|\s+)\S+", "", again).strip()
    wanted = version + (f"+{variant}" if variant else "")
    fields: Dict[str, object] = dict(url=url, version=wanted, again=retry, python=python_tag(),
                                     host=socket.gethostname())
    page, why = ask_index(url, timeout)
    if page is None:
        return "torch_index.unreachable", dict(fields, reason=why)
    if not lists_wheel(page, version, variant):
        return "torch_index.missing", fields
    return "torch_index.listed", fields


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_tutorial.torch_index",
                                     description="why pip could not install torch from URL (scripts/setup.sh)")
    parser.add_argument("url")
    parser.add_argument("version")
    parser.add_argument("--variant", default="")
    parser.add_argument("--again", default="bash scripts/setup.sh")
    args = parser.parse_args(argv)
    key, fields = diagnose(args.url, args.version, args.variant, args.again)
    chosen = os.environ.get(LANG_VARIABLE, "").strip().lower()[:2]
    for lang in ([chosen] if chosen in LANGUAGES else LANGUAGES):
        print(f"!! setup.sh: {t(key, lang, **fields)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
