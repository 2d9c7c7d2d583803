"""The wheel/GPU compatibility rule (ddp_tutorial.gpu) on tables: compute capability × driver ×
variant; the parsers of nvidia-smi and /proc; the report in both languages."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial import gpu, gpu_grant
from ddp_tutorial.i18n import t

REPO = Path(__file__).resolve().parent.parent

P100, V100, T4, A100, L40S, H100, B200, RTX5090 = (6, 0), (7, 0), (7, 5), (8, 0), (8, 9), (9, 0), (10, 0), (12, 0)


# (GPUs' compute capabilities, driver, the wheel's CUDA, its arch list or None) → (status, advised variant)
TABLE = [
    # the PyPI wheel (cu130) on TRUBA's partitions, recent driver
    ([P100, P100], "580.65.06", "13.0", None, "no_kernels", "cu126"),         # barbun-cuda
    ([V100] * 4, "580.65.06", "13.0", None, "no_kernels", "cu126"),           # akya-cuda
    ([A100] * 8, "580.65.06", "13.0", None, "ok", None),                       # palamut-cuda
    ([H100] * 4, "580.65.06", "13.0", None, "ok", None),                       # kolyoz-cuda
    ([L40S], "580.65.06", "13.0", None, "ok", None),                           # sm_86 code runs on 8.9
    ([RTX5090], "580.65.06", "13.0", None, "ok", None),
    ([T4], "590.1", "13.0", None, "ok", None),
    # the same wheel, an older driver: torch sees no GPU at all
    ([A100], "570.124.06", "13.0", None, "driver_too_old", "cu126"),          # no cu128 build of 2.14.1
    ([A100], "565.57.01", "13.0", None, "driver_too_old", "cu126"),           # TRUBA's palamut-cuda
    ([H100], "565.57.01", "13.0", None, "driver_too_old", "cu126"),           # TRUBA's kolyoz-cuda
    ([A100], "550.54.15", "13.0", None, "driver_too_old", "cu126"),           # 12.6 with minor-version compatibility
    ([V100], "550.54.15", "13.0", None, "driver_too_old", "cu126"),
    ([A100], "470.82.01", "13.0", None, "driver_too_old", None),              # nothing in the table fits
    # the cu126 build: P100/V100 fine, Blackwell not
    ([P100], "535.104.05", "12.6", None, "ok", None),
    ([V100], "560.35.03", "12.6", None, "ok", None),
    ([B200], "580.65.06", "12.6", None, "no_kernels", "cu130"),
    ([RTX5090], "570.10", "12.6", None, "no_kernels", None),                  # Blackwell needs CUDA 13: driver ≥ 580
    # a cu128 build (torch ≤ 2.11, e.g. a site module): the advice is a build of the pinned torch
    ([V100], "570.10", "12.8", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "no_kernels", "cu126"),
    ([H100], "570.10", "12.8", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "ok", None),
    # the cu132 build
    ([V100], "595.1", "13.2", None, "no_kernels", "cu126"),
    ([H100], "595.1", "13.2", None, "ok", None),
    # a CPU-only torch
    ([], None, None, None, "cpu_build", None),
    ([A100], "570.10", None, None, "cpu_build_on_gpu_node", "cu126"),
    ([V100], "580.1", None, None, "cpu_build_on_gpu_node", "cu126"),
    # a CUDA torch on a login node
    ([], None, "13.0", None, "no_gpu", None),
    # torch's own arch list wins over the table
    ([V100], "580.1", "13.0", ["sm_70", "sm_75", "sm_80"], "ok", None),
    ([A100], "580.1", "13.0", ["sm_90a"], "no_kernels", "cu130"),              # arch-specific code: 9.0 only
    ([H100], "580.1", "13.0", ["sm_80", "compute_80"], "ok", None),            # PTX is compiled for newer GPUs
    # a mixed node: the advice must fit all GPUs
    ([V100, A100], "580.1", "13.0", None, "no_kernels", "cu126"),
    # a build outside the table: its CUDA major's minimum driver
    ([A100], "510.1", "12.4", None, "driver_too_old", None),
    ([A100], "530.1", "12.4", ["sm_80"], "ok", None),
]


@pytest.mark.parametrize("caps,driver,cuda,arch,status,variant", TABLE)
def test_the_compatibility_rule(caps, driver, cuda, arch, status, variant):
    verdict = gpu.compatibility(caps, driver, cuda, arch)
    assert (verdict.status, verdict.suggestion) == (status, variant)
    assert verdict.ok == (status in ("ok", "cpu_build", "no_gpu"))
    for lang in ("en", "tr"):
        text = verdict.message(lang)
        assert text and "{" not in text
        if variant:
            assert f"bash scripts/setup.sh --cuda {variant}" in text


@pytest.mark.parametrize("caps,arch", [(V100, "sm_70"), (P100, "sm_60")])
def test_the_p100_v100_message_with_the_pypi_wheel_in_both_languages(caps, arch):
    verdict = gpu.compatibility([caps], "580.65.06", "13.0", None)
    en, tr = verdict.message("en"), verdict.message("tr")
    assert f"This torch (CUDA 13.0) has no kernels for {arch}" in en
    assert "install the cu126 build of torch 2.14.1: bash scripts/setup.sh --cuda cu126".lower() in en.lower()
    assert "pip install --index-url https://download.pytorch.org/whl/cu126 torch==2.14.1+cu126" in en
    assert f"Bu torch'ta (CUDA 13.0) {arch} için çekirdek kodu (kernel) yok" in tr
    assert "torch 2.14.1 için cu126 derlemesini kurun: bash scripts/setup.sh --cuda cu126" in tr


def test_a_cpu_build_on_a_gpu_node_says_so_not_run_on_a_gpu_node():
    verdict = gpu.compatibility([A100], "580.1", None)
    assert "CPU-only torch build on a GPU node" in verdict.message("en")
    assert "run on a GPU node" not in verdict.message("en")
    assert "yalnızca CPU için derlenmiş" in verdict.message("tr")
    assert verdict.error().key == "gpu.verdict_cpu_build_on_gpu_node"


@pytest.mark.parametrize("cap,arch_list,runs", [
    ((8, 6), ["sm_80"], True), ((8, 9), ["sm_86"], True), ((8, 0), ["sm_86"], False),
    ((9, 0), ["sm_80"], False), ((9, 0), ["sm_80", "compute_80"], True), ((7, 0), ["compute_75"], False),
    ((9, 0), ["sm_90a"], True), ((9, 1), ["sm_90a"], False), ((10, 0), ["sm_100"], True),
    ((12, 0), ["sm_100"], False), ((12, 1), ["sm_120"], True), ((6, 1), ["sm_60"], True),
])
def test_which_kernels_run_on_which_gpu(cap, arch_list, runs):
    assert gpu.has_kernels(cap, arch_list) is runs


def test_variant_names():
    assert [gpu.variant_of(v) for v in ("13.0", "12.8", "12.6", None, "")] == ["cu130", "cu128", "cu126", None, None]
    # The table holds only builds that exist for the pinned torch: PyPI's first, then the index's.
    assert list(gpu.VARIANTS) == ["cu130", "cu132", "cu126"] and gpu.VARIANTS["cu130"].pypi
    assert gpu.TORCH_VERSION == "2.14.1" and "cu128" not in gpu.VARIANTS


def test_parsing_nvidia_smi_and_proc():
    smi = "NVIDIA H200, 9.0, 570.124.06\nNVIDIA H200, 9.0, 570.124.06\n"
    gpus, driver = gpu.parse_nvidia_smi(smi)
    assert [(g.name, g.capability) for g in gpus] == [("NVIDIA H200", (9, 0))] * 2 and driver == "570.124.06"
    gpus, driver = gpu.parse_nvidia_smi("Tesla V100-SXM2-32GB, 7.0, 535.104.05\n")
    assert gpus[0].capability == (7, 0) and driver == "535.104.05"
    gpus, _ = gpu.parse_nvidia_smi("Tesla P100-PCIE-16GB, [N/A], 470.82.01\n")  # an old nvidia-smi
    assert gpus[0].capability is None
    assert gpu.parse_nvidia_smi("") == ([], None)
    proc = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert gpu.parse_proc_version(proc) == "550.54.15"
    assert gpu.parse_proc_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release "
                                  "Build\n") == "570.86.15"
    assert gpu.parse_proc_version("nothing") is None


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_report_on_this_machine(lang):
    report = gpu.report(lang)
    import torch
    assert torch.__version__ in report
    gpus, driver, _ = gpu.node_facts()
    if not gpus:  # this machine: no GPU, and the report says so plainly
        assert t("gpu.report_no_gpu", lang) in report
    for g in gpus:
        assert g.name in report
    if torch.version.cuda:
        assert t("gpu.build_cuda", lang, cuda=torch.version.cuda) in report


def test_ddp_tutorial_env_prints_the_check_and_the_json():
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.cli", "env"], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "torch " in done.stdout and '"world_size": 1' in done.stdout


def _fake_nvidia_smi(folder: Path, line: str) -> dict:
    """A stand-in nvidia-smi on PATH printing what the real one prints on a GPU node."""
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nprintf '%s\\n' '{line}'\nprintf '%s\\n' '{line}'\n")
    tool.chmod(0o755)
    import os
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


CHOOSE = """
from ddp_tutorial.device_rule import choose_device
from ddp_tutorial.whoami import resolve_environment
from ddp_tutorial.i18n import TutorialError
try:
    print("DEVICE", choose_device("{requested}", resolve_environment(environ={{}})))
