# Sourced by scripts/setup.sh, scripts/lab.sh and scripts/lab_job.sh before anything else (issue 34 item 2, review N2):
# the package needs Python >= 3.11 (tomllib), and a login node's python3 is often 3.6 or 3.9. Without this
# check setup.sh died later in `python -m ddp_tutorial.gpu` with a traceback. The module that gives a newer
# Python on TRUBA comes from ddp_tutorial/gpu_sites.py (PYTHON_MODULES: python_module=, and whether that
# name was verified on the site): read from the file, since this Python cannot import the package.
#
#   python_check PYTHON LANG SCRIPT   # LANG: tr | en | "" (both, in one line); SCRIPT: setup.sh or lab.sh
#
# Returns when PYTHON imports tomllib; else prints one line on stderr, in LANG, and exits 2.

say_and_stop() {  # say_and_stop LANG EN TR: the line in the user's language (unset: both) on stderr, exit 2
  case "$1" in
    tr) echo "$3" >&2 ;;
    en) echo "$2" >&2 ;;
    *) echo "$2 / $3" >&2 ;;
  esac
  exit 2
}
python_check() {
  local py=$1 lang=$2 script=$3 here found module verified en tr note_en note_tr
  if "$py" -c 'import sys, tomllib; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
    return 0
  fi
  here=$(dirname "${BASH_SOURCE[0]}")/../ddp_tutorial/gpu_sites.py
  if command -v "$py" >/dev/null 2>&1; then
    found=$("$py" --version 2>&1 | head -n 1 | cut -c 1-80) || true   # (set -o pipefail: a failing --version too)
  else
    found=""
  fi
  module=$(sed -n 's/.*python_module="\([^"]*\)".*/\1/p' "$here" 2>/dev/null | head -n 1)
  verified=$(sed -n 's/.*python_module_verified=\(True\|False\).*/\1/p' "$here" 2>/dev/null | head -n 1)
  module=${module:-comp/python/3.12.0}
  note_en="" note_tr=""
  if [ "$verified" != True ]; then
    note_en=" (name not verified on TRUBA: module av python)"
    note_tr=" (ad TRUBA'da doğrulanmadı: module av python)"
  fi
  en="!! $script needs Python 3.11 or newer (tomllib); $py here: ${found:-not found}. On TRUBA: module load $module$note_en, then run it again; elsewhere: PYTHON=/path/to/python3.12 bash scripts/$script"
  tr="!! $script Python 3.11 ya da daha yenisini ister (tomllib); buradaki $py: ${found:-bulunamadı}. TRUBA'da: module load $module$note_tr komutundan sonra yeniden çalıştırın; başka yerde: PYTHON=/yol/python3.12 bash scripts/$script"
  say_and_stop "$lang" "$en" "$tr"
}

# Class day P1 (issue 45): an environment whose bin/python is there but cannot be run — its interpreter lies
# (through the venv's link) in a folder that lets nobody else through, such as the builder's mode-700 home.
#
#   path_blocker PATH WHO NEED   # WHO: me (this user) | others (the other-permission bits); NEED: x | r
#       prints the first folder on PATH's way (links followed, each folder checked as it is entered) that WHO
#       cannot pass, or PATH's final file when WHO cannot run it (x) or read it (r); nothing when all is open.
#   python_unrunnable PY LANG SCRIPT   # one line, in LANG, on stderr: PY is there but this user cannot run
#       it, naming the folder that blocks and what the instructor does; exit 2.

_open_for() {  # _open_for PATH WHO BITS: PATH allows WHO the BITS (x, r or rx)
  local mode
  if [ "$2" = me ]; then
    case "$3" in x) [ -x "$1" ] ;; r) [ -r "$1" ] ;; *) [ -r "$1" ] && [ -x "$1" ] ;; esac
    return
  fi
  mode=$(stat -L -c %a -- "$1" 2>/dev/null) || return 1
  case "$3" in x) (( 8#$mode & 1 )) ;; r) (( 8#$mode & 4 )) ;; *) (( (8#$mode & 5) == 5 )) ;; esac
}

path_blocker() {
  local rest=$1 who=$2 need=$3 done="" part link hops=0
  [[ $rest == /* ]] || rest=$PWD/$rest
  while [ -n "$rest" ]; do
    part=${rest%%/*}
    if [[ $rest == */* ]]; then rest=${rest#*/}; else rest=""; fi
    case "$part" in
      ""|.) continue ;;
      ..) done=${done%/*}; continue ;;
    esac
    _open_for "${done:-/}" "$who" x || { echo "${done:-/}"; return 0; }
    if [ -L "$done/$part" ]; then
      hops=$((hops + 1))
      [ $hops -le 40 ] || return 0
      link=$(readlink -- "$done/$part") || { echo "$done/$part"; return 0; }
      [[ $link == /* ]] && done=""
      rest=$link${rest:+/$rest}
      continue
    fi
    done=$done/$part
  done
  local bits=$need
  [ "$who" = others ] && [ "$need" = x ] && bits=rx   # an interpreter others run: read and execute for all
  _open_for "${done:-/}" "$who" "$bits" || echo "${done:-/}"
  return 0
}

python_unrunnable() {
  local py=$1 lang=$2 script=$3 user blocker why en tr
  user=$(id -un 2>/dev/null || id -u)
  blocker=$(path_blocker "$py" me x)
  why=$("$py" -c '' 2>&1 | head -n 1 | sed 's/^.*line [0-9]*: //' | cut -c 1-160) || true
  if [ -n "$blocker" ] && [ -d "$blocker" ]; then
    en="!! $script: $py is there, but you ($user) cannot run it: $blocker does not let you through (the environment's interpreter lies behind it). The instructor rebuilds the class environment from a Python others can run (the site's module), with bash scripts/setup.sh --prefix DIR, which checks this"
    tr="!! $script: $py orada, ama siz ($user) onu çalıştıramıyorsunuz: $blocker sizi geçirmiyor (ortamın yorumlayıcısı onun ardında). Eğitmen sınıf ortamını başkalarının da çalıştırabildiği bir Python'dan (merkezin modülü) bash scripts/setup.sh --prefix KLASÖR ile yeniden kursun; bu komut bunu denetler"
  else
    en="!! $script: $py is there, but you ($user) cannot run it (${why:-no reason given}). The instructor rebuilds the class environment from a Python others can run (the site's module), with bash scripts/setup.sh --prefix DIR, which checks this"
    tr="!! $script: $py orada, ama siz ($user) onu çalıştıramıyorsunuz (${why:-neden bildirilmedi}). Eğitmen sınıf ortamını başkalarının da çalıştırabildiği bir Python'dan (merkezin modülü) bash scripts/setup.sh --prefix KLASÖR ile yeniden kursun; bu komut bunu denetler"
  fi
  say_and_stop "$lang" "$en" "$tr"
}
