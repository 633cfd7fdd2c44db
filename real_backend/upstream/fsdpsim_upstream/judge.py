"""Judges what each rank's stored base weight holds (exact, missing_delta,
extra_delta, corrupt) against W0 + the merged adapters' deltas. A rank holds
only its rows of every adapter, so the full B @ A comes from every rank's rows
at that point: the coordinator has them all. Same rule and tolerance as the
C++ backend's observer (real_backend/observer.cpp)."""
import torch


def vec(v):
    """Decodes observe.flat's float32 bytes to a float64 vector."""
    import base64
    raw = base64.b64decode(v)
    if not raw:  # a rank that holds no rows of this parameter
        return torch.zeros(0, dtype=torch.float64)
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).double()


def _chunk_rows(rows, world, rank):
    c = (rows + world - 1) // world
    left = rows - c * rank
    return 0 if left <= 0 else min(left, c), c * rank


def _view(r, j, step, init, vals):
    """Rank j's values as rank r sees them at `step`: j's latest report at or
    before that step, else j's initial values."""
    best = None
    for s in vals[j]:
        if s <= step and (best is None or s > best):
            best = s
    return vals[j][best]["s"] if best is not None else init[j]["values"]["s"]


def _full(name, shape, r, step, world, init, vals, own):
    parts = []
    for j in range(world):
        src = own if j == r else _view(r, j, step, init, vals)
        v = src.get(name)
        if v is None:
            return None
        parts.append(vec(v))
    rows = shape[0]
    t = torch.cat(parts)
    if t.numel() != rows * shape[1]:
        if t.numel() == shape[0] * shape[1] * world:  # not sharded: every rank holds it whole
            t = vec(own[name])
        else:
            return None
    return t.reshape(shape)


def delta_of(A, B, wshape):
    """B @ A for a Linear weight (out, in); for an (E, in, out) experts weight
    PEFT's per-expert delta (lora/layer.py::ParamWrapper.get_delta_weight):
    A read as (E, r, in), B as (out, r, E)."""
    if len(wshape) == 2:
        return B @ A
    E, fan_in, fan_out = wshape
    a = A.reshape(E, -1, fan_in)
    b = B.reshape(fan_out, -1, E)
    return torch.einsum("ore,eri->eio", b, a)


# bf16 keeps 8 bits of mantissa: a merged bf16 weight is W0 + delta rounded to that
# (PEFT notes the bf16 round trip is not exact); fp32 keeps the real backend's tolerance.
RELATIVE = {"fp32": 1e-4, "bf16": 1e-2}


def _close(d, s, scale, dtype="fp32", magnitude=0.0):
    if not d.numel():
        return True
    if dtype == "bf16":
        return bool((d - s).abs().max() <= RELATIVE["bf16"] * (scale + magnitude) + 2e-6)
    return bool((d - s).abs().max() <= RELATIVE["fp32"] * scale + 2e-6)


def classify(d, merged, deltas, dtype="fp32", magnitude=0.0):
    names = list(deltas)
    want = {n for n in names if n in merged}

    def total(sub):
        s = torch.zeros_like(d)
        for n in sub:
            s = s + deltas[n]
        return s

    scale = max([float(x.abs().max()) for x in deltas.values() if x.numel()] + [0.0])
    if _close(d, total(want), scale, dtype, magnitude):
        return "exact"
    missing = extra = False
    for m in range(1 << len(names)):
        sub = {names[i] for i in range(len(names)) if (m >> i) & 1}
        if sub == want or not _close(d, total(sub), scale, dtype, magnitude):
            continue
        if sub <= want:
            missing = True
        elif sub >= want:
            extra = True
    return "missing_delta" if missing else "extra_delta" if extra else "corrupt"


