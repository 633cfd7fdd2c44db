"""Each candidate fix in docs/findings/<report>.patch does what its header says, on a copy of
the pinned PEFT with the patch applied (in a temporary directory, removed after):
1. every repro its `fixes:` lines name exits 0, every one its `still-fails:` lines name still
   exits 1 through its assert (the copy first on PYTHONPATH);
2. the report's corpus classes (the corpus files `fsdpsim triage` attributes to the report's
   entry points, at most PER_ROOT_CAUSE classes each, one file per class) reproduce on the
   pinned PEFT and no longer on the patched copy (`fsdpsim versions --peft COPY`, which
   builds the copy's environment under the temporary directory), and wherever the model's
   `patched` profile drops the root cause (`fsdpsim triage --profile patched`), the patched
   copy agrees. A class the header lists as `corpus-unchanged: FILE` (with its reason in the
   header) must instead still reproduce on the patched copy: the patch does not claim it;
3. the model under the `patched` profile says what the patched copy says, class by class: the
   profile drops the root cause exactly where the copy stops reproducing it. The entry points
   in PROFILE_GAPS are the known exceptions (no switch models that part of the fix yet): for
   them the profile must still show the class, so an entry is removed once a switch models it.
Run by ctest (label upstream) as `test_findings_patches.py DIR FSDPSIM`; exit 77 (skipped)
without .venv's peft or the `patch` program."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))
from fsdpsim_upstream.repro_run import run_all  # noqa: E402

CORPUS = [os.path.join(ROOT, "corpus", "regressions"), os.path.join(ROOT, "corpus", "divergences")]
# Entry points whose fix no profile switch models yet: the patched profile still shows their classes
# where the patched copy is clean. Each leaves this set when a switch models it (the test says so).
PROFILE_GAPS = set()
PER_ROOT_CAUSE = 3  # classes checked per entry point: the whole corpus on every patch would take most of an hour
# What `pip install` needs to build the copy (a flat layout: peft/ beside this file); no dependencies
# are declared, the shared .venv already has them.
PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "peft"
version = "{version}+patched"

[tool.setuptools.packages.find]
include = ["peft*"]
"""


def patched_copy(patch, tmp):
    """(the copy's directory, None) or (None, why it does not apply)."""
    spec = importlib.util.find_spec("peft")
    pinned = spec.submodule_search_locations[0]
    copy = os.path.join(tmp, os.path.basename(patch)[:-len(".patch")])
    shutil.copytree(pinned, os.path.join(copy, "peft"), ignore=shutil.ignore_patterns("__pycache__"))
    from importlib.metadata import version
    with open(os.path.join(copy, "pyproject.toml"), "w") as f:
        f.write(PYPROJECT.format(version=version("peft")))
    applied = subprocess.run(["patch", "-p1", "--batch", "-i", os.path.abspath(patch)], cwd=copy,
                             capture_output=True, text=True)
    if applied.returncode != 0:
        return None, f"{patch}: does not apply to peft in {pinned}: {applied.stdout}{applied.stderr}"
    return copy, None


def check_repros(patch, text, root, copy):
    want = {name: 0 for name in re.findall(r"^fixes: (\S+)$", text, re.M)}
    want.update({name: 1 for name in re.findall(r"^still-fails: (\S+)$", text, re.M)})
    if not want:
        return [f"{patch}: no `fixes:` line names a repro"]
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


def triage(fsdpsim, files, *flags):
    """{file: (class, root cause)} of `fsdpsim triage FILES --json` (files with no finding left out)."""
    r = subprocess.run([fsdpsim, "triage", *files, "--json", *flags], capture_output=True, text=True, cwd=ROOT)
    out = {}
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "triage" and rec.get("root_cause"):
            out[os.path.normpath(os.path.join(ROOT, rec["file"]))] = (rec["class"], rec["root_cause"])
    return out


def pins_switches(file):
    """Whether the file sets switches of its own (`set NAME=VALUE`): a patched copy of PEFT cannot
    honour such a pin (e.g. `delete_fallback=per_layer` under the patched profile), so the file
    says nothing about whether the profile and the copy agree."""
    with open(file) as f:
        return any(line.startswith("set ") for line in f)


