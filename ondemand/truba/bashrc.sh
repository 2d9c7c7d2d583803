# >>> ddp-tutorial: TRUBA Open OnDemand "Jupyter Notebook" apps (docs/ondemand.md) >>>
# Paste into ~/.bashrc. *Custom* starts Jupyter with the environment ~/.bashrc sets up, *Container*
# the image named by CONTAINER_JUPYTER. The block changes login shells in nothing but that one name;
# inside a SLURM job (the OnDemand session) it sets up the class environment, data root and language
# and makes your working copy of the notebooks. The instructor fills in the first two lines (the class
# environment, built once: `bash scripts/setup.sh --site truba --prefix DIR`, or the image,
# `apptainer build … ondemand/container/ddp-tutorial.def`); the other two are each attendee's.
DDP_CLASS_VENV=/arf/home/INSTRUCTOR/ddp/venv
export CONTAINER_JUPYTER=/arf/home/INSTRUCTOR/ddp/ddp-tutorial.sif
DDP_CHECKOUT=$HOME/ddp-tutorial
DDP_WORK=$HOME/ddp-tutorial/workshop
if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "${DDP_TUTORIAL_VENV:-}" ]; then
  # The Python the environment was built with (the site profile's module, ddp_tutorial/gpu.py; the
  # name is not verified on TRUBA: `module av python`). The Container app needs none of this.
  command -v module >/dev/null 2>&1 && module load comp/python/3.12.0 >/dev/null 2>&1
  export DDP_TUTORIAL_VENV=$DDP_CLASS_VENV
  export PATH="$DDP_TUTORIAL_VENV/bin:$PATH"                      # jupyter and its kernel: the class environment
  export DDP_TUTORIAL_ROOT=${DDP_TUTORIAL_ROOT:-$HOME/ddp-data}   # or the class's shared, read-only data root
  export DDP_TUTORIAL_LANG=${DDP_TUTORIAL_LANG:-tr}
  export DDP_TUTORIAL_SLURM_PROFILE=${DDP_TUTORIAL_SLURM_PROFILE:-akya-cuda}
  # The working copy; what goes wrong is said on stderr (the session's log), in both languages.
  if [ ! -f "$DDP_CHECKOUT/scripts/workshop_copy.sh" ]; then
    echo "!! ddp-tutorial: $DDP_CHECKOUT deponun bir kopyası değil: git clone ile oraya alın ya da ~/.bashrc'deki DDP_CHECKOUT'u düzeltin / is no clone of the repository: clone it there or fix DDP_CHECKOUT in ~/.bashrc" >&2
  elif [ "$DDP_TUTORIAL_LANG" != tr ] && [ "$DDP_TUTORIAL_LANG" != en ]; then
    echo "!! ddp-tutorial: DDP_TUTORIAL_LANG=$DDP_TUTORIAL_LANG: dil tr ya da en olmalı / the language must be tr or en" >&2
  elif ! bash "$DDP_CHECKOUT/scripts/workshop_copy.sh" "$DDP_TUTORIAL_LANG" "$DDP_WORK/$DDP_TUTORIAL_LANG" >/dev/null; then
    echo "!! ddp-tutorial: $DDP_WORK/$DDP_TUTORIAL_LANG çalışma kopyası yapılamadı (nedeni yukarıda) / the working copy could not be made (the line above says why)" >&2
  fi
fi
# <<< ddp-tutorial <<<
