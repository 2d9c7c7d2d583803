#!/usr/bin/env bash
# The attendee's JupyterLab on a compute node, inside a SLURM job — the one start script under all of:
#
#   sbatch slurm/lab.sbatch                          (a plain batch job; it runs this script)
#   ondemand/ddp_tutorial/template/script.sh.erb     (our Open OnDemand app; it runs this script)
#   bash scripts/lab_job.sh                          (by hand, inside `salloc`/`srun --pty`)
#
# It makes the workshop copy (scripts/workshop_copy.sh: notebooks/<language>/ → <work>/<language>,
# first start only), starts JupyterLab on this node on a free port with a new token, and prints —
# once the server answers — how to reach it:
#
#   == tunnel, from your own computer: ssh -N -L PORT:NODE:PORT USER@LOGIN
#   == then open: http://localhost:PORT/lab/tree/00_setup.ipynb?token=TOKEN
#
# Nothing is installed and no data is downloaded here (compute nodes often have no internet, and the
# class shares one environment): the environment and the data are made on the login node beforehand.
#
# Environment (all optional):
#   DDP_TUTORIAL_LANG   tr | en (default en): the notebooks' copy and the messages
#   DDP_TUTORIAL_VENV   the class environment, a venv folder (DIR/bin/jupyter; default: the checkout's .venv)
#   DDP_TUTORIAL_ROOT   the data root (default ~/ddp-data); DDP_TUTORIAL_DATASET (mnist | fashion-mnist)
#   DDP_TUTORIAL_WORK   where the working copies live (default <checkout>/workshop), as in scripts/lab.sh
#   DDP_TUTORIAL_LAB_PORT, DDP_TUTORIAL_LAB_TOKEN, DDP_TUTORIAL_LAB_BASE_URL: given by OnDemand; else a
#                       free port and a new token are chosen here, and the base URL is /
#
# The end of the job (scancel, the walltime: SIGTERM to every process of the job) ends everything it
# started within seconds (review N7): the trap below cancels every SLURM engine job a notebook started
# (their ids are appended to $DDP_TUTORIAL_ENGINE_JOBS by ddp_tutorial/ipp/watchdog.py, whose watchdog
# also cancels them on SIGTERM), then ends JupyterLab, its kernels and their engines — every process
# that carries this start's marker in its environment, and every descendant — SIGTERM, then SIGKILL.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
checkout=$(pwd -P)

lang=${DDP_TUTORIAL_LANG:-en}
case "$lang" in
  tr|en) ;;
  *) echo "!! DDP_TUTORIAL_LANG=$lang: dil tr ya da en olmalı / the language must be tr or en" >&2; exit 2 ;;
esac
say() { if [ "$lang" = tr ]; then echo "$1"; else echo "$2"; fi; }
absolute() { (cd "$caller" && realpath -m -- "$1"); }

venv=$(absolute "${DDP_TUTORIAL_VENV:-$checkout/.venv}")
if [ ! -x "$venv/bin/jupyter" ] || [ ! -x "$venv/bin/python" ]; then
  say "!! $venv bir ortam değil (bin/jupyter yok): sınıfın ortamını DDP_TUTORIAL_VENV ile verin (eğitmen giriş düğümünde bir kez kurar: bash scripts/setup.sh --prefix KLASÖR)" \
      "!! $venv is no environment (no bin/jupyter): give the class environment with DDP_TUTORIAL_VENV (the instructor builds it once on the login node: bash scripts/setup.sh --prefix DIR)" >&2
  exit 2
fi
source scripts/python_check.sh
python_check "$venv/bin/python" "$lang" lab_job.sh
export PATH="$venv/bin:$PATH" DDP_TUTORIAL_LANG=$lang

if [ -z "${DDP_TUTORIAL_ROOT:-}" ] && [ -z "${HOME:-}" ]; then
  say "!! HOME tanımlı değil: veri kökünü DDP_TUTORIAL_ROOT ile verin" "!! HOME is not set: give the data root with DDP_TUTORIAL_ROOT" >&2
  exit 2
fi
export DDP_TUTORIAL_ROOT=$(absolute "${DDP_TUTORIAL_ROOT:-$HOME/ddp-data}")
staged() { "$venv/bin/ddp-tutorial" data check --dataset "$1" --root "$DDP_TUTORIAL_ROOT" >/dev/null 2>&1; }
dataset=${DDP_TUTORIAL_DATASET:-}
case "$dataset" in
  "") for candidate in mnist fashion-mnist; do if staged "$candidate"; then dataset=$candidate; break; fi; done ;;
  mnist|fashion-mnist) ;;
  *) say "!! DDP_TUTORIAL_DATASET=$dataset: bilinmeyen veri kümesi; mnist ya da fashion-mnist olmalı." \
         "!! DDP_TUTORIAL_DATASET=$dataset: unknown data set; it must be mnist or fashion-mnist." >&2
     exit 2 ;;
esac
if [ -z "$dataset" ] || ! staged "$dataset"; then
  dataset=${dataset:-mnist}
  say "!! $DDP_TUTORIAL_ROOT içinde $dataset hazır değil; hesaplama düğümü indirmez. Giriş düğümünde: ddp-tutorial data prepare --dataset $dataset --root $DDP_TUTORIAL_ROOT" \
      "!! $dataset is not staged in $DDP_TUTORIAL_ROOT; a compute node downloads nothing. On the login node: ddp-tutorial data prepare --dataset $dataset --root $DDP_TUTORIAL_ROOT" >&2
fi
export DDP_TUTORIAL_DATASET=$dataset

