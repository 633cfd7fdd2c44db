"""`--steps N`: a run of K > N back-to-back repeats of the same ops at the same script lines
(one loop's iterations) is cut to its first N, and the header says so."""


def _key(op):
    return (op.text, op.at, op.raised)


def cut_loops(ops, steps, max_period=64):
    """(ops, header lines). At each position the period whose repeats cover the most ops wins;
    an iteration that raised differs from the others, so it is kept."""
    out, header, i = [], [], 0
    keys = [_key(o) for o in ops]
    while i < len(ops):
        best = (1, 1)  # (repeats, period)
        for p in range(1, min(max_period, (len(ops) - i) // 2) + 1):
            k = 1
            while keys[i + k * p:i + (k + 1) * p] == keys[i:i + p]:
                k += 1
            if k >= 2 and k * p > best[0] * best[1]:
                best = (k, p)
        k, p = best
        if k > steps and steps > 0:
            out += ops[i:i + steps * p]
            body = ops[i:i + p]
            lines = sorted({o.at for o in body})
            header.append(f"loop of {p} op{'s' if p > 1 else ''} ({', '.join(lines)}): {k} iterations ran, "
                          f"the first {steps} kept (--steps {steps})")
            i += k * p
        else:  # no loop here (k = p = 1), or one within --steps: kept whole
            out += ops[i:i + k * p]
            i += k * p
    return out, header
