"""Runs exported repro scripts (export.py) under torchrun with real gloo, no
coordinator, and reads their verdict: exit 1 the bug reproduces, 0 it does not,
2 it fails differently. `python -m fsdpsim_upstream.repro_run [--results FILE] SCRIPT...`
prints (or writes to FILE) one line per script, `SCRIPT<TAB>CODE<TAB>the got line`,
running two at a time."""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

from .pool import free_port


def world_of(script_text):
    """`# world: N`, else the `--nproc_per_node=N` of the script's header, else 1."""
    m = re.search(r"^# world: (\d+)", script_text, re.M) or re.search(r"--nproc_per_node[= ](\d+)", script_text)
    return int(m.group(1)) if m else 1


def run_repro(path, timeout=180):
    """(the ranks' exit code, the expected/got/result lines, torchrun's stderr tail). torchrun turns any
    rank's non-zero code into its own 1, so the code is read off the script's `result: ... (exit N)`
    line; without one (a crash before it) a failed torchrun counts as 2, failing differently."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with open(path) as f:
        world = world_of(f.read())
    # torchrun's own logs (else a torchelastic_* directory left in $TMPDIR per launch) and the ranks'
    # compile caches, removed with the run
    with tempfile.TemporaryDirectory(prefix="fsdpsim-torchrun-") as logs:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(logs, "inductor"), TRITON_CACHE_DIR=os.path.join(logs, "triton"))
        try:
            out = subprocess.run([torchrun, f"--nproc_per_node={world}", f"--master_port={free_port()}", f"--log-dir={logs}", path],
                                 capture_output=True, text=True, timeout=timeout, cwd=os.path.dirname(path) or ".", env=env)
        except subprocess.TimeoutExpired:
            return 2, [], f"no verdict within {timeout} s"
    lines = [l for l in out.stdout.splitlines() if re.match(r"(rank \d+ )?(expected|got|result): ", l)]
    # One result line when the ranks agreed on a code; one per rank after a collective that could not
    # complete (a hang or mismatch finding), where the bug reproduces if any rank saw it.
    codes = [int(c) for c in re.findall(r"^(?:rank \d+ )?result: .* \(exit (\d)\)$", out.stdout, re.M)]
    code = (1 if 1 in codes else 2 if 2 in codes else 0) if codes else (0 if out.returncode == 0 else 2)
    if (code == 0) != (out.returncode == 0):  # the verdict line and torchrun must agree
        code = 2
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
        got = next((l.split("got: ", 1)[1] for l in lines if "got: " in l), "")
        print(f"{path}\t{code}\t{got}", file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
