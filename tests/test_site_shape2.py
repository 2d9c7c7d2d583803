"""A second site shape (issue 46 item 3): nothing of the class is TRUBA-only.

tests/data/sites/other.toml is a made-up university cluster, "ANKARA-HPC", unlike TRUBA on purpose: partitions
cpu (the default; at least 8 cores per job), gpu-l40 (2 L40S per node, 16 cores per GPU, 1 day) and gpu-a100
(8 A100 per node, 2 days), GPUs typed and picked with -C, no debug partition, login node hpc-login1. The lab
in its shape (``other_lab``: tests/conftest.py) runs that table's job_submit.lua. Then, as an instructor
would at a new site:

1. ``ddp-tutorial site derive --output derived.toml`` on the lab's login node writes what SLURM tells;
2. the fields it marks to fill (login nodes, storage, caps, the submit plugin's minimums, the day) are filled
   from what the centre says — here the hand-written table, which the lab's job_submit.lua enforces;
3. with ``DDP_TUTORIAL_SITE=derived.toml``: 05's class job renders, ``sbatch --test-only`` accepts it, it runs
   and COMPLETES with its accuracy line; a job beyond the site's limits is refused at render naming the
   limit; a class of two rehearses the day (tests/helpers/classroom.py, as scripts/rehearse_class.py
   ``--site``): sessions on cpu with the day's 8 cores, 05's jobs on gpu-l40 in the reservation.

No code of ddp_tutorial/ names this site: the table is the only place it exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
from classroom import accuracy_pattern, job_end, run_class  # noqa: E402

from ddp_tutorial import sites  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLASSROOM = REPO / "tests" / "helpers" / "classroom.py"
OTHER_SITE = REPO / "tests" / "data" / "sites" / "other.toml"   # the other_lab fixture's table (conftest.py)
ATTENDEES = 2

pytestmark = pytest.mark.slurm


# ---------------------------------------------------------------------- the table a person completes
def _value(value) -> str:
    """One TOML value (the kinds a site table holds)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _value(name)


def _toml(document: dict) -> str:
    """A site table's document as TOML: top-level tables, then ``[partitions.<name>]``."""
    out = []
    for name, table in document.items():
        if name == "partitions":
            for part, fields in table.items():
                out.append(f"[partitions.{_key(part)}]")
                out += [f"{_key(k)} = {_value(v)}" for k, v in fields.items()]
                out.append("")
            continue
        out.append(f"[{name}]")
        out += [f"{_key(k)} = {_value(v)}" for k, v in table.items()]
        out.append("")
    return "\n".join(out)


def complete(derived: Path, written: sites.Site) -> dict:
    """What a person does with a derived table: each field it marks to fill (``to_fill``) gets the value the
    centre states (here: ``written``, the table the lab enforces) with the centre's source, or is left out
    where the centre states none; the marks go; the proposed ``[day]`` becomes the class's day (the
    proposal is a guess made without the centre's minimums). Every value SLURM told stays as derived.
    Returns ``{table: [fields filled]}``."""
    document = tomllib.loads(derived.read_text())
    filled = {}

    def fill(table: dict, given: dict, name: str) -> None:
        marked = list(table.pop("to_fill", ()))
        for key in marked:
            if key in given:
                table[key] = given[key]
                if "sources" in table and key in given.get("sources", {}):
                    table["sources"][key] = given["sources"][key]
            else:
                table.pop(key, None)
        filled[name] = marked

    for name, table in list(document.items()):
        if name not in ("partitions", "day") and isinstance(table, dict):
            fill(table, written.raw.get(name, {}), name)
    for name, table in document.get("partitions", {}).items():
        fill(table, written.raw["partitions"].get(name, {}), f"partitions.{name}")
    for name in ("login", "storage", "caps"):  # a table the derive left out altogether
        if name not in document:
            document[name] = dict(written.raw[name])
            filled[name] = list(written.raw[name])
    filled["day"] = list(document.get("day", {}).get("to_fill", ()))
    document["day"] = dict(written.raw["day"])
    derived.write_text(_toml(document), encoding="utf-8")
    return filled


