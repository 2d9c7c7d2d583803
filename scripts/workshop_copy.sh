#!/usr/bin/env bash
# The attendee's working copy of the notebooks (scripts/lab.sh step 3; tests call it the same way):
#
#   bash scripts/workshop_copy.sh LANG WORK [--reset]
#
# copies notebooks/LANG/*.ipynb into WORK on first start (complete or absent, never half a copy);
# with --reset an existing WORK is first renamed to WORK.backup-<date>. Everything else a notebook
# needs comes from the installed package (08's cnn_single.py included), so nothing else is copied.
# The copy starts without outputs and prompt numbers (issue 49: the build's outputs, with their old pids
# and timings, could not be told from the attendee's own): every output in WORK is one the attendee ran.
# The build's outputs stay in notebooks/LANG/, where nbval checks them and anyone can compare.
# Whatever goes wrong (a language without notebooks, a full disk, a folder it may not write, a WORK that
# is another user's copy) is one line in LANG (both languages when LANG is neither tr nor en), exit 2,
# and no WORK.partial.* folder is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
lang=${1:-} work=${2:-} reset=${3:-}
fail() {   # fail EN TR: one line on stderr, in the copy's language, exit 2 (the trap removes the partial copy)
  case "$lang" in
    tr) echo "!! $2" >&2 ;;
    en) echo "!! $1" >&2 ;;
    *) echo "!! $1 / $2" >&2 ;;
  esac
  exit 2
}
why() {   # the reason of a coreutils error ("cp: error writing 'x': No space left on device" → the part after ': ')
  local last=${1##*$'\n'}
  echo "${last##*: }"
}
case "$lang" in tr|en) notebooks=(notebooks/"$lang"/*.ipynb) ;; *) notebooks=("") ;; esac
if [ ! -f "${notebooks[0]}" ]; then
  fail "workshop_copy.sh: no notebooks for the language '$lang' (tr or en; DDP_TUTORIAL_LANG=tr|en)" \
       "workshop_copy.sh: '$lang' dili için defter yok (tr ya da en; DDP_TUTORIAL_LANG=tr|en)"
fi
[ -n "$work" ] || fail "workshop_copy.sh: give the folder of the copy: workshop_copy.sh LANG WORK [--reset]" \
                       "workshop_copy.sh: kopyanın dizinini verin: workshop_copy.sh DİL DİZİN [--reset]"
if [ -e "$work" ] && [ ! -d "$work" ]; then
  fail "$work is a file, not a folder: move it away, or choose another place with DDP_TUTORIAL_WORK" \
       "$work bir dizin değil, dosya: taşıyın ya da DDP_TUTORIAL_WORK ile başka bir yer seçin"
fi
if [ -d "$work" ] && [ ! -O "$work" ]; then   # someone else's copy is never "your copy", nor renamed by --reset
  owner=$(stat -c %U -- "$work" 2>/dev/null || echo "?")
  fail "$work is the copy of another user ($owner): choose your own place with DDP_TUTORIAL_WORK (in your own clone)" \
       "$work başka bir kullanıcının ($owner) kopyası: DDP_TUTORIAL_WORK ile kendinize ait bir yer seçin (kendi kopyanızda)"
fi
if [ "$reset" = --reset ] && [ -d "$work" ]; then
  backup=$work.backup-$(date +%Y%m%d-%H%M%S) n=1
  while [ -e "$backup" ]; do n=$((n + 1)); backup=$work.backup-$(date +%Y%m%d-%H%M%S)-$n; done  # two resets in one second
  err=$(mv -T "$work" "$backup" 2>&1) ||
    fail "cannot rename $work for --reset: $(why "$err")" "--reset için $work yeniden adlandırılamıyor: $(why "$err")"
  if [ "$lang" = tr ]; then echo "== --reset: önceki kopya ${backup#"$PWD"/} olarak saklandı"
  else echo "== --reset: the previous copy is kept in ${backup#"$PWD"/}"; fi
fi
if [ ! -d "$work" ]; then
  partial=""
  trap '[ -z "$partial" ] || rm -rf -- "$partial"' EXIT   # every way out: no half copy left
  trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT
  cannot_write() {
    fail "cannot make the copy of the notebooks in $work: $1; choose a place you can write with DDP_TUTORIAL_WORK, or free some space" \
         "defterlerin kopyası $work içinde yapılamıyor: $1; DDP_TUTORIAL_WORK ile yazabileceğiniz bir yer seçin ya da yer açın"
  }
  err=$(mkdir -p -- "$(dirname -- "$work")" 2>&1) || cannot_write "$(why "$err")"
  if ! partial=$(mktemp -d "$work.partial.XXXXXX" 2>&1); then   # each start its own: two first starts never mix
    err=$partial partial=""
    cannot_write "$(why "$err")"
  fi
  err=$(cp -- "${notebooks[@]}" "$partial"/ 2>&1) || cannot_write "$(why "$err")"
  # Outputs and prompt numbers cleared, in the copy only (nbformat's layout: one-space indent, sorted keys),
  # by the Python first on PATH (the lab's environment: lab.sh, lab_job.sh and the OnDemand block put it there).
  if ! command -v python3 >/dev/null 2>&1; then
    if [ "$lang" = tr ]; then echo "== python3 yok: kopya, derlemenin çıktılarını taşıyor"
    else echo "== no python3: the copy keeps the build's outputs"; fi
  else err=$(python3 - "$partial"/*.ipynb 2>&1 <<'PY'
import json, sys
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        notebook = json.load(f)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    with open(path, "w", encoding="utf-8") as f:
        json.dump(notebook, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
PY
  ) || cannot_write "$(why "$err")"
  fi
  chmod "$(printf %o $((0777 & ~0$(umask))))" "$partial"   # mktemp's 0700: the umask decides, as mkdir would
  # complete or absent, never half a copy; where another start won the race, its copy stays and ours goes
  if mv -T "$partial" "$work" 2>/dev/null; then partial=""; fi
fi
