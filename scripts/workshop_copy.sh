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
if [ "$reset" = --reset ] && [ -d "$work" ]; then
  backup=$work.backup-$(date +%Y%m%d-%H%M%S)
  mv "$work" "$backup"
  if [ "$lang" = tr ]; then echo "== --reset: önceki kopya ${backup#"$PWD"/} olarak saklandı"
  else echo "== --reset: the previous copy is kept in ${backup#"$PWD"/}"; fi
fi
if [ ! -d "$work" ]; then
  mkdir -p "$work.partial"
  cp notebooks/"$lang"/*.ipynb "$work.partial"/
  mv "$work.partial" "$work"                  # complete or absent, never half a copy
fi
