"""Every class the patched hunt keeps in corpus/{regressions,divergences}/patched/ is explained in the
README's "Findings under `patched`" section: its file's first line names a root-cause
paragraph (a bold title there), and that paragraph lists the class id. Run by ctest
(label unit) with the system python3; `python3 patched_catalogue_test.py` by hand."""
import glob
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def findings_section(readme):
    start = readme.index("## Findings under `patched`")
    end = readme.index("\n### ", start)
    return readme[start:end]


def paragraphs(section):
    """{title: the paragraph's text} of the section's `- **title** ...` items."""
    out = {}
    for item in re.split(r"\n(?=- \*\*)", section):
        m = re.match(r"- \*\*(.+?)\*\*", item)
        if m:
            out[m.group(1)] = item
    return out


def problems(root=ROOT):
    section = findings_section(open(os.path.join(root, "README.md")).read())
    paras = paragraphs(section)
    bad = []
    files = sorted(glob.glob(os.path.join(root, "corpus", "regressions", "patched", "*.seq")) +
                   glob.glob(os.path.join(root, "corpus", "divergences", "patched", "*.seq")))
    if not files:
        bad.append("corpus/regressions/patched/ and corpus/divergences/patched/ hold no class files")
    for f in files:
        stem = os.path.basename(f)[:-4]
        lines = open(f).read().split("\n")
        m = re.match(r"# (.+?) \(README, Findings under `patched`\)\.", lines[0])
        if not m:
            bad.append(f"{stem}: the first line does not name its root cause paragraph")
            continue
        title = m.group(1)
        if title not in paras:
            bad.append(f"{stem}: no paragraph '{title}' in the findings section")
        elif f"`{stem}`" not in paras[title]:
            bad.append(f"{stem}: the paragraph '{title}' does not list it")
        if not any(line.startswith("# signature: ") for line in lines):
            bad.append(f"{stem}: no # signature: line")
    return bad


if __name__ == "__main__":
    bad = problems()
    for b in bad:
        print("FAIL:", b)
    n = len(glob.glob(os.path.join(ROOT, "corpus", "*", "patched", "*.seq")))
    print(f"{n} patched class files, {len(bad)} problems")
    sys.exit(1 if bad else 0)
