#!/usr/bin/env python3
"""Progress and colours: the long commands (crosscheck, hunt, explore,
shrink, check) print progress on stderr and nothing there with --quiet; so do
the steps that block with nothing to count (run on the upstream or real
backend, versions making a release environment, export), once they pass ~2 s;
output that is not a terminal holds no escape codes; on a terminal (a pty)
check colours FAIL red and crosscheck overwrites its progress line in place,
and NO_COLOR turns the colours off.

Usage: cli_progress_test.py FSDPSIM REPO_ROOT
"""
import os
import pty
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-progress-"))
FSDPSIM, ROOT, REG, SEED000, TMP, check = S.fsdpsim, S.root, S.reg, S.seed000, S.tmp, S.check
ENV = dict(os.environ, FSDPSIM_PYTHON="/nonexistent")  # the hunt without upstream
ENV.pop("NO_COLOR", None)

# Each runs a few seconds (check a second or less: --quiet and the escape codes are what it shows).
LONG = {
    "crosscheck": ["crosscheck", "--seed", "20000", "--count", "150", "--out", os.path.join(TMP, "cc")],
    "hunt": ["hunt", "--seconds", "2", "--seed", "3", "--out", os.path.join(TMP, "hunt")],
    "explore": ["explore", "--builtin", "seed000_merged_raf_false", "--depth", "0", "--seconds", "3"],
    "check": ["check", REG, os.path.join(ROOT, "corpus", "divergences")],
}


def run(args, env=ENV):
    return subprocess.run([FSDPSIM] + args, capture_output=True, text=True, timeout=600, env=env)


def on_terminal(args, env, stdout_tty=True):
    """Runs with stdout (or else stderr) on a pty; (exit code, what the pty got, the other stream)."""
    master, slave = pty.openpty()
    other = subprocess.PIPE
    p = subprocess.Popen([FSDPSIM] + args, stdout=slave if stdout_tty else other, stderr=other if stdout_tty else slave, env=env)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not chunk:
            break
        got += chunk
    rest = (p.stderr if stdout_tty else p.stdout).read()
    p.wait(timeout=600)
    os.close(master)
    return p.returncode, got.decode(errors="replace"), rest.decode(errors="replace")


def slow_steps():
    """Steps that block for seconds: stand-ins make each take 3 s or more (a pool slow to start,
    a release environment slow to make, a long sequence on the real backend)."""
    obs = os.path.join(TMP, "seed000.jsonl")
    with open(obs, "w") as f:
        f.write(run(["run", SEED000, "--json"]).stdout)
    slow_python = os.path.join(TMP, "slow-release-env")  # release_env.py's stand-in: 3 s, then cannot run
    with open(slow_python, "w") as f:
        f.write("#!/bin/sh\nsleep 3\necho 'cannot run: a stand-in release environment' >&2\nexit 1\n")
    os.chmod(slow_python, 0o755)
    text = open(SEED000).read()
    long_seq = os.path.join(TMP, "long.seq")  # 300 ops on the real backend
    with open(long_seq, "w") as f:
        f.write(text[:text.index("---\n") + 4] + "eval\ntrain_step\n" * 150)
    pool = dict(ENV, **S.fake_pool(obs), FAKE_POOL_START_S="3")
    slow = [("run", ["run", SEED000, "--backend", "model,upstream"], pool),
            ("versions", ["versions", SEED000, "--upstream", "peft==0.17.0"],
             dict(ENV, FSDPSIM_PYTHON=slow_python, FSDPSIM_RELEASES_DIR=os.path.join(TMP, "releases"))),
            ("run", ["run", long_seq, "--backend", "real"], ENV)]
    if os.access(os.path.join(ROOT, ".venv", "bin", "python"), os.X_OK):  # export starts the real libraries
        slow.append(("export", ["export", SEED000, "--python", "--out", os.path.join(TMP, "seed000.py")], dict(os.environ)))
    for tool, args, env in slow:
        t0 = time.time()
        loud = run(args, env)
        took = time.time() - t0
        lines = loud.stderr.splitlines()
        if took > 3.0:
            check(loud.stderr.startswith(tool + ": ") and all(l.startswith(tool + ": ") for l in lines),
                  "%s (%.1f s): no progress line on stderr: %r" % (" ".join(args[:4]), took, loud.stderr[-400:]))
            # into a pipe a line every 10 s, the first after ~2 s
            check(len(lines) <= 2 + int(took / 10), "%s: %d progress lines in %.1f s: %r" % (args[0], len(lines), took, lines[:6]))
        check("\x1b" not in loud.stderr + loud.stdout and "\r" not in loud.stderr, "%s: escape codes into a pipe" % args[0])
        quiet = run(args + ["--quiet"], env)
        check(quiet.stderr == "", "%s --quiet: stderr %r" % (" ".join(args[:4]), quiet.stderr[:400]))
        check(quiet.returncode == loud.returncode, "%s --quiet changed the exit code: %d vs %d" % (args[0], quiet.returncode, loud.returncode))
    # On a terminal the line is redrawn in place and erased before the result is printed.
    code, err, out = on_terminal(slow[0][1], pool, stdout_tty=False)
    check(code == 1 and "\rrun: " in err and err.endswith("\r\x1b[K") and "\x1b" not in out and "findings" in out,
          "run's progress on a terminal: %d %r" % (code, err[-300:]))


