#!/usr/bin/env python3
"""The two C++ sides' object graph (docs/design/architecture.md, "The object graph"): the concept
classes sit below the dispatchers (no file of model/machine/ includes rank_model.hpp or defines a
RankModel method but the dispatcher's own; no real_backend/ file that pairs with a model/machine/
file includes real_rank.hpp or defines a RealRank method), each dispatcher declares at most
MAX_METHODS methods, and no source file in model/ or real_backend/ passes MAX_LINES lines."""
import os
import re
import sys

MAX_METHODS = 30
MAX_LINES = 600
# (side's folder, the dispatcher's file stem, its class)
SIDES = [("model/machine", "rank_model", "RankModel"), ("real_backend", "real_rank", "RealRank")]
SOURCE = (".cpp", ".hpp", ".h", ".py")


def stems(folder):
    return {os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith((".cpp", ".hpp"))}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def back_arrows(root):
    """Lines where a concept class reaches up to its side's dispatcher."""
    out = []
    model_stems = stems(os.path.join(root, "model/machine"))
    for folder, dispatcher, cls in SIDES:
        include = re.compile(r'^\s*#\s*include\s+"%s/%s\.hpp"' % (re.escape(folder), dispatcher))
        method = re.compile(r"\b%s::\w+\s*\(" % cls)
        for name in sorted(os.listdir(os.path.join(root, folder))):
            stem, ext = os.path.splitext(name)
            # On the C++ side only the files that pair with a model class are concept classes
            # (the launcher and the stepped ranks sit above the dispatcher and drive it).
            if ext not in (".cpp", ".hpp") or stem == dispatcher or stem not in model_stems:
                continue
            path = os.path.join(root, folder, name)
            with open(path, encoding="utf-8") as src:
                for n, line in enumerate(strip_comments(src.read()).split("\n"), 1):
                    if include.match(line):
                        out.append("%s/%s:%d: includes the dispatcher %s.hpp" % (folder, name, n, dispatcher))
                    elif method.search(line):
                        out.append("%s/%s:%d: defines a %s method" % (folder, name, n, cls))
    return out


def methods_of(header_text, cls):
    """Distinct method names a class declares (its constructor and deleted members aside)."""
    text = strip_comments(header_text)
    start = re.search(r"\bclass\s+%s\b[^;{]*\{" % cls, text)
    if not start:
        return None
    depth, i, stmt, names = 1, start.end(), "", set()
    while i < len(text) and depth > 0:
        c = text[i]
        if c == "{":
            if depth == 1:
                names |= declared(stmt, cls)
                stmt = ""
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 1:
            if c == ";":
                names |= declared(stmt, cls)
                stmt = ""
            else:
                stmt += c
        i += 1
    return names


def declared(stmt, cls):
    stmt = re.sub(r"^\s*(public|private|protected)\s*:", "", stmt.strip())
    if "= delete" in stmt or "(" not in stmt:
        return set()
    head = stmt[: stmt.index("(")]
    if "=" in head or "{" in head:  # a data member's initializer
        return set()
    m = re.search(r"(operator\s*\S+|~?\w+)\s*$", head)
    if not m or m.group(1) in (cls, "~" + cls):
        return set()
    return {m.group(1)}


def long_files(root):
    out = []
    for top in ("model", "real_backend"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(SOURCE):
                    path = os.path.join(d, f)
                    with open(path, encoding="utf-8") as src:
                        n = sum(1 for _ in src)
                    if n > MAX_LINES:
                        out.append("%s: %d lines (at most %d)" % (os.path.relpath(path, root), n, MAX_LINES))
    return out


def problems(root):
    out = back_arrows(root)
    for folder, dispatcher, cls in SIDES:
        with open(os.path.join(root, folder, dispatcher + ".hpp"), encoding="utf-8") as src:
            names = methods_of(src.read(), cls)
        if names is None:
            out.append("%s/%s.hpp: no class %s" % (folder, dispatcher, cls))
        elif len(names) > MAX_METHODS:
            out.append("%s/%s.hpp: %s declares %d methods (at most %d)" % (folder, dispatcher, cls, len(names), MAX_METHODS))
    return out + long_files(root)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: object_graph_test.py SOURCE_DIR")
    root = sys.argv[1]
    found = problems(root)
    for p in found:
        print(p)
    for folder, dispatcher, cls in SIDES:
        with open(os.path.join(root, folder, dispatcher + ".hpp"), encoding="utf-8") as src:
            print("%s: %d methods" % (cls, len(methods_of(src.read(), cls) or ())))
    print("object graph: %s" % ("%d problem(s)" % len(found) if found else "no back arrow, dispatchers and files within bounds"))
    sys.exit(1 if found else 0)
