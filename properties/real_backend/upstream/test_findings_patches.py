"""Each candidate fix in docs/findings/*.patch does what its header says: applied to a
copy of the pinned PEFT in a temporary directory (first on PYTHONPATH), every repro its
`fixes:` lines name exits 0 and every one its `still-fails:` lines name still exits 1
through its assert. Run by ctest (label upstream) as `test_findings_patches.py [DIR]`;
exit 77 (skipped) without .venv's peft or the `patch` program."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream.repro_run import run_all  # noqa: E402


def check(patch, root, tmp):
    """Problems of one patch (empty when its header holds)."""
    with open(patch) as f:
        text = f.read()
    want = {name: 0 for name in re.findall(r"^fixes: (\S+)$", text, re.M)}
    want.update({name: 1 for name in re.findall(r"^still-fails: (\S+)$", text, re.M)})
    if not want:
        return [f"{patch}: no `fixes:` line names a repro"]
    pinned = importlib.util.find_spec("peft").submodule_search_locations[0]
    copy = os.path.join(tmp, os.path.basename(patch) + ".peft")
    shutil.copytree(pinned, os.path.join(copy, "peft"), ignore=shutil.ignore_patterns("__pycache__"))
    applied = subprocess.run(["patch", "-p1", "--batch", "-i", os.path.abspath(patch)], cwd=copy,
                             capture_output=True, text=True)
    if applied.returncode != 0:
        return [f"{patch}: does not apply to peft in {pinned}: {applied.stdout}{applied.stderr}"]
    os.environ["PYTHONPATH"] = copy + os.pathsep + os.environ.get("PYTHONPATH", "")
    try:
        results = run_all([os.path.join(root, name) for name in want])
    finally:
        os.environ["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep, 1)[1]
    out = []
    for name, code in want.items():
        got, lines, err = results[os.path.join(root, name)]
        print(f"{os.path.basename(patch)}: {name}: exit {got} (expected {code}) {lines[:1]}")
        if got != code:
            out.append(f"{patch}: {name} exits {got}, the header says {code}\n{err[-600:]}")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "docs", "findings")
    if importlib.util.find_spec("peft") is None or shutil.which("patch") is None:
        print("skipped: needs peft and the patch program")
        return 77
    patches = sorted(f for f in os.listdir(root) if f.endswith(".patch"))
    problems = []
    with tempfile.TemporaryDirectory(prefix="fsdpsim-patches-") as tmp:
        for p in patches:
            problems += check(os.path.join(root, p), root, tmp)
    for p in problems:
        print("FAILED " + p)
    print(f"{len(patches)} patches, {len(problems)} problems")
    return 1 if problems or not patches else 0


if __name__ == "__main__":
    sys.exit(main())
