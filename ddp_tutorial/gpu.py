"""Which torch build runs on these GPUs with this driver? The build table, the chooser, the check.

A PyTorch wheel bundles its own CUDA runtime (a ``module load cuda/…`` does not change it) and carries compiled
kernels only for some GPU generations ("compute capabilities", ``sm_XY``). Two things can make a GPU unusable
although ``nvidia-smi`` shows it:

* the **driver** is older than the wheel's CUDA needs → torch sees no GPU at all;
* the wheel has **no kernels** for the GPU's compute capability → "no kernel image is available
  for execution on the device" on the first CUDA operation.

This module is the ONE place that knows the builds of the pinned torch (:data:`VARIANTS`) and the rule between
them and a site's GPU nodes (:data:`SITES`, read from the site tables by :mod:`ddp_tutorial.gpu_sites`: each GPU
partition's ``sm_XY`` and the ``[gpu]`` table's driver). No torch import at module level: ``scripts/setup.sh``
asks it which build to install before torch exists (``python -m ddp_tutorial.gpu choose [--site truba]``,
:func:`choose`); ``ddp-tutorial env`` / notebook 00 print :func:`report` (this machine's facts and the verdict,
:func:`compatibility`).

The builds of torch 2.14.1 (:data:`TORCH_VERSION`), first that fits is chosen:

| variant | kernels (compute capabilities) | driver | checked here |
|---|---|---|---|
| cu130 | sm_75 … sm_120: Turing and newer (T4, A100, H100/H200, B200) | ≥ 580 | yes: PyPI's wheel |
| cu132 | sm_75 … sm_120 | ≥ 580 | release notes only |
| cu126 | sm_50 … sm_90: Maxwell … Hopper (P100 sm_60, V100 sm_70) | ≥ 525 (560 recommended) | release notes only |

cu130 is PyPI's build (``pip install torch==2.14.1``; arch list read here with ``get_arch_list()``), the others come
from ``download.pytorch.org/whl/<variant>``.

Sources (:data:`SOURCES`): PyTorch's ``RELEASE.md`` support matrix for 2.14 (#194367, #197555, RFC #190355: CUDA 12.6,
13.0, 13.2; 12.8 dropped in 2.12, #178665); NVIDIA's minor-version compatibility (12.x ≥ 525, 13.x ≥ 580). 2.14 is the
last release with a CUDA 12 build (#190385): never raise the pin past 2.14 while P100/V100 partitions are in use. Only
cu130 was checked here; ``ddp-tutorial env`` on a GPU node is the real check (torch's ``get_arch_list()`` wins).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .gpu_grant import unusable
# A site's GPU nodes, read from its table (gpu_sites); site_gpus stays reachable as gpu.site_gpus for site-check
from .gpu_sites import SITES, Capability, known_sites, site_gpus, site_named  # noqa: F401
from .i18n import TutorialError, t

TORCH_VERSION = "2.14.1"        # the pin (scripts/setup.sh, the container recipe in docs/truba.md)
TORCHVISION_VERSION = "0.29.1"  # torchvision's release that goes with it
INDEX = "https://download.pytorch.org/whl/"


@dataclass(frozen=True)
class Variant:
    name: str
    cuda: str
    arch_list: Tuple[str, ...]
    min_driver: int  # the driver major version below which this build sees no GPU
    pypi: bool = False  # the build a plain `pip install torch==TORCH_VERSION` gets

    @property
    def index_url(self) -> str:
        return INDEX + self.name


VARIANTS: Dict[str, Variant] = {  # the builds of TORCH_VERSION that exist, in order of preference
    "cu130": Variant("cu130", "13.0", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"), 580, pypi=True),
    "cu132": Variant("cu132", "13.2", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"), 580),
    "cu126": Variant("cu126", "12.6", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"), 525),
}
DEFAULT_VARIANT = next(name for name, v in VARIANTS.items() if v.pypi)
# The minimum driver for a CUDA major version (minor-version compatibility), for builds not in the table.
MIN_DRIVER_FOR_CUDA_MAJOR = {11: 450, 12: 525, 13: 580}


SOURCES = {
    "builds": "https://github.com/pytorch/pytorch/blob/main/RELEASE.md#pytorch-cuda-support-matrix "
              "(2.14: pytorch/pytorch#194367, #197555, #190355)",
    "drivers": "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html",
    "install": "https://pytorch.org/get-started/previous-versions/",
    "sites": "ddp_tutorial/sites/*.toml ([gpu] driver and each partition's gpu, with the guide's file:line)",
}


def install_command(variant: str) -> str:
    """The one command that installs ``variant`` of the pinned torch in a checkout."""
    return f"bash scripts/setup.sh --cuda {variant}"


def pip_command(variant: str) -> str:
    """The same for any other environment (a container, a site venv): exact versions, that index."""
    return (f"pip install --index-url {VARIANTS[variant].index_url} torch=={TORCH_VERSION}+{variant} "
            f"torchvision=={TORCHVISION_VERSION}+{variant}")


def variant_of(wheel_cuda: Optional[str]) -> Optional[str]:
    """``"13.0"`` → ``"cu130"`` (``torch.version.cuda``); None for a CPU-only build."""
    if not wheel_cuda:
        return None
    parts = wheel_cuda.split(".")
    return "cu" + parts[0] + (parts[1] if len(parts) > 1 else "0")


def _arch(entry: str) -> Optional[Tuple[str, int, int, str]]:
    """``"sm_86"`` → ("sm", 8, 6, ""); ``"sm_90a"`` → ("sm", 9, 0, "a"); ``"compute_120"`` → PTX."""
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", entry.strip())
    if not match:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)


def has_kernels(capability: Capability, arch_list: Sequence[str]) -> bool:
    """Can a build with ``arch_list`` run on a GPU of ``capability``?

    ``sm_XY`` code runs on X.Y and on newer GPUs of the same generation (X.Z, Z ≥ Y);
    ``sm_XYa`` only on X.Y itself; ``compute_XY`` (PTX) is compiled at load time for X.Y and newer."""
    major, minor = capability
    for entry in arch_list:
        parsed = _arch(entry)
        if parsed is None:
            continue
        kind, a_major, a_minor, suffix = parsed
        if kind == "compute" and (major, minor) >= (a_major, a_minor):
            return True
        if kind == "sm" and a_major == major and (minor == a_minor if suffix else minor >= a_minor):
            return True
    return False


def driver_major(driver_version: Optional[str]) -> Optional[int]:
    match = re.match(r"\s*(\d+)", driver_version or "")
    return int(match.group(1)) if match else None


def suggest(capabilities: Sequence[Capability], driver_version: Optional[str]) -> Optional[str]:
    """The first build of :data:`VARIANTS` (they all exist for the pinned torch) with kernels for
    every GPU and a minimum driver this driver meets; None when none fits."""
    major = driver_major(driver_version)
    for name, variant in VARIANTS.items():
        if all(has_kernels(c, variant.arch_list) for c in capabilities) and (
                major is None or major >= variant.min_driver):
            return name
    return None


VERDICT_KEYS = {  # status → its message (literal keys: grep finds every use)
    "ok": "gpu.verdict_ok", "no_gpu": "gpu.verdict_no_gpu", "cpu_build": "gpu.verdict_cpu_build",
    "cpu_build_on_gpu_node": "gpu.verdict_cpu_build_on_gpu_node", "granted_unusable": "gpu.verdict_granted_unusable",
    "driver_too_old": "gpu.verdict_driver_too_old", "no_kernels": "gpu.verdict_no_kernels",
}


@dataclass
class Verdict:
    """``ok``: this torch can train on these GPUs (or there is none, and the CPU is used).
    ``status``: ok | no_gpu | cpu_build | cpu_build_on_gpu_node | driver_too_old | no_kernels | granted_unusable.
    ``key``/``fields``: the plain-words message (``gpu.verdict_<status>`` or ``gpu.no_variant``)."""

    ok: bool
    status: str
    suggestion: Optional[str] = None
    fields: Dict[str, object] = field(default_factory=dict)

    @property
    def key(self) -> str:
        if not self.ok and self.suggestion is None and self.status != "granted_unusable":
            return "gpu.no_variant"
        return VERDICT_KEYS[self.status]

    def message(self, lang: Optional[str] = None) -> str:
        return t(self.key, lang, **self.fields)

    def error(self) -> TutorialError:
        return TutorialError(self.key, **self.fields)


def _cap(c: Capability) -> str:
    return f"{c[0]}.{c[1]}"


def compatibility(capabilities: Sequence[Capability], driver_version: Optional[str], wheel_cuda: Optional[str],
                  arch_list: Optional[Sequence[str]] = None, granted: Optional[Dict[str, str]] = None) -> Verdict:
    """The verdict for GPUs of ``capabilities`` (e.g. ``[(7, 0)]`` for a V100), the NVIDIA driver
    ``driver_version`` (``"570.124.06"``; None when unknown), the wheel's CUDA (``torch.version.cuda``,
    None for a CPU-only build) and its kernels (``torch.cuda.get_arch_list()``; None or empty: from
    :data:`VARIANTS`); ``granted``: SLURM granted GPUs none of which is usable (:func:`.gpu_grant.unusable`)."""
    capabilities = list(capabilities)
    wheel = variant_of(wheel_cuda)
    caps_text = ", ".join(_cap(c) for c in capabilities)
    advice = suggest(capabilities, driver_version) if capabilities else None
    fields: Dict[str, object] = dict(cuda=wheel_cuda or "-", driver=driver_version or "?", caps=caps_text,
                                     variant=advice or "-", command=install_command(advice) if advice else "-",
                                     pip=pip_command(advice) if advice else "-", torch=TORCH_VERSION)
    if not capabilities:  # in a job granted GPUs, none usable is a failure (P5), never "a login node?"
        status = "granted_unusable" if granted else "cpu_build" if wheel is None else "no_gpu"
        return Verdict(not granted, status, None, {**fields, **(granted or {})})
    if wheel is None:
        return Verdict(False, "cpu_build_on_gpu_node", advice, fields)
    known = VARIANTS.get(wheel)
    major = driver_major(driver_version)
    cuda_major = driver_major(wheel_cuda)
    minimum = known.min_driver if known else MIN_DRIVER_FOR_CUDA_MAJOR.get(cuda_major or 0)
    if major is not None and minimum is not None and major < minimum:
        fields["minimum"] = minimum
        return Verdict(False, "driver_too_old", advice, fields)
    kernels = list(arch_list or ()) or (list(known.arch_list) if known else [])
    if kernels:
        missing = [c for c in capabilities if not has_kernels(c, kernels)]
        if missing:
            fields["missing"] = ", ".join(f"sm_{c[0]}{c[1]}" for c in dict.fromkeys(missing))
            return Verdict(False, "no_kernels", advice, fields)
    return Verdict(True, "ok", None, fields)


# ---- The facts of this machine (without initialising CUDA in this process)


@dataclass
class GPU:
    name: str
    capability: Optional[Capability]


def parse_nvidia_smi(text: str) -> Tuple[List[GPU], Optional[str]]:
    """Lines of ``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader``."""
    gpus, driver = [], None
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0]:
            continue
        match = re.fullmatch(r"(\d+)\.(\d+)", parts[1])
        gpus.append(GPU(parts[0], (int(match.group(1)), int(match.group(2))) if match else None))
        driver = driver or (parts[2] if re.match(r"\d", parts[2]) else None)
    return gpus, driver


def parse_proc_version(text: str) -> Optional[str]:
    """The driver version in ``/proc/driver/nvidia/version`` ("… Kernel Module  550.54.15 …")."""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


SMI_TIMEOUT = 30  # seconds: nvidia-smi can be slow on a busy node, but never this slow
# What went wrong with nvidia-smi at the last node_facts(): (message key, fields), or None (G02/G04).
_SMI: Dict[str, object] = {"problem": None}


def node_facts() -> Tuple[List[GPU], Optional[str], str]:
    """(GPUs, driver version, where the facts came from), from ``nvidia-smi`` or ``/proc``."""
    smi = shutil.which("nvidia-smi")
    _SMI["problem"] = None
    if smi:
        try:
            done = subprocess.run([smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
                                  capture_output=True, encoding="utf-8", errors="replace", timeout=SMI_TIMEOUT,
                                  stdin=subprocess.DEVNULL)
            # errors="replace": a stray non-UTF-8 byte (an odd locale, a damaged name) is one odd line, not a crash
            gpus, driver = parse_nvidia_smi(done.stdout) if done.returncode == 0 else ([], None)
            if gpus and any(g.capability for g in gpus):
                return gpus, driver, "nvidia-smi"
            _SMI["problem"] = ("gpu.smi_failed", {"code": done.returncode}) if done.returncode else \
                ("gpu.smi_no_cap", {})
            if gpus:
                return gpus, driver, "nvidia-smi"
        except subprocess.TimeoutExpired:
            _SMI["problem"] = ("gpu.smi_timeout", {"seconds": SMI_TIMEOUT})
        except (OSError, ValueError, subprocess.SubprocessError) as error:
            _SMI["problem"] = ("gpu.smi_failed", {"code": type(error).__name__})
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            return [], parse_proc_version(f.read()), "/proc/driver/nvidia/version"
    except OSError:
        return [], None, "-"


def torch_facts() -> Tuple[str, Optional[str], List[str]]:
    """(torch version, the wheel's CUDA or None, the wheel's kernels when torch can tell)."""
    import torch
    arch: List[str] = []
    try:
        if torch.version.cuda and torch.cuda.is_available():  # no CUDA context is made by either call
            arch = list(torch.cuda.get_arch_list())
    except RuntimeError:  # an old driver: torch says so here; the table stands in
        arch = []
    return torch.__version__, torch.version.cuda, arch


def check() -> Verdict:
    """The verdict for this machine."""
    gpus, driver, _ = node_facts()
    _, cuda, arch = torch_facts()
    return compatibility([g.capability for g in gpus if g.capability], driver, cuda, arch, unusable(len(gpus)))


def why_no_gpu() -> Optional[TutorialError]:
    """When torch sees no GPU: a better error than "no usable GPU" if this node does have GPUs
    (a CPU-only torch on a GPU node, a driver older than the wheel needs); else None."""
    verdict = check()
    return None if verdict.ok else verdict.error()


def report(lang: Optional[str] = None) -> str:
    """The environment check in plain words: torch, its CUDA, the driver, every GPU, the verdict."""
    version, cuda, arch = torch_facts()
    gpus, driver, source = node_facts()
    lines = [t("gpu.report_torch", lang, version=version,
               build=t("gpu.build_cuda", lang, cuda=cuda) if cuda else t("gpu.build_cpu", lang))]
    if cuda:
        known = VARIANTS.get(variant_of(cuda))
        table = " ".join(known.arch_list) if known else "?"
        kernels = " ".join(arch) if arch else t("gpu.kernels_from_table", lang, kernels=table)
        lines.append(t("gpu.report_kernels", lang, kernels=kernels))
    if driver:
        lines.append(t("gpu.report_driver", lang, driver=driver, source=source))
    else:
        lines.append(t("gpu.report_no_driver", lang))
    if gpus:
        for i, g in enumerate(gpus):
            lines.append(t("gpu.report_gpu", lang, index=i, name=g.name,
                           capability=_cap(g.capability) if g.capability else "?"))
    else:
        lines.append(t("gpu.report_no_gpu", lang))
    verdict = compatibility([g.capability for g in gpus if g.capability], driver, cuda, arch, unusable(len(gpus)))
    lines.append(t("gpu.report_ok" if verdict.ok else "gpu.report_bad", lang, message=verdict.message(lang)))
    return "\n".join(lines)


# ---- Which build to install (scripts/setup.sh asks this before torch exists)


@dataclass
class Choice:
    """The build to install and why (``key``/``fields``: the one-line reason, both languages)."""

    variant: Optional[str]  # None: no build of the pinned torch fits
    key: str
    fields: Dict[str, object]

    def message(self, lang: Optional[str] = None) -> str:
        return t(self.key, lang, **self.fields)


def _gpu_text(capabilities: Sequence[Capability]) -> str:
    return ", ".join(f"sm_{c[0]}{c[1]}" for c in dict.fromkeys(capabilities))


def choose(site: Optional[str] = None, gpus: Optional[Sequence[GPU]] = None,
           driver: Optional[str] = None) -> Choice:
    """The build of the pinned torch for this node (``gpus``/``driver``: :func:`node_facts`) or, when
    ``site`` is given, for every GPU partition of that site (an environment shared by all of them;
    a site given on purpose wins over the node's facts). No GPU and no site: PyPI's default build."""
    if site is not None:
        s = site_named(site)
        if s is None:
            raise TutorialError("gpu.unknown_site", name=site, choices=", ".join(known_sites()))
        caps = list(s.partitions.values())
        variant = suggest(caps, s.driver or None)
        fields = dict(site=site, partitions=", ".join(f"{p} {_cap(c)}" for p, c in s.partitions.items()),
                      driver=s.driver or "?", torch=TORCH_VERSION)
    else:
        caps = [g.capability for g in (gpus or []) if g.capability]
        if not caps and _SMI["problem"] is not None:  # G02/G04: nvidia-smi hung, failed or is too old
            v = VARIANTS[DEFAULT_VARIANT]
            key, problem = _SMI["problem"]
            known = t("gpu.smi_driver", driver=driver) if driver else ""
            return Choice(DEFAULT_VARIANT, "gpu.choice_smi",
                          dict(variant=v.name, cuda=v.cuda, driver=v.min_driver, torch=TORCH_VERSION,
                               why=t(key, **problem), known=known, sites=", ".join(SITES)))
        if not caps:
            v = VARIANTS[DEFAULT_VARIANT]
            return Choice(DEFAULT_VARIANT, "gpu.choice_default",
                          dict(variant=v.name, cuda=v.cuda, driver=v.min_driver, torch=TORCH_VERSION,
                               sites=", ".join(SITES)))
        variant = suggest(caps, driver)
        fields = dict(gpus=_gpu_text(caps), driver=driver or "?", torch=TORCH_VERSION)
    if variant is None:
        return Choice(None, "gpu.choice_none", dict(fields, gpus=_gpu_text(caps), fallback=DEFAULT_VARIANT))
    v = VARIANTS[variant]
    fields.update(variant=variant, cuda=v.cuda, minimum=v.min_driver, kernels=f"{v.arch_list[0]}…{v.arch_list[-1]}")
    return Choice(variant, "gpu.choice_site" if site is not None else "gpu.choice_node", fields)


def _choose_main(argv: Sequence[str]) -> int:
    """``python -m ddp_tutorial.gpu choose [--site NAME] [--cuda VARIANT]`` (scripts/setup.sh): line 1 the
    build (``cu126`` …, ``cpu``, or ``none``), line 2 its index URL (empty: PyPI's default build),
    line 3 the pinned ``torch torchvision`` versions, line 4 why, in the user's language."""
    parser = argparse.ArgumentParser(prog="python -m ddp_tutorial.gpu choose")
    parser.add_argument("--site", default=None)
    parser.add_argument("--cuda", default=None)
    args = parser.parse_args(argv)
    if args.cuda is not None:  # asked for by name: it must be a build that exists for the pin
        if args.cuda != "cpu" and args.cuda not in VARIANTS:
            raise TutorialError("gpu.unknown_variant", name=args.cuda, torch=TORCH_VERSION,
                                choices=", ".join([*VARIANTS, "cpu"]))
        choice = Choice(args.cuda, "gpu.choice_asked", dict(variant=args.cuda, torch=TORCH_VERSION))
        v, s = VARIANTS.get(args.cuda), site_named(args.site or "")
        if v and s and not (all(has_kernels(c, v.arch_list) for c in s.partitions.values())
                            and (driver_major(s.driver) or v.min_driver) >= v.min_driver):  # G06: the site, not dropped
            fits = suggest(list(s.partitions.values()), s.driver or None) or "none"
            choice = Choice(args.cuda, "gpu.choice_asked_site", dict(choice.fields, site=args.site, fits=fits))
    else:
        gpus, driver, _ = node_facts()
        choice = choose(args.site, gpus, driver)
    variant = VARIANTS.get(choice.variant or "")
    print(choice.variant or "none")
    print(INDEX + "cpu" if choice.variant == "cpu" else "" if variant is None or variant.pypi else variant.index_url)
    print(TORCH_VERSION, TORCHVISION_VERSION)
    print(choice.message())
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:  # python -m ddp_tutorial.gpu [choose …]
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["choose"]:
        try:
            return _choose_main(argv[1:])
        except TutorialError as error:
            print(f"{t('error.prefix')}: {error}", file=sys.stderr)
            return error.exit_code
    print(report())
    return 0 if check().ok else 1


if __name__ == "__main__":
    sys.exit(main())
