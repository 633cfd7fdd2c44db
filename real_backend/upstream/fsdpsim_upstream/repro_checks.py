"""The finding an exported repro checks, read off the minimal sequence's
`# signature:` and `# finding:` comments (sim/findings/triage.cpp writes them); the
assert itself is repro_asserts.py's."""
import re
from dataclasses import dataclass


@dataclass
class Finding:
    spec: str
    step: int
    rank: int  # -1: not one rank's (S5)
    detail: str  # the sentence after "S1 step 4 rank 0: "
    status: str  # the finding op's status in the signature ("ok", "key_error", ...)
    signature: str


def parse(comments):
    """The finding of a `.seq`'s comments; None when it carries none."""
    found = {k: v for k, v in (c.split(": ", 1) for c in comments if ": " in c)}
    sentence, signature = found.get("finding"), found.get("signature")
    if not sentence or not signature:
        return None
    m = re.match(r"(S\d) step (\d+)(?: rank (\d+))?: (.*)", sentence)
    if not m:
        raise ValueError(f"cannot read the finding sentence: {sentence}")
    status = signature.split(" |", 1)[0].split(":", 1)[1]
    return Finding(m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else -1, m.group(4), status, signature)


def adapters(text):
    """"{a,b}" -> ["a", "b"]."""
    return sorted(n for n in text.strip("{}").split(",") if n)
