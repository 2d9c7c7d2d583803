"""The job log's last line is one sentence written in one place (issue 48 item 5).

``slurm_script.echo_finished_own`` (``messages/<lang>.toml``: "your script finished with exit code {code}")
is the line a user-script job ends its log with: the template echoes it in the language the job was rendered
in, and ``slurm result`` reads it back in every language (``slurm.jobs.finished_lines``), whichever
language the reader uses. Checked here: no template and no module spells the sentence itself; the line a
rendered job's bash writes (real bash, both languages) is the one ``slurm result`` reads; and on the SLURM
lab, a real job rendered in English and one rendered in Turkish.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.cli import main
from ddp_tutorial.i18n import LANGUAGES, t

REPO = Path(__file__).resolve().parent.parent
FINISHED_KEYS = ("slurm_script.echo_finished_own", "slurm_script.echo_finished_training")
#: the echo of the log's last line in a rendered script: the only echo that prints the step's $STATUS
FINISHED_ECHO = re.compile(r'^echo "[^"\n]*\$STATUS[^"\n]*"$', re.M)


def _render(tmp_path: Path, template: str, lang: str, script: str | None = "my.py") -> str:
    spec = slurm.JobSpec(template=template, nodes=1, nproc_per_node=1, python=sys.executable,
                         run_dir=str(tmp_path / "runs"), time="00:10:00", script=script)
    return slurm.render(spec, lang)


def _last_line(rendered: str, status: int) -> str:
    """What the rendered script's finished echo writes, run by bash with the step's exit code ``status``."""
    [echo] = FINISHED_ECHO.findall(rendered)
    done = subprocess.run(["bash", "-c", f"STATUS={status}\n{echo}"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_sentence_is_written_only_in_the_catalogue():
    """Its words (the part before the exit code, in each language) appear in no template and no module: they
    were in three places (a template marker, a catalogue word and a regex in slurm/jobs.py)."""
    places = sorted((REPO / "ddp_tutorial").rglob("*.py")) + sorted((REPO / "slurm").glob("*.sbatch"))
    for key in FINISHED_KEYS:
        for lang in LANGUAGES:
            assert t(key, lang, code="\0").count("\0") == 1, (key, lang)  # finished_lines reads around one {code}
            words = t(key, lang, code="\0").split("\0")[0].strip()
            assert len(words) > 10, (key, lang, words)
            spelled = [str(p.relative_to(REPO)) for p in places if words in p.read_text(encoding="utf-8")]
            assert not spelled, f"{words!r} ({key}, {lang}) is spelled in {spelled}: read it from the catalogue"


@pytest.mark.parametrize("template", slurm.SCRIPT_TEMPLATES)
@pytest.mark.parametrize("job_lang", LANGUAGES)
def test_slurm_result_reads_the_line_a_rendered_job_writes(tmp_path, template, job_lang, monkeypatch, capsys):
    """A job rendered in ``job_lang`` ends its log with the catalogue's sentence; ``slurm result`` reads its
    exit code from that line in either language of the reader."""
    line = _last_line(_render(tmp_path, template, job_lang), 3)
    assert line == t("slurm_script.echo_finished_own", job_lang, code=3) + "\n", line
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "slurm-41.out").write_text("job 41 on n1\nRESULT {}\n" + line)
    for reader in LANGUAGES:
        monkeypatch.setenv("DDP_TUTORIAL_LANG", reader)
        assert main(["slurm", "result", "41", "--run-dir", str(runs)]) == 1
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        assert (report["exit_code"], report["source"], report["own_script"]) == (3, "log", True), report
        assert t("slurm.own_script_finished", reader, job_id="41", code=3, source="log") in captured.err


@pytest.mark.parametrize("job_lang", LANGUAGES)
def test_the_trainings_own_finished_line_is_not_an_own_script_outcome(tmp_path, job_lang, capsys):
    """The package's training ends its log with its own sentence (echo_finished_training) and writes a result
    file: without the file, `slurm result` says there is no result, not "your script exited with 0"."""
    for template in slurm.TEMPLATES:
        line = _last_line(_render(tmp_path, template, job_lang, script=None), 0)
        assert line == t("slurm_script.echo_finished_training", job_lang, code=0) + "\n", (template, line)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "slurm-42.out").write_text("job 42 on n1\n" + line)
    assert main(["slurm", "result", "42", "--run-dir", str(runs)]) == 2
    assert "42" in capsys.readouterr().err


OWN_SCRIPT = """\
import sys
print("my script ran")
sys.exit(3)
"""


@pytest.mark.slurm
@pytest.mark.slow
def test_a_real_job_in_each_language_is_read_back(slurm_cluster, tmp_path, monkeypatch, capsys):
    """On the SLURM lab: a user-script job rendered in English and one rendered in Turkish, whose script exits
    with 3; the log ends with the catalogue's sentence in the job's language, and `slurm result`, run in the
    other language, reads 3 from it."""
    lab = slurm_cluster
    script = tmp_path / "exits_three.py"
    script.write_text(OWN_SCRIPT)
    jobs = {}
    for lang in LANGUAGES:
        spec = slurm.JobSpec(template="per-gpu", nodes=1, nproc_per_node=1, python=sys.executable,
                             run_dir=str(tmp_path / lang), time="00:05:00", job_name=f"log-{lang}",
                             script=str(script))
        jobs[lang] = slurm.submit(slurm.write_script(slurm.render(spec, lang), tmp_path / f"{lang}.sh"), env=lab.env)
    for lang, job in jobs.items():
        info = slurm.wait(job, timeout=120, poll=0.5, max_poll=2, env=lab.env)
        log = slurm.read_log(job, run_dir=str(tmp_path / lang))
        assert info.state == "FAILED" and info.exit_code == 3, f"{lang}: {info.describe()}\n{log}"
        assert log.splitlines()[-1] == t("slurm_script.echo_finished_own", lang, code=3), log
        other = next(x for x in LANGUAGES if x != lang)
        monkeypatch.setenv("DDP_TUTORIAL_LANG", other)
        assert main(["slurm", "result", job, "--run-dir", str(tmp_path / lang)]) == 1
        report = json.loads(capsys.readouterr().out)
        assert (report["exit_code"], report["source"]) == (3, "log"), (report, log)
