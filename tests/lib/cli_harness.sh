# Shared by the tests/cli_*.sh scripts (sourced, not run): a temporary
# directory, running loom, and checks that count passes and failures.
# The sourcing script sets LOOM (the binary) first. Needs only bash and
# coreutils.

LOOM=$(cd "$(dirname "$LOOM")" && pwd)/$(basename "$LOOM") # absolute: tests cd around
passed=0
failed=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loom_cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache # a private kernel cache, never the user's

# run ARGS...: runs loom; sets out, err and rc.
run() {
  out=$("$LOOM" "$@" 2>"$tmp/stderr")
  rc=$?
  err=$(<"$tmp/stderr")
}

ok() { passed=$((passed + 1)); }

bad() {
  failed=$((failed + 1))
  echo "FAIL: $1" >&2
  echo "  rc=$rc" >&2
  echo "  stdout: ${out:0:3000}" >&2
  echo "  stderr: ${err:0:3000}" >&2
}

# check NAME COMMAND...: passes if the command succeeds.
check() {
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}

# matches STR PATTERN: '*' matches anything, every other character is
# literal (so "f32[2, 3]" needs no escaping); "" matches only "".
matches() {
  local s=$1 pat=$2 frag
  [[ -z $pat ]] && { [[ -z $s ]]; return; }
  if [[ $pat != \** ]]; then
    frag=${pat%%\**}
    [[ $s == "$frag"* ]] || return 1
    s=${s#"$frag"}
    pat=${pat#"$frag"}
  fi
  while [[ -n $pat ]]; do
    pat=${pat#\*}
    frag=${pat%%\**}
    pat=${pat#"$frag"}
    [[ -z $frag ]] && continue
    [[ $s == *"$frag"* ]] || return 1
    s=${s#*"$frag"}
  done
  return 0
}

# expect DESC RC [PATTERN_IN_STDOUT] [PATTERN_IN_STDERR]
expect() {
  local desc=$1 want_rc=$2 pout=${3-*} perr=${4-*}
  if [[ $rc == "$want_rc" ]] && matches "$out" "$pout" && matches "$err" "$perr"; then
    ok
  else
    bad "$desc (wanted rc $want_rc, stdout ~ '$pout', stderr ~ '$perr')"
  fi
}

# same_bytes DESC FILE EXPECTED: files equal byte for byte (od is coreutils).
same_bytes() {
  local a b
  a=$(od -An -v -tx1 "$2" 2>&1)
  b=$(od -An -v -tx1 "$3" 2>&1)
  if [[ -f $2 && $a == "$b" ]]; then
    ok
  else
    bad "$1: $2 differs from $3"
    echo "  got:    ${a:0:2000}" >&2
    echo "  wanted: ${b:0:2000}" >&2
  fi
}

# finish NAME: the closing line ctest and people read; the exit status.
finish() {
  echo "$1: $passed passed, $failed failed"
  [[ $failed == 0 ]]
}
