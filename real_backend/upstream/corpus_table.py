"""Prints the corpus table (docs/design/upstream-backend.md): every regression file, whether its
expectations hold on the model and on the upstream backend, and whether the
two agree op by op. Three whole-directory runs of `fsdpsim check`.
Usage: python3 real_backend/upstream/corpus_table.py build/fsdpsim corpus/regressions"""
import os
import re
import subprocess
import sys


def per_file(fsdpsim, corpus, backend):
    out = subprocess.run([fsdpsim, "check", corpus, "--backend", backend], capture_output=True, text=True).stdout
    files, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"(PASS|FAIL) (\S+\.seq)(.*)", line)
        if m:
            cur = os.path.basename(m.group(2))
            found = re.search(r"(\d+) findings as expected", m.group(3))
            files[cur] = {"pass": m.group(1) == "PASS", "findings": int(found.group(1)) if found else None,
                          "fails": 0, "divergences": 0}
        elif cur and line.startswith("  "):
            d = re.search(r"divergences \(model vs upstream\): (\d+)", line)
            if d:
                files[cur]["divergences"] = int(d.group(1))
            elif "expected" in line:
                files[cur]["fails"] += 1
    return files


def verdict(v):
    if v["pass"]:
        return f"holds ({v['findings']} findings)" if v["findings"] is not None else "holds"
    return f"{v['fails']} expectation(s) fail"


def main():
    fsdpsim, corpus = sys.argv[1], sys.argv[2]
    model = per_file(fsdpsim, corpus, "model")
    upstream = per_file(fsdpsim, corpus, "upstream")
    both = per_file(fsdpsim, corpus, "model,upstream")
    print("| file | model | upstream | model = upstream |")
    print("|---|---|---|---|")
    for name in sorted(model):
        d = both.get(name, {}).get("divergences", 0)
        agree = "yes" if both.get(name, {}).get("pass") and not d else f"no ({d} fields differ)"
        print(f"| `{name}` | {verdict(model[name])} | {verdict(upstream[name])} | {agree} |")


if __name__ == "__main__":
    main()
