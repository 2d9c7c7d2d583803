#!/usr/bin/env bash
# The attendee's working copy of the notebooks (scripts/lab.sh step 3; tests call it the same way):
#
#   bash scripts/workshop_copy.sh LANG WORK [--reset]
#
# copies notebooks/LANG/*.ipynb into WORK on first start (complete or absent, never half a copy);
# with --reset an existing WORK is first renamed to WORK.backup-<date>. Everything else a notebook
# needs comes from the installed package (08's cnn_single.py included), so nothing else is copied.
set -euo pipefail
cd "$(dirname "$0")/.."
lang=$1 work=$2 reset=${3:-}
if [ -e "$work" ] && [ ! -d "$work" ]; then
  if [ "$lang" = tr ]; then echo "!! $work bir dizin değil, dosya: taşıyın ya da DDP_TUTORIAL_WORK ile başka bir yer seçin" >&2
  else echo "!! $work is a file, not a folder: move it away, or choose another place with DDP_TUTORIAL_WORK" >&2; fi
  exit 2
fi
if [ "$reset" = --reset ] && [ -d "$work" ]; then
  backup=$work.backup-$(date +%Y%m%d-%H%M%S) n=1
  while [ -e "$backup" ]; do n=$((n + 1)); backup=$work.backup-$(date +%Y%m%d-%H%M%S)-$n; done  # two resets in one second
  mv -T "$work" "$backup"
  if [ "$lang" = tr ]; then echo "== --reset: önceki kopya ${backup#"$PWD"/} olarak saklandı"
  else echo "== --reset: the previous copy is kept in ${backup#"$PWD"/}"; fi
fi
if [ ! -d "$work" ]; then
  mkdir -p "$(dirname "$work")"
  partial=$(mktemp -d "$work.partial.XXXXXX")   # each start its own: two first starts at once never mix
  cp notebooks/"$lang"/*.ipynb "$partial"/
  chmod "$(printf %o $((0777 & ~0$(umask))))" "$partial"   # mktemp's 0700: the umask decides, as mkdir would
  # complete or absent, never half a copy; where another start won the race, its copy stays and ours goes
  mv -T "$partial" "$work" 2>/dev/null || rm -rf "$partial"
fi
