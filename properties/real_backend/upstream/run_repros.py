"""Runs exported repro scripts under torchrun and reads their verdict. As a program
(ctest `findings_repros`): every docs/findings/*.py must still reproduce its bug (its
ranks exit 1); prints each script's verdict and fails naming those that do not."""
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream.repro_run import run_all  # noqa: E402


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "docs", "findings")
    scripts = sorted(glob.glob(os.path.join(root, "*.py")))
    print(f"{len(scripts)} scripts")
    bad = []
    results = run_all([os.path.abspath(p) for p in scripts])
    for path in scripts:
        code, lines, err = results[os.path.abspath(path)]
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
