#!/usr/bin/env bash
# Runs one of the scripts of a node command on this node. Fed to `bash -s -- <action>` on stdin (docker exec
# into a kindest/node container, or SSH to a real server; components/worker/access.py), followed on the same
# stdin by a data block that components/worker/access.py node_stdin writes, one line per action, then `end`:
#
#   <action> <script name> <script text, base64> [<NAME>=<value, base64>]...
#   end
#
# The whole block is read before anything runs. The line of <action> is the only one used: its variables are
# decoded (printf is a builtin and base64 reads stdin, so no value is in any argv; none is printed), exported,
# and its script runs in a new bash with stdin from /dev/null, as `bash <script name>` would run the file.
#
# Exit: the script's own status; 2 when the action is unknown or the data block is damaged (nothing ran).
set -euo pipefail
# One brace group: bash reads all of it from stdin before running any command, and the `exit` at its end
# keeps bash from ever reading the data block after it as commands (the `read` below consumes it).
{
fail() {
  printf 'gpu-tenancy: dispatch.sh: %s\n' "$*" >&2
  exit 2
}

# decode_into <variable> <base64>: the variable holds the decoded text byte for byte. Command substitution
# strips trailing newlines; the x keeps them.
decode_into() {
  local decoded
  decoded="$(printf '%s' "$2" | base64 -d && printf x)" || return 1
  printf -v "$1" '%s' "${decoded%x}"
}

action="${1:-}"
known=()
chosen=()
ended=0
while IFS=' ' read -r -a fields; do
  if [[ "${#fields[@]}" -eq 1 && "${fields[0]}" == end ]]; then
    ended=1
    break
  fi
  [[ "${#fields[@]}" -ge 3 ]] || fail "a line of the data block has fewer than 3 fields; nothing was run"
  known+=("${fields[0]}")
  if [[ "${fields[0]}" == "$action" ]]; then
    chosen=("${fields[@]}")
  fi
done
# A stdin cut short (a dropped connection) runs nothing.
[[ "$ended" -eq 1 ]] || fail "the data block has no end line: stdin was cut short; nothing was run"
[[ "${#chosen[@]}" -gt 0 ]] || fail "unknown action \"$action\" (expected: ${known[*]})"

name="${chosen[1]}"
[[ "$name" =~ ^[a-z0-9][a-z0-9-]*\.sh$ ]] || fail "'$name' is not a script name"
script=""
decode_into script "${chosen[2]}" || fail "the text of $name does not decode; nothing was run"
# Variables are upper case and this file's own are lower case, so a value never overwrites the dispatcher's.
for field in "${chosen[@]:3}"; do
  var="${field%%=*}"
  [[ "$field" == *=* && "$var" =~ ^[A-Z_][A-Z0-9_]*$ ]] || fail "'$var' is not an upper-case variable name"
  decode_into "$var" "${field#*=}" || fail "the value of $var does not decode; nothing was run"
  export "${var?}"
done
# The text is public (the repository's file); one argument holds up to 128 KiB (MAX_ARG_STRLEN, Linux
# include/uapi/linux/binfmts.h), which components/worker/access.py checks.
exec bash -c "$script" "$name" </dev/null
}
