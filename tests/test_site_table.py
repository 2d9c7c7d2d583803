"""The site table (ddp_tutorial/sites/truba.toml) as the one source of TRUBA's limits (issue 45, T5-8, P9).

* every source is "path:line" with a path TRUBA's guide has (the list below is taken from the guide's
  mirror at the table's commit; the mirror is not in CI), and every partition field is set or ``silent``;
* ``Site.check_job`` names each broken rule with the table's value and source;
* ``slurm.PROFILES`` for TRUBA is built from the table; its description follows the user's language (P9);
* ``slurm render`` refuses the review's §5 scripts 11, 16, 17 and 21 in the table's words, and accepts the
  class shape (akya-cuda 2 × 1 GPU × 10 cores) and notebook 05's default (2 × 3 GPUs).
"""

from __future__ import annotations

import re

import pytest

from ddp_tutorial import sites, slurm
from ddp_tutorial.cli import main
from ddp_tutorial.i18n import TutorialError

# `git -C TRUBA-HPC/Belgeler ls-tree -r --name-only 30b58fd source/` (the files the table cites), with each
# file's line count at that commit: a source's line must exist (re-read the lines with
# `git -C …/Belgeler show 30b58fd:source/PATH | sed -n LINEp`).
GUIDE_FILES = {
    "1-kaynaklar/arf/arf_baglanti.rst": 59,
    "1-kaynaklar/arf/arf_kuyruk_bilgisi.rst": 136,
    "1-kaynaklar/arf/arf_depolama_kaynaklari.rst": 269,
    "1-kaynaklar/arf_acc/arf_acc_baglanti.rst": 39,
    "1-kaynaklar/arf_acc/arf_acc_kuyruk_bilgisi.rst": 133,
    "2-temel_bilgiler/hesaplama_kumeleri.rst": 214,
    "2-temel_bilgiler/gpu.rst": 53,
    "2-temel_bilgiler/interaktif-is-calistirma.rst": 50,
    "2-temel_bilgiler/konteyner_kullanimi.rst": 270,
    "2-temel_bilgiler/slurm-betik-ozellik.rst": 171,
    "2-temel_bilgiler/uygulamalar/Python/python.rst": 369,
    "5-sikca_sorulan_sorular/index.rst": 392,
}
SOURCE = re.compile(r"(?P<path>[0-9A-Za-z_./-]+\.rst):(?P<line>[1-9][0-9]*)")
TRUBA = sites.load("truba")


#: Pages the guide has removed, cited at their last commit (``<name>_commit`` beside ``<name>_source``), with their
#: line count there: [gpu] driver_source, the hardware page that named the driver (issue 46).
REMOVED_PAGES = {("eski-2025-oncesi/TRUBA/kullanici-el-kitabi/hesaplamakumeleri.rst",
                  "0e2004ddf63b017a919fddfc43643a68cd95ecc3"): 739}


