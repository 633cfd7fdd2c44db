"""Imported first by the upstream Python tests: torch's compile caches (importing accelerate or
PEFT makes one) go into a directory removed at exit, not $TMPDIR/torchinductor_<user> left behind,
as the pool keeps its own inside its directory (pool.py's RankProc). Processes these tests start
inherit the setting; a cache directory set by the caller is kept."""
import atexit
import os
import shutil
import tempfile

if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _dir = tempfile.mkdtemp(prefix="fsdpsim-test-torch-caches-")
    atexit.register(shutil.rmtree, _dir, True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_dir, "inductor")
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_dir, "triton"))
