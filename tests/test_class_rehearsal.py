"""The class rehearsal as a test (issue 45 item 4; shared/reviews/class-day.md §2 rebuilt as code).

N attendees (N = 4 here), each a separate non-root user with a home of their own (mode 700, the site's
rule) and their own clone of this checkout, all at once on a SLURM lab in TRUBA's shape:

* 09:00 — each starts a session the kit's way, ``cd ~/ddp-tutorial && sbatch slurm/lab.sbatch``, half in
  Turkish, half in English, with the class environment (DDP_TUTORIAL_VENV) read-only, and the class's
  variables DDP_TUTORIAL_SLURM_* (never SBATCH_*) in their environment; the test waits for each log's
  tunnel and address lines, then the owner gets into the session with the address file's token (HTTP 200)
  and the next attendee neither reads that file nor gets in without the token (403);
* 12:45 — from inside each session (``srun --jobid=LAB --overlap`` as that user) 05's job is built as 05's
  cells build it and submitted in the class reservation (made by root on the akya-cuda nodes for the N
  users), in the class shape of the site table's ``[day]`` (2 nodes × 1 GPU × 10 cores); the lab's GPUs are
  stand-ins, so the training runs on the CPU with one thread (the #SBATCH lines as rendered);
* 15:00 — each attendee ``squeue --me`` and ``scancel`` of what it lists.

Asserted: no job refused (sbatch's exit code, ``--test-only`` included), each session on ``debug`` outside
the reservation (P3), each 05 job COMPLETED in the reservation with its accuracy line in its owner's
language, no (node, port) held by two users at one moment (``ss -ltnp`` in every node's namespace and the
login node's, every second), nothing of the class but SLURM clients and their shell on the login node
(T5-1), and after the end of day no process of those users anywhere and no job of theirs. The
numbers (session start, drain from the first 05 submit to the last end, waits, ports) are printed
(``pytest -s``) and written to tests/artifacts/class-rehearsal-N.json.

    .venv/bin/python -m pytest -s -q tests/test_class_rehearsal.py
    python scripts/rehearse_class.py --attendees 30        # the same code for the whole class

Needs root (users, namespaces), setpriv, useradd and the lab's SLURM packages; skips without them (fails
under CI=true). Every user is removed at the end, on failure too (and a later run removes those of a run
that died: their GECOS names the owning process).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
from classroom import run_class, write_numbers  # noqa: E402
from job_submit import minutes  # noqa: E402

from ddp_tutorial import sites  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ATTENDEES = 4
ARTIFACTS = REPO / "tests" / "artifacts"


def _need(what: str):
    message = f"the class rehearsal needs {what}"
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(message + " (CI=true: it must run here, not skip)", pytrace=False)
    pytest.skip(message)


@pytest.mark.slurm
@pytest.mark.timeout(1200)
def test_a_class_of_four_on_the_site_shaped_lab(request):
    missing = [f"{tool} (passwd, util-linux, iproute2)" for tool in ("useradd", "userdel", "setpriv", "ss")
               if shutil.which(tool) is None]
    if missing:
        _need("; ".join(missing))
    lab = request.getfixturevalue("truba_lab")  # the rule-enforcing lab: TRUBA's partitions, its job_submit.lua
    numbers = run_class(ATTENDEES, train_subset=512, lab=lab, say=lambda line: print(line, flush=True))
    write_numbers(numbers, ARTIFACTS / f"class-rehearsal-{ATTENDEES}.json")
    print(json.dumps({k: v for k, v in numbers.items() if k not in ("lab_jobs", "fifth_jobs")}, ensure_ascii=False))

    assert not numbers["refused"], "jobs refused:\n" + "\n".join(numbers["refused"])
    assert not numbers["sessions_failed"], numbers["sessions_failed"]
    assert not numbers["session_access"], numbers["session_access"]
    sessions = numbers["lab_jobs"]
    assert len(sessions) == ATTENDEES, sessions
    reserved = set(numbers["reservation"]["nodes"])
    site = sites.load("truba")
    day = site.section("day")
    for user, job in sessions.items():
        # P3: a CPU session never lands in the GPU reservation or on its nodes; its size and length within debug's
        assert job["Partition"] == day["session_partition"] and job["Reservation"] in ("", "(null)"), (user, job)
        assert job["NodeList"] not in reserved, (user, job)
        assert minutes(job["TimeLimit"]) <= minutes(site.partitions["debug"].max_time), (user, job)
        # T5-4, P4: the kit's own command gives the day's session (lab.sbatch's defaults)
        assert (job["TimeLimit"], job["NumCPUs"]) == (day["session_time"], str(day["session_cores"])), (user, job)
    assert sorted(job["lang"] for job in sessions.values()) == ["en", "en", "tr", "tr"]

    fifth = numbers["fifth_jobs"]
    assert len(fifth) == ATTENDEES, fifth
    for job_id, job in fifth.items():
        assert job["state"] == "COMPLETED", (job_id, job)
        assert job["partition"] == "akya-cuda" and job["reservation"] == numbers["reservation"]["name"], job
        # the class shape of the site's [day]: 2 nodes × (1 GPU, 10 cores), one launcher per node
        assert job["num_nodes"] == str(day["job_nodes"]) and job["tasks"] == str(day["job_nodes"]), job
        assert job["gpus_per_node"] == f"gres:gpu:{day['job_gpus_per_node']}", job
        assert job["cpus_per_task"] == str(site.partitions["akya-cuda"].cores_per_gpu), job
        assert job["accuracy_line"], (job_id, job["log_tail"])
        assert ("doğruluğu" in job["accuracy_line"]) == (job["lang"] == "tr"), job
        assert not job["address_in_use"], job

    assert numbers["port_pairs"] >= ATTENDEES, f"the sampler saw {numbers['port_pairs']} listeners: it proved nothing"
    assert not numbers["port_collisions"], numbers["port_collisions"]
    assert not numbers["login_work"], f"more than SLURM clients on the login node: {numbers['login_work']}"
    assert numbers["processes_before_end"] >= ATTENDEES, "no session process before the end of day: proved nothing"
    assert not numbers["processes_left"], numbers["processes_left"]
    assert not numbers["jobs_left"], numbers["jobs_left"]
