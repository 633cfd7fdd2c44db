"""`fsdpsim hunt --html`: one page, a catalogue row per class (the classes the
--json catalogue lists) under its root cause's section, in the --json root causes'
order, linking to that class's timeline section, every id on the page unique,
each timeline a row per op of the class's minimal sequence and a column per
confirming backend (backends that agree share one, "model, real"), every link
relative to the page's directory and pointing at a file that is there."""
import json
import os
import sys
import tempfile
from html.parser import HTMLParser

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cli"))
import cli_util  # noqa: E402


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.rows, self.links, self.files = [], [], {}, []
        self.sections = {}  # section id -> {"steps": [...], "heads": [...]}
        self.section = None
        self.in_th = False
        self.row = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "section" and a.get("class") == "timeline":
            self.section = a.get("id")
            self.sections[self.section] = {"steps": [], "heads": []}
        if tag == "tr" and "class-row" in a.get("class", ""):
            self.row = a["data-class"]
            self.rows.append(self.row)
        if tag == "a" and self.row and a.get("href", "").startswith("#class-"):
            self.links[self.row] = a["href"][1:]
        elif tag == "a" and not a.get("href", "#").startswith("#"):
            self.files.append(a["href"])
        if tag == "tr" and self.section and a.get("id", "").startswith(self.section + "-step-"):
            self.sections[self.section]["steps"].append(a["id"])
        self.in_th = tag == "th" and self.section is not None

    def handle_endtag(self, tag):
        if tag == "tr":
            self.row = None
        if tag == "th":
            self.in_th = False

    def handle_data(self, data):
        if self.in_th and data.strip():
            self.sections[self.section]["heads"] += data.strip().split(", ")


def main():
    fsdpsim, root = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="fsdpsim-hunt-html-")
    S = cli_util.Session(fsdpsim, root, tmp)
    os.makedirs(os.path.join(tmp, "pages"))
    page = os.path.join(tmp, "pages", "hunt.html")  # beside --out, not above it: its links go up a directory
    # Without .venv the classes are confirmed on the C++ backend only: fast, and every class has a real column.
    # 6 s: the model's phases get 2 s of it (a third), the confirmation the rest.
    r = S.run(["hunt", "--seconds", "6", "--seed", "3", "--out", os.path.join(tmp, "hunt"), "--json", "--html", page, "--quiet"],
              {"FSDPSIM_PYTHON": "/nonexistent"})
    S.check(r.returncode == 0, "hunt exit %d: %s" % (r.returncode, r.stderr))
    classes = [json.loads(l) for l in r.stdout.splitlines() if json.loads(l)["type"] == "hunt_class"]
    roots = [json.loads(l) for l in r.stdout.splitlines() if json.loads(l)["type"] == "hunt_root_cause"]
    S.check(len(classes) > 3, "the hunt found %d classes" % len(classes))
    p = Page()
    p.feed(open(page, encoding="utf-8").read())
    S.check(len(p.ids) == len(set(p.ids)), "ids repeat on the page: %s" % sorted({i for i in p.ids if p.ids.count(i) > 1})[:5])
    grouped = [c for rc in roots for c in rc["classes"]]
    S.check(sorted(grouped) == sorted(c["class"] for c in classes), "the root causes do not hold every class once")
    S.check(p.rows == grouped, "catalogue rows %s, classes by root cause %s" % (p.rows[:3], grouped[:3]))
    S.check(any(f.startswith("../hunt/") for f in p.files), "no link to a class file relative to the page: %s" % p.files[:3])
    for f in p.files:
        S.check(not f.startswith("/") and not f.startswith("file:"), "absolute link %s" % f)
        S.check(os.path.exists(os.path.join(os.path.dirname(page), f)), "link %s points nowhere from the page's directory" % f)
    for c in classes:
        sec = p.links.get(c["class"])
        S.check(sec in p.sections, "%s: its link %s names no timeline section" % (c["class"], sec))
        if sec not in p.sections:
            continue
        got = p.sections[sec]
        want = [sec + "-step-%d" % k for k in range(1, c["ops"] + 1)]
        S.check(got["steps"] == want, "%s: step rows %s, want %s" % (c["class"], got["steps"], want))
        if c["real"] == "yes":
            S.check("real" in got["heads"] and "model" in got["heads"], "%s: backend columns %s" % (c["class"], got["heads"]))
    return S.finish("hunt --html: %d classes, each linked to its timeline" % len(classes))


if __name__ == "__main__":
    sys.exit(main())
