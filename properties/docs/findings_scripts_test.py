"""The repro scripts in docs/findings read as a maintainer's repro: each compiles, has at
most 40 lines of code (the docstring, comments and blank lines aside), ends in a plain
assert, and carries none of the project's internal vocabulary (spec ids S1-S8, class
signatures, seed numbers, the tool's own name, its switch names). No torch is imported:
ctest `findings_repros` runs them. `findings_scripts_test.py [DIR]`."""
import ast
import glob
import io
import json
import os
import re
import sys
import tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_CODE_LINES = 40
# The profile switches' names, from the one table both sides read (a switch added later is covered).
with open(os.path.join(HERE, "..", "..", "model", "vocab", "profiles.json")) as f:
    SWITCHES = [row["name"] for row in json.load(f)["switches"]]
INTERNAL = [r"\bS[1-8]\b", r"fsdpsim", r"\bfinding\b", r"\bseed 0\d\d\b", r"[Ss]ignature", r"root.cause",
            r"\bverdict\b", r"\bblame\b", r"\b(" + "|".join(SWITCHES) + r")\b",
            r"RECORDED_|status_of|DIFFERENT"]


def code_lines(text):
    """Lines holding code: not blank, not a comment alone, not inside the module docstring."""
    tree = ast.parse(text)
    doc = set()
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant) \
            and isinstance(tree.body[0].value.value, str):
        doc = set(range(tree.body[0].lineno, tree.body[0].end_lineno + 1))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        lines.update(l for l in range(tok.start[0], tok.end[0] + 1) if l not in doc)
    return len(lines)


def problems(path):
    with open(path) as f:
        text = f.read()
    out = []
    try:
        compile(text, path, "exec")
    except SyntaxError as e:
        return [f"does not compile: {e}"]
    n = code_lines(text)
    if n > MAX_CODE_LINES:
        out.append(f"{n} lines of code (at most {MAX_CODE_LINES})")
    if not re.search(r"^\s*assert ", text, re.M) and "raise AssertionError" not in text:
        out.append("no assert")
    for pat in INTERNAL:
        m = re.search(pat, text)
        if m:
            out.append(f"internal word {m.group(0)!r} (line {text.count(chr(10), 0, m.start()) + 1})")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "docs", "findings")
    scripts = sorted(glob.glob(os.path.join(root, "*.py")))
    if not scripts:
        print(f"{root}: no scripts")
        return 1
    bad = 0
    for path in scripts:
        for p in problems(path):
            print(f"{path}: {p}")
            bad += 1
    print(f"{len(scripts)} scripts, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
