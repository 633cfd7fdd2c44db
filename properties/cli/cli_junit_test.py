#!/usr/bin/env python3
"""--junit FILE on check, crosscheck and hunt, and fuzz/nightly.sh's writer
(fuzz/junit_xml.py): each report parses (xml.etree), has testsuites >
testsuite > testcase with tests/failures/errors/time counts that add up, one
testcase per file / sequence / class, and a <failure> or <error> exactly where
the run failed, holding the finding's or divergence's text.

Usage: cli_junit_test.py FSDPSIM REPO_ROOT
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-junit-"))
ROOT, SEED000, TMP, check, fsdpsim = S.root, S.seed000, S.tmp, S.check, S.run


def report(path, what):
    """{testcase name: (outcome, message, text)} of a JUnit file, its structure and counts checked."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        S.problems.append("%s: %s does not parse: %s" % (what, path, e))
        return {}
    check(root.tag == "testsuites", "%s: root is <%s>" % (what, root.tag))
    suites = root.findall("testsuite")
    check(len(suites) == 1, "%s: %d testsuites" % (what, len(suites)))
    cases = {}
    for suite in suites:
        tcs = suite.findall("testcase")
        for el in (root, suite):
            for key, n in (("tests", len(tcs)), ("failures", sum(t.find("failure") is not None for t in tcs)),
                           ("errors", sum(t.find("error") is not None for t in tcs))):
                check(el.get(key) == str(n), "%s: <%s %s=%s>, counted %d" % (what, el.tag, key, el.get(key), n))
            check(float(el.get("time", "x")) >= 0, "%s: <%s> time=%s" % (what, el.tag, el.get("time")))
        for t in tcs:
            check(float(t.get("time", "x")) >= 0 and t.get("classname"), "%s: testcase %s lacks time or classname" % (what, t.get("name")))
            bad = t.find("failure") if t.find("failure") is not None else t.find("error")
            cases[t.get("name")] = ("pass",) if bad is None else (bad.tag, bad.get("message"), bad.text or "")
    return cases


def main():
    # check: a file passing, one failing an expectation, one that does not parse.
    wrong = S.wrong_seed000()
    broken = os.path.join(TMP, "broken.seq")
    open(broken, "w").write("world 2\nlayer a 4 2\n---\ntrian_step\n")
    out = os.path.join(TMP, "check.xml")
    r = fsdpsim(["check", SEED000, wrong, broken, "--junit", out])
    check(r.returncode == 3, "check: exit %d" % r.returncode)
    c = report(out, "check")
    check(set(c) == {SEED000, wrong, broken}, "check: testcases %s" % sorted(c))
    check(c.get(SEED000) == ("pass",), "check: %s" % (c.get(SEED000),))
    f = c.get(wrong, ("",))
    check(f[0] == "failure" and "expected" in f[2] and "S2" in f[2], "check: the failing file's testcase: %s" % (f,))
    check(c.get(broken, ("",))[0] == "error" and "unknown op 'trian_step'" in c.get(broken, ("", "", ""))[2],
          "check: the bad file's testcase: %s" % (c.get(broken),))

    # crosscheck: a testcase per sequence, all passing; then one divergent (the fake pool
    # replaying sequence 7's observations with one field changed), then one broken.
    out = os.path.join(TMP, "cc.xml")
    r = fsdpsim(["crosscheck", "--seed", "20000", "--count", "4", "--out", os.path.join(TMP, "cc"), "--junit", out])
    check(r.returncode == 0, "crosscheck: exit %d %s" % (r.returncode, r.stderr[-500:]))
    c = report(out, "crosscheck")
    check(sorted(c) == ["seed %d" % s for s in range(20000, 20004)] and all(v == ("pass",) for v in c.values()), "crosscheck: %s" % c)
    pool = S.divergent_seed7_pool()
    out = os.path.join(TMP, "cc_div.xml")
    r = fsdpsim(["crosscheck", "--seed", "7", "--count", "1", "--against", "upstream", "--out", os.path.join(TMP, "div"), "--junit", out], pool)
    check(r.returncode == 2, "crosscheck divergent: exit %d %s" % (r.returncode, r.stderr[-500:]))
    c = report(out, "crosscheck divergent").get("seed 7", ("",))
    check(c[0] == "failure" and "step 1 rank 0" in c[2] and "divergent_7.seq" in c[1], "crosscheck divergent: %s" % (c,))
    out = os.path.join(TMP, "cc_broken.xml")
    r = fsdpsim(["crosscheck", "--seed", "5", "--count", "1", "--timeout", "2000", "--out", os.path.join(TMP, "b"), "--junit", out],
                {"FSDPSIM_CRASH_RANK": "1"})
    c = report(out, "crosscheck broken").get("seed 5", ("",))
    check(r.returncode == 4 and c[0] == "error" and c[2], "crosscheck broken: exit %d, %s" % (r.returncode, c))

    # hunt: a testcase per class of the catalogue; with --fail-on-unreported (alias --fail-on-new) the classes whose root cause no upstream report covers fail.
    for strict in (False, True):
        out = os.path.join(TMP, "hunt.xml")
        args = ["hunt", "--seconds", "2", "--seed", "3", "--out", os.path.join(TMP, "hunt"), "--json", "--junit", out]
        r = fsdpsim(args + (["--fail-on-unreported"] if strict else []), {"FSDPSIM_PYTHON": "/nonexistent"})
        classes = {}
        for line in r.stdout.splitlines():
            rec = json.loads(line)
            if rec["type"] == "hunt_class":
                classes[rec["class"]] = rec["verdict"]
        c = report(out, "hunt")
        check(classes and set(c) == set(classes), "hunt: testcases %s, classes %s" % (sorted(c), sorted(classes)))
        for name, verdict in classes.items():
            want = "failure" if strict and verdict in ("bug, unreported", "bug, regression in", "unreviewed") else "pass"
            check(c.get(name, ("",))[0] == want, "hunt%s: class %s (%s): %s" % (" --fail-on-unreported" if strict else "", name, verdict, c.get(name)))
        unreported = {"bug, unreported", "bug, regression in", "unreviewed"} & set(classes.values())
        check(r.returncode == (1 if strict and unreported else 0), "hunt: exit %d" % r.returncode)

    # fuzz/nightly.sh's writer, on what a shell hands it (markup in names and texts).
    out = os.path.join(TMP, "nightly.xml")
    cases = "fuzz\tlifecycle_fuzzer\t12\tfailure\t2 crash artifacts\ta<b & \"c\"\\nline 2\nconfirm\tS1_x\t3\tpass\t\t\n"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "fuzz", "junit_xml.py"), out, "fsdpsim-nightly"], input=cases, text=True)
    c = report(out, "nightly")
    check(r.returncode == 0 and c.get("S1_x") == ("pass",) and c.get("lifecycle_fuzzer") == ("failure", "2 crash artifacts", 'a<b & "c"\nline 2'),
          "nightly: %s" % c)
    return S.finish("check, crosscheck, hunt and nightly JUnit reports")

if __name__ == "__main__":
    sys.exit(main())