def _all_sources(table, where=""):
    """Every (where, "path:line") of the raw table: ``*_source`` keys and each partition's ``sources``; a
    source with its own ``*_commit`` (a removed page) is checked against :data:`REMOVED_PAGES` instead."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _all_sources(value, f"{where}{key}.")
        elif key.endswith("_source") and key[:-len("_source")] + "_commit" in table:
            path, _, line = value.rpartition(":")
            assert int(line) <= REMOVED_PAGES[(path, table[key[:-len("_source")] + "_commit"])], (where, key)
        elif key.endswith("source") or where.endswith("sources."):
            for spec in ([value] if isinstance(value, str) else value):
                yield f"{where}{key}", spec


def test_every_source_is_a_line_of_the_guide():
    seen = list(_all_sources({k: v for k, v in TRUBA.raw.items() if k != "guide"}))
    assert len(seen) > 80, len(seen)
    for where, spec in seen:
        m = SOURCE.fullmatch(spec)
        assert m, (where, spec)
        assert m["path"] in GUIDE_FILES, (where, spec)
        assert int(m["line"]) <= GUIDE_FILES[m["path"]], (where, spec)


def test_every_partition_field_is_set_or_silent():
    for p in TRUBA.partitions.values():
        for name in sites.PARTITION_FIELDS:
            if name == "constraints" or (name in ("gpu", "min_gpus", "cores_per_gpu") and p.gpus_per_node == 0):
                continue  # constraints: none documented; a CPU partition has no GPU fields
            value = getattr(p, name)
            assert (value is not None) != (name in p.silent), (p.name, name)
            if value is not None and not (name == "gpu_only" and value is False):
                assert p.source_of(name), (p.name, name)  # a value without a source is a guess


def test_the_table_says_what_the_guide_says():
    """The values read again from the guide (review §1; hesaplama_kumeleri.rst:110-196 for DefMemPerCore)."""
    p = TRUBA.partitions
    assert (p["akya-cuda"].nodes, p["akya-cuda"].gpus_per_node, p["akya-cuda"].cores_per_gpu) == (24, 4, 10)
    assert (p["barbun-cuda"].nodes, p["barbun-cuda"].gpus_per_node, p["barbun-cuda"].cores_per_gpu) == (24, 2, 20)
    assert (p["palamut-cuda"].nodes, p["kolyoz-cuda"].nodes) == (9, 24 + 48)
    assert p["kolyoz-cuda"].source_of("nodes") == "1-kaynaklar/arf_acc/arf_acc_kuyruk_bilgisi.rst:42,52"
    assert {n: p[n].mem_per_core_mb for n in ("orfoz", "barbun", "hamsi", "barbun-cuda", "akya-cuda", "palamut-cuda",
                                              "kolyoz-cuda")} == {
        "orfoz": 2000, "barbun": 8500, "hamsi": 3400, "barbun-cuda": 8500, "akya-cuda": 8500, "palamut-cuda": 7500,
        "kolyoz-cuda": 14 * 1024}
    assert p["debug"].min_cores == 1 and p["debug"].source_of("min_cores").endswith("hesaplama_kumeleri.rst:121")
    assert "mem_per_core_mb" in p["debug"].silent
    assert (p["orfoz"].min_cores, p["hamsi"].min_cores, p["barbun"].min_cores) == (56, 28, 20)
    assert TRUBA.source("2-temel_bilgiler/gpu.rst:46").url.endswith("/source/2-temel_bilgiler/gpu.rst#L46")


# ------------------------------------------------------------------------------------------
# check_job


def _rules(partition, **job):
    return {v.rule: v for v in TRUBA.check_job(partition, **job)}


def test_check_job_names_each_broken_rule_with_its_value_and_source():
    broken = _rules("akya-cuda", nodes=30, gpus_per_node=8, cores_per_node=32, time="4-00:00:00")
    assert set(broken) == {"gpus_per_node", "nodes", "cores_per_gpu", "max_time"}
    v = broken["cores_per_gpu"]
    assert (v.limit, v.asked, v.source) == (10, 4, "2-temel_bilgiler/gpu.rst:46")
    assert v.text("en").startswith("akya-cuda: at least 10 cores per GPU (TRUBA's guide, 2-temel_bilgiler/gpu.rst:46); "
                                   "this job asks 4.")
    assert "GPU başına en az 10 CPU çekirdeği (TRUBA kılavuzu, 2-temel_bilgiler/gpu.rst:46)" in v.text("tr")
    assert _rules("akya-cuda", nodes=1, gpus_per_node=0, cores_per_node=10)["gpu_only"].source.endswith(":122")
    assert set(_rules("barbun", nodes=1, gpus_per_node=0, cores_per_node=4)) == {"min_cores"}
    assert set(_rules("barbun", nodes=1, gpus_per_node=0, cores_per_node=41)) == {"cores_per_node"}
    assert _rules("debug", nodes=1, gpus_per_node=0, cores_per_node=4, time="04:00:01") .keys() == {"max_time"}
    assert _rules("debug", nodes=1, gpus_per_node=0, cores_per_node=4, time="0").keys() == {"max_time"}  # no limit
    assert not _rules("debug", nodes=1, gpus_per_node=0, cores_per_node=4, time="03:00:00")
    assert not _rules("akya-cuda", nodes=2, gpus_per_node=1, cores_per_node=10, time="00:15:00")
    assert not _rules("no-such-partition", nodes=99, gpus_per_node=99, cores_per_node=1)


# ------------------------------------------------------------------------------------------
# Profiles from the table


def test_the_truba_profiles_are_the_tables():
    gpu_partitions = [p for p in TRUBA.partitions.values() if p.gpus_per_node]
    assert [n for n in slurm.PROFILES if n != "generic"] == [p.name for p in gpu_partitions]
    for p in gpu_partitions:
        profile = slurm.PROFILES[p.name]
        assert (profile.partition, profile.gpus_per_node, profile.cpus_per_gpu, profile.cores_per_node, profile.gpu,
                profile.site) == (p.name, p.gpus_per_node, p.cores_per_gpu, p.cores_per_node, p.gpu, "truba")


def test_the_profile_description_follows_the_language(monkeypatch):
    """P9: the Turkish preview read "akya-cuda profili: TRUBA akya-cuda: 4× NVIDIA V100, 40 cores, 10 per GPU"."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    assert (slurm.PROFILES["akya-cuda"].description
            == "TRUBA akya-cuda: 4× NVIDIA V100 16 GB, 40 CPU çekirdeği, GPU başına 10")
    assert "cores" not in slurm.PROFILES["generic"].description
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    assert slurm.PROFILES["akya-cuda"].description == "TRUBA akya-cuda: 4× NVIDIA V100 16 GB, 40 cores, 10 per GPU"


