"""The right torch for the node: a fake ``nvidia-smi`` on PATH (what a TRUBA GPU node prints) drives
the build ``scripts/setup.sh`` chooses (``python -m ddp_tutorial.gpu choose``) and the verdict
``ddp-tutorial env`` prints, in both languages. setup.sh and ``gpu choose`` run as real processes, env's
command in this one; only nvidia-smi is a stand-in (this machine has no GPU), and setup.sh's pip is
recorded instead of run (no network)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial import gpu
from ddp_tutorial.i18n import t

REPO = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)

# name → (nvidia-smi lines, the build chosen, env's verdict with this machine's torch (cu130), advice)
NODES = {
    "akya: driver 565 + 4 x V100": (["Tesla V100-SXM2-16GB, 7.0, 565.57.01"] * 4, "cu126",
                                     "driver_too_old", "cu126"),
    "palamut: driver 565 + 8 x A100": (["NVIDIA A100-SXM4-80GB, 8.0, 565.57.01"] * 8, "cu126",
                                       "driver_too_old", "cu126"),
    "kolyoz: driver 580 + 4 x H100": (["NVIDIA H100 80GB HBM3, 9.0, 580.65.06"] * 4, "cu130", "ok", None),
    "a login node: no nvidia-smi": ([], "cu130", "no_gpu", None),
}


def _node(folder: Path, lines) -> dict:
    """The environment of a node whose nvidia-smi prints ``lines`` (none: no nvidia-smi at all)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = os.environ["PATH"]
    if lines:
        body = "".join(f"printf '%s\\n' '{line}'\n" for line in lines)
        tool = folder / "nvidia-smi"
        tool.write_text("#!/bin/sh\n" + body)
        tool.chmod(0o755)
        path = f"{folder}:{path}"
    else:  # a PATH without any nvidia-smi (this machine has none; keep it that way)
        path = os.pathsep.join(p for p in path.split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    env = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_SITE", "TORCH_VERSION",
                                                            "TORCHVISION_VERSION")}
    return {**env, "PATH": path}


def _choose(env: dict, *args: str):
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu", "choose", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("name", list(NODES))
def test_setup_chooses_the_build_from_nvidia_smi(tmp_path, name):
    lines, build, _, _ = NODES[name]
    env = {**_node(tmp_path, lines), "DDP_TUTORIAL_LANG": "en"}
    variant, url, pins, why = _choose(env)
    assert variant == build and pins == f"{gpu.TORCH_VERSION} {gpu.TORCHVISION_VERSION}"
    assert url == ("" if gpu.VARIANTS[build].pypi else f"https://download.pytorch.org/whl/{build}")
    assert gpu.TORCH_VERSION in why and (build in why)
    if lines:
        driver = lines[0].split(", ")[2]
        assert driver in why and why.startswith(f"torch {gpu.TORCH_VERSION}: the {build} build")
    else:
        assert "--site truba" in why  # a login node is told how to get the site's build
    # The same choice in Turkish.
    tr = _choose({**env, "DDP_TUTORIAL_LANG": "tr"})
    assert tr[0] == build and "derleme" in tr[3]


def test_the_site_option_gives_the_build_of_every_truba_partition(tmp_path):
    for lines in ([], NODES["kolyoz: driver 580 + 4 x H100"][0]):  # a site given on purpose wins
        variant, url, _, why = _choose({**_node(tmp_path / str(len(lines)), lines), "DDP_TUTORIAL_LANG": "en"},
                                       "--site", "truba")
        assert variant == "cu126" and url == "https://download.pytorch.org/whl/cu126"
        for partition in ("barbun-cuda", "akya-cuda", "palamut-cuda", "kolyoz-cuda"):
            assert partition in why
    # Every TRUBA partition's GPU is in the site table, with the profile's compute capability.
    from ddp_tutorial.slurm import PROFILES
    for partition, capability in gpu.SITES["truba"].partitions.items():
        assert f"sm_{capability[0]}{capability[1]}" in PROFILES[partition].gpu
        assert gpu.has_kernels(capability, gpu.VARIANTS["cu126"].arch_list)


