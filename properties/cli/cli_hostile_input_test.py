#!/usr/bin/env python3
"""Hostile inputs and output paths, table-driven: each case runs the command
under a 1 GiB address-space limit and a 10 s timeout and must exit 3 with a
short message naming the problem, within 10 s and under 1 GB of resident
memory (ru_maxrss), creating nothing. Inputs: a FIFO (a plain open would
block forever), /dev/zero and /dev/urandom (never end), a directory, a 100 MB
file, a 1 MB line, a missing file, an unreadable one, a FIFO inside a
directory `check` walks. Outputs, for every flag naming a path: an existing
directory where a file is expected, a file where a directory is expected (or
as a parent), a missing parent directory, a read-only place.

Read-only as root: root passes permission bits and access(2), so a chmod'ed
directory proves nothing here. /proc is a place where no file can be created
for root either (and a plain file as a parent directory is refused for
everyone), so those stand for "read-only"; the checker itself probes by
creating a file, which a read-only mount refuses the same way.

Then the explorer's caps (--memory-budget, --max-states, the default under
`ulimit -v`) and the hunt's manifest (a user's S2-mine.seq survives).

Usage: cli_hostile_input_test.py FSDPSIM REPO_ROOT
"""
import os
import concurrent.futures
import resource
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402

S = Session(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), tempfile.mkdtemp(prefix="fsdpsim-hostile-"))
FSDPSIM, ROOT, SEED000, TMP, check = S.fsdpsim, S.root, S.seed000, S.tmp, S.check
ENV = dict(os.environ, FSDPSIM_PYTHON="/nonexistent")  # nothing here may need the upstream pool
GIB = 1 << 30
# An AddressSanitizer build (the test command's build-asan) reserves terabytes of shadow address
# space at start: under RLIMIT_AS it cannot start at all, so there the address-space limit is left
# off and the peak resident size, the time and the exit code are still checked.
with open(FSDPSIM, "rb") as _binary:
    ASAN = b"__asan_init" in _binary.read()  # the sanitizer runtime's entry, which an instrumented binary imports


def limited(args, timeout=10, address_space=GIB, cwd=None, env=None):
    """(exit code or 'timeout', stdout+stderr, seconds, peak resident bytes) of FSDPSIM ARGS
    under RLIMIT_AS, killed at the timeout; the peak is this child's own (wait4's rusage)."""
    def limit():
        if not ASAN:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    t0 = time.monotonic()
    p = subprocess.Popen([FSDPSIM] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=dict(ENV, **(env or {})), cwd=cwd or TMP, preexec_fn=limit)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    killed = not timer.is_alive()
    timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    p.stdout.close()
    code = "timeout" if killed else p.returncode
    return code, out.decode(errors="replace"), time.monotonic() - t0, usage.ru_maxrss * 1024


CASES = []  # (name, args, message, keyword arguments of limited, most output lines): run together below


def refused(name, args, message, lines=3, **kw):
    """A case that must exit 3 within 10 s, under 1 GB, with `message` in a short output."""
    CASES.append((name, args, message, kw, lines))


def judge(case):
    name, args, message, kw, lines = case
    code, out, seconds, rss = limited(args, **kw)
    check(code == 3, f"{name}: exit {code}, expected 3: {out[:300]!r}")
    check(message in out, f"{name}: {message!r} missing from {out[:300]!r}")
    check(len(out) < 200 * lines and out.count("\n") <= lines, f"{name}: more than a short message: {out[:300]!r}")
    check(seconds < 10, f"{name}: {seconds:.1f} s")
    check(rss < GIB, f"{name}: {rss / 1e9:.2f} GB resident")
    if os.environ.get("HOSTILE_VERBOSE"):
        print(f"{name}: exit {code}, {seconds:.2f} s, {rss / 1e6:.0f} MB: {out.strip()[:160]}")