@pytest.fixture(scope="module")
def derived_site(other_lab, tmp_path_factory):
    """``ddp-tutorial site derive`` on the lab's login node, then completed as a person would (:func:`complete`)."""
    folder = tmp_path_factory.mktemp("site-shape2")
    folder.chmod(0o755)
    derived = folder / "derived.toml"
    began = time.monotonic()
    proc = subprocess.run(other_lab.login_command([sys.executable, "-m", "ddp_tutorial", "site", "derive",
                                                   "--output", str(derived)]),
                          env={**other_lab.env, "DDP_TUTORIAL_LANG": "en"}, capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - began
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seconds < 15, f"site derive took {seconds:.1f} s"
    print(f"site derive on the second lab: {seconds:.1f} s")
    derived.chmod(0o644)
    told = sites.load_file(derived)
    assert told.origin == "slurm" and told.to_fill(), derived.read_text()
    assert "min_cores" in told.to_fill()["partitions.cpu"], told.to_fill()  # a submit plugin's: SLURM cannot tell
    (folder / "proposed-day.json").write_text(json.dumps(told.section("day")))
    written = sites.load(str(OTHER_SITE))
    filled = complete(derived, written)
    print(f"filled in: {filled}")
    return derived


def _site_env(lab, derived: Path, lang: str = "en", **more) -> dict:
    env = {k: v for k, v in lab.env.items() if not k.startswith("DDP_TUTORIAL_SLURM_")}
    env.update({"DDP_TUTORIAL_SITE": str(derived), "DDP_TUTORIAL_LANG": lang, **more})
    return env


# ---------------------------------------------------------------------- the lab
def test_the_second_lab_has_the_tables_shape(other_lab):
    site = sites.load(str(OTHER_SITE))
    parts = other_lab.run(["sinfo", "-h", "-o", "%P %D %c %G %f %l"]).stdout.split("\n")
    shown = {line.split()[0]: line.split()[1:] for line in parts if line.strip()}
    assert set(shown) == {"cpu*", "gpu-l40", "gpu-a100"}, shown   # cpu is the default; no debug
    assert shown["gpu-l40"][:3] == ["2", "32", "gpu:l40s:2"] and "l40s" in shown["gpu-l40"][3], shown
    assert shown["gpu-a100"][:3] == ["1", "64", "gpu:a100:8"] and shown["gpu-a100"][4] == "2-00:00:00", shown
    assert shown["gpu-l40"][4] == "1-00:00:00" == site.partitions["gpu-l40"].max_time, shown
    login = subprocess.run(other_lab.login_command(["hostname"]), env=other_lab.env, capture_output=True, text=True)
    assert login.stdout.strip() == "hpc-login1"
    # a job picks the GPU type by -C; the table's rules are the lab's (cpu: at least 8 cores per job)
    typed = other_lab.run(["sbatch", "--test-only", "-p", "gpu-l40", "-C", "l40s", "-N2", "--gres=gpu:1", "-c", "16",
                           "-t", "00:20:00", "--wrap", "true"], check=False)
    assert typed.returncode == 0, typed.stderr
    wrong_type = other_lab.run(["sbatch", "--test-only", "-p", "gpu-l40", "-C", "a100", "--gres=gpu:1", "-c", "16",
                                "--wrap", "true"], check=False)
    assert wrong_type.returncode != 0, wrong_type.stderr
    small = other_lab.run(["sbatch", "--test-only", "-c", "4", "--wrap", "true"], check=False)
    assert small.returncode != 0 and "cpu: En az 8 çekirdek" in small.stderr, small.stderr


# ---------------------------------------------------------------------- the derived table
def test_the_derived_table_says_what_slurm_tells_and_the_filled_rest(derived_site):
    site = sites.load_file(derived_site)
    written = sites.load(str(OTHER_SITE))
    assert not site.to_fill(), site.to_fill()
    assert set(site.partitions) == {"cpu", "gpu-l40", "gpu-a100"}
    for name, part in site.partitions.items():
        mine = written.partitions[name]
        for field in ("cores_per_node", "gpus_per_node", "memory_gb", "mem_per_core_mb", "max_time", "min_cores",
                      "cores_per_gpu", "gpu_only"):
            assert getattr(part, field) == getattr(mine, field), (name, field, getattr(part, field))
    assert (site.partitions["gpu-l40"].nodes, site.partitions["cpu"].nodes) == (2, 1)  # the lab's, not the centre's
    assert site.section("day") == written.section("day")
    assert site.is_login_host("hpc-login1") and not site.is_login_host("arf-ui1")
    # why the proposed day must be checked: its session breaks the minimum a person filled in (cpu: 8 cores)
    proposed = json.loads((derived_site.parent / "proposed-day.json").read_text())
    broken = site.check_job(proposed["session_partition"], nodes=1, gpus_per_node=0,
                            cores_per_node=proposed["session_cores"], time=proposed["session_time"])
    if proposed["session_cores"] < site.partitions[proposed["session_partition"]].min_cores:
        assert [v.rule for v in broken] == ["min_cores"], broken


# ---------------------------------------------------------------------- 05's job
def test_05s_class_job_from_the_derived_table_is_accepted_and_completes(other_lab, derived_site, tmp_path, mnist_root):
    """05's job as the attendee's kernel builds it (slurm.class_job in the class's shape from the table's [day]):
    rendered, tried with sbatch --test-only, submitted; it COMPLETES with its accuracy line."""
    day = sites.load_file(derived_site).section("day")
    work = tmp_path / "attendee"
    work.mkdir()
    env = _site_env(other_lab, derived_site, DDP_TUTORIAL_ROOT=str(mnist_root), DDP_TUTORIAL_DATASET="mnist",
                    DDP_TUTORIAL_SLURM_PROFILE=day["job_partition"],
                    DDP_TUTORIAL_SLURM_GPUS=str(day["job_gpus_per_node"]))
    env.pop("DDP_TUTORIAL_SLURM_RESERVATION", None)
    proc = subprocess.run([sys.executable, str(CLASSROOM), "submit-05", "--train-subset", "256"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown
    assert "gpu-l40" in shown and "Job" in shown and "to start at" in shown, shown  # the preview, --test-only's answer
    info, text = job_end(other_lab, re.search(r"^SUBMITTED (\d+)$", proc.stdout, re.M).group(1))
    assert info.get("JobState") == "COMPLETED", (info, text[-2000:])
    assert (info["Partition"], info["NumNodes"], info["CPUs/Task"]) == ("gpu-l40", "2", "16"), info
    assert info["TresPerNode"] == "gres:gpu:1", info
    assert accuracy_pattern().search(text), text[-2000:]


@pytest.mark.parametrize("asked, said", [
    (["--gpus-per-node", "3", "--cpus-per-process", "16"], ("2 GPUs per node", "asks 3", "'s SLURM, scontrol show")),
    (["--gpus-per-node", "1", "--cpus-per-process", "8"], ("at least 16", "asks 8", "'s table, other.toml:84)")),
    (["--gpus-per-node", "1", "--cpus-per-process", "16", "--time", "2-00:00:00"], ("1-00:00:00", "2-00:00:00")),
    (["--gpus-per-node", "1", "--cpus-per-process", "16", "--nodes", "3"], ("2 nodes", "asks 3")),
])
def test_a_job_beyond_the_sites_limits_is_refused_at_render_naming_the_limit(other_lab, derived_site, asked, said):
    """GPUs per node (2: SLURM's), cores per GPU (16: filled in), time (1 day: SLURM's), nodes (the lab's 2)."""
    proc = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "render", "--partition", "gpu-l40", *asked],
                          env=_site_env(other_lab, derived_site), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: gpu-l40:") and all(words in lines[0] for words in said), lines[0]
    assert "#SBATCH" not in proc.stdout


# ---------------------------------------------------------------------- the day
def _need_users():
    missing = [tool for tool in ("useradd", "userdel", "setpriv", "ss") if shutil.which(tool) is None]
    if missing:
        message = f"the class rehearsal needs {', '.join(missing)} (passwd, util-linux, iproute2)"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(message + " (CI=true: it must run here, not skip)", pytrace=False)
        pytest.skip(message)


@pytest.mark.timeout(600)
def test_a_class_of_two_rehearses_the_day_on_the_second_shape(other_lab, derived_site):
    """The class rehearsal (tests/test_class_rehearsal.py's, for 2) from the derived table: sessions the site's
    way (``sbatch -p cpu -c 8 -t 07:00:00 slurm/lab.sbatch``, lab.sbatch's own lines being TRUBA's), 05's jobs
    in the reservation on gpu-l40, nothing refused, nothing left."""
    _need_users()
    site = sites.load_file(derived_site)
    day = site.section("day")
    numbers = run_class(ATTENDEES, train_subset=256, lab=other_lab, site=str(derived_site),
                        say=lambda line: print(line, flush=True))
    assert numbers["session_command"] == "sbatch --parsable --partition=cpu --cpus-per-task=8 --time=07:00:00 " \
                                        "slurm/lab.sbatch", numbers["session_command"]
    assert not numbers["refused"], "jobs refused:\n" + "\n".join(numbers["refused"])
    assert not numbers["sessions_failed"], numbers["sessions_failed"]
    assert not numbers["session_access"], numbers["session_access"]
    assert len(numbers["lab_jobs"]) == ATTENDEES, numbers["lab_jobs"]
    reserved = set(numbers["reservation"]["nodes"])
    assert reserved == {"gpu1", "gpu2"}, reserved
    for user, job in numbers["lab_jobs"].items():
        assert job["Partition"] == "cpu" and job["Reservation"] in ("", "(null)"), (user, job)
        assert job["NodeList"] not in reserved, (user, job)
        assert (job["TimeLimit"], job["NumCPUs"]) == (day["session_time"], str(day["session_cores"])), (user, job)
    fifth = numbers["fifth_jobs"]
    assert len(fifth) == ATTENDEES, fifth
    for job_id, job in fifth.items():
        assert job["state"] == "COMPLETED" and job["accuracy_line"], (job_id, job)
        assert job["partition"] == "gpu-l40" and job["reservation"] == numbers["reservation"]["name"], job
        assert (job["num_nodes"], job["gpus_per_node"], job["cpus_per_task"]) == ("2", "gres:gpu:1", "16"), job
        assert ("doğruluğu" in job["accuracy_line"]) == (job["lang"] == "tr"), job
    assert not numbers["port_collisions"], numbers["port_collisions"]
    assert not numbers["login_work"], numbers["login_work"]
    assert not numbers["processes_left"] and not numbers["jobs_left"], (numbers["processes_left"], numbers["jobs_left"])