except TutorialError as error:
    print("ERROR", error.key, error)
"""


def test_asking_for_gpus_on_a_node_this_torch_cannot_use_says_why(tmp_path):
    import torch
    if torch.cuda.is_available() or not torch.version.cuda:
        pytest.skip("needs a CUDA build of torch that sees no GPU (this machine)")
    env = {**_fake_nvidia_smi(tmp_path, "Tesla V100-SXM2-32GB, 7.0, 535.104.05"), "DDP_TUTORIAL_LANG": "en"}
    done = subprocess.run([sys.executable, "-c", CHOOSE.format(requested="cuda")], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)
    # The driver 535 is older than this cu130 wheel needs: the advice is the build that fits driver and GPU.
    assert "ERROR gpu.verdict_driver_too_old" in done.stdout, done.stdout + done.stderr
    assert "535.104.05" in done.stdout and "bash scripts/setup.sh --cuda cu126" in done.stdout
    env["DDP_TUTORIAL_LANG"] = lang = "tr"
    done = subprocess.run([sys.executable, "-c", CHOOSE.format(requested="auto")], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)
    assert "DEVICE cpu" in done.stdout, done.stdout + done.stderr   # auto: the CPU, but not silently
    assert "bash scripts/setup.sh --cuda cu126" in done.stderr and "sürücü" in done.stderr, done.stderr
    report = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu"], capture_output=True, text=True,
                            timeout=120, cwd=REPO, env=env)
    assert report.returncode == 1
    assert t("gpu.report_gpu", lang, index=1, name="Tesla V100-SXM2-32GB", capability="7.0") in report.stdout
    assert t("gpu.report_driver", lang, driver="535.104.05", source="nvidia-smi") in report.stdout


def test_gpu_choose_survives_non_utf8_bytes_from_nvidia_smi(tmp_path):
    """G03 (round 4): one line of nvidia-smi's output that is not UTF-8 was a UnicodeDecodeError traceback
    in `gpu choose`, and scripts/setup.sh stopped at its first question."""
    tool = tmp_path / "nvidia-smi"
    tool.write_bytes(b"#!/bin/sh\nprintf 'NVIDIA H200, 9.0, 580.65.06\\n'\n"
                     b"printf 'GPU \\377\\376 odd, 9.0, 580.65.06\\n'\n")
    tool.chmod(0o755)
    import os
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "DDP_TUTORIAL_LANG": "en"}
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu", "choose"], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and "sm_90" in lines[3], done.stdout


@pytest.mark.parametrize("script, words", [
    ("exec sleep 60", "did not answer within 1 s"),                                     # G04: a hanging nvidia-smi
    ("echo 'Tesla P100-PCIE-16GB, [N/A], 470.82.01'", "gave no compute capability"),   # G02: an old one
])
def test_gpu_choose_never_says_no_gpu_when_nvidia_smi_hung_or_is_too_old(tmp_path, monkeypatch, script, words):
    """G02/G04 (round 4): a hanging nvidia-smi (30 s, silent) or one that cannot report compute_cap was
    read as "this machine shows no GPU" — false on a GPU node."""
    import os
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(gpu, "SMI_TIMEOUT", 1)
    for lang in ("en", "tr"):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        gpus, driver, _ = gpu.node_facts()
        message = gpu.choose(None, gpus, driver).message()
        assert "shows no GPU" not in message and "GPU görünmüyor" not in message, message
        if lang == "en":
            assert words in message and "nvidia-smi" in message, message
            assert "470.82.01" in message or "sleep" in script, message


def test_a_build_asked_by_name_that_the_site_cannot_run_is_named(monkeypatch):
    """G06 (round 4): DDP_TUTORIAL_SITE=truba with --cuda cu130 said "the cu130 build, as asked" and dropped
    the site silently, although TRUBA's P100/V100 partitions cannot run cu130."""
    for lang, words in (("en", "does not run on every GPU partition of truba"), ("tr", "her GPU kuyruğunda çalışmaz")):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        choose = [sys.executable, "-m", "ddp_tutorial.gpu", "choose", "--site", "truba", "--cuda", "cu130"]
        done = subprocess.run(choose, capture_output=True, text=True, timeout=120, cwd=REPO)
        lines = done.stdout.splitlines()
        assert done.returncode == 0 and lines[0] == "cu130" and words in lines[3] and "cu126" in lines[3], done.stdout
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu", "choose", "--site", "truba", "--cuda", "cu126"],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env={**__import__("os").environ,
                                                                                      "DDP_TUTORIAL_LANG": "en"})
    assert "as asked (--cuda cu126)." in done.stdout and "partition" not in done.stdout