def test_only_builds_that_exist_for_the_pin_are_offered(tmp_path):
    env = {**_node(tmp_path, []), "DDP_TUTORIAL_LANG": "en"}
    for asked in ("cu128", "cu124", "cu13"):
        done = subprocess.run([sys.executable, "-m", "ddp_tutorial.gpu", "choose", "--cuda", asked],
                              capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
        assert done.returncode == 2 and f"no '{asked}' build of torch {gpu.TORCH_VERSION}" in done.stderr
        assert "Traceback" not in done.stderr
    assert _choose(env, "--cuda", "cu132")[:2] == ["cu132", "https://download.pytorch.org/whl/cu132"]
    # Every advice of the verdicts names a build of the table, i.e. one that exists for the pin.
    for caps in ([(6, 0)], [(7, 0)], [(8, 0)], [(9, 0)], [(10, 0)], [(12, 0)], [(7, 0), (9, 0)]):
        for driver in ("535.1", "565.57.01", "580.65.06", "595.1"):
            for cuda in ("13.0", "12.6", None):
                advice = gpu.compatibility(caps, driver, cuda).suggestion
                assert advice is None or advice in gpu.VARIANTS


def _fake_venv(folder: Path) -> Path:
    """A venv whose python is the real one, except that ``-m pip`` only records its arguments."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(
        "#!/bin/bash\n"
        'if [ "$1" = -m ] && [ "$2" = pip ]; then shift 2; echo "pip $*" >> "$PIP_LOG"; exit 0; fi\n'
        f'exec {PYTHON} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    return folder


@pytest.mark.parametrize("name", ["akya: driver 565 + 4 x V100", "kolyoz: driver 580 + 4 x H100"])
def test_setup_sh_says_the_choice_in_one_line_and_installs_that_build(tmp_path, name):
    lines, build, _, _ = NODES[name]
    log = tmp_path / "pip.log"
    env = {**_node(tmp_path / "node", lines), "VENV": str(_fake_venv(tmp_path / "venv")), "PIP_LOG": str(log),
           "SKIP_SYSTEM": "1", "DDP_TUTORIAL_LANG": "en"}
    done = subprocess.run(["bash", "scripts/setup.sh"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("== torch build: ")]
    assert len(said) == 1 and f"the {build} build" in said[0], done.stdout
    pips = log.read_text().splitlines()
    torch_installs = [p for p in pips if "torch==" in p and "-e" not in p.split()]
    if build == "cu126":  # this machine's torch is PyPI's cu130: replaced by the cu126 build
        assert torch_installs == [f"pip --disable-pip-version-check -q install --force-reinstall --index-url "
                                  f"https://download.pytorch.org/whl/cu126 torch=={gpu.TORCH_VERSION} "
                                  f"torchvision=={gpu.TORCHVISION_VERSION}"]
    else:  # PyPI's cu130 is installed already: nothing to replace
        assert torch_installs == []
    # A GPU node: setup ends with the check of the installed torch against these GPUs.
    assert t("gpu.report_driver", "en", driver=lines[0].split(", ")[2], source="nvidia-smi") in done.stdout


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("name", list(NODES))
def test_env_says_whether_this_torch_can_use_the_gpus_and_the_command_that_fixes_it(tmp_path, name, lang, monkeypatch,
                                                                                    capsys):
    """``ddp-tutorial env``'s command, called here with the node's PATH and language (the command in a
    process of its own: tests/test_gpu.py; eight interpreters importing torch for one report each were
    50 s of the suite)."""
    import torch
    from ddp_tutorial import cli
    if torch.version.cuda != "13.0" or torch.cuda.is_available():
        pytest.skip("written for this machine's torch: PyPI's cu130 build, no GPU")
    lines, _, status, advice = NODES[name]
    node = _node(tmp_path, lines)
    for variable in ("DDP_TUTORIAL_SITE", "TORCH_VERSION", "TORCHVISION_VERSION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PATH", node["PATH"])
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    assert cli.main(["env"]) == 0
    out = capsys.readouterr().out
    caps = [(int(line.split(", ")[1][0]), 0) for line in lines]
    verdict = gpu.compatibility(caps, lines[0].split(", ")[2] if lines else None, "13.0")
    assert verdict.status == status and verdict.suggestion == advice
    key = "gpu.report_ok" if verdict.ok else "gpu.report_bad"
    assert t(key, lang, message=verdict.message(lang)) in out
    if advice:
        assert f"bash scripts/setup.sh --cuda {advice}" in out
        assert (f"--index-url https://download.pytorch.org/whl/{advice} torch=={gpu.TORCH_VERSION}+{advice}"
                in out)
    for i, line in enumerate(lines):
        name_, capability, _ = line.split(", ")
        assert t("gpu.report_gpu", lang, index=i, name=name_, capability=capability) in out
