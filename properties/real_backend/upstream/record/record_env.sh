# Sourced by the record tests (usage: . record_env.sh FSDPSIM SOURCE_DIR NAME): FSDPSIM, SRC, a work
# folder T removed at exit, RUN (torchrun on 2 ranks), fail, and a TMPDIR of the recordings' own
# (T/tmp) that left_in_tmpdir checks is empty at the end, as CI checks its own. Exits 77 without
# the project's .venv.
FSDPSIM=$1
SRC=$2
[ -x "$SRC/.venv/bin/python" ] || exit 77
T=$(mktemp -d "${TMPDIR:-/tmp}/$3.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir "$T/tmp" && export TMPDIR="$T/tmp"
RUN="torchrun --standalone --nproc_per_node=2"
fail() { echo "FAIL: $*"; exit 1; }
left_in_tmpdir() {
  local left
  left=$(ls -A "$T/tmp")
  [ -z "$left" ] || fail "the recordings left in TMPDIR: $left"
}
