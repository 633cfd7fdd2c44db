#!/usr/bin/env python3
"""JUnit XML for fuzz/nightly.sh, with the escaping a shell echo lacks.

Reads one testcase per line on standard input, tab-separated:
    CLASSNAME  NAME  SECONDS  OUTCOME  MESSAGE  TEXT
OUTCOME is pass, failure or error; TEXT may hold literal \\n for newlines.
Writes testsuites > testsuite NAME (argv[2]) to the file argv[1], with tests,
failures, errors and time counts, as `fsdpsim check --junit` does.

Usage: junit_xml.py OUT.xml SUITE_NAME < cases.tsv
"""
import sys
import xml.etree.ElementTree as ET


def main():
    if len(sys.argv) != 3:
        print("usage: junit_xml.py OUT.xml SUITE_NAME < cases.tsv", file=sys.stderr)
        return 3
    out, suite_name = sys.argv[1], sys.argv[2]
    cases, total = [], 0.0
    for line in sys.stdin.read().splitlines():
        if not line.strip():
            continue
        fields = (line.split("\t") + [""] * 6)[:6]
        classname, name, seconds, outcome, message, text = fields
        seconds = float(seconds or 0)
        total += seconds
        cases.append((classname, name, seconds, outcome or "pass", message, text.replace("\\n", "\n")))
    counts = {"tests": str(len(cases)), "failures": str(sum(c[3] == "failure" for c in cases)),
              "errors": str(sum(c[3] == "error" for c in cases)), "time": "%.3f" % total}
    root = ET.Element("testsuites", dict(name="fsdpsim", **counts))
    suite = ET.SubElement(root, "testsuite", dict(name=suite_name, **counts))
    for classname, name, seconds, outcome, message, text in cases:
        tc = ET.SubElement(suite, "testcase", classname=classname, name=name, time="%.3f" % seconds)
        if outcome in ("failure", "error"):
            ET.SubElement(tc, outcome, message=message).text = text
        elif outcome != "pass":
            print("junit_xml.py: unknown outcome %r for %s" % (outcome, name), file=sys.stderr)
            return 3
    ET.indent(root)
    ET.ElementTree(root).write(out, encoding="UTF-8", xml_declaration=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
