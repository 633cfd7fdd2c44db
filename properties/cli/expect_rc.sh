# Sourced by the command-line shell tests: `fail MESSAGE` and `expect_rc RC DESCRIPTION CMD...`
# (CMD's stdout and stderr into out.txt and err.txt of the current folder, both shown on a wrong exit).
fail() { echo "FAIL: $*"; exit 1; }
expect_rc() {
  local want=$1 what=$2; shift 2
  "$@" > out.txt 2> err.txt; local rc=$?
  [ "$rc" = "$want" ] || { cat out.txt err.txt; fail "$what: exit $rc, wanted $want"; }
}
