#!/usr/bin/env bash
# Set up this checkout on a fresh machine: system packages (when root on Debian/Ubuntu),
# a virtual environment in .venv with PyTorch, and the package itself (editable).
#
#   bash scripts/setup.sh                 # the package, the notebooks' tools, the torch build for this node
#   bash scripts/setup.sh --test          # and what the tests need (SLURM test cluster, data, pytest, nbval)
#   bash scripts/setup.sh --site truba    # the torch build that runs on every GPU partition of TRUBA (cu126)
#   bash scripts/setup.sh --cuda cu126    # a build by name: cu126, cu130, cu132 or cpu
#   bash scripts/setup.sh --index-url URL # torch from another index (a site mirror)
#   bash scripts/setup.sh --site truba --prefix DIR   # the CLASS environment, built once by the instructor
#
# The class environment (issue 34 item 1): --prefix DIR builds the venv in DIR (say a project folder on
# /arf) with the package installed as a copy (not editable: it must not depend on the instructor's checkout),
# readable by everyone; attendees then run `DDP_TUTORIAL_VENV=DIR bash scripts/lab.sh tr` and nothing is
# installed for them (DIR may be read-only). DIR must be new or empty, or a class environment this script
# made before (its marker .ddp-tutorial-class-env and a pyvenv.cfg): any other folder is refused untouched;
# the environment ends readable by all and writable by its owner only (a+rX,go-w), whatever the umask.
# It ends by checking the environment as ANOTHER user would run it (class day P1: a venv's python links to the
# interpreter it was made from, which may lie in the builder's private home): the other-permission bits along
# the way to its interpreter and standard library and, when root, `import ddp_tutorial` as nobody; if others
# cannot run it, one line names the folder that blocks them, exit 2. DIR/ddp-tutorial.module records the
# Python module loaded for the build (T5-17), which the OnDemand ~/.bashrc block loads (ondemand/truba/bashrc.sh).
# On TRUBA (a host named arf-ui*/*.truba.gov.tr, or /arf present) --site truba is taken when no
# --site/--cuda is given, and said so. A laptop without GPU may take the CPU build, --cuda cpu
# (download.pytorch.org/whl/cpu, about 1 GB instead of 5–6 GB; not tested here: this machine's package
# index has no +cpu wheel); pip is pinned to torch==2.14.1 either way.
#
# Which torch build? The pinned torch (2.14.1) exists as cu130 (PyPI's), cu132 and cu126; their GPUs
# and drivers are in ONE table, ddp_tutorial/gpu.py (VARIANTS, with its sources), and this script asks
# it before torch is installed: `python -m ddp_tutorial.gpu choose`. On a GPU node it reads
# nvidia-smi (driver, each GPU's compute capability); with --site (or DDP_TUTORIAL_SITE) it takes the
# build that runs on all of that site's GPU partitions, even on a login node without GPUs; with
# neither it installs PyPI's build. It prints the choice and why in one line. Do not raise the pin
# past 2.14 while P100/V100 partitions are in use: 2.14 is the last torch with a CUDA 12 build.
# `ddp-tutorial env` on a GPU node checks the result against the real driver and GPUs.
# The wheel bundles its own CUDA runtime and NCCL: no `module load cuda` is needed.
#
# Environment: PYTHON (default python3, >= 3.11: checked first, scripts/python_check.sh), VENV (default .venv), SKIP_SYSTEM=1 (no apt-get), TORCH_VERSION /
# TORCHVISION_VERSION (default: the pin in ddp_tutorial/gpu.py; another version skips the table).
set -euo pipefail
caller=$PWD
given=("$@")   # the command as typed: what the message after a failed torch install says to run again
cd "$(dirname "$0")/.."

