"""A job that runs your own script reports the ranks' own exit code, not srun's (issue 47 item 6b).

When one rank fails, ``srun --kill-on-bad-exit`` stops the others with SIGTERM and returns their 143: the
footer said "your script finished with exit code 143" and ``slurm result`` gave 143 for a script that
exited with 1. Now each rank writes its own code into the job's EXIT_DIR (:mod:`ddp_tutorial.convention`'s
runner), and the footer names the rank that failed first, with its code, before the finished line, which
carries that code; ``slurm result`` reads both back. Checked on the SLURM lab: a script whose rank 1 exits
with 1 while rank 0 is still at work, under per-gpu (one node, two tasks) and torchrun (two nodes), each
rendered in English and in Turkish.
"""

from __future__ import annotations

import json
import sys

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.cli import main
from ddp_tutorial.i18n import LANGUAGES, t

#: rank 1 fails at once; rank 0 would work for a minute: srun (or torchrun, then srun) stops it
RANK_ONE_FAILS = """\
import os, sys, time
if os.environ["RANK"] == "1":
    print("rank 1 fails", flush=True)
    sys.exit(1)
time.sleep(60)
"""

SHAPES = {"per-gpu": dict(nodes=1, nproc_per_node=2), "torchrun": dict(nodes=2, nproc_per_node=1)}


@pytest.mark.slurm
@pytest.mark.slow
def test_the_footer_and_slurm_result_give_the_failed_ranks_code(slurm_cluster, tmp_path, monkeypatch, capsys):
    lab = slurm_cluster
    script = tmp_path / "rank_one_fails.py"
    script.write_text(RANK_ONE_FAILS)
    jobs = {}
    for template, shape in SHAPES.items():
        for lang in LANGUAGES:
            run_dir = tmp_path / f"{template}-{lang}"
            spec = slurm.JobSpec(template=template, python=sys.executable, run_dir=str(run_dir), time="00:05:00",
                                 job_name=f"rank1-{lang}", script=str(script), **shape)
            path = slurm.write_script(slurm.render(spec, lang), tmp_path / f"{template}-{lang}.sh")
            jobs[(template, lang)] = (slurm.submit(path, env=lab.env), run_dir)
    for (template, lang), (job, run_dir) in jobs.items():
        info = slurm.wait(job, timeout=180, poll=0.5, max_poll=2, env=lab.env)
        log = slurm.read_log(job, run_dir=str(run_dir))
        where = f"{template}, {lang}: {info.describe()}\n{log}"
        assert info.state == "FAILED" and info.exit_code == 1, where
        *_, named, last = log.splitlines()
        assert last == t("slurm_script.echo_finished_own", lang, code=1), where
        assert named.startswith(t("slurm_script.echo_rank_failed", lang, rank=1, code=1, srun_code="\0")
                                .split("\0")[0]), where
        assert not list((run_dir).glob(".exit-*")), f"the ranks' exit files are left behind: {where}"
        other = next(x for x in LANGUAGES if x != lang)
        monkeypatch.setenv("DDP_TUTORIAL_LANG", other)
        assert main(["slurm", "result", job, "--run-dir", str(run_dir)]) == 1
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        assert (report["exit_code"], report["failed_rank"], report["source"]) == (1, 1, "log"), (report, where)
        assert report["srun_exit_code"] == (143 if template == "per-gpu" else 1), report  # torchrun's agent: 1
        assert t("slurm.own_script_rank_failed", other, rank=1, code=1,
                 srun_code=report["srun_exit_code"]) in captured.err, captured.err
