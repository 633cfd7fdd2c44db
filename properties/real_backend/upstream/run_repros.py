"""Runs exported repro scripts under torchrun and reads their verdict. As a program
(ctest `findings_repros`): every docs/findings/*.py must still reproduce its bug (its
ranks exit 1); prints each script's verdict and fails naming those that do not."""
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream.pool import free_port  # noqa: E402


def world_of(script_text):
    """`# world: N`, else the `--nproc_per_node=N` of the script's header, else 1."""
    m = re.search(r"^# world: (\d+)", script_text, re.M) or re.search(r"--nproc_per_node[= ](\d+)", script_text)
    return int(m.group(1)) if m else 1


def run_repro(path, timeout=120):
    """(the ranks' exit code, the expected/got/result lines, torchrun's stderr tail). torchrun turns any
    rank's non-zero code into its own 1, so the code is read off the script's `result: ... (exit N)`
    line; without one (a crash before it) a failed torchrun counts as 2, failing differently."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with open(path) as f:
        world = world_of(f.read())
    try:
        out = subprocess.run([torchrun, f"--nproc_per_node={world}", f"--master_port={free_port()}", path],
                             capture_output=True, text=True, timeout=timeout, cwd=os.path.dirname(path) or ".")
    except subprocess.TimeoutExpired:
        return 2, [], f"no verdict within {timeout} s"
    lines = [l for l in out.stdout.splitlines() if l.startswith(("expected: ", "got: ", "result: "))]
    m = re.search(r"^result: .* \(exit (\d)\)$", out.stdout, re.M)
    code = int(m.group(1)) if m else (0 if out.returncode == 0 else 2)
    if (code == 0) != (out.returncode == 0):  # the verdict line and torchrun must agree
        code = 2
    return code, lines, out.stderr[-1500:]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "docs", "findings")
    scripts = sorted(glob.glob(os.path.join(root, "*.py")))
    print(f"{len(scripts)} scripts")
    bad = []
    for path in scripts:
        code, lines, err = run_repro(os.path.abspath(path))
        print(f"{os.path.basename(path)}: exit {code}")
        for l in lines:
            print("  " + l)
        if code != 1:
            why = {0: "it no longer reproduces (fixed upstream? move it out of docs/findings)",
                   2: "it fails differently"}.get(code, f"exit {code}")
            bad.append(f"{os.path.basename(path)}: {why}")
            if code == 2 and not lines:
                print(err)
    for b in bad:
        print("FAILED " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
