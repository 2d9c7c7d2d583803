"""``ddp-tutorial slurm wait|logs|render`` with values that used to slip through (round 3: A10, A13–A15).

No SLURM needed: a stand-in ``scontrol`` on the PATH answers "RUNNING" and counts its calls, so a
busy loop against the controller shows as a count, and every run has a time limit.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.i18n import TutorialError

SCONTROL = """#!/bin/sh
echo x >> "{calls}"
echo "JobId=$4 JobName=x JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0"
"""


@pytest.fixture
def stand_in(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    script = bin_dir / "scontrol"
    script.write_text(SCONTROL.format(calls=calls))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")

    def run(*argv, lang="en", timeout=60):
        out = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", *argv], capture_output=True,
                             text=True, timeout=timeout, env=dict(env, DDP_TUTORIAL_LANG=lang), cwd=tmp_path)
        count = len(calls.read_text().splitlines()) if calls.exists() else 0
        calls.unlink(missing_ok=True)
        return out, count
    return run


@pytest.mark.parametrize("poll", ["0", "-1", "nan", "inf", "0.01"])
def test_wait_refuses_a_poll_that_would_hammer_the_controller(stand_in, poll):
    """A15: `--poll 0` made 641–925 scontrol calls in 3 s; A14: `--poll -1` was a ValueError traceback."""
    for lang, word in (("en", "--poll"), ("tr", "SLURM denetleyicisine")):
        out, calls = stand_in("wait", "1", "--poll", poll, "--timeout", "3", lang=lang)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert word in out.stderr and calls == 0, (calls, out.stderr)


def test_wait_with_a_sane_poll_asks_a_few_times(stand_in):
    out, calls = stand_in("wait", "1", "--poll", "1", "--timeout", "3")
    assert out.returncode == 2 and "Traceback" not in out.stderr  # the time-out message
    assert 1 <= calls <= 6, calls


@pytest.mark.parametrize("timeout", ["-1", "0", "nan"])
def test_wait_refuses_a_timeout_that_is_no_duration(stand_in, timeout):
    out, calls = stand_in("wait", "1", "--timeout", timeout)
    assert out.returncode == 2 and "--timeout" in out.stderr and calls == 0, out.stderr


@pytest.mark.parametrize("tail", ["-2", "0"])
def test_logs_refuses_a_tail_below_one(stand_in, tmp_path, tail):
    """A13: `--tail -2` printed all lines but the first two, exit 0."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "slurm-123.out").write_text("".join(f"line {i}\n" for i in range(5)))
    out, _ = stand_in("logs", "123", "--run-dir", str(runs), "--tail", tail)
    assert out.returncode == 2 and "--tail" in out.stderr and out.stdout == "", out.stdout + out.stderr
    out, _ = stand_in("logs", "123", "--run-dir", str(runs), "--tail", "2")
    assert out.returncode == 0 and out.stdout == "line 3\nline 4\n"


@pytest.mark.parametrize("time_limit,signal_seconds,smallest", [("00:05:00", 600, "00:12:00"), ("5", 300, "00:07:00"),
                                                                ("1:00", 60, "00:03:00"),
                                                                ("00:01:00", 30, "00:02:00"),   # P8, as seen
                                                                ("00:03:00", 120, "00:04:00")])  # 180 = 120 + 60
def test_a_preemption_warning_within_60_s_of_the_time_limit_is_refused(time_limit, signal_seconds, smallest):
    """A10, P8: SLURM may send --signal's warning up to 60 s early, so with time <= signal + 60 a run can be
    warned at its start: checkpoint at step 0, requeue, for ever (the class-day rehearsal saw 7 restarts, 3
    with no progress, with time=00:01:00 and signal 30). Refused with the smallest time that works."""
    spec = slurm.JobSpec(time=time_limit, signal_seconds=signal_seconds, requeue=True)
    with pytest.raises(TutorialError) as caught:
        slurm.render(spec)
    assert caught.value.key == "slurm_limits.signal_ge_time"
    for lang in ("en", "tr"):
        text = caught.value.text(lang)
        assert "--preempt-signal" in text and time_limit in text and smallest in text and "60" in text, text
    slurm.render(slurm.JobSpec(time=smallest, signal_seconds=signal_seconds, requeue=True))  # the time it names
    slurm.render(slurm.JobSpec(time="0", signal_seconds=600, requeue=True))  # 0: no time limit


