#!/usr/bin/env python3
"""The GitHub Actions workflows cannot run here; this checks what can be checked.

- .github/workflows/ci.yml and nightly.yml parse as YAML and have the
  triggers they promise (ci: push; nightly: schedule with a cron line);
- every script a `run:` step calls exists in the repository, and every flag
  passed to fuzz/nightly.sh is one it accepts;
- every `fsdpsim COMMAND` they call is a command the built binary knows, and
  every flag given to it is one that command accepts (asked of the binary:
  an unknown command or flag is exit 3 naming it);
- ci.yml runs the README's test command and ClusterFuzzLite's full build
  (clusterfuzzlite_build_test.sh); nightly.yml uploads findings, shrunk
  sequences and the JUnit XML, and merges what the crosscheck shards wrote;
  the crosscheck matrix has as many shards as SHARDS says; nightly.yml runs
  the default release matrix over docs/findings and compares it with
  docs/findings/versions.jsonl (`fsdpsim versions --compare`), and the
  `slow` ctest label wherever .ci/test.sh leaves it out.

Usage: workflows_test.py FSDPSIM REPO_ROOT
"""
import os
import re
import subprocess
import sys

try:
    import yaml
except ImportError:  # Debian's python3-yaml missing: the venv has PyYAML
    venv = os.path.join(sys.argv[2], ".venv", "bin", "python")
    if os.path.exists(venv) and os.path.realpath(sys.executable) != os.path.realpath(venv):
        os.execv(venv, [venv] + sys.argv)
    print("FAIL: no PyYAML: run bash .ci/install-deps.sh (python3-yaml)")
    sys.exit(1)

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def steps(doc):
    for name, job in (doc.get("jobs") or {}).items():
        for step in job.get("steps") or []:
            yield name, job, step


def commands(script):
    """Shell commands of a run: block, continuation lines joined."""
    return [c.strip() for c in re.sub(r"\\\n\s*", " ", script).split("\n") if c.strip()]


