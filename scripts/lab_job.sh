#!/usr/bin/env bash
# The attendee's JupyterLab on a compute node, inside a SLURM job — the one start script under all of:
#
#   sbatch slurm/lab.sbatch                          (a plain batch job; it runs this script)
#   ondemand/ddp_tutorial/template/script.sh.erb     (our Open OnDemand app; it runs this script)
#   bash scripts/lab_job.sh                          (by hand, inside `salloc`/`srun --pty`)
#
# It makes the workshop copy (scripts/workshop_copy.sh: notebooks/<language>/ → <work>/<language>,
# first start only), starts JupyterLab on this node on a free port with a new token, and prints —
# once our own server answers with that token — how to reach it:
#
#   == tunnel, from your own computer: ssh -N -L PORT:NODE:PORT USER@LOGIN
#   == then open the address in <work>/<language>.lab-url (only you can read it): cat …
#
# JupyterLab is its owner's alone (review LJ01, class day P6): it listens on this node's own address
# (what the tunnel and OnDemand's /node/HOST/PORT proxy reach), not on every interface; its token
# reaches it in a 0600 config file of this start's 0700 state folder — never on a command line
# (/proc/PID/cmdline is readable by every user of the node), never in the kernels' environment — and
# the address with the token goes to the 0600 file <work>/<language>.lab-url, not to the job's log
# (lab-JOBID.out is as readable as the clone it lies in). On a terminal the address is printed too.
# One JupyterLab per working copy: a second start on the same copy is refused, naming the first.
#
# A session in the class's GPU reservation (SBATCH_RESERVATION set, or the job's reservation is
# DDP_TUTORIAL_SLURM_RESERVATION: class day P3) is said in one line of the log, not refused. An environment
# whose interpreter this user cannot run (class day P1) is named as such, with the folder that blocks.
#
# Nothing is installed and no data is downloaded here (compute nodes often have no internet, and the
# class shares one environment): the environment (by the instructor, in a job on a compute node) and the data
# are made beforehand.
#
# Environment (all optional):
#   DDP_TUTORIAL_LANG   tr | en (default en): the notebooks' copy and the messages
#   DDP_TUTORIAL_VENV   the class environment, a venv folder (DIR/bin/jupyter; default: the checkout's .venv)
#   DDP_TUTORIAL_ROOT   the data root (default ~/ddp-data); DDP_TUTORIAL_DATASET (mnist | fashion-mnist)
#   DDP_TUTORIAL_WORK   where the working copies live (default <checkout>/workshop), as in scripts/lab.sh
#   DDP_TUTORIAL_LOGIN_HOST  the tunnel's login address (default: the site table's [login] address when
#                       the site is known, DDP_TUTORIAL_SITE or the submit host's name; else SLURM_SUBMIT_HOST)
#   DDP_TUTORIAL_LAB_PORT, DDP_TUTORIAL_LAB_TOKEN, DDP_TUTORIAL_LAB_BASE_URL: given by OnDemand; else a
#                       free port and a new token are chosen here, and the base URL is /. A port given
#                       must be 1–65535 and free on this node's address.
#
# The end of the job (scancel, the walltime: SIGTERM to every process of the job) ends everything it
# started within seconds (review N7): the trap below cancels every SLURM engine job a notebook started
# (their ids are appended to $DDP_TUTORIAL_ENGINE_JOBS by ddp_tutorial/ipp/watchdog.py, whose watchdog
# also cancels them on SIGTERM), then ends JupyterLab, its kernels and their engines — every descendant,
# and every process of this job (or, started by hand, of no job) that carries this start's marker in its
# environment; a job submitted from the lab carries the marker too, but is another job and lives on
# (review LJ07) — SIGTERM, then SIGKILL. Last, with every process of the session gone, it removes the
# ipyparallel cluster files its kernels wrote ($DDP_TUTORIAL_CLUSTER_FILES lists them): left behind,
# a later JupyterLab's ipyparallel extension would load them.
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
source scripts/python_check.sh
if { [ -L "$venv/bin/python" ] || [ -e "$venv/bin/python" ]; } && [ -n "$(path_blocker "$venv/bin/python" me x)" ]; then
  python_unrunnable "$venv/bin/python" "$lang" lab_job.sh   # there, but not yours to run (class day P1)