def main():
    for name, args in LONG.items():
        t0 = time.time()
        loud = run(args)
        # Progress shows once a run has taken a second of its own (the hunt's first line at once); the
        # wall time here also counts the process start, which under load took over half a second.
        if time.time() - t0 > 3.0 or name == "hunt":
            check(loud.stderr.startswith(name + ": "), "%s: no progress lines on stderr: %r" % (name, loud.stderr[-400:]))
        if name == "hunt":  # into a pipe its phase lines only, not a line per class triaged and confirmed
            lines = loud.stderr.splitlines()
            check(len(lines) <= 8 and any(l.startswith("hunt: triage: ") and l.endswith(" s") for l in lines),
                  "hunt: %d progress lines into a pipe: %r" % (len(lines), lines[:12]))
        for stream, text in (("stdout", loud.stdout), ("stderr", loud.stderr)):
            check("\x1b" not in text and "\r" not in text, "%s: escape codes in %s, which is not a terminal" % (name, stream))
        quiet = run(args + ["--quiet"])
        check(quiet.stderr == "", "%s --quiet: stderr %r" % (name, quiet.stderr[:400]))
        check(quiet.returncode == loud.returncode, "%s --quiet changed the exit code: %d vs %d" % (name, quiet.returncode, loud.returncode))
    shrink = run(["shrink", SEED000, "--quiet"])
    check(shrink.returncode == 1 and shrink.stderr == "", "shrink --quiet: %d %r" % (shrink.returncode, shrink.stderr[:300]))

    # Colours on a terminal only, never with NO_COLOR.
    wrong = S.wrong_seed000()
    plain = run(["check", SEED000, wrong])
    check("\x1b" not in plain.stdout and "\nFAIL " + wrong in "\n" + plain.stdout, "check into a pipe: %r" % plain.stdout[:300])
    code, tty, _ = on_terminal(["check", SEED000, wrong], ENV)
    check(code == 1 and "\x1b[31mFAIL\x1b[0m " + wrong in tty and "\x1b[32mPASS\x1b[0m " + SEED000 in tty, "check on a terminal: %r" % tty[:400])
    code, tty, _ = on_terminal(["check", SEED000, wrong], dict(ENV, NO_COLOR="1"))
    check(code == 1 and "\x1b" not in tty and "FAIL " + wrong in tty, "check on a terminal with NO_COLOR: %r" % tty[:400])
    code, tty, _ = on_terminal(["run", SEED000], ENV)
    check(code == 1 and "\x1b[31mfindings: " in tty, "run on a terminal: %r" % tty[-400:])
    # Progress on a terminal replaces itself (\r, erase to the end of the line); stdout keeps no escapes.
    code, err, out = on_terminal(LONG["crosscheck"], ENV, stdout_tty=False)
    check(code == 0 and "\rcrosscheck: " in err and "\x1b[K" in err and "\x1b" not in out, "crosscheck progress on a terminal: %r" % err[-300:])
    # The hunt on a terminal: its ticks redraw one line, only the phase totals stay.
    code, err, _ = on_terminal(LONG["hunt"], ENV, stdout_tty=False)
    check(code == 0 and "\rhunt: triage: " in err and "\x1b[K" in err and err.count("\n") <= 8,
          "hunt progress on a terminal: %d lines: %r" % (err.count("\n"), err[-400:]))
    slow_steps()
    return S.finish("progress on stderr, --quiet, colours and escape codes only on a terminal")

if __name__ == "__main__":
    sys.exit(main())
