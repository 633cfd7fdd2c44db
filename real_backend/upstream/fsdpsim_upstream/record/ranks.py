"""Per-rank op lists as one `.seq` body: an op every rank ran at the same place is written
once; the others get an `@R` line per rank that ran them (difflib aligns each rank with the
merged list so far, so the result depends only on the lists)."""

import difflib

from .ops import error_kind


def merge_ranks(per_rank):
    ranks = sorted(per_rank)
    merged = [[o, {ranks[0]: o}] for o in per_rank[ranks[0]]]
    for r in ranks[1:]:
        theirs = per_rank[r]
        sm = difflib.SequenceMatcher(None, [(m[0].text, m[0].at) for m in merged],
                                     [(o.text, o.at) for o in theirs], autojunk=False)
        out = []
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                for m, o in zip(merged[i1:i2], theirs[j1:j2]):
                    m[1][r] = o
                    out.append(m)
            else:
                out += merged[i1:i2]
                out += [[o, {r: o}] for o in theirs[j1:j2]]
        merged = out
    lines = []
    for op, by_rank in merged:
        if len(by_rank) == len(ranks):
            lines.append(_line("", op, by_rank, len(ranks)))
        else:
            lines += [_line(f"@{r} ", o, {r: o}, 1) for r, o in sorted(by_rank.items())]
    return lines


def _line(prefix, op, by_rank, world):
    kinds = {r: error_kind(o.raised) for r, o in by_rank.items()}
    raised = sorted({o.raised for o in by_rank.values() if o.raised})
    expect = ""
    if kinds and all(kinds.values()) and len(set(kinds.values())) == 1 and not prefix:
        expect = f"  expect error={next(iter(kinds.values()))}"
    elif any(kinds.values()):
        expect = "  expect " + " ".join(f"@{r} error={k}" for r, k in sorted(kinds.items()) if k)
        if prefix:
            expect = "  expect " + " ".join(f"error={k}" for k in kinds.values() if k)
    comment = f"  # {op.at}" + (f"  raised {'; '.join(raised)}" if raised else "")
    return f"{prefix}{op.text}{expect}".ljust(30) + comment
