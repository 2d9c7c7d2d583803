# Sourced by scripts/setup.sh and scripts/lab.sh before anything else (issue 34 item 2, review N2):
# the package needs Python >= 3.11 (tomllib), and a login node's python3 is often 3.6 or 3.9. Without this
# check setup.sh died later in `python -m ddp_tutorial.gpu` with a traceback. The module that gives a newer
# Python on TRUBA comes from the site table, ddp_tutorial/gpu.py (SITES: python_module=, and whether that
# name was verified on the site): read from the file, since this Python cannot import the package.
#
#   python_check PYTHON LANG SCRIPT   # LANG: tr | en | "" (both, in one line); SCRIPT: setup.sh or lab.sh
#
# Returns when PYTHON imports tomllib; else prints one line on stderr, in LANG, and exits 2.

python_check() {
  local py=$1 lang=$2 script=$3 here found module verified en tr note_en note_tr
  if "$py" -c 'import sys, tomllib; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
    return 0
  fi
  here=$(dirname "${BASH_SOURCE[0]}")/../ddp_tutorial/gpu.py
  if command -v "$py" >/dev/null 2>&1; then
    found=$("$py" --version 2>&1 | head -n 1 | cut -c 1-80)
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
  case "$lang" in
    tr) echo "$tr" >&2 ;;
    en) echo "$en" >&2 ;;
    *) echo "$en / $tr" >&2 ;;
  esac
  exit 2
}
