"""Hazard B7's measurement table on the upstream backend: seed 000's topology at
world 2 (lin0 10x20, lin1 20x2, adapters default and other on both, fully_shard
lin0 and root), `checkpoint lin0` or `checkpoint lin1` (or none, for reference),
raf true and false, and
    forward; MID; backward; step; train_step; train_step
for each MID, plus `forward; eval; backward; step; train_step` and
`train_step; train_step`. Prints, per case, every op's status, message, grads,
group states, the optimizer objects no longer registered, stored weights that
are not exact, and collectives; both ranks on one line when they agree.

    python b7_table.py [lin0|lin1|none ...]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fsdpsim_upstream.pool import Pool  # noqa: E402

HEADER = """world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
adapter other r={r} alpha=8 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward={raf}
fully_shard root reshard_after_forward={raf}
optimizer trainable
{ckpt}---
"""

MIDS = [("nothing", 8, []), ("merge", 8, ["merge"]), ("disable_enter", 8, ["disable_enter"]),
        ("set_adapter other", 8, ["set_adapter other"]), ("set_adapter other (r=4)", 4, ["set_adapter other"]),
        ("set_adapter [default,other]", 8, ["set_adapter [default,other]"]),
        ("set_adapter [other,default]", 8, ["set_adapter [other,default]"]),
        ("unshard", 8, ["unshard"]), ("reshard", 8, ["reshard"])]


def cases(ckpt, raf):
    line = f"checkpoint {ckpt}\n" if ckpt != "none" else ""
    for name, r, mid in MIDS:
        yield name, HEADER.format(r=r, raf=raf, ckpt=line) + "\n".join(
            ["forward"] + mid + ["backward", "step", "train_step", "train_step"]) + "\n"
    yield "eval between", HEADER.format(r=8, raf=raf, ckpt=line) + "forward\neval\nbackward\nstep\ntrain_step\n"
    yield "train_step twice", HEADER.format(r=8, raf=raf, ckpt=line) + "train_step\ntrain_step\n"


def text(o):
    s = o["status"] + (f" [{o['message']}]" if o.get("message") else "")
    if "grads" in o:
        s += f" grads={o['grads']}"
    s += " groups=" + ",".join(f"{g['name']}:{g['state'][0]}" for g in o["groups"])
    if o["optimizer"]["missing"]:
        s += f" opt_missing={o['optimizer']['missing']}/{o['optimizer']['total']}"
    stored = [f"{l['name']}:{l['stored']}" for l in o["layers"] if l["stored"] != "exact"]
    if stored:
        s += " stored=" + ",".join(stored)
    return s + " coll=[" + ", ".join(f"{c['op']}({c['group']},{c['count']})" for c in o["collectives"]) + "]"


def main():
    which = sys.argv[1:] or ["lin0", "lin1"]
    pool = Pool(2, 20000)
    pool.start()
    try:
        for ckpt in which:
            for raf in ("true", "false"):
                for name, seq in cases(ckpt, raf):
                    obs, restarted = pool.run(seq, None)
                    print(f"== checkpoint {ckpt} raf={raf}: {name}" + (" (pool restarted)" if restarted else ""))
                    for step in sorted({o["step"] for o in obs}):
                        here = [o for o in obs if o["step"] == step]
                        texts = [text(o) for o in here]
                        if len(set(texts)) == 1:
                            print(f"  {step} {here[0]['op']}: both: {texts[0]}")
                        else:
                            for o, t in zip(here, texts):
                                print(f"  {step} {o['op']}: rank {o['rank']}: {t}")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
