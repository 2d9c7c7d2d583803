"""slurm.wait backs off while a job's state does not change (every poll is a request to slurmctld),
and looks again soon after a change. A stand-in `scontrol` on PATH counts the requests."""

from __future__ import annotations

import os
import time

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.i18n import TutorialError

SCONTROL = """#!/bin/sh
echo x >> "{log}"
now=$(date +%s%N)
if [ "$now" -lt "{done_at}" ]; then
  echo "JobId=7 JobName=t JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0 NodeList=n1"
else
  echo "JobId=7 JobName=t JobState=COMPLETED Reason=None Restarts=0 ExitCode=0:0 NodeList=n1"
fi
"""


def _stand_in(tmp_path, seconds: float) -> tuple:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    done_at = time.time_ns() + int(seconds * 1e9)
    (bin_dir / "scontrol").write_text(SCONTROL.format(log=log, done_at=done_at))
    (bin_dir / "scontrol").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return env, log


def test_wait_backs_off_while_nothing_changes(tmp_path):
    env, log = _stand_in(tmp_path, 3.0)
    info = slurm.wait("7", timeout=30, poll=0.05, max_poll=0.8, env=env)
    calls = len(log.read_text().splitlines())
    assert info.state == "COMPLETED"
    # without the backoff: 3 s / 0.05 s = 60 requests; with it: 0.1, 0.2, 0.4, 0.8, 0.8, … ≈ 8
    assert calls <= 12, f"{calls} requests to slurmctld in 3 s"


def test_wait_never_sleeps_past_its_timeout(tmp_path):
    env, _ = _stand_in(tmp_path, 60.0)
    started = time.monotonic()
    with pytest.raises(TutorialError) as caught:
        slurm.wait("7", timeout=1.5, poll=0.05, max_poll=30, env=env)
    assert caught.value.key == "slurm.wait_timeout"
    assert time.monotonic() - started < 5, "the backoff overshot the timeout"
