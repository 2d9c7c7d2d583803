# Sourced by scripts/lab.sh and scripts/lab_job.sh (issue 45, T5-1 and T5-20): a site table's login
# nodes, read from ddp_tutorial/sites/*.toml without Python (on a login node lab.sh runs before any
# environment exists, and the system python3 may be too old for tomllib). It reads the [login] table's
# one-line values only; tests/test_login_guard.py checks that what it reads equals what
# ddp_tutorial.sites reads from every shipped table.
#
#   site_login_value FILE KEY [TABLE]  # the [login] table's (or TABLE's) KEY: a string, or an array's
#                                      # items, one a line
#   site_login_table NAME HOST   # the table of site NAME (a name or a TOML file's path), or else of the
#                                # site whose login names match HOST; prints its path, or nothing
#   site_login_host FILE HOST    # succeeds when HOST (short or full name) is one of FILE's login nodes
#   site_login_match HOST [FILE] # the first table (FILE, then the shipped ones) whose login nodes name HOST

site_login_value() {
  awk -v key="$2" -v table="${3:-login}" '
    /^[[:space:]]*\[/ { inside = ($0 ~ "^[[:space:]]*\\[" table "\\][[:space:]]*(#.*)?$"); next }
    inside && $0 ~ "^[[:space:]]*" key "[[:space:]]*=" {
      value = $0
      sub(/^[^=]*=[[:space:]]*/, "", value)
      if (value ~ /^\[/) {                       # an array of strings on one line
        sub(/^\[/, "", value); sub(/\][^\]]*$/, "", value)
        n = split(value, items, ",")
        for (i = 1; i <= n; i++) {
          item = items[i]
          gsub(/^[[:space:]]*"|"[[:space:]]*$/, "", item)
          if (item != "") print item
        }
      } else if (value ~ /^"/) {                 # a string
        sub(/^"/, "", value); sub(/".*$/, "", value)
        print value
      }
      exit
    }' "$1" 2>/dev/null
}

site_login_host() {
  local short=${2%%.*} name
  [ -n "$short" ] || return 1
  while IFS= read -r name; do
    # shellcheck disable=SC2053  # the table's patterns are globs (arf-ui*)
    [[ $short == $name ]] && return 0
  done < <(site_login_value "$1" patterns; site_login_value "$1" hosts)
  return 1
}

site_login_match() {  # site_login_match HOST [FILE]: the first table (FILE, then the shipped ones) naming HOST
  local file
  for file in ${2:+"$2"} "$(dirname "${BASH_SOURCE[0]}")"/../ddp_tutorial/sites/*.toml; do
    [ -f "$file" ] && site_login_host "$file" "$1" && { echo "$file"; return 0; }
  done
  return 0
}

site_login_table() {
  local tables
  tables=$(dirname "${BASH_SOURCE[0]}")/../ddp_tutorial/sites
  case "$1" in
    none|None|NONE) return 0 ;;   # DDP_TUTORIAL_SITE=none: no site (setup.sh's word too)
    "") ;;
    *.toml|*/*) [ -f "$1" ] && { echo "$1"; return 0; } ;;
    *) [ -f "$tables/$1.toml" ] && { echo "$tables/$1.toml"; return 0; } ;;
  esac
  [ -n "$2" ] && site_login_match "$2"
  return 0
}