def probe(fsdpsim, args):
    r = subprocess.run([fsdpsim] + args, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def main():
    fsdpsim, root = sys.argv[1], sys.argv[2]
    wf = os.path.join(root, ".github", "workflows")
    docs = {}
    for name in ("ci.yml", "nightly.yml"):
        path = os.path.join(wf, name)
        try:
            with open(path) as f:
                docs[name] = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as e:
            print("FAIL: %s: %s" % (path, e))
            sys.exit(1)
        check(isinstance(docs[name], dict) and docs[name].get("jobs"), name + ": no jobs")
    # PyYAML reads the key `on` as the boolean true.
    trig = lambda d: d.get("on", d.get(True)) or {}
    check("push" in trig(docs["ci.yml"]), "ci.yml does not run on push")
    sched = trig(docs["nightly.yml"]).get("schedule") or []
    check(any(re.fullmatch(r"(\S+\s+){4}\S+", s.get("cron", "")) for s in sched), "nightly.yml has no schedule: with a cron line")

    nightly_sh = open(os.path.join(root, "fuzz", "nightly.sh")).read()
    usage = re.search(r"usage: fuzz/nightly.sh (.*)", nightly_sh).group(1)
    seen_cmds, all_runs = set(), {}
    for name, doc in docs.items():
        runs = []
        for job_name, job, step in steps(doc):
            check("run" in step or "uses" in step, "%s job %s: a step with neither run nor uses" % (name, job_name))
            if "uses" in step:
                check(re.fullmatch(r"[\w.-]+/[\w./-]+@v\d+", step["uses"]) is not None, "%s: unpinned action %s" % (name, step["uses"]))
            if "run" not in step:
                continue
            for cmd in commands(step["run"]):
                runs.append(cmd)
                # Scripts of this repository.
                for script in re.findall(r"(?:^|[\s;&|(])((?:\./)?(?:\.ci|fuzz|\.clusterfuzzlite|properties)/[\w./-]+\.(?:sh|py))", cmd):
                    check(os.path.isfile(os.path.join(root, script)), "%s: %s calls %s, which does not exist" % (name, job_name, script))
                m = re.search(r"fuzz/nightly\.sh(.*)", cmd)
                if m:
                    for flag in re.findall(r"(--[a-z-]+)", m.group(1)):
                        check(re.search(re.escape(flag) + r"(?![\w-])", usage) is not None, "%s: fuzz/nightly.sh does not accept %s (usage: %s)" % (name, flag, usage))
                # fsdpsim commands and their flags.
                for m in re.finditer(r"(?:^|[\s/])fsdpsim\s+([a-z][a-z-]*)((?:\s+(?:\"[^\"]*\"|'[^']*'|[^\s|;&]+))*)", cmd):
                    sub, rest = m.group(1), m.group(2)
                    seen_cmds.add(sub)
                    code, out = probe(fsdpsim, [sub, "--zz-probe"])
                    check(code == 3 and "unknown flag --zz-probe" in out and "unknown command" not in out,
                          "%s: `fsdpsim %s` is not a command of the built fsdpsim (%s)" % (name, sub, out.strip()[:200]))
                    for flag in set(re.findall(r"(?:^|\s)(--[a-z][a-z-]*)", rest)):
                        # A flag with a value takes --zz-probe as its value; a
                        # known switch leaves --zz-probe to be the unknown one.
                        code, out = probe(fsdpsim, [sub, flag, "--zz-probe"])
                        check("unknown flag " + flag not in out, "%s: `fsdpsim %s` does not accept %s" % (name, sub, flag))
        all_runs[name] = "\n".join(runs)

    check("bash .ci/test.sh" in all_runs["ci.yml"], "ci.yml does not run the README's test command (bash .ci/test.sh)")
    # The ClusterFuzzLite image build left the test command for a job of its own: it must stay there.
    check(re.search(r"(?m)^bash properties/ci/clusterfuzzlite_build_test\.sh\s*$", all_runs["ci.yml"]) is not None,
          "ci.yml does not run properties/ci/clusterfuzzlite_build_test.sh (the full build, without --no-compile)")
    readme = open(os.path.join(root, "README.md")).read()
    check("bash .ci/test.sh" in readme, "the README no longer names bash .ci/test.sh as its test command")
    n = docs["nightly.yml"]
    check("fuzz/nightly.sh" in all_runs["nightly.yml"], "nightly.yml does not run fuzz/nightly.sh")
    check({"crosscheck", "merge-results"} <= seen_cmds, "nightly.yml does not run crosscheck shards and merge-results")
    uploads = " ".join(str(s.get("with", {}).get("path", "")) for _, _, s in steps(n) if "upload-artifact" in s.get("uses", ""))
    for what in ("findings", "shrunk", "junit.xml"):
        check(what in uploads, "nightly.yml uploads no %s" % what)
    # The shards' --results files and divergent sequences are under an uploaded folder.
    shard_runs = "\n".join(c for c in all_runs["nightly.yml"].split("\n") if "fsdpsim crosscheck" in c)
    for out in re.findall(r"--(?:results|out) \"?([\w./-]+)", shard_runs):
        check(any(out.startswith(p.strip()) for p in uploads.split() if p.strip().endswith("/")),
              "nightly.yml writes %s outside every uploaded folder" % out)
    check("junit.xml" in nightly_sh, "fuzz/nightly.sh no longer writes junit.xml")
    cc = n["jobs"]["crosscheck"]
    shards = cc["strategy"]["matrix"]["shard"]
    check(shards == list(range(len(shards))) and str(len(shards)) == str(n["env"]["SHARDS"]),
          "nightly.yml: the matrix's shards %s do not match SHARDS=%s" % (shards, n["env"]["SHARDS"]))
    check("--shard" in all_runs["nightly.yml"], "nightly.yml's crosscheck is not sharded")
    # The release matrix over the findings, gated on the kept verdicts (issue 40, item 6).
    check(re.search(r"fsdpsim versions docs/findings --matrix default --json", all_runs["nightly.yml"]) is not None
          and "fsdpsim versions --compare docs/findings/versions.jsonl" in all_runs["nightly.yml"],
          "nightly.yml does not run the default matrix over docs/findings and compare it with docs/findings/versions.jsonl")
    # `versions` exits 1 when a file reproduces (a finding; the findings reproduce on most releases):
    # the matrix step must go on to the comparison on 1 and stop on 3 or 4 only.
    matrix_step = [str(st.get("run", "")) for _, _, st in steps(n) if "fsdpsim versions docs/findings" in str(st.get("run", ""))]
    check(len(matrix_step) == 1 and '|| rc=$?' in matrix_step[0] and '[ "$rc" -le 1 ] || exit "$rc"' in matrix_step[0],
          "nightly.yml's matrix step must accept exit 0 and 1 (a reproduction) and stop on 3 or 4 only")
    # The test command leaves the `slow` label out (-LE slow); nightly.yml must run it, so every test runs somewhere.
    test_sh = open(os.path.join(root, ".ci", "test.sh")).read()
    leaves_out = re.search(r"(?m)^ctest --test-dir build .*-LE slow\b", test_sh) is not None
    check(not leaves_out or re.search(r"ctest --test-dir build -L slow\b", all_runs["nightly.yml"]) is not None,
          ".ci/test.sh leaves the slow label out and nightly.yml does not run `ctest --test-dir build -L slow`")
    if errors:
        for e in errors:
            print("FAIL: " + e)
        sys.exit(1)
    print("ok: ci.yml and nightly.yml parse; fsdpsim commands %s and every script they call exist" % sorted(seen_cmds))


if __name__ == "__main__":
    main()
