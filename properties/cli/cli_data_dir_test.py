"""The project's data wherever fsdpsim runs (sim/core/project_data.hpp): from a directory outside the
repository the hunt fills the regression and repro columns and `report` links the root cause's
page, and every path either prints exists from there; with FSDPSIM_DATA_DIR at an empty folder
both say once, on stderr, which columns are unavailable and why, and print no path to nothing."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util  # noqa: E402


def run(S, args, cwd, env=None):
    return subprocess.run([S.fsdpsim] + args, capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=dict(os.environ, **(env or {})))


def records(stdout, kind):
    return [r for r in map(json.loads, stdout.splitlines()) if r["type"] == kind]


def printed_paths(text):
    """Every token that names a file or folder of the project or the hunt's output."""
    return re.findall(r"[\w./-]*(?:docs/findings|corpus/)[\w./<>,' -]*?(?=[\s)\"]|$)", text)


def main():
    fsdpsim, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="fsdpsim-data-dir-")
    S = cli_util.Session(fsdpsim, root, tmp)
    S.check(not os.path.realpath(tmp).startswith(os.path.realpath(root) + os.sep), "TMPDIR lies inside the repository")
    seed000 = S.seed000
    env = {"FSDPSIM_DATA_DIR": ""}  # the compiled-in source tree

    # The hunt from outside the repository: the smallest budget that gives rows.
    r = run(S, ["hunt", "--model-only", "--seconds", "2", "--out", "h", "--json", "--quiet"], tmp, env)
    S.check(r.returncode == 0, "hunt --json exit %d: %s" % (r.returncode, r.stderr[-500:]))
    classes, roots = records(r.stdout, "hunt_class"), records(r.stdout, "hunt_root_cause")
    S.check(len(classes) > 3, "the hunt found %d classes" % len(classes))
    S.check(any(c["regression"] for c in classes), "no class has a regression file: the corpus was not found")
    S.check(any(rc["repro"] for rc in roots) and any(rc["page"] for rc in roots), "no root cause has a page or a repro script")
    for c in classes:
        S.check(not c["regression"] or os.path.exists(os.path.join(tmp, c["regression"])), "regression %s is not there" % c["regression"])
    for rc in roots:
        for k in ("page", "repro"):
            S.check(not rc[k] or os.path.exists(os.path.join(tmp, rc[k])), "%s %s is not there from the working directory" % (k, rc[k]))
    S.check("unavailable" not in r.stderr, "the data was there, yet: %s" % r.stderr)

    t = run(S, ["hunt", "--model-only", "--seconds", "2", "--out", "h", "--quiet"], tmp, env)
    rows = [l for l in t.stdout.splitlines() if re.match(r"^\S+\s+(fixed|fix-proposed|reported|regression|unreported|by-design|documented|unsupported|misuse|unreviewed)\s", l)]
    S.check(any(re.search(r"\s yes \s", l) for l in rows), "no catalogue row has a repro: %s" % rows[:3])
    m = re.search(r"^pages, scripts: (\S+)/(?:report-<report>\.md, )?<root cause", t.stdout, re.M)
    S.check(m is not None and os.path.isdir(os.path.join(tmp, m.group(1))), "the pages line names no folder that is there: %s" % (m and m.group(1)))

    # report: the root cause links its page, relative to the page written here.
    rep = run(S, ["report", seed000, "--html", "r.html"], tmp, env)
    S.check(rep.returncode == 1, "report exit %d: %s" % (rep.returncode, rep.stderr))
    html = open(os.path.join(tmp, "r.html"), encoding="utf-8").read()
    link = re.search(r'Root cause <a href="([^"]+)"', html)
    S.check(link is not None, "report's box links no root-cause page")
    S.check(link is None or os.path.exists(os.path.join(tmp, link.group(1))), "the root-cause link %s leads nowhere" % (link and link.group(1)))

    # The data made unreachable: one line says what is missing, no path to nothing is printed.
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    gone = {"FSDPSIM_DATA_DIR": empty}
    u = run(S, ["hunt", "--model-only", "--seconds", "2", "--out", "h", "--quiet"], tmp, gone)
    S.check(u.returncode == 0, "hunt without data exit %d: %s" % (u.returncode, u.stderr[-300:]))
    lines = [l for l in u.stderr.splitlines() if "unavailable" in l]
    S.check(len(lines) == 1, "expected one line naming what is unavailable, got %r" % u.stderr)
    S.check(lines and "regression column" in lines[0] and "repro column" in lines[0] and empty in lines[0] and "FSDPSIM_DATA_DIR" in lines[0],
            "the line does not say which columns and why: %r" % lines)
    S.check("docs/findings/<" not in u.stdout, "the pages line names a folder that is not there")
    S.check(not re.search(r"\s yes \s", u.stdout), "a repro column says yes without the findings folder")
    for p in printed_paths(u.stdout):
        S.check(os.path.exists(os.path.join(tmp, p.split("<")[0])), "printed path %s does not exist" % p)
    ur = run(S, ["report", seed000, "--html", "r2.html"], tmp, gone)
    lines = [l for l in ur.stderr.splitlines() if "unavailable" in l]
    S.check(len(lines) == 1 and "page link" in lines[0], "report without data: %r" % ur.stderr)
    S.check('Root cause <a href' not in open(os.path.join(tmp, "r2.html"), encoding="utf-8").read(), "a link to a page that is not there")
    return S.finish("hunt and report from %s outside the repository" % tmp)


if __name__ == "__main__":
    sys.exit(main())