# P5 (issue 45): inside a job SLURM granted GPUs, "no GPU" is a failure, never "a login node?".
@pytest.mark.parametrize("environ, grant", [
    ({"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"}, "SLURM_JOB_GPUS=0"),  # the batch step
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"}, "SLURM_STEP_GPUS=0,1"),  # srun
    ({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "2"}, "CUDA_VISIBLE_DEVICES=2"),
    ({"SLURM_JOB_ID": "7", "GPU_DEVICE_ORDINAL": "0"}, "GPU_DEVICE_ORDINAL=0"),
    ({"CUDA_VISIBLE_DEVICES": "0"}, None),                       # a laptop's own setting: no SLURM job
    ({"SLURM_JOB_ID": "7"}, None),                               # a CPU job
    ({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": ""}, None),   # every GPU hidden
    ({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "NoDevFiles"}, None),
    ({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "-1"}, None),
])
def test_which_variables_say_slurm_granted_gpus(environ, grant):
    assert gpu_grant.granted(environ) == grant


def test_no_gpu_inside_a_job_granted_gpus_is_a_failure_in_both_languages():
    """The verdict on the facts (no torch here): gpu_grant.unusable's fields, as the pre-check's test below
    gets them from a real torch in a process of its own."""
    environ = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"}
    assert gpu_grant.unusable(1, environ) is None and gpu_grant.unusable(0, {}) is None  # nvidia-smi saw one; no job
    granted = dict(grant=gpu_grant.granted(environ), node="akya3")
    found = gpu.compatibility([], None, "13.0", None, granted)
    assert (found.ok, found.status, found.key) == (False, "granted_unusable", "gpu.verdict_granted_unusable")
    assert "SLURM granted this job GPUs (SLURM_JOB_GPUS=0) but none is usable" in found.message("en")
    assert "SLURM bu işe GPU verdi (SLURM_JOB_GPUS=0) ama" in found.message("tr")
    assert "login node" not in found.message("en") and "--exclude=" in found.message("en")
    assert gpu.compatibility([], None, None, None, granted).status == "granted_unusable"  # a CPU build cannot either
    assert gpu.compatibility([], None, "13.0", None, None).status == "no_gpu"             # outside: as before


def test_the_pre_check_of_a_gpu_job_ends_with_exit_code_1_when_no_granted_gpu_is_usable(tmp_path):
    """The rendered job's pre-check (``"$PYTHON" -m ddp_tutorial.gpu || … exit 2``) fails here, so the job ends
    with exit code 2 and this line instead of failing on every rank (slurm/README.md)."""
    import torch
    if torch.cuda.device_count():
        pytest.skip("this machine's torch sees a GPU")
    env = dict(os.environ, DDP_TUTORIAL_LANG="en", SLURM_JOB_ID="7", SLURM_JOB_GPUS="0", CUDA_VISIBLE_DEVICES="0",
               PATH=str(tmp_path))  # no nvidia-smi
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "!! SLURM granted this job GPUs (SLURM_JOB_GPUS=0)" in done.stdout, done.stdout
    env.pop("SLURM_JOB_ID")  # CUDA_VISIBLE_DEVICES=0 outside a job (a laptop's own setting): the old verdict
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=dict(env, SLURM_JOB_GPUS=""))
    assert done.returncode == 0 and "a login node?" in done.stdout, done.stdout + done.stderr