work=$(absolute "${DDP_TUTORIAL_WORK:-$checkout/workshop}")/$lang
case "$work" in
  "$checkout"/*) ;;
  *) say "!! DDP_TUTORIAL_WORK deponun dışında ($work): 04–06 defterlerindeki 'python -m benchmarks…' komutları oradan benchmarks/ klasörünü bulamaz; kopyayı deponun içinde tutun." \
         "!! DDP_TUTORIAL_WORK is outside the checkout ($work): the 'python -m benchmarks…' commands of notebooks 04–06 will not find benchmarks/ from there; keep the copy inside the checkout." >&2 ;;
esac
bash scripts/workshop_copy.sh "$lang" "$work"
settings=$venv/share/jupyter/lab/settings   # the lab's settings (no news pop-up), where the environment is ours
if [ -w "$settings" ] || { [ ! -e "$settings" ] && [ -w "$venv" ]; }; then
  mkdir -p "$settings"
  cmp -s notebooks/lab/overrides.json "$settings/overrides.json" || cp notebooks/lab/overrides.json "$settings/"
fi

# What this start owns: a folder for the engine job ids, and a marker every process it starts inherits.
state=$(mktemp -d "${TMPDIR:-/tmp}/ddp-lab-job.XXXXXX")
export DDP_TUTORIAL_ENGINE_JOBS=$state/engine-jobs DDP_TUTORIAL_LAB_SESSION=$state
: > "$DDP_TUTORIAL_ENGINE_JOBS"

owned() {  # processes this start owns: its descendants and those carrying its marker (zombies and this check excepted)
  "$venv/bin/python" -I - "$$" "DDP_TUTORIAL_LAB_SESSION=$state" <<'PY'
import os, sys
root, marker = int(sys.argv[1]), sys.argv[2].encode()
parent, alive, marked = {}, set(), set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        parent[int(pid)] = int(fields[1])
        if fields[0] not in "ZX":
            alive.add(int(pid))
        if marker in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
            marked.add(int(pid))
    except (OSError, IndexError, ValueError):
        continue
mine, p = set(), os.getpid()  # this check and the shell that runs it are not to be ended
while p > 1 and p != root:
    mine.add(p)
    p = parent.get(p, 1)
def below(pid):
    while pid > 1:
        pid = parent.get(pid, 1)
        if pid == root:
            return True
    return False
print(" ".join(str(p) for p in sorted(alive - mine - {root}) if p in marked or below(p)))
PY
}
ended=0
cleanup() {
  set +e
  [ $ended = 1 ] && return
  ended=1
  trap '' TERM INT HUP
  local jobs pids i
  jobs=$(sort -u "$DDP_TUTORIAL_ENGINE_JOBS" 2>/dev/null | xargs)
  if [ -n "${jobs// }" ]; then
    say "== iş bitiyor: motor işleri iptal ediliyor ($jobs)" "== the job is ending: cancelling the engine jobs ($jobs)"
    timeout 20 scancel $jobs 2>/dev/null
  fi
  pids=$(owned)
  [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
  for i in $(seq 40); do
    pids=$(owned)
    [ -z "$pids" ] && break
    [ "$i" -ge 15 ] && kill -KILL $pids 2>/dev/null   # about 3 s of SIGTERM, then SIGKILL
    sleep 0.1
  done
  rm -rf "$state"
}
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 129' HUP
trap cleanup EXIT

port=${DDP_TUTORIAL_LAB_PORT:-$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}
token=${DDP_TUTORIAL_LAB_TOKEN:-$("$venv/bin/python" -c 'import secrets; print(secrets.token_hex(24))')}
base=${DDP_TUTORIAL_LAB_BASE_URL:-/}
node=$(hostname -s 2>/dev/null || hostname)
login=${DDP_TUTORIAL_LOGIN_HOST:-${SLURM_SUBMIT_HOST:-LOGIN}}
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)
cd "$work"
rm -f "$work.lab-workspaces"/*.jupyterlab-workspace  # 00_setup alone: no kernel for every restored tab (lab.sh)
"$venv/bin/jupyter" lab --no-browser --ip=0.0.0.0 --port="$port" --ServerApp.port_retries=0 \
  --IdentityProvider.token="$token" --ServerApp.base_url="$base" --ServerApp.root_dir="$work" \
  --LabApp.workspaces_dir="$work.lab-workspaces" --LabApp.default_url=/lab/tree/00_setup.ipynb "${extra[@]}" &
server=$!
answers() { "$venv/bin/python" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2).close()' "$port" 2>/dev/null; }
until answers; do
  if ! kill -0 $server 2>/dev/null; then
    say "!! JupyterLab başlamadı (yukarıdaki satırlara bakın)" "!! JupyterLab did not start (see the lines above)" >&2
    wait $server || exit $?
    exit 1
  fi
  sleep 0.5
done
say "== JupyterLab $node:$port üzerinde (iş ${SLURM_JOB_ID:-yok}; defterler: $work)" \
    "== JupyterLab on $node:$port (job ${SLURM_JOB_ID:-none}; notebooks: $work)"
say "== tünel, kendi bilgisayarınızdan: ssh -N -L $port:$node:$port $(id -un)@$login" \
    "== tunnel, from your own computer: ssh -N -L $port:$node:$port $(id -un)@$login"
say "== sonra açın: http://localhost:$port${base%/}/lab/tree/00_setup.ipynb?token=$token" \
    "== then open: http://localhost:$port${base%/}/lab/tree/00_setup.ipynb?token=$token"
status=0
wait $server || status=$?
exit $status