def report_classes(report, triaged):
    """One corpus file per class of the report's entry points (`report` or `report/...`), at most
    PER_ROOT_CAUSE classes per entry point, in file order: {file: root cause}."""
    seen, per_cause, out = set(), {}, {}
    for file, (cls, cause) in sorted(triaged.items()):
        if pins_switches(file):
            continue
        if (cause == report or cause.startswith(report + "/")) and cls not in seen:
            if per_cause.get(cause, 0) < PER_ROOT_CAUSE:
                seen.add(cls)
                per_cause[cause] = per_cause.get(cause, 0) + 1
                out[file] = cause
    return out


def check_corpus(patch, text, copy, fsdpsim, triaged, tmp):
    report = os.path.basename(patch)[:-len(".patch")]
    unclaimed = set(re.findall(r"^corpus-unchanged: (\S+)$", text, re.M))
    files = report_classes(report, triaged)
    if not files:
        print(f"{report}.patch: no corpus class is attributed to the report")
        return []
    env = dict(os.environ, FSDPSIM_RELEASES_DIR=os.path.join(tmp, "releases"))
    r = subprocess.run([fsdpsim, "versions", "--peft", copy, *files, "--json"], capture_output=True,
                       text=True, env=env, cwd=ROOT)
    if r.returncode not in (0, 1):
        return [f"{report}.patch: versions --peft exit {r.returncode}: {r.stderr[-800:]}"]
    fixed = {}
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "versions_change":
            fixed[rec["file"]] = (rec["was"], rec["now"])
    profile = triage(fsdpsim, list(files), "--profile", "patched")
    out = []
    for file, cause in files.items():
        stem = os.path.splitext(os.path.basename(file))[0]
        change = fixed.get(stem)
        on_copy = change == ("reproduces", "does not reproduce")
        in_profile = profile.get(file, ("", ""))[1] != cause
        rel = os.path.relpath(file, ROOT)
        print(f"{report}.patch: {rel} ({cause}): patched copy {'fixed' if on_copy else change or 'unchanged'}; "
              f"patched profile {'fixed' if in_profile else 'still shows it'}")
        if cause in PROFILE_GAPS:
            if in_profile:
                out.append(f"{report}.patch: {rel} ({cause}): the patched profile now drops it; take {cause} out of PROFILE_GAPS")
        elif in_profile != on_copy:
            out.append(f"{report}.patch: {rel} ({cause}): the patched profile {'drops' if in_profile else 'still shows'} it, "
                       f"the patched copy {'does not reproduce' if on_copy else 'reproduces'} it")
        if rel in unclaimed:
            if change is not None:
                out.append(f"{report}.patch: {rel} is listed as corpus-unchanged, but on the patched copy: {change}")
        elif not on_copy:
            out.append(f"{report}.patch: {rel} ({cause}) still reproduces on the patched copy, or did not on the pinned PEFT: "
                       f"{change or 'unchanged'}")
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "findings"))
    fsdpsim = sys.argv[2] if len(sys.argv) > 2 else None
    if importlib.util.find_spec("peft") is None or shutil.which("patch") is None:
        print("skipped: needs peft and the patch program")
        return 77
    patches = sorted(f for f in os.listdir(root) if f.endswith(".patch"))
    triaged = triage(fsdpsim, CORPUS) if fsdpsim else {}
    problems = []
    with tempfile.TemporaryDirectory(prefix="fsdpsim-patches-") as tmp:
        for p in patches:
            path = os.path.join(root, p)
            with open(path) as f:
                text = f.read()
            copy, why = patched_copy(path, tmp)
            if why:
                problems.append(why)
                continue
            problems += check_repros(path, text, root, copy)
            if fsdpsim:
                problems += check_corpus(path, text, copy, fsdpsim, triaged, tmp)
    for p in problems:
        print("FAILED " + p)
    print(f"{len(patches)} patches, {len(problems)} problems")
    return 1 if problems or not patches else 0


if __name__ == "__main__":
    sys.exit(main())
