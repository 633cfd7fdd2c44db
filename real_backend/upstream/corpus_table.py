"""Prints the README's corpus table: every regression file, what the model and
the upstream backend each observe against the file's expectations, and
whether the two agree op by op (`fsdpsim check --backend model,upstream`).
Usage: python3 real_backend/upstream/corpus_table.py build/fsdpsim corpus/regressions"""
import glob
import os
import re
import subprocess
import sys


def verdict(fsdpsim, path, backend):
    out = subprocess.run([fsdpsim, "check", path, "--backend", backend], capture_output=True, text=True)
    first = out.stdout.splitlines()[0] if out.stdout else out.stderr.strip()
    m = re.search(r"(\d+) findings as expected", first)
    if first.startswith("PASS"):
        return f"expectations hold ({m.group(1) if m else 0} findings)", out
    fails = [l for l in out.stdout.splitlines() if l.strip().startswith(("[", path))]
    return f"{len(fails)} expectation(s) fail", out


def main():
    fsdpsim, corpus = sys.argv[1], sys.argv[2]
    print("| file | model | upstream | model = upstream |")
    print("|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(corpus, "*.seq"))):
        model, _ = verdict(fsdpsim, path, "model")
        upstream, _ = verdict(fsdpsim, path, "upstream")
        both = subprocess.run([fsdpsim, "check", path, "--backend", "model,upstream"], capture_output=True, text=True)
        m = re.search(r"divergences \(model vs upstream\): (\d+)", both.stdout)
        agree = "yes" if not m else f"no ({m.group(1)} fields differ)"
        print(f"| `{os.path.basename(path)}` | {model} | {upstream} | {agree} |")


if __name__ == "__main__":
    main()