# ------------------------------------------------------------------------------------------
# slurm render refuses a job beyond its partition (T5-8): the review's §5 scripts


REFUSED = {  # review §5.1 number: (render arguments, the rule, words of the message)
    11: (["--profile", "palamut-cuda", "--template", "torchrun", "--nodes", "16"], "nodes",
         "palamut-cuda: 9 nodes (TRUBA's guide, 1-kaynaklar/arf_acc/arf_acc_kuyruk_bilgisi.rst:32); this job asks 16"),
    16: (["--profile", "akya-cuda", "--template", "per-gpu", "--nodes", "1", "--gpus-per-node", "8",
          "--cpus-per-process", "5"], "gpus_per_node",
         "akya-cuda: 4 GPUs per node (TRUBA's guide, 1-kaynaklar/arf/arf_kuyruk_bilgisi.rst:56); this job asks 8"),
    17: (["--profile", "akya-cuda", "--template", "per-gpu", "--nodes", "2", "--gpus-per-node", "4",
          "--cpus-per-process", "4"], "cores_per_gpu",
         "akya-cuda: at least 10 cores per GPU (TRUBA's guide, 2-temel_bilgiler/gpu.rst:46); this job asks 4"),
    21: (["--profile", "barbun-cuda", "--template", "seed", "--nodes", "2", "--gpus-per-node", "2", "--time",
          "4-00:00:00"], "max_time",
         "barbun-cuda: at most 3-00:00:00 per job (TRUBA's guide, 1-kaynaklar/arf/arf_kuyruk_bilgisi.rst:48); "
         "this job asks 4-00:00:00"),
}


@pytest.mark.parametrize("script", sorted(REFUSED))
def test_render_refuses_the_reviews_jobs_beyond_a_partition(script, tmp_path, capsys, monkeypatch):
    args, rule, words = REFUSED[script]
    monkeypatch.delenv("DDP_TUTORIAL_SITE", raising=False)
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    out = tmp_path / "job.sh"
    assert main(["slurm", "render", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    assert main(["slurm", "render", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "TRUBA kılavuzu" in err and "hata:" in err, err


@pytest.mark.parametrize("overrides", [dict(nodes=2, gpus_per_node=1),   # the class shape: 2 × 1 GPU × 10 cores
                                       dict(nodes=2, gpus_per_node=3),   # 05's default: 2 × 3 GPUs × 10 cores
                                       dict(nodes=2, gpus_per_node=1, template="per-gpu", time="00:15:00")])
def test_the_class_shape_and_05s_default_pass(overrides):
    text = slurm.render(slurm.JobSpec.from_profile("akya-cuda", **overrides))
    assert "#SBATCH --partition=akya-cuda" in text


def test_the_site_variable_chooses_the_table(tmp_path, monkeypatch):
    """A partition no profile has (debug) is checked when DDP_TUTORIAL_SITE names the table; a site file
    without the partition leaves the job to SLURM."""
    spec = dict(partition="debug", nodes=1, nproc_per_node=1, cpus_per_process=4, time="05:00:00")
    monkeypatch.delenv("DDP_TUTORIAL_SITE", raising=False)
    slurm.render(slurm.JobSpec(**spec))  # no site: SLURM decides
    monkeypatch.setenv("DDP_TUTORIAL_SITE", "truba")
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(**spec))
    assert caught.value.key == "site_rule.max_time" and "04:00:00" in caught.value.text("en")
    slurm.render(slurm.JobSpec(**dict(spec, time="03:00:00")))
    other = tmp_path / "other.toml"
    other.write_text('[site]\nname = "other"\n[partitions.gpu]\nnodes = 1\n')
    monkeypatch.setenv("DDP_TUTORIAL_SITE", str(other))
    slurm.render(slurm.JobSpec(**spec))