want_test=0
variant=""
index_url=""
site=${DDP_TUTORIAL_SITE:-}
prefix=""
login_ok=${DDP_TUTORIAL_LOGIN_OK:-0}
while [ $# -gt 0 ]; do
  case "$1" in
    --test) want_test=1 ;;
    --login-ok) login_ok=1 ;;
    --cuda)
      variant=${2:-}
      [ -n "$variant" ] || { echo "setup.sh: --cuda needs a build name (cu126, cu130, cu132, cpu) / --cuda bir derleme adı ister" >&2; exit 2; }
      shift ;;
    --site)
      site=${2:-}
      [ -n "$site" ] || { echo "setup.sh: --site needs a name (truba) / --site bir merkez adı ister" >&2; exit 2; }
      shift ;;
    --prefix)
      prefix=${2:-}
      [ -n "$prefix" ] || { echo "setup.sh: --prefix needs a folder (the class environment) / --prefix bir klasör ister (sınıf ortamı)" >&2; exit 2; }
      shift ;;
    --index-url)
      index_url=${2:-}
      [ -n "$index_url" ] || { echo "setup.sh: --index-url needs a URL / --index-url bir adres ister" >&2; exit 2; }
      shift ;;
    *) echo "setup.sh: unknown option '$1' (use --test, --site NAME, --cuda VARIANT, --index-url URL, --prefix DIR, --login-ok) / bilinmeyen seçenek" >&2; exit 2 ;;
  esac
  shift
