"""The rank keeps the model of its last scenario as the build left it before `prepare` (the base
layers with every adapter PEFT injected: get_peft_model and add_adapter), with the global RNG
state and W0 of that moment (from the second sequence of a scenario on: keep), and the next
sequence of the same scenario and switches starts from a deep copy of it instead of building
again (take). Nothing after that point is kept: prepare
(accelerate, fully_shard, AdamW), every op and every observation run on the copy as on a fresh
build. Why a copy and not a reset in place: the ops may add, delete, merge, wrap and shard
anything, and a copy of the untouched model needs no list of what to undo.

Where the copy could differ from a fresh build, the build does not keep the model (keepable):
a function that holds a module by closure (a hook PEFT or torch registered) would still point at
the kept model after copy.deepcopy, which copies functions as they are. Without
`FSDPSIM_UPSTREAM_REUSE=1` (the pool's default for every run, pool.py) every sequence is built afresh; test_reuse.py checks
that both give the same observations."""
import copy
import types

import torch

KEPT = {"key": None, "seen": None}  # seen: the last scenario built with reuse on


def key_of(text, switches):
    """What the kept model depends on: the scenario's lines (everything above `---`) and the
    resolved switches (adapter_meta_check moves an added adapter)."""
    head = text.split("\n---", 1)[0] if not text.startswith("---") else ""
    return head, tuple(sorted(switches.items()))


def take(sess, key):
    """A copy of the kept model for `key` onto the session, the RNG where the build left it;
    False where nothing is kept for it."""
    if key is None or KEPT["key"] != key:
        return False
    sess.pm = copy.deepcopy(KEPT["pm"])
    sess.w0 = KEPT["w0"]  # only read (the init message)
    torch.set_rng_state(KEPT["rng"])
    return True


def keep(sess, key):
    """Keeps a copy of the session's model as the build left it (call right after PEFT's injection,
    before anything patches or shards it)."""
    if key is None:  # reuse off: what is kept stays for a later sequence with reuse on
        return
    KEPT["key"] = None
    # a copy costs about half a build: made the second time a scenario comes, so that a run of
    # sequences that never repeat one (crosscheck, the hunt) pays nothing for reuse
    first = KEPT.get("seen") != key
    KEPT["seen"] = key
    if first or not keepable(sess.pm):
        return
    KEPT.update(key=key, pm=copy.deepcopy(sess.pm), w0=sess.w0, rng=torch.get_rng_state())


def keepable(model):
    """No module holds a hook or an instance function that closes over a module (deepcopy would
    share it with the kept model instead of copying it)."""
    for m in model.modules():
        hooks = [getattr(m, a) for a in vars(m) if a.endswith("_hooks") or a.endswith("_hook")]
        for store in hooks:
            for fn in (store.values() if isinstance(store, dict) else ()):
                if closes_over_state(fn):
                    return False
        for v in vars(m).values():
            if isinstance(v, types.FunctionType) and closes_over_state(v):
                return False
    return True


def closes_over_state(fn):
    """A function whose closure cells or defaults hold a module or a tensor (a bound method's
    object is copied with it; its function's closure is not)."""
    fn = getattr(fn, "__func__", fn)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(v, (torch.nn.Module, torch.Tensor)):
            return True
    return any(isinstance(d, (torch.nn.Module, torch.Tensor)) for d in getattr(fn, "__defaults__", None) or ())
