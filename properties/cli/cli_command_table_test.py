#!/usr/bin/env python3
"""The command table (sim/cli/command_table.hpp) is what the user sees: every command
`fsdpsim --help` lists answers `CMD --help` with its own lines, an unknown flag names the
flag and the command and lists the command's flags, and those flags agree with the usage:
each flag the usage shows for a command is one it takes, and each flag it takes is shown
(in its lines or the shared notes). `--against` names a backend; versions' old
`--against PATH` is refused with its new name, --peft. No work is run: every call stops at
the parser (exit 3) or prints help (exit 0)."""
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

FSDPSIM = sys.argv[1]
problems = []
FLAG = re.compile(r"--[a-z][a-z-]*")


def run(args):
    r = subprocess.run([FSDPSIM] + args, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def check(cond, msg):
    if not cond:
        problems.append(msg)


def own_and_note_flags(text):
    """The flags in a usage's command lines, and those in its notes ("       (..."), up to the exit codes."""
    own, notes, in_note = set(), set(), False
    for line in text.splitlines():
        if line.startswith("exit codes:"):
            break
        starts_command = re.match(r"\s+fsdpsim [a-z]", line) is not None
        in_note = line.startswith("       (") or (in_note and not starts_command)
        (notes if in_note else own).update(FLAG.findall(line))
    return own, notes


code, full = run(["--help"])
check(code == 0, "fsdpsim --help: exit %d" % code)
commands = []
for m in re.finditer(r"(?m)^\s+fsdpsim ([a-z][a-z-]*)", full):
    if m.group(1) not in commands:
        commands.append(m.group(1))
check(len(commands) >= 20, "fsdpsim --help lists %d commands: %s" % (len(commands), commands))
_, all_notes = own_and_note_flags(full)

# Every run loads the binary (libtorch with it): the runs go side by side.
with ThreadPoolExecutor(max_workers=4) as pool:
    helps = list(pool.map(lambda c: run([c, "--help"]), commands))
    probes = list(pool.map(lambda c: run([c, "--zz-probe"]), commands))
for cmd, (code, usage), (probe_code, err) in zip(commands, helps, probes):
    check(code == 0, "%s --help: exit %d" % (cmd, code))
    check(re.search(r"(?m)^\s+fsdpsim %s\b" % re.escape(cmd), usage) is not None, "%s --help does not show its own lines:\n%s" % (cmd, usage))
    check(all(re.match(r"\s+fsdpsim %s\b" % re.escape(cmd), l) for l in re.findall(r"(?m)^\s+fsdpsim [a-z][a-z-]*.*$", usage)),
          "%s --help shows another command's lines:\n%s" % (cmd, usage))
    own, _ = own_and_note_flags(usage)
    m = re.search(r"unknown flag --zz-probe for (\S+) \(it takes ([^;]*);", err)
    check(probe_code == 3 and m is not None and m.group(1) == cmd,
          "%s --zz-probe: exit %d, not an unknown-flag error naming the command and its flags: %s" % (cmd, probe_code, err.strip()))
    if not m:
        continue
    takes = set(m.group(2).split(", "))
    check("--quiet" in takes, "%s does not take --quiet" % cmd)
    for flag in sorted(own - takes - {"--help"}):
        problems.append("%s --help shows %s, which %s refuses" % (cmd, flag, cmd))
    # --fail-on-new: the hunt's old spelling, still taken with a warning and no longer shown.
    for flag in sorted(takes - own - all_notes - {"--quiet", "--fail-on-new"}):
        problems.append("%s takes %s, which no usage line shows" % (cmd, flag))

# A near miss gets the fix, named with its command.
code, err = run(["run", "--backen"])
check(code == 3 and "unknown flag --backen for run; did you mean '--backend'?" in err, "run --backen: exit %d: %s" % (code, err.strip()))
# --against is a backend; the PEFT path is --peft.
code, err = run(["versions", "--against", "/nowhere", "x.seq"])
check(code == 3 and "versions --peft PATH" in err, "versions --against PATH: exit %d, not the new name: %s" % (code, err.strip()))
code, err = run(["crosscheck", "--peft", "/nowhere"])
check(code == 3 and "unknown flag --peft for crosscheck" in err, "crosscheck --peft: exit %d: %s" % (code, err.strip()))
code, err = run(["crosscheck", "--seed", "1", "--against", "model"])
check(code == 3 and "--against expects real or upstream" in err, "crosscheck --against model: exit %d: %s" % (code, err.strip()))

for p in problems:
    print(p)
print("command table: %d commands, %s" % (len(commands), "%d problem(s)" % len(problems) if problems else "help, flags and errors agree"))
sys.exit(1 if problems else 0)