done
# A site given as a table's file (DDP_TUTORIAL_SITE=/path/site.toml): its rules are read from that file, its
# name (the table's [site] name) chooses the build.
source scripts/site_login.sh
site_file=""
if [[ $site == *.toml || $site == */* ]]; then
  site_file=$site
  site=$(site_login_value "$site_file" name site)
fi
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
[ -n "$prefix" ] && VENV=$(cd "$caller" && realpath -m -- "$prefix")   # the caller's folder, made absolute

# The class environment is a folder this script makes, and only that folder is ever opened to all:
# --prefix takes a missing or empty folder, or one holding this script's marker and a pyvenv.cfg (a
# class environment made before, being updated; one made before the marker existed: a venv with ddp_tutorial installed). Anything else (/, $HOME, a conda installation, a
# project folder) is refused before anything runs in it, in DDP_TUTORIAL_LANG (tr | en; unset: both).
MARKER=.ddp-tutorial-class-env
say() {   # say EN TR: a progress line in DDP_TUTORIAL_LANG (tr | en; unset: both)
  case "${DDP_TUTORIAL_LANG:-}" in
    tr) echo "== $2" ;;
    en) echo "== $1" ;;
    *) echo "== $1 / $2" ;;
  esac
}
refuse_prefix() {   # refuse_prefix EN TR
  case "${DDP_TUTORIAL_LANG:-}" in
    tr) echo "!! setup.sh: $2" >&2 ;;
    en) echo "!! setup.sh: $1" >&2 ;;
    *) echo "!! setup.sh: $1 / $2" >&2 ;;
  esac
  exit 2
}
# The class environment is built in a job on a compute node (issue 45, the class environment decision): a
# pip install of some 6 GB on a login node is the heavy work TRUBA suspends accounts for. A host the site
# tables name as a login node (scripts/site_login.sh) is refused, in a job's shell too (salloc runs it
# there); --login-ok (or DDP_TUTORIAL_LOGIN_OK=1) for a machine that only shares a login node's name.
if [ -n "$prefix" ] && [ "$login_ok" != 1 ]; then
  source scripts/site_login.sh
  host=$(hostname 2>/dev/null || uname -n)
  table=$(site_login_match "$host" "$(site_login_table "${site_file:-$site}" "")")
  if [ -n "$table" ]; then
    title=$(site_login_value "$table" title site)
    refuse_prefix "this is $host, a login node of ${title:-$(basename "$table" .toml)}: the class environment is built in a job on a compute node, e.g. srun -p debug -c 4 -t 01:00:00 bash scripts/setup.sh --site ${site_file:-${site:-truba}} --prefix $prefix" \
      "burası $host, ${title:-$(basename "$table" .toml)} giriş düğümlerinden biri: sınıf ortamı bir hesaplama düğümündeki bir işte kurulur, örneğin srun -p debug -c 4 -t 01:00:00 bash scripts/setup.sh --site ${site_file:-${site:-truba}} --prefix $prefix"
  fi
fi
if [ -n "$prefix" ]; then
  umask 022   # nothing of the class environment is writable by the group or others, whatever the caller's umask
  home=$(realpath -m -- "${HOME:-/}")
  if [ "$VENV" = / ] || [ "$VENV" = "$home" ]; then
    what_en="the root folder" what_tr="kök dizin"
    [ "$VENV" = "$home" ] && what_en="your home folder" what_tr="ev dizininiz"
    refuse_prefix "--prefix '$prefix' is $what_en, not a folder for the class environment (an empty variable in --prefix \"\$DIR/\"?): give a new or empty folder, such as --prefix /arf/.../ddp-class-env" \
      "--prefix '$prefix' $what_tr, sınıf ortamı için bir dizin değil (--prefix \"\$DIR/\" içinde boş bir değişken mi?): yeni ya da boş bir dizin verin, örneğin --prefix /arf/.../ddp-class-env"
  elif [ -e "$VENV" ] && [ ! -d "$VENV" ]; then
    refuse_prefix "--prefix '$prefix' is a file, not a folder: give a new or empty folder for the class environment" \
      "--prefix '$prefix' bir dizin değil, dosya: sınıf ortamı için yeni ya da boş bir dizin verin"
  elif [ -d "$VENV" ] && ! { [ -f "$VENV/pyvenv.cfg" ] && { { [ -f "$VENV/$MARKER" ] && [ ! -L "$VENV/$MARKER" ]; } \
         || compgen -G "$VENV/lib/python3*/site-packages/ddp_tutorial-*.dist-info" >/dev/null; }; }; then
    # (a class environment made before the marker existed is a venv with this package installed: updated, and marked)
    entries=$(find "$VENV" -mindepth 1 -maxdepth 1 -print -quit 2>/dev/null) || entries=unreadable
    [ -z "$entries" ] || refuse_prefix \
      "--prefix '$prefix' already holds files and is no class environment made by this script (no $MARKER there): nothing was changed; give a new or empty folder" \
      "--prefix '$prefix' zaten dosyalar içeriyor ve bu betiğin kurduğu bir sınıf ortamı değil (içinde $MARKER yok): hiçbir şey değiştirilmedi; yeni ya da boş bir dizin verin"
  fi
fi

# The site's storage rule (issue 45, T5-3): TRUBA's guide forbids installing Python libraries with pip on
# /arf (the table's [storage] no_pip_on, with its source). A checkout's own .venv there (lab.sh without the
# class environment) is refused before anything is made; a class environment (--prefix) there belongs only
# in the read-only folder the centre agreed to in writing, and this says so.
guard_site=${site_file:-$site}   # given, or TRUBA recognised as below (a login node's name, or /arf)
if [ -z "$guard_site" ] && [ -z "$(site_login_table "" "$(hostname 2>/dev/null || uname -n)")" ]; then
  [ -d /arf ] && guard_site=truba
fi
storage_table=$(site_login_table "$guard_site" "$(hostname 2>/dev/null || uname -n)")
no_pip_on=""
[ -n "$storage_table" ] && no_pip_on=$(site_login_value "$storage_table" no_pip_on storage)
if [ -n "$no_pip_on" ]; then
  case "$(realpath -m -- "$VENV")/" in
    "$(realpath -m -- "$no_pip_on")"/*)
      rule=$(site_login_value "$storage_table" no_pip_source storage)
      title=$(site_login_value "$storage_table" title site)
      if [ -z "$prefix" ]; then
        refuse_prefix "$VENV is on $no_pip_on, where ${title:-the site}'s guide forbids installing Python libraries with pip ($rule): nothing was installed. Use the class environment the instructor names: DDP_TUTORIAL_VENV=DIR with sbatch slurm/lab.sbatch or the OnDemand app" \
          "$VENV, ${title:-merkezin} kılavuzunun pip ile Python kütüphanesi kurmayı yasakladığı $no_pip_on üzerinde ($rule): hiçbir şey kurulmadı. Eğitmenin verdiği sınıf ortamını kullanın: sbatch slurm/lab.sbatch ya da OnDemand uygulamasıyla DDP_TUTORIAL_VENV=DİZİN"
      fi
      case "${DDP_TUTORIAL_LANG:-}" in
        tr) echo "== $VENV, $no_pip_on üzerinde: kılavuz kullanıcıların orada pip ile kurmasını yasaklar ($rule); sınıf ortamı yalnızca merkezin yazılı olarak kabul ettiği, salt okunur klasöre kurulur (docs/instructor/README.tr.md)" ;;
        *) echo "== $VENV is on $no_pip_on: the guide forbids users' own pip installs there ($rule); a class environment belongs only in the read-only folder the centre agreed to in writing (docs/instructor/README.md)" ;;
      esac ;;
  esac
fi

# 0. Python >= 3.11 first (the venv's, or the one that makes it): else one line, in DDP_TUTORIAL_LANG
#    (tr | en; unset: both), saying what to do (on TRUBA: the module of ddp_tutorial/gpu_sites.py (PYTHON_MODULES)), exit 2.
source scripts/python_check.sh
if [ -x "$VENV/bin/python" ]; then python_check "$VENV/bin/python" "${DDP_TUTORIAL_LANG:-}" setup.sh
else python_check "$PYTHON" "${DDP_TUTORIAL_LANG:-}" setup.sh; fi

# TRUBA, recognised where it can be (its login nodes arf-ui*, its /arf storage): the build that runs on all
# its GPU partitions, even on a login node without GPUs (a plain install there would be PyPI's cu130,
# which TRUBA's driver cannot run). DDP_TUTORIAL_SITE=none (or an explicit --cuda) keeps the node's choice.
if [ -z "$site" ] && [ -z "$variant" ] && [ -z "$index_url" ]; then
  case "$(hostname -f 2>/dev/null || hostname)" in
    arf-ui*|*.truba.gov.tr) site=truba ;;
    *) [ -d /arf ] && site=truba ;;
  esac
  if [ "$site" = truba ]; then
    case "${DDP_TUTORIAL_LANG:-}" in
      tr) echo "== TRUBA tanındı (sunucu adı ya da /arf): --site truba kullanılıyor (istemiyorsanız DDP_TUTORIAL_SITE=none)" ;;
      en) echo "== TRUBA recognised (host name or /arf): using --site truba (to opt out: DDP_TUTORIAL_SITE=none)" ;;
      *) echo "== TRUBA recognised (host name or /arf): using --site truba (opt out: DDP_TUTORIAL_SITE=none) / TRUBA tanındı: --site truba" ;;
    esac
  fi
fi
[ "$site" = none ] && site=""


# 1. System packages: Debian's genuine Fashion-MNIST (offline data), and for the tests a real
#    SLURM (controller, node daemon, client), munge and iproute2 for the two-node test cluster.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ -z "${SKIP_SYSTEM:-}" ]; then
  pkgs=(dataset-fashion-mnist)
  [ $want_test = 1 ] && pkgs+=(slurm-wlm slurmctld slurmd slurm-client munge iproute2 util-linux procps)
  missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# 2. The virtual environment, PyTorch pinned (pip must not resolve another torch), then us.
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV" "$VENV oluşturuluyor"
  "$PYTHON" -m venv "$VENV"
fi
if [ -n "$prefix" ] && [ ! -f "$VENV/$MARKER" ]; then   # what lets a later --prefix run update this folder
  echo "class environment of ddp-tutorial, made by scripts/setup.sh --prefix on $(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    > "$VENV/$MARKER.tmp.$$"
  mv -f "$VENV/$MARKER.tmp.$$" "$VENV/$MARKER"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

# Which build: ddp_tutorial/gpu.py decides (no torch needed; run from this checkout). Its answer:
# the build, its index URL (empty: PyPI), the pinned versions, and why (one line, user's language).
choose=(choose)
[ -n "$site" ] && choose+=(--site "$site")
[ -n "$variant" ] && choose+=(--cuda "$variant")
answer=$("$VENV/bin/python" -m ddp_tutorial.gpu "${choose[@]}") || exit 2
mapfile -t lines <<< "$answer"
chosen=${lines[0]}; chosen_url=${lines[1]}; read -r pin_torch pin_vision <<< "${lines[2]}"
TORCH_VERSION=${TORCH_VERSION:-$pin_torch}
TORCHVISION_VERSION=${TORCHVISION_VERSION:-$pin_vision}
want_local=""
if [ -n "$index_url" ]; then
  echo "== torch build: from $index_url, as asked (--index-url) / istendiği gibi bu dizinden"
elif [ "$TORCH_VERSION" != "$pin_torch" ]; then
  echo "== torch build: TORCH_VERSION=$TORCH_VERSION is not the pin ($pin_torch): PyPI's build, the table does not apply / sabitlenen sürüm değil: PyPI derlemesi"
else
  echo "== torch build: ${lines[3]}"
  [ "$chosen" != none ] && want_local=$chosen   # torch.__version__ ends in +cu126, +cu130 (PyPI's too), +cpu
  index_url=$chosen_url
fi
# The installed build must be this version and, when the table chose, this variant.
if ! "$VENV/bin/python" -c "import torch, torchvision, sys; v = torch.__version__.split('+'); sys.exit(not (v[0] == '$TORCH_VERSION' and torchvision.__version__.split('+')[0] == '$TORCHVISION_VERSION' and ('$want_local' == '' or (v[1:] or [''])[0] == '$want_local')))" 2>/dev/null; then
  if [ -n "$index_url" ]; then
    say "pip install torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION from $index_url (a few minutes)" \
        "pip install torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION, $index_url dizininden (birkaç dakika sürer)"
    # --force-reinstall: an installed torch of the same version but another build counts as "already there".
    if ! "${PIP[@]}" install --force-reinstall --index-url "$index_url" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"; then
      # pip's last line (ResolutionImpossible, after its retries) names neither the index nor what to do
      # (issue 49 P5): one line that does, after asking the index itself (ddp_tutorial/torch_index.py).
      "$VENV/bin/python" -m ddp_tutorial.torch_index "$index_url" "$TORCH_VERSION" --variant "$want_local" \
        --again "bash scripts/setup.sh ${given[*]}" || true
      exit 2
    fi
  else
    say "pip install torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION (a few minutes)" \
        "pip install torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION (birkaç dakika sürer)"
    force=()   # another build of the same version (say +cu126) would count as "already there"
    "$VENV/bin/python" -c "import torch" 2>/dev/null && force=(--force-reinstall)
    "${PIP[@]}" install "${force[@]}" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
  fi
fi
extra=notebooks
[ $want_test = 1 ] && extra=test,notebooks
if [ -n "$prefix" ]; then   # the class environment: a copy of the package, not a link to this checkout
  say "pip install .[$extra] (into $VENV)" "pip install .[$extra] ($VENV içine)"
  "${PIP[@]}" install --no-cache-dir "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" ".[$extra]"
else
  say "pip install -e .[$extra]" "pip install -e .[$extra] (düzenlenebilir kurulum)"
  "${PIP[@]}" install "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" -e ".[$extra]"
fi
"$VENV/bin/python" -c "import ddp_tutorial, torch; print('ddp_tutorial', ddp_tutorial.__version__, '| torch', torch.__version__)"
if command -v nvidia-smi >/dev/null 2>&1; then  # a GPU node: does this build fit its GPUs? (plain words)
  "$VENV/bin/python" -m ddp_tutorial.gpu || true
fi
# JupyterLab's settings (no news pop-up) in the environment itself: lab.sh cannot write into a shared one.
mkdir -p "$VENV/share/jupyter/lab/settings"
cp notebooks/lab/overrides.json "$VENV/share/jupyter/lab/settings/"
# What lab.sh looks at to skip this script when pyproject.toml and setup.sh have not changed since.
[ "$VENV" = .venv ] && touch .venv/.lab-setup-done
if [ -n "$prefix" ]; then   # readable by every attendee (the folders above it must let them through: chmod o+x),
  # The Python module this environment was built with (issue 45, T5-17): the loaded modules whose name says
  # python (LOADEDMODULES, set by `module load`), one a line; ondemand/truba/bashrc.sh loads them in the
  # session before it uses the environment. Empty: built without a module.
  tr ':' '\n' <<< "${LOADEDMODULES:-}" | grep -i python > "$VENV/ddp-tutorial.module.tmp.$$" || true
  mv -f "$VENV/ddp-tutorial.module.tmp.$$" "$VENV/ddp-tutorial.module"
  chmod -R a+rX,go-w "$VENV"   # writable by its owner only (links inside it are not followed)
  # Class day P1 (issue 45): the environment as ANOTHER user runs it. As root: its Python imports the package
  # as nobody (from /, isolated: not this checkout's copy). Otherwise: the other-permission bits along the
  # way to its interpreter (links resolved, every folder) and to the standard library it reads.
  blocker="" failed=""
  blocker=$(path_blocker "$VENV/bin/python" others x)
  [ -n "$blocker" ] || blocker=$(path_blocker "$("$VENV/bin/python" -I -c 'import os; print(os.__file__)')" others r)
  if [ -z "$blocker" ] && [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    # (through env: setpriv's own exec passed a mode-700 folder on our test machine; env's exec is nobody's)
    if ! out=$(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups -- env "$VENV/bin/python" -I \
                 -c "import ddp_tutorial" 2>&1 >/dev/null); then
      failed=$(tail -n 1 <<< "${out:-?}" | cut -c 1-160)
    fi
  fi
  if [ -n "$blocker" ]; then
    refuse_prefix "the class environment $VENV is built, but other users cannot run it: $blocker does not let them through (its Python lies behind it). Build it in a new folder from a Python others can run (the site's module: module av python; not a Python in your home)" \
      "sınıf ortamı $VENV kuruldu, ama başka kullanıcılar onu çalıştıramıyor: $blocker onları geçirmiyor (ortamın Python'u onun ardında). Ortamı yeni bir klasöre, başkalarının da çalıştırabildiği bir Python'dan kurun (merkezin modülü: module av python; ev dizininizdeki bir Python değil)"
  elif [ -n "$failed" ]; then
    refuse_prefix "the class environment $VENV is built, but as another user (nobody) its Python cannot import the package: $failed. Build it in a new folder from a Python others can run (the site's module: module av python)" \
      "sınıf ortamı $VENV kuruldu, ama başka bir kullanıcı (nobody) olarak Python'u paketi içe aktaramıyor: $failed. Ortamı yeni bir klasöre, başkalarının da çalıştırabildiği bir Python'dan kurun (merkezin modülü: module av python)"
  fi
  echo "== class environment ready / sınıf ortamı hazır: DDP_TUTORIAL_VENV=$VENV DDP_TUTORIAL_ROOT=DATA bash scripts/lab.sh tr (DATA: the class's data folder / sınıfın veri klasörü)"
fi
exit 0
