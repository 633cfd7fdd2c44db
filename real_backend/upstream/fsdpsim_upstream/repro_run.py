"""Runs exported repro scripts (export.py) as their docstring's `Run:` line says (torchrun
with real gloo, or plain python) and reads their verdict: 1 the bug reproduces (the
script's assert failed: an AssertionError on stderr and a non-zero exit), 0 it does not
(exit 0), 2 it fails differently (any other failure: a crash, a timeout, an exception that
is not the assert). `python -m fsdpsim_upstream.repro_run [--results FILE] SCRIPT...`
prints (or writes to FILE) one line per script, `SCRIPT<TAB>CODE<TAB>the assert's message`,
running two at a time."""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

from .pool import free_port


def launch_of(script_text):
    """(launcher, world) from the script's `Run:` line: ("python", 1) or ("torchrun", N)."""
    m = re.search(r"^Run: (python|torchrun --nproc_per_node=(\d+)) ", script_text, re.M)
    if not m:
        return "torchrun", 1
    return ("python", 1) if m.group(1) == "python" else ("torchrun", int(m.group(2)))


def run_repro(path, timeout=180):
    """(the verdict code, the assert's message lines, the stderr tail)."""
    bindir = os.path.dirname(sys.executable)
    with open(path) as f:
        launcher, world = launch_of(f.read())
    # torchrun's own logs (else a torchelastic_* directory left in $TMPDIR per launch) and the ranks'
    # compile caches, removed with the run
    with tempfile.TemporaryDirectory(prefix="fsdpsim-torchrun-") as logs:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(logs, "inductor"), TRITON_CACHE_DIR=os.path.join(logs, "triton"))
        for _attempt in range(3):
            cmd = ([sys.executable, path] if launcher == "python" else
                   [os.path.join(bindir, "torchrun"), f"--nproc_per_node={world}", f"--master_port={free_port()}", f"--log-dir={logs}", path])
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=os.path.dirname(path) or ".", env=env)
            except subprocess.TimeoutExpired:
                return 2, [], f"no verdict within {timeout} s"
            # A rank that aborts with no exception in flight is torch's gloo runtime tearing down (a
            # thread left joinable; about 1 launch in 6 on a loaded 2-core machine), not the script's
            # verdict: the launch is run again, at most twice.
            if out.returncode == 0 or "terminate called without an active exception" not in out.stderr:
                break
    # the last AssertionError a rank printed: the script's own (a library's may be chained before it)
    lines = re.findall(r"^(?:\[rank\d+\]: )?AssertionError: (.*)$", out.stderr, re.M)[-1:]
    code = 0 if out.returncode == 0 else 1 if lines else 2
    return code, lines, out.stderr[-1500:]


def run_all(paths, workers=2):
    """{path: run_repro(path)}, `workers` torchruns at a time."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(paths, pool.map(run_repro, paths)))


def main():
    args = sys.argv[1:]
    out = sys.stdout
    if args[:1] == ["--results"]:  # fsdpsim hunt --scripts reads the lines from a file
        out = open(args[1], "w")
        args = args[2:]
    for path, (code, lines, _err) in run_all([os.path.abspath(p) for p in args]).items():
        got = lines[0] if lines else ""
        print(f"{path}\t{code}\t{got}", file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