# ---- inputs ----
fifo = os.path.join(TMP, "fifo.seq")
os.mkfifo(fifo)
a_dir = os.path.join(TMP, "a-dir")
os.mkdir(a_dir)
big = os.path.join(TMP, "big.seq")  # 100 MB of comment lines: every line short, the file too large
with open(big, "w") as f:
    line = "# " + "x" * 97 + "\n"
    f.write(line * (100 * 1000 * 1000 // len(line)))
long_line = os.path.join(TMP, "long.seq")
with open(long_line, "w") as f:
    f.write("world 1\n" + "layer a 2 2 " + "x" * 1000000 + "\n---\neval\n")
missing = os.path.join(TMP, "missing.seq")
# Unreadable: /proc/self/mem is a regular file that no one can read from its start (EIO), root included;
# a mode-000 file is unreadable to anyone else.
unreadable = "/proc/self/mem"
walked = os.path.join(TMP, "walked")  # `check DIR` with a FIFO and a device link among its .seq files
os.mkdir(walked)
os.mkfifo(os.path.join(walked, "a-fifo.seq"))
os.symlink("/dev/zero", os.path.join(walked, "zero.seq"))

INPUTS = {
    "fifo": (fifo, "not a regular file (a FIFO)"),
    "dev_zero": ("/dev/zero", "not a regular file (a character device)"),
    "dev_urandom": ("/dev/urandom", "not a regular file (a character device)"),
    "directory": (a_dir, "is a directory"),
    "file_100mb": (big, f"{big}:{(4 << 20) // len(line) + 1}:{(4 << 20) % len(line) + 1}: the file is larger than the 4 MiB limit"),
    "line_1mb": (long_line, f"{long_line}:2:65537: a line longer than the 64 KiB limit"),
    "missing": (missing, "cannot open file: No such file or directory"),
    "unreadable": (unreadable, "cannot read file: Input/output error"),
}
# Each command that reads a .seq file, with what it needs besides.
SEQ_COMMANDS = {
    "run": ["run", "{}"],
    "run_upstream": ["run", "{}", "--backend", "model,upstream"],
    "check": ["check", "{}"],
    "triage": ["triage", "{}"],
    "report": ["report", "{}", "--html", os.path.join(TMP, "r.html")],
    "export": ["export", "{}", "--python", "--out", os.path.join(TMP, "x.py")],
    "shrink": ["shrink", "{}"],
    "findings": ["findings", "{}", "--out", os.path.join(TMP, "pages")],
    "cost": ["cost", "{}"],
    "explore": ["explore", "{}"],
    "versions": ["versions", "{}"],
}
for cname, template in SEQ_COMMANDS.items():
    for iname, (path, message) in INPUTS.items():
        if iname == "directory" and cname in ("check", "triage", "findings", "versions"):
            continue  # these take directories (an empty one: below)
        refused(f"{cname} {iname}", [a.replace("{}", path) for a in template], message)
for cname in ("check", "triage", "versions"):
    for what, message in (("FIFO", "a-fifo.seq: not a regular file (a FIFO); expected a .seq file; skipped"),
                          ("device link", "zero.seq: not a regular file (a character device)")):
        refused(f"{cname} walked directory ({what})", [cname, walked], message, lines=4)

# JSON inputs: the results merge-results reads, the verdicts versions --compare reads.
big_json = os.path.join(TMP, "big.json")
with open(big_json, "w") as f:
    f.truncate(100 * 1000 * 1000)
for iname, (path, message) in {**INPUTS, "file_100mb": (big_json, f"{big_json}:1:67108865: the file is larger than the 64 MiB limit")}.items():
    if iname == "line_1mb":
        continue  # a JSON record may be one long line
    message = message.replace("a .seq file", "a JSON input")
    refused(f"merge-results {iname}", ["merge-results", path], message)
    refused(f"versions --compare {iname}", ["versions", "--compare", path, path], message)

# The release matrix a user may name (FSDPSIM_MATRIX_FILE), and the test seam's answers file.
refused("versions FSDPSIM_MATRIX_FILE fifo", ["versions", SEED000], "not a regular file (a FIFO); expected a text file",
        env={"FSDPSIM_MATRIX_FILE": fifo})
refused("versions FSDPSIM_FAKE_RELEASES /dev/zero", ["versions", SEED000], "not a regular file (a character device)",
        env={"FSDPSIM_FAKE_RELEASES": "/dev/zero"})

# ---- outputs ----
a_file = os.path.join(TMP, "a-file")
open(a_file, "w").close()
out_dir = os.path.join(TMP, "out-dir")
os.mkdir(out_dir)
FILE_TARGETS = {  # a flag naming a file
    "existing directory": (out_dir, "is a directory"),
    "missing parent": (os.path.join(TMP, "no", "such", "x.out"), "cannot create it: no directory"),
    "file as parent": (os.path.join(a_file, "x.out"), f"cannot create it: {a_file} is not a directory"),
    "read-only place": ("/proc/fsdpsim-hostile.out", "cannot create it in /proc"),
}
DIR_TARGETS = {  # a flag naming a directory
    "existing file": (a_file, "not a directory"),
    "file as parent": (os.path.join(a_file, "sub"), f"cannot create it: {a_file} is not a directory"),
    "read-only place": ("/proc/fsdpsim-hostile", "cannot create it in /proc"),
}
results = os.path.join(TMP, "results.json")
subprocess.run([FSDPSIM, "crosscheck", "--seed", "1", "--count", "1", "--results", results, "--quiet"], env=ENV, cwd=TMP,
               capture_output=True, timeout=300)
check(os.path.exists(results), "crosscheck --results wrote nothing (the merge-results cases need it)")
HUNT = ["hunt", "--model-only", "--seconds", "30"]  # 30 s of work: a check after it runs past the 10 s bound
FILE_FLAGS = {
    "export --out": ["export", SEED000, "--python", "--out", "{}"],
    "report --html": ["report", SEED000, "--html", "{}"],
    "check --junit": ["check", SEED000, "--junit", "{}"],
    "hunt --junit": HUNT + ["--junit", "{}"],
    "hunt --html": HUNT + ["--html", "{}"],
    "explore --dot": ["explore", "--builtin", "seed000_merged_raf_false", "--depth", "0", "--dot", "{}"],
    "explore --svg": ["explore", "--builtin", "seed000_merged_raf_false", "--depth", "0", "--svg", "{}"],
    "crosscheck --results": ["crosscheck", "--seed", "1", "--count", "100000", "--results", "{}"],
    "crosscheck --junit": ["crosscheck", "--seed", "1", "--count", "100000", "--junit", "{}"],
    "merge-results --results": ["merge-results", results, "--results", "{}"],
}
DIR_FLAGS = {
    "hunt --out": HUNT + ["--out", "{}"],
    "explore --out": ["explore", "--builtin", "seed000_merged_raf_false", "--depth", "0", "--out", "{}"],
    "triage --out": ["triage", SEED000, "--out", "{}"],
    "crosscheck --out": ["crosscheck", "--seed", "1", "--count", "100000", "--out", "{}"],
    "random --out": ["random", "--seed", "1", "--count", "100000", "--out", "{}"],
    "findings --out": ["findings", SEED000, "--out", "{}"],
}
for flags, targets in ((FILE_FLAGS, FILE_TARGETS), (DIR_FLAGS, DIR_TARGETS)):
    for fname, template in flags.items():
        for tname, (path, message) in targets.items():
            refused(f"{fname} {tname}", [a.replace("{}", path) for a in template], message)
# The hunt's default directory (out/hunt) is checked like a --out: here `out` is a file.
open(os.path.join(out_dir, "out"), "w").close()
refused("hunt default out/hunt", HUNT, "--out out/hunt: cannot create it: out is not a directory", cwd=out_dir)
# A FIFO no process reads, as an output file: refused, never waited on.
refused("report --html fifo", ["report", SEED000, "--html", fifo], "a FIFO no process reads")

# Four at a time: the machine's load may slow each, never past the 10 s bound.
with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    list(pool.map(judge, CASES))
# Nothing was created: no refused path exists, the existing targets are as they were (no probe file left).
for target in list(FILE_TARGETS.values()) + list(DIR_TARGETS.values()):
    if target[0] not in (a_file, out_dir):
        check(not os.path.exists(target[0]), f"{target[0]}: created by a refused command")
check(os.listdir(out_dir) == ["out"] and os.path.getsize(a_file) == 0, f"{out_dir}: {os.listdir(out_dir)}; {a_file} written")

# ---- the explorer's caps ----
three_layers = os.path.join(TMP, "three_layers.seq")
with open(three_layers, "w") as f:
    f.write("world 2\nlayer a 8 8\nlayer b 8 8\nlayer c 8 2\nadapter default r=4 alpha=4 targets=a,b,c\n"
            "adapter other r=4 alpha=4 targets=a,b,c\nfully_shard a\nfully_shard b\nfully_shard c\n"
            "fully_shard root reshard_after_forward=false\n---\n")
code, out, seconds, _ = limited(["explore", three_layers, "--depth", "0", "--full", "--max-states", "2000"], timeout=120, address_space=8 * GIB)
check(code == 1 and "stopped at the state cap" in out, f"explore --max-states: exit {code}: {out[:400]!r}")
# --memory-budget: the search stops there, keeps its classes (exit 1) and says so.
code, out, seconds, _ = limited(["explore", three_layers, "--depth", "0", "--full", "--memory-budget", "300M", "--json"],
                                timeout=300, address_space=8 * GIB)
check(code == 1 and '"stopped_by":"memory"' in out, f"explore --memory-budget 300M: exit {code}: {out[:400]!r}")
# The default budget under `ulimit -v 1G`: three quarters of it, so the search stops itself rather than
# the allocator stopping it (std::bad_alloc, exit 4).
if not ASAN:  # needs the address-space limit the sanitizer build cannot run under
    code, out, seconds, _ = limited(["explore", three_layers, "--depth", "0", "--full"], timeout=300)
    check(code == 1 and "stopped at the memory budget" in out, f"explore --depth 0 under ulimit -v 1G: exit {code}: {out[-400:]!r}")

# ---- the hunt's manifest: only what a hunt wrote is removed ----
hunt_dir = os.path.join(TMP, "hunt")
os.mkdir(hunt_dir)
mine = os.path.join(hunt_dir, "S2-mine.seq")
open(mine, "w").write("# the user's own file\n")
for seed in ("1", "2"):
    code, out, _, _ = limited(["hunt", "--model-only", "--seconds", "1", "--seed", seed, "--out", hunt_dir, "--quiet"], timeout=120,
                              address_space=8 * GIB)
    check(code == 0, f"hunt --seed {seed}: exit {code}: {out[-300:]!r}")
    manifest = os.path.join(hunt_dir, "hunt-manifest.txt")
    check(os.path.exists(manifest), f"hunt --seed {seed}: no {manifest}")
    listed = [ln for ln in open(manifest).read().splitlines() if not ln.startswith("#")] if os.path.exists(manifest) else []
    on_disk = sorted(n for n in os.listdir(hunt_dir) if n.endswith(".seq") and n != "S2-mine.seq")
    check(sorted(listed) == on_disk, f"hunt --seed {seed}: the manifest lists {len(listed)} files, the directory holds {len(on_disk)}")
    check(os.path.exists(mine), f"hunt --seed {seed} removed the user's S2-mine.seq")

sys.exit(S.finish("hostile inputs and output paths refused with exit 3 in time and memory; explorer caps; hunt manifest"))