def test_a_preemption_warning_61_s_inside_the_limit_is_accepted():
    slurm.render(slurm.JobSpec(time="00:05:00", signal_seconds=300 - 61, requeue=True))
    with pytest.raises(TutorialError):
        slurm.render(slurm.JobSpec(time="00:05:00", signal_seconds=300 - 60, requeue=True))


def test_render_refuses_the_livelock_on_the_command_line(stand_in):
    out, _ = stand_in("render", "--template", "per-gpu", "--time", "00:05:00", "--preempt-signal", "600",
                      "--requeue", lang="tr")
    assert out.returncode == 2 and "hata:" in out.stderr and "--preempt-signal 600" in out.stderr, out.stderr
    assert out.stdout == ""  # no script


@pytest.mark.parametrize("module", ["-f", "--force", "-"])
def test_a_module_that_looks_like_an_option_is_refused(module, monkeypatch):
    """H09b: `--module=-f` rendered `module load -f`."""
    for lang, words in (("en", "not starting with -"), ("tr", "başta - olmadan")):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        with pytest.raises(TutorialError) as caught:
            slurm.render(slurm.JobSpec(modules=(module,)))
        assert f"module={module!r}" in str(caught.value) and words in str(caught.value)
    slurm.render(slurm.JobSpec(modules=("cuda/12.1", "gcc-12")))


def test_result_reads_only_the_end_of_a_huge_log(stand_in, tmp_path):
    """SJ01: the own-script fallback of ``slurm result`` reads the end of the log for its last line, never the
    whole of it: a 1 GiB log (sparse: no disk used) under a 600 MB address-space limit, and a second one
    without the line, which says "No result" as fast."""
    import resource
    import time

    runs = tmp_path / "runs"
    runs.mkdir()
    for job, tail in (("41", b"\nyour script finished with exit code 0\n"), ("42", b"\nepoch 3\n")):
        with open(runs / f"slurm-{job}.out", "wb") as log:
            log.truncate(1 << 30)
            log.seek(0, os.SEEK_END)
            log.write(tail)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", DDP_TUTORIAL_LANG="en")
    (tmp_path / "bin").mkdir(exist_ok=True)
    limit = 600 << 20

    def result(job):
        return subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "result", job, "--run-dir", "runs"],
                              capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    started = time.monotonic()
    done = result("41")
    assert done.returncode == 0 and '"exit_code": 0' in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    done = result("42")
    assert done.returncode == 2 and "No result for job 42" in done.stderr, done.stdout + done.stderr
    assert time.monotonic() - started < 20


def test_render_to_a_full_disk_names_the_file(stand_in):
    """DF01: ENOSPC from write() or fsync() carries no file name; the message names the output, not '?'."""
    done, _ = stand_in("render", "--template", "per-gpu", "-o", "/dev/full")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "Cannot use /dev/full: No space left on device" in done.stderr, done.stderr
    assert "?" not in done.stderr.split(":")[1]


@pytest.mark.parametrize("option", ["--run-dir", "--workdir"])
def test_a_relative_run_dir_under_a_folder_with_a_space_or_turkish_letter_says_what_to_do(tmp_path, option):
    """UP01: `runs` (or `--workdir .`) is fine as typed; made absolute under `dir ş ü/` a job script cannot take
    it (#SBATCH lines are not shell-quoted). The message says so and gives the way out."""
    here = tmp_path / "dir ş ü"
    here.mkdir()
    value = "runs" if option == "--run-dir" else "."
    for lang, words in (("en", "letters of the English alphabet only"), ("tr", "İngiliz alfabesinin harfleri")):
        done = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "render", "--template", "per-gpu",
                               option, value], capture_output=True, text=True, timeout=60, cwd=here,
                              env=dict(os.environ, DDP_TUTORIAL_LANG=lang))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        text = done.stderr.strip()
        assert len(text.splitlines()) == 1 and words in text, text
        assert f"{option} '{value}'" in text and str(here) in text and f"{option} $HOME/runs" in text, text
    assert not (here / "runs").exists()
