# >>> ddp-tutorial: TRUBA Open OnDemand "Jupyter Notebook" apps (docs/ondemand.md) >>>
# Paste into ~/.bashrc for the class day; delete it (this line to the <<< line) when the day is over.
# *Custom* starts Jupyter with the environment ~/.bashrc sets up, *Container* the image named by
# CONTAINER_JUPYTER. Everything happens inside a SLURM job (the OnDemand session), and only DDP_TUTORIAL_*
# variables are set (issue 45, T5-2, T5-12): never SBATCH_*, which would redirect every later sbatch of
# yours, this session's own included. After DDP_CLASS_UNTIL the block sets nothing and says so.
# The instructor gives the INSTRUCTOR values (docs/ondemand.md): the last day, the class environment
# (built once in a job on a compute node: bash scripts/setup.sh --site truba --prefix DIR) or the image,
# the class's shared data root, the account and the GPU reservation notebook 05's jobs use.
DDP_CLASS_UNTIL=YYYY-MM-DD                        # INSTRUCTOR: the class's last day
DDP_CLASS_VENV=/arf/INSTRUCTOR/ddp-class-env      # INSTRUCTOR: the class environment
DDP_CLASS_SIF=/arf/INSTRUCTOR/ddp-tutorial.sif    # INSTRUCTOR: or the image, for the Container app
DDP_CLASS_DATA=/arf/INSTRUCTOR/ddp-data           # INSTRUCTOR: the class's data root (read-only)
DDP_CLASS_ACCOUNT=INSTRUCTOR                      # INSTRUCTOR: the account for 05's jobs (sbatch -A)
DDP_CLASS_RESERVATION=INSTRUCTOR                  # INSTRUCTOR: the GPU reservation for 05's jobs
DDP_CHECKOUT=$HOME/ddp-tutorial
DDP_WORK=$HOME/ddp-tutorial/workshop
if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "${DDP_TUTORIAL_VENV:-}" ]; then
  if ! [[ $DDP_CLASS_UNTIL =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]]; then
    echo "!! ddp-tutorial: ~/.bashrc'deki DDP_CLASS_UNTIL=$DDP_CLASS_UNTIL bir tarih değil (YYYY-AA-GG); eğitmenin verdiği son günü yazın, blok o güne dek geçerlidir / DDP_CLASS_UNTIL=$DDP_CLASS_UNTIL in ~/.bashrc is no date (YYYY-MM-DD): write the class's last day the instructor gave; the block holds until then" >&2
  elif [[ $(date +%F) > $DDP_CLASS_UNTIL ]]; then
    echo "!! ddp-tutorial: ~/.bashrc'deki ddp-tutorial bloğu geçmiş bir gün ($DDP_CLASS_UNTIL) için: silin (>>> ve <<< satırları arası) / the ddp-tutorial block of ~/.bashrc is for a day that is over ($DDP_CLASS_UNTIL): delete it (between the >>> and <<< lines)" >&2
  else
    ddp_unfilled=""
    [[ $DDP_CLASS_VENV$DDP_CLASS_SIF == *INSTRUCTOR*INSTRUCTOR* ]] && ddp_unfilled=" DDP_CLASS_VENV"   # one of the two
    for ddp_name in DDP_CLASS_DATA DDP_CLASS_ACCOUNT DDP_CLASS_RESERVATION; do
      [[ ${!ddp_name} == *INSTRUCTOR* ]] && ddp_unfilled="$ddp_unfilled $ddp_name"
    done
    [ -n "$ddp_unfilled" ] && echo "!! ddp-tutorial: ~/.bashrc'de eğitmenin doldurmadığı değerler var:$ddp_unfilled; değerleri eğitmenden alıp yazın (o zamana dek bunlar ayarlanmaz) / ~/.bashrc still has INSTRUCTOR values:$ddp_unfilled; write in what the instructor gives (until then they are not set)" >&2
    [[ $DDP_CLASS_SIF == *INSTRUCTOR* ]] || export CONTAINER_JUPYTER=$DDP_CLASS_SIF
    if [[ $DDP_CLASS_VENV != *INSTRUCTOR* ]]; then
      # The Python module the environment was built with (scripts/setup.sh --prefix wrote it there, T5-17);
      # a module that does not load is said, in one line.
      if [ -s "$DDP_CLASS_VENV/ddp-tutorial.module" ]; then
        while IFS= read -r ddp_module; do
          [ -n "$ddp_module" ] || continue
          ddp_error=${TMPDIR:-/tmp}/ddp-tutorial-module.$$
          if ! command -v module >/dev/null 2>&1; then
            echo "!! ddp-tutorial: module komutu yok, $ddp_module yüklenemedi / no module command: $ddp_module was not loaded" >&2
          elif ! module load "$ddp_module" 2>"$ddp_error"; then
            echo "!! ddp-tutorial: module load $ddp_module olmadı ($(grep -m 1 -v '^[[:space:]]*$' "$ddp_error" | cut -c 1-120)); eğitmene bildirin / module load $ddp_module failed; tell the instructor" >&2
          fi
          rm -f "$ddp_error"
        done < "$DDP_CLASS_VENV/ddp-tutorial.module"
      fi
      export DDP_TUTORIAL_VENV=$DDP_CLASS_VENV
      export PATH="$DDP_TUTORIAL_VENV/bin:$PATH"                    # jupyter and its kernel: the class environment
    fi
    [[ $DDP_CLASS_DATA == *INSTRUCTOR* ]] || export DDP_TUTORIAL_ROOT=$DDP_CLASS_DATA
    export DDP_TUTORIAL_LANG=${DDP_TUTORIAL_LANG:-tr}
    export DDP_TUTORIAL_SLURM_PROFILE=akya-cuda DDP_TUTORIAL_SLURM_GPUS=1   # 05's jobs: 2 nodes × 1 V100
    [[ $DDP_CLASS_ACCOUNT == *INSTRUCTOR* ]] || export DDP_TUTORIAL_SLURM_ACCOUNT=$DDP_CLASS_ACCOUNT
    [[ $DDP_CLASS_RESERVATION == *INSTRUCTOR* ]] || export DDP_TUTORIAL_SLURM_RESERVATION=$DDP_CLASS_RESERVATION
    # The working copy; what goes wrong is said on stderr (the session's log), in both languages.
    if [ ! -f "$DDP_CHECKOUT/scripts/workshop_copy.sh" ]; then
      echo "!! ddp-tutorial: $DDP_CHECKOUT deponun bir kopyası değil: git clone ile oraya alın ya da ~/.bashrc'deki DDP_CHECKOUT'u düzeltin / is no clone of the repository: clone it there or fix DDP_CHECKOUT in ~/.bashrc" >&2
    elif [ "$DDP_TUTORIAL_LANG" != tr ] && [ "$DDP_TUTORIAL_LANG" != en ]; then
      echo "!! ddp-tutorial: DDP_TUTORIAL_LANG=$DDP_TUTORIAL_LANG: dil tr ya da en olmalı / the language must be tr or en" >&2
    elif ! bash "$DDP_CHECKOUT/scripts/workshop_copy.sh" "$DDP_TUTORIAL_LANG" "$DDP_WORK/$DDP_TUTORIAL_LANG" >/dev/null; then
      echo "!! ddp-tutorial: $DDP_WORK/$DDP_TUTORIAL_LANG çalışma kopyası yapılamadı (nedeni yukarıda) / the working copy could not be made (the line above says why)" >&2
    fi
  fi
elif [[ $- == *i* ]] && [[ $DDP_CLASS_UNTIL =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]] && [[ $(date +%F) > $DDP_CLASS_UNTIL ]]; then
  echo "!! ddp-tutorial: ~/.bashrc'deki ddp-tutorial bloğu geçmiş bir gün ($DDP_CLASS_UNTIL) için: silin (>>> ve <<< satırları arası) / the ddp-tutorial block of ~/.bashrc is for a day that is over ($DDP_CLASS_UNTIL): delete it (between the >>> and <<< lines)" >&2
fi
# <<< ddp-tutorial <<<