elif [ ! -x "$venv/bin/jupyter" ] || [ ! -x "$venv/bin/python" ]; then
  say "!! $venv bir ortam değil (bin/jupyter yok): sınıfın ortamını DDP_TUTORIAL_VENV ile verin (eğitmen bir kez, bir hesaplama düğümündeki bir işte kurar: srun -p debug … bash scripts/setup.sh --site truba --prefix KLASÖR)" \
      "!! $venv is no environment (no bin/jupyter): give the class environment with DDP_TUTORIAL_VENV (the instructor builds it once, in a job on a compute node: srun -p debug … bash scripts/setup.sh --site truba --prefix DIR)" >&2
  exit 2
fi
python_check "$venv/bin/python" "$lang" lab_job.sh
# A CPU session never sits in the class's GPU reservation (class day P3): it would hold cores of the nodes
# 05's jobs need, and end with the reservation. SBATCH_RESERVATION (an old kit's ~/.bashrc export) sends every
# sbatch there; the class's reservation travels as DDP_TUTORIAL_SLURM_RESERVATION, read only for 05's jobs.
# Said in one line, not refused: the session is already placed, and a site may reserve nodes for the
# sessions themselves.
in_reservation=${SLURM_JOB_RESERVATION:-${SBATCH_RESERVATION:-}}
if [ -n "${SBATCH_RESERVATION:-}" ] || { [ -n "$in_reservation" ] \
     && [ "$in_reservation" = "${DDP_TUTORIAL_SLURM_RESERVATION:-}" ]; }; then
  say "!! bu oturum $in_reservation rezervasyonunda çalışıyor; sınıfın GPU rezervasyonu 05'in işleri içindir. Oturumu kapatın (scancel ${SLURM_JOB_ID:-İŞNO}), unset SBATCH_RESERVATION yapın (~/.bashrc'den de silin) ve yeniden gönderin: sbatch slurm/lab.sbatch" \
      "!! this session runs in reservation $in_reservation; the class's GPU reservation is meant for 05's jobs. End it (scancel ${SLURM_JOB_ID:-JOBID}), unset SBATCH_RESERVATION (remove it from ~/.bashrc too) and submit again: sbatch slurm/lab.sbatch" >&2