def judge_layers(o, r, world, init, vals):
    step = o["step"]
    mine = vals[r].get(step)
    if mine is None:
        return
    shapes = init[r]["shapes"]
    scaling = init[r]["scaling"]
    for lo in o["layers"]:
        layer = lo["name"]
        wname = layer + ".weight"
        if wname not in mine["s"] or mine["s"][wname] is None:
            continue
        wshape = shapes[wname]
        out_f = wshape[0]
        w0 = vec(init[r]["w0"][layer]).reshape(wshape)
        n, start = _chunk_rows(out_f, world, r)
        s_local = vec(mine["s"][wname]).reshape([-1] + wshape[1:])
        full_stored = s_local.shape[0] == out_f and world > 1 and n != out_f
        rows = slice(0, out_f) if full_stored else slice(start, start + n)

        def deltas_for(registered):
            ds = {}
            for a, sc in scaling.items():
                an, bn = f"{layer}.lora_A.{a}", f"{layer}.lora_B.{a}"
                if an not in shapes or an not in mine["s"]:
                    continue
                if registered and an in mine["u"]:
                    A = vec(mine["u"][an]).reshape(shapes[an])
                else:
                    A = _full(an, shapes[an], r, step, world, init, vals, mine["s"])
                if registered and bn in mine["u"]:
                    B = vec(mine["u"][bn]).reshape(shapes[bn])
                else:
                    B = _full(bn, shapes[bn], r, step, world, init, vals, mine["s"])
                if A is None or B is None:
                    continue
                ds[a] = delta_of(A, B, wshape) * sc
            return ds

        merged = set(lo["merged"])
        ds = deltas_for(False)
        dtype = init[r].get("dtype", "fp32")
        mag = float(w0.abs().max()) if w0.numel() else 0.0
        lo["stored"] = classify(s_local - w0[rows], merged, {a: d[rows] for a, d in ds.items()}, dtype, mag)
        if wname in mine["u"]:
            u = vec(mine["u"][wname]).reshape(wshape)
            lo["registered"] = classify(u - w0, merged, deltas_for(True), dtype, mag)
        else:
            lo["registered"] = lo["stored"]


def judge_deltas(o, r, world, init, vals):
    """delta_weight: each active adapter's delta (this rank's rows of it when
    PEFT returned a sharded DTensor) against the full B @ A * scaling."""
    step = o["step"]
    mine = vals[r].get(step)
    if not mine or "deltas" not in mine:
        return
    layer = mine["delta_layer"]
    shapes = init[r]["shapes"]
    wshape = shapes[layer + ".weight"]
    out_f = wshape[0]
    for a, d in mine["deltas"].items():
        an, bn = f"{layer}.lora_A.{a}", f"{layer}.lora_B.{a}"
        A = _full(an, shapes[an], r, step, world, init, vals, mine["s"])
        B = _full(bn, shapes[bn], r, step, world, init, vals, mine["s"])
        if A is None or B is None or d["v"] is None:
            continue
        want = delta_of(A, B, wshape) * init[r]["scaling"][a]
        got = vec(d["v"])
        if d.get("partial"):  # a Partial DTensor (B @ A on uneven shards) is the sum of the ranks' locals
            parts = [vals[q].get(step, {}).get("deltas", {}).get(a) for q in range(world)]
            if any(p is None or p["v"] is None for p in parts):
                continue
            got = sum(vec(p["v"]) for p in parts)
        if list(want.shape) != d["shape"]:
            o["deltas"][a] = "corrupt"
            continue
        if d["shard_dim"] is not None:  # this rank's chunk of a sharded DTensor
            dim = d["shard_dim"]
            n, start = _chunk_rows(want.shape[dim], world, r)
            want = want.narrow(dim, start, n)
        ok = got.numel() == want.numel() and _close(got.reshape(-1), want.reshape(-1),
                                                   float(want.abs().max()) if want.numel() else 0.0,
                                                   init[r].get("dtype", "fp32"))
        o["deltas"][a] = "exact" if ok else "corrupt"
