"""``ddp-tutorial site derive``: a site's table read from its SLURM (issue 46 items 1 and 3a).

On the lab in TRUBA's shape (tests/conftest.py ``truba_lab``: akya1–akya4 in akya-cuda, barbun1 in barbun,
debug over all five and the default), the derived table equals ``truba.toml`` in everything SLURM can tell,
names what it cannot, and drives ``slurm render``: a job beyond a limit is refused naming the limit and the
command it came from, and 05's class job is accepted by ``sbatch --test-only``. The parser is also checked
on the text captured from that lab (tests/data/derive/truba-lab-*.txt: ``scontrol show partition -o``,
``show node -o``, ``show config``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial import sites
from ddp_tutorial.i18n import t
from ddp_tutorial.sites import derive

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "derive"
CLI = [sys.executable, "-m", "ddp_tutorial.cli"]
#: the lab's shape (slurmlab.SITE_SHAPE): partition → nodes, debug over all of them
LAB_NODES = {"akya-cuda": 4, "barbun": 1, "debug": 5}
#: what SLURM tells, compared with TRUBA's written table
TOLD = ("cores_per_node", "gpus_per_node", "memory_gb", "mem_per_core_mb", "max_time")


def captured() -> str:
    return derive.table_text((DATA / "truba-lab-partition.txt").read_text(), (DATA / "truba-lab-node.txt").read_text(),
                             (DATA / "truba-lab-config.txt").read_text(), host="arf-ui1", date="2026-12-06")


def test_scontrol_lines_are_parsed():
    """``key=value`` pairs whose values hold spaces (OS=Linux … #1 SMP …), GRES with and without a type."""
    node = derive.records((DATA / "truba-lab-node.txt").read_text())[0]
    assert node["NodeName"] == "akya1" and node["OS"].startswith("Linux ") and node["RealMemory"] == "393216"
    assert node["Partitions"] == "debug,akya-cuda" and node["Gres"] == "gpu:v100:4"
    assert derive.gpus("gpu:v100:4(S:0-1)") == (4, ["v100"])
    assert derive.gpus("gpu:2") == (2, [])
    assert derive.gpus("gpu:a100:4,gpu:v100:2,shard:8") == (6, ["a100", "v100"])
    assert derive.gpus("(null)") == (0, [])
    assert derive.config((DATA / "truba-lab-config.txt").read_text())["ClusterName"] == "lab"


def _equals_truba(site: sites.Site) -> None:
    truba = sites.load("truba")
    assert list(site.partitions) == ["debug", "akya-cuda", "barbun"]
    assert site.default_partition == "debug" and site.origin == "slurm"
    for name, part in site.partitions.items():
        written = truba.partitions[name]
        assert part.nodes == LAB_NODES[name], name
        for field in TOLD:
            if getattr(written, field) is not None:  # TRUBA's debug is silent on cores, GPUs, memory
                assert getattr(part, field) == getattr(written, field), (name, field)
        lab_types = [c for c in written.constraints if c in LAB_NODES]  # the node types the lab has
        assert sorted(part.constraints) == sorted(lab_types), name  # SLURM lists them in node order
        assert part.source_of("max_time") == f"scontrol show partition {name}: MaxTime"
    akya = site.partitions["akya-cuda"]
    assert akya.gpu == "v100" and truba.partitions["akya-cuda"].gpu.lower().startswith("v100")
    assert akya.cores_per_gpu == truba.partitions["akya-cuda"].cores_per_gpu  # the even share, marked to fill
    left = site.to_fill()
    assert set(left["partitions.akya-cuda"]) == {"min_cores", "min_gpus", "cores_per_gpu", "gpu_only"}
    assert {"hosts", "may_run"} <= set(left["login"]) and "outputs" in left["storage"] and "phd" in left["caps"]
    assert site.section("login")["hosts"] == ["arf-ui1"]
    day = site.section("day")
    assert (day["session_partition"], day["job_partition"]) == (truba.section("day")["session_partition"],
                                                                truba.section("day")["job_partition"])
    # proposed without the partitions' minimums (SLURM does not say them): what must meet them is to fill too
    assert {"session_partition", "session_cores", "job_partition", "job_gpus_per_node"} <= set(left["day"]), left


def test_the_captured_text_gives_trubas_table(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text(captured())
    text = path.read_text()
    assert "# min_cores = ?   # TO FILL:" in text and "[guide]" not in text
    _equals_truba(sites.load_file(path))


def test_site_show_lists_what_is_to_fill(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text(captured())
    for lang in ("en", "tr"):
        words = t("site_show.to_fill_head", lang)   # the catalogue's heading, in that language
        proc = subprocess.run([*CLI, "site", "show", "--site", str(path)], capture_output=True, text=True,
                              env={**os.environ, "DDP_TUTORIAL_LANG": lang}, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert words in proc.stdout and "[partitions.akya-cuda] cores_per_gpu, min_gpus, gpu_only, min_cores" \
            in proc.stdout
        assert "scontrol show partition akya-cuda: MaxTime" in proc.stdout
        default = {"en": "partition debug (the default: a job without --partition runs here)",
                   "tr": "kuyruk debug (varsayılan: --partition vermeyen iş burada çalışır)"}[lang]
        assert proc.stdout.count(default) == 1, proc.stdout   # SLURM's Default=YES, on that partition only


def test_a_rule_from_slurm_is_not_called_the_guides(tmp_path, monkeypatch):
    path = tmp_path / "lab.toml"
    path.write_text(captured())
    site = sites.load_file(path)
    (broken,) = site.check_job("akya-cuda", nodes=1, gpus_per_node=8, cores_per_node=80)[:1]
    assert broken.text("en").startswith(
        "akya-cuda: 4 GPUs per node (LAB's SLURM, scontrol show node akya[1-4]: Gres); this job asks 8.")
    assert "LAB SLURM yapılandırması, scontrol show node akya[1-4]: Gres" in broken.error().text("tr")
    assert "guide" not in broken.text("en")


def filled_by_hand(path: Path) -> sites.Site:
    """The captured table as a person completes part of it: akya-cuda's cores per GPU from the centre's page
    (a source of their own), its minimum cores with no source, the caps without one; the rest as SLURM told."""
    text = captured()
    for old, new in (("cores_per_gpu = 10   # TO FILL", "cores_per_gpu = 16   # was TO FILL"),
                     ('cores_per_gpu = "scontrol show node akya[1-4]: CPUTot / Gres"', 'cores_per_gpu = "gpu.rst:46"'),
                     ("# min_cores = ?   # TO FILL: the least cores per job a submit plugin enforces (SLURM does not "
                      "say)\nsources = { nodes = \"scontrol show partition akya-cuda",
                      "min_cores = 8\nsources = { nodes = \"scontrol show partition akya-cuda"),
                     ("# undergraduate = ?", "undergraduate = 4"), ("# masters = ?", "masters = 40"),
                     ("# phd = ?", "phd = 160")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)
    return sites.load_file(path)


def test_a_value_a_person_filled_is_the_tables_not_slurms(tmp_path):
    """Per field: a value whose source is site derive's own scontrol command is SLURM's; one a person filled is
    the table's, with the source they gave (or none)."""
    site = filled_by_hand(tmp_path / "lab.toml")
    broken = {v.rule: v for v in site.check_job("akya-cuda", nodes=1, gpus_per_node=8, cores_per_node=4)}
    assert set(broken) == {"gpus_per_node", "cores_per_gpu", "min_cores"}, broken
    assert "(LAB's SLURM, scontrol show node akya[1-4]: Gres)" in broken["gpus_per_node"].text("en")
    assert broken["cores_per_gpu"].text("en").startswith("akya-cuda: at least 16 cores per GPU (LAB's table, "
                                                         "gpu.rst:46); this job asks 0.")
    assert "(LAB merkez tablosu, gpu.rst:46)" in broken["cores_per_gpu"].error().text("tr")
    assert "at least 8 cores per job (LAB's table); this job asks 4" in broken["min_cores"].text("en")
    assert "(LAB merkez tablosu)" in broken["min_cores"].text("tr")
    assert not any("SLURM" in broken[rule].text(lang) for rule in ("cores_per_gpu", "min_cores")
                   for lang in ("en", "tr"))


@pytest.mark.parametrize("lang, head", [
    ("en", "Day plan at LAB for 30 attendees, 09:00–15:00 (the site table: read from LAB's SLURM on arf-ui1, "
           "2026-12-06, and completed by hand)"),
    ("tr", "Gün planı: LAB, 30 katılımcı, 09:00–15:00 (merkez tablosu: 2026-12-06 tarihinde arf-ui1 üzerinde "
           "LAB SLURM'ünden okundu ve elle tamamlandı)")])
def test_site_plan_on_a_derived_table_says_where_it_came_from(tmp_path, lang, head):
    """The plan's header names SLURM on its host and date (no guide, no commit); a value without a source
    gets no empty parentheses."""
    path = tmp_path / "lab.toml"
    filled_by_hand(path)
    proc = subprocess.run([*CLI, "site", "plan", "--site", str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DDP_TUTORIAL_LANG": lang})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == head, lines[0]
    assert "()" not in proc.stdout and "(?)" not in proc.stdout and " ?" not in proc.stdout, proc.stdout
    assert "guide" not in proc.stdout and "kılavuz" not in proc.stdout, proc.stdout
    assert "(scontrol show partition akya-cuda: MaxTime)" in proc.stdout, proc.stdout   # a source is still said


def test_no_scontrol_is_one_line(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "DDP_TUTORIAL_LANG": "en"}
    proc = subprocess.run([*CLI, "site", "derive"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "scontrol not found" in proc.stderr
    proc = subprocess.run([*CLI, "site", "derive"], capture_output=True, text=True, timeout=60,
                          env={**env, "DDP_TUTORIAL_LANG": "tr"})
    assert proc.returncode == 2 and "scontrol bulunamadı" in proc.stderr and "Traceback" not in proc.stderr


def _derive(lab, *args) -> subprocess.CompletedProcess:
    return subprocess.run(lab.login_command([*CLI, "site", "derive", *args]), env=lab.env, capture_output=True,
                          text=True, timeout=60, cwd=REPO)


@pytest.mark.slurm
def test_derived_on_the_truba_lab_equals_trubas_table(truba_lab, tmp_path):
    """Written in seconds from the login node arf-ui1; equal to truba.toml in what SLURM tells; an existing
    file is kept without --force; slurm render follows it: refuses beyond a limit, renders 05's job, which
    the lab accepts."""
    tmp_path.chmod(0o755)
    out = tmp_path / "lab.toml"
    started = time.monotonic()
    proc = _derive(truba_lab, "--output", str(out))
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert seconds < 10, seconds
    assert "3 partitions" in proc.stdout and "still to fill" in proc.stdout
    _equals_truba(sites.load_file(out))
    assert out.read_text().startswith("# lab's site table, read from its SLURM by `ddp-tutorial site derive` on "
                                      "arf-ui1")

    out.write_text(out.read_text() + "# filled by hand\n")
    kept = _derive(truba_lab, "--output", str(out))
    assert kept.returncode == 2 and "exists" in kept.stderr and out.read_text().endswith("# filled by hand\n")
    assert _derive(truba_lab, "--output", str(out), "--force").returncode == 0
    assert "# filled by hand" not in out.read_text()
    printed = _derive(truba_lab, "--name", "mycluster")
    assert printed.returncode == 0 and 'name = "mycluster"' in printed.stdout

    env = {**truba_lab.env, "DDP_TUTORIAL_SITE": str(out), "DDP_TUTORIAL_LANG": "en"}
    for args, words in ((["--gpus-per-node", "8", "--cpus-per-process", "5"],
                         "akya-cuda: 4 GPUs per node (LAB's SLURM, scontrol show node akya[1-4]: Gres); this job asks"),
                        (["--nodes", "5"], "akya-cuda: 4 nodes (LAB's SLURM, scontrol show partition akya-cuda: "
                                           "TotalNodes); this job asks 5"),
                        (["--time", "4-00:00:00"], "akya-cuda: at most 3-00:00:00 per job (LAB's SLURM, scontrol "
                                                   "show partition akya-cuda: MaxTime)")):
        refused = subprocess.run([*CLI, "slurm", "render", "--profile", "akya-cuda", *args], env=env,
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and words in refused.stderr, (args, refused.stderr)

    script = tmp_path / "class.sbatch"
    code = ("import sys; from ddp_tutorial import slurm; "
            "sys.stdout.write(slurm.render(slurm.class_job(profile='akya-cuda')))")
    rendered = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**env, "DDP_TUTORIAL_SLURM_GPUS": "1", "DDP_TUTORIAL_ROOT": str(tmp_path)})
    assert rendered.returncode == 0, rendered.stderr
    script.write_text(rendered.stdout)
    assert "#SBATCH --partition=akya-cuda" in rendered.stdout
    accepted = truba_lab.run(["sbatch", "--test-only", str(script)], check=False)
    assert accepted.returncode == 0 and "to start at" in accepted.stderr, accepted.stderr


@pytest.mark.slurm
def test_05s_job_from_the_table_derived_on_the_truba_lab_runs(truba_lab, tmp_path, mnist_root):
    """Issue 46's "done when" on the TRUBA shape (test_site_shape2.py does it on the second): 05's job, built as
    the attendee's kernel builds it with the DERIVED table as the class's site, is tried, submitted and
    COMPLETES on akya-cuda with its accuracy line."""
    from classroom import accuracy_pattern, job_end
    tmp_path.chmod(0o755)
    derived = tmp_path / "lab.toml"
    assert _derive(truba_lab, "--output", str(derived)).returncode == 0
    work = tmp_path / "attendee"
    work.mkdir()
    env = {k: v for k, v in truba_lab.env.items() if not k.startswith("DDP_TUTORIAL_SLURM_")}
    env.update(DDP_TUTORIAL_SITE=str(derived), DDP_TUTORIAL_LANG="en", DDP_TUTORIAL_ROOT=str(mnist_root),
               DDP_TUTORIAL_DATASET="mnist", DDP_TUTORIAL_SLURM_PROFILE="akya-cuda", DDP_TUTORIAL_SLURM_GPUS="1")
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "helpers" / "classroom.py"), "submit-05",
                           "--train-subset", "256"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "to start at" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    info, text = job_end(truba_lab, re.search(r"^SUBMITTED (\d+)$", proc.stdout, re.M).group(1))
    assert info.get("JobState") == "COMPLETED", (info, text[-2000:])
    assert (info["Partition"], info["NumNodes"], info["CPUs/Task"]) == ("akya-cuda", "2", "10"), info
    assert accuracy_pattern().search(text), text[-2000:]


def test_a_derived_tables_gpu_types_choose_the_torch_build(tmp_path):
    """``site derive`` writes the GRES type (``gpu = "v100"``), not ``sm_70``: the build rule reads the model's
    compute capability, so ``gpu choose --site derived.toml`` (setup.sh, class_env.sbatch) picks a build instead of
    "Unknown site 'lab': the sites known are truba, lab"."""
    from ddp_tutorial import gpu_sites
    path = tmp_path / "lab.toml"
    path.write_text(captured())
    found = gpu_sites.site_gpus(sites.load_file(path))
    assert found is not None and found.partitions["akya-cuda"] == (7, 0), found
    chosen = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu", "choose", "--site", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert chosen.returncode == 0 and chosen.stdout.strip(), chosen.stdout + chosen.stderr
    assert "Unknown site" not in chosen.stderr + chosen.stdout