fi
export PATH="$venv/bin:$PATH" DDP_TUTORIAL_LANG=$lang
export VIRTUAL_ENV=$venv DDP_TUTORIAL_LAB_VENV=$venv   # the lab's terminal puts it first again (lab_terminal.bashrc)

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
# The port: OnDemand's (or one given by hand) must be a port; else a free one is chosen below.
port=${DDP_TUTORIAL_LAB_PORT:-}
if [ -n "$port" ] && { ! [[ $port =~ ^[0-9]{1,5}$ ]] || [ $((10#$port)) -lt 1 ] || [ $((10#$port)) -gt 65535 ]; }; then
  say "!! DDP_TUTORIAL_LAB_PORT=$port: port 1 ile 65535 arasında bir sayı olmalı (boş bırakın: boş bir port seçilir)" \
      "!! DDP_TUTORIAL_LAB_PORT=$port: a port is a number from 1 to 65535 (leave it unset and a free one is chosen)" >&2
  exit 2
fi
[ -n "$port" ] && port=$((10#$port))
# This node's own address (what the tunnel's NODE and OnDemand's proxy reach), and the port: the one
# given, if it is free there, else a free one.
picked=$("$venv/bin/python" -I - "${port:-0}" <<'PY'
import socket, sys
port = int(sys.argv[1])
try:
    address = socket.gethostbyname(socket.gethostname())
except OSError:
    sys.exit(3)
probe = socket.socket()
probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as JupyterLab binds it
try:
    probe.bind((address, port))
except OSError:
    print(address)
    sys.exit(4)
print(address, probe.getsockname()[1])
PY
) || case $? in
  3) say "!! bu düğümün adı ($(hostname)) bir adrese çözümlenmiyor: JupyterLab'a tünel de vekil de ulaşamaz; sistem yöneticinize sorun" \
         "!! this node's name ($(hostname)) resolves to no address: neither a tunnel nor a proxy could reach JupyterLab; ask your system administrators" >&2
     exit 2 ;;
  4) say "!! $port portu bu düğümde ($picked) dolu: başka bir program kullanıyor. DDP_TUTORIAL_LAB_PORT'u boş bırakın (boş bir port seçilir) ya da başka bir numara verin" \
         "!! port $port is taken on this node ($picked): another program holds it. Leave DDP_TUTORIAL_LAB_PORT unset (a free one is chosen) or give another number" >&2
     exit 2 ;;
  *) exit 1 ;;
esac
read -r address port <<< "$picked"

# One JupyterLab per working copy (two would remove each other's workspaces and autosave the same
# notebooks): a lock held by this script for its whole life; its text names the holder.
mkdir -p "$(dirname "$work")"
lockfile=$work.lab-lock
exec {lock}>>"$lockfile"
held=0
flock -n -E 75 "$lock" 2>/dev/null || held=$?   # a file system without locks: no check (75: held)
if [ $held = 75 ]; then
  first=$(head -c 300 "$lockfile" 2>/dev/null | head -n 1)
  say "!! $work zaten başka bir JupyterLab'da açık (${first:-?}): önce onu kapatın (scancel İŞNO), ya da bu oturuma DDP_TUTORIAL_WORK ile ayrı bir kopya verin" \
      "!! $work is open in another JupyterLab already (${first:-?}): end that one first (scancel JOBID), or give this one its own copy with DDP_TUTORIAL_WORK" >&2
  exit 2
fi
node=$(hostname -s 2>/dev/null || hostname)
printf '%s\n' "job ${SLURM_JOB_ID:-none}, node $node, pid $$" > "$lockfile"

bash scripts/workshop_copy.sh "$lang" "$work"
# The lab's settings (no news pop-up), where the environment is ours: a temporary file in the folder
# moved over the name (mv -T replaces a symbolic link planted there, never writes through it), and only
# when the folder is the environment's own (no link to elsewhere on its way).
settings=$venv/share/jupyter/lab/settings
if [ -w "$settings" ] || { [ ! -e "$settings" ] && [ -w "$venv" ]; }; then
  mkdir -p "$settings"
  if [ "$(realpath -- "$settings")" = "$(realpath -- "$venv")/share/jupyter/lab/settings" ] \
     && { [ -L "$settings/overrides.json" ] || ! cmp -s notebooks/lab/overrides.json "$settings/overrides.json"; }; then
    fresh=$(mktemp "$settings/.overrides.json.XXXXXX")
    cat notebooks/lab/overrides.json > "$fresh" && chmod 644 "$fresh" && mv -T -f "$fresh" "$settings/overrides.json" \
      || rm -f "$fresh"
  fi
fi

# What this start owns: a private folder (0700) for the engine job ids, the cluster files and the
# server's config, and a marker every process it starts inherits.
state=$(mktemp -d "${TMPDIR:-/tmp}/ddp-lab-job.XXXXXX")
export DDP_TUTORIAL_ENGINE_JOBS=$state/engine-jobs DDP_TUTORIAL_CLUSTER_FILES=$state/cluster-files \
       DDP_TUTORIAL_LAB_SESSION=$state
: > "$DDP_TUTORIAL_ENGINE_JOBS"
: > "$DDP_TUTORIAL_CLUSTER_FILES"

owned() {  # processes this start owns: its descendants, and those carrying its marker in this same job
           # (SLURM_JOB_ID equal to ours, or both without one); zombies and this check excepted
  "$venv/bin/python" -I - "$$" "DDP_TUTORIAL_LAB_SESSION=$state" "${SLURM_JOB_ID:-}" <<'PY'
import os, sys
root, marker, job = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode()
parent, alive, marked = {}, set(), set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        parent[int(pid)] = int(fields[1])
        if fields[0] not in "ZX":
            alive.add(int(pid))
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        its_job = next((v[len(b"SLURM_JOB_ID="):] for v in environ if v.startswith(b"SLURM_JOB_ID=")), b"")
        if marker in environ and its_job == job:
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
  # The address goes first: the server is ending, and SLURM SIGKILLs this script KillWait seconds after scancel's
  # SIGTERM (5 s on the lab); the clean-up below can take longer on a loaded node (scancel, a Python scan per round),
  # and the file would outlive the server with its token.
  [ -n "${urlfile:-}" ] && rm -f "$urlfile"
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
  forget_clusters
  rm -rf "$state"
}
forget_clusters() {  # the ipyparallel cluster files this session's kernels wrote (all its processes are gone)
  local file
  while IFS= read -r file; do
    case "${file##*/}" in cluster-*.json) rm -f -- "$file" ;; esac
  done < <(sort -u "$DDP_TUTORIAL_CLUSTER_FILES" 2>/dev/null)
}
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 129' HUP
trap cleanup EXIT

# The token: OnDemand's password, or a new one. It reaches JupyterLab in a config file only we can read.
token=${DDP_TUTORIAL_LAB_TOKEN:-$("$venv/bin/python" -c 'import secrets; print(secrets.token_hex(24))')}
unset DDP_TUTORIAL_LAB_TOKEN
config=$state/jupyter_server_config.json
LAB_TOKEN=$token "$venv/bin/python" -I -c '
import json, os, sys
with os.fdopen(os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as config:
    json.dump({"IdentityProvider": {"token": os.environ["LAB_TOKEN"]}}, config)' "$config"
base=${DDP_TUTORIAL_LAB_BASE_URL:-/}
# The tunnel's login address (T5-20): DDP_TUTORIAL_LOGIN_HOST, else the site table's documented address
# ([login] address) when the site is known (DDP_TUTORIAL_SITE, or the submit host is one of a table's login
# nodes: a laptop on the VPN may not resolve the short name arf-ui1), else the submit host.
source scripts/site_login.sh
table=$(site_login_table "${DDP_TUTORIAL_SITE:-}" "${SLURM_SUBMIT_HOST:-}")
login=${DDP_TUTORIAL_LOGIN_HOST:-}
[ -z "$login" ] && [ -n "$table" ] && login=$(site_login_value "$table" address)
login=${login:-${SLURM_SUBMIT_HOST:-LOGIN}}
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)
# The terminal's shell (lab.sh): bash with the lab's start-up file, never a login shell, whose start-up files
# could put another Python first; `ddp-tutorial`, `torchrun` and `python` there are the environment's.
extra+=(--ServerApp.terminado_settings="shell_command=bash --rcfile $(printf %q "$checkout/scripts/lab_terminal.bashrc") -i")
cd "$work"
rm -f "$work.lab-workspaces"/*.jupyterlab-workspace  # 00_setup alone: no kernel for every restored tab (lab.sh)
"$venv/bin/jupyter" lab --no-browser --ip="$address" --port="$port" --ServerApp.port_retries=0 \
  --config="$config" --ServerApp.base_url="$base" --ServerApp.root_dir="$work" \
  --LabApp.workspaces_dir="$work.lab-workspaces" --LabApp.default_url=/lab/tree/00_setup.ipynb "${extra[@]}" \
  {lock}>&- &
server=$!
# Ready: the socket listening on the port is our server's own (not another program's), and it answers
# {base}api/status with our token (asked only then: the token goes to no one else).
ready() {
  LAB_TOKEN=$token "$venv/bin/python" -I - "$server" "$address" "$port" "$base" 2>/dev/null <<'PY'
import os, sys, urllib.request
server, address, port, base = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
listening = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        fields = row.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            listening.add(f"socket:[{fields[9]}]")
held = set()
for fd in os.listdir(f"/proc/{server}/fd"):
    try:
        held.add(os.readlink(f"/proc/{server}/fd/{fd}"))
    except OSError:
        pass
if not listening & held:
    sys.exit(1)
host = f"[{address}]" if ":" in address else address
request = urllib.request.Request(f"http://{host}:{port}{base}api/status",
                                 headers={"Authorization": "token " + os.environ["LAB_TOKEN"]})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy between us and our server
with opener.open(request, timeout=5) as answer:
    sys.exit(0 if answer.status == 200 else 1)
PY
}
until ready; do
  if ! kill -0 $server 2>/dev/null; then
    say "!! JupyterLab başlamadı (yukarıdaki satırlara bakın)" "!! JupyterLab did not start (see the lines above)" >&2
    wait $server || exit $?
    exit 1
  fi
  sleep 0.5
done
# The address with the token: in a file only its owner reads (written whole, then moved into place).
url="http://localhost:$port${base%/}/lab/tree/00_setup.ipynb?token=$token"
urlfile=$work.lab-url
fresh=$(mktemp "$urlfile.XXXXXX")
printf '%s\n' "$url" > "$fresh"
mv -T -f "$fresh" "$urlfile"
say "== JupyterLab $node:$port üzerinde (iş ${SLURM_JOB_ID:-yok}; defterler: $work)" \
    "== JupyterLab on $node:$port (job ${SLURM_JOB_ID:-none}; notebooks: $work)"
say "== tünel, kendi bilgisayarınızdan: ssh -N -L $port:$node:$port $(id -un)@$login" \
    "== tunnel, from your own computer: ssh -N -L $port:$node:$port $(id -un)@$login"
say "== sonra $urlfile içindeki adresi açın (belirteci içerir; yalnızca siz okuyabilirsiniz): cat $urlfile" \
    "== then open the address in $urlfile (it holds the token; only you can read it): cat $urlfile"
if [ -t 1 ]; then
  say "== adres: $url" "== the address: $url"
fi
status=0
wait $server || status=$?
exit $status
