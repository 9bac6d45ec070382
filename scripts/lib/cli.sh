# Sourced by the scripts in scripts/: one command-line convention for all of them, as for
# every strata program. `--help` (or -h) prints the script's usage, its header comment,
# and exits 0; an option it does not take, or one argument too many, prints one line and
# the usage, exit 2, before the script does anything.
#
#   cli_check "$0" "OPTIONS" MAX_ARGS "$@"
# OPTIONS: the options it takes, space-separated ("*": any, passed on to a program);
# MAX_ARGS: how many other arguments it takes ("any": no limit).

# The header comment: from line 2 to the line before `set -`.
cli_usage() { sed -n '2,/^set -/p' "$1" | sed '$d' | sed -E 's/^# ?//'; }

cli_check() {
  local script=$1 options=" $2 " max=$3 n=0 a
  shift 3
  local bad=""
  for a in "$@"; do
    case $a in
      --help | -h) cli_usage "$script"; exit 0 ;;
      -*) [[ $options == " * " || $options == *" $a "* ]] || bad=${bad:-"unknown option '$a'"} ;;
      *) n=$((n + 1)) ;;
    esac
  done
  [[ $max != any && $n -gt $max ]] && bad=${bad:-"takes at most $max argument(s), got $n"}
  if [[ -n $bad ]]; then
    echo "$(basename "$script"): $bad" >&2
    cli_usage "$script" >&2
    exit 2
  fi
}
