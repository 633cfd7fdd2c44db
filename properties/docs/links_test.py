#!/usr/bin/env python3
"""Every relative link in README.md and docs/**/*.md leads somewhere (ctest `doc_links`).

A link `[text](target)` or `![alt](target)` outside code (fenced blocks and
`inline code` are skipped) fails when
- its target is an absolute path, or resolves to a path outside the repository
  (a reader's clone has nothing there, e.g. the maintainers' ../shared notes);
- the file or directory it names does not exist;
- it carries an anchor (`file.md#section`, or `#section` in the same page) that
  no heading of that Markdown file produces (GitHub's slugs: lower case,
  punctuation other than '-' and '_' dropped, spaces as '-', '-N' for repeats).
Web links (scheme:...) are not followed.

Usage: links_test.py REPO_ROOT
"""
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose_lines(text):
    """(line number, line with inline code blanked) for every line outside fences."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            # `code` spans keep their columns but lose their content.
            yield n, re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            text = f.read()
        fenced = False
        for line in text.split("\n"):
            if FENCE.match(line):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line)
            if m:
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                found.add(s if k == 0 else f"{s}-{k}")
        found.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', text))
        cache[path] = found
    return cache[path]


def check_file(root, md):
    errors = []
    rel_md = os.path.relpath(md, root)
    with open(md, encoding="utf-8") as f:
        text = f.read()
    for n, line in prose_lines(text):
        for m in LINK.finditer(line):
            target = m.group(1)
            where = f"{rel_md}:{n}:{m.start() + 1}"
            if not target or SCHEME.match(target):
                continue
            path, _, anchor = target.partition("#")
            if path.startswith("/"):
                errors.append(f"{where}: link '{target}' is an absolute path; expected one relative to {rel_md}")
                continue
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if os.path.commonpath([root, dest]) != root:
                errors.append(f"{where}: link '{target}' leads outside the repository (to {dest})")
                continue
            if not os.path.exists(dest):
                errors.append(f"{where}: link '{target}': no such file {os.path.relpath(dest, root)}")
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                errors.append(f"{where}: link '{target}': {os.path.relpath(dest, root)} has no heading with anchor '#{anchor}'")
    return errors


def main():
    if len(sys.argv) != 2:
        print("usage: links_test.py REPO_ROOT", file=sys.stderr)
        return 3
    root = os.path.realpath(sys.argv[1])
    pages = [os.path.join(root, "README.md")]
    for d, _, files in os.walk(os.path.join(root, "docs")):
        pages += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
    errors = []
    for md in sorted(pages):
        if not os.path.exists(md):
            errors.append(f"{os.path.relpath(md, root)}: missing")
            continue
        errors += check_file(root, md)
    for e in errors:
        print("FAIL:", e)
    print(f"{len(pages)} pages checked, {len(errors)} broken links")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
