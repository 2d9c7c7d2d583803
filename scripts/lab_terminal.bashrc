# The shell of the lab's terminal (JupyterLab: File → New → Terminal). scripts/lab.sh and scripts/lab_job.sh
# start JupyterLab with `bash --rcfile` this file (issue 49 P4: the terminal had no `ddp-tutorial`, `torchrun`
# or `python` of the lab's environment on its PATH).
#
# It reads the attendee's own ~/.bashrc first, as any terminal does, then puts the lab's environment
# (DDP_TUTORIAL_LAB_VENV, exported by the launcher) first on PATH again, over whatever ~/.bashrc put there
# (a conda base, another venv): the terminal runs the same Python, torch and `ddp-tutorial` as the notebooks.
# Not a login shell: a login shell's /etc/profile (Debian's) sets PATH afresh, without the lab's environment.
# Türkçe: lab'ın terminali, kendi ~/.bashrc'nizden sonra lab'ın ortamını PATH'in başına koyar.
if [ -f ~/.bashrc ]; then
  . ~/.bashrc
fi
if [ -n "${DDP_TUTORIAL_LAB_VENV:-}" ] && [ -d "$DDP_TUTORIAL_LAB_VENV/bin" ]; then
  export VIRTUAL_ENV=$DDP_TUTORIAL_LAB_VENV
  export PATH="$DDP_TUTORIAL_LAB_VENV/bin:$PATH"
fi
