"""Judges what each rank's stored base weight holds (exact, missing_delta,
extra_delta, corrupt) against W0 + the merged adapters' deltas. A rank holds
only its rows of every adapter, so the full B @ A comes from every rank's rows
at that point: the coordinator has them all. Same rule and tolerance as the
C++ backend's observer (real_backend/observer.cpp)."""
import math

import torch


# observe.flat's text -> its float64 vector, while one run's reports are judged: a rank's
# values reach the judge many times (each peer's view of them, each layer's A and B, the
# registered copy beside the shard), and decoding was most of the judging's time. Keyed by
# the text itself, so a hit is the same values whatever report it came from; the vectors are
# only read (every judging step makes new tensors). Emptied by forget() after each run.
_DECODED = {}
_ASSEMBLED = {}  # (shape, each rank's text) -> the full tensor _full assembled from them
# _layer_key -> (whether the judgement noted the merges in the RoundingLog, the fields it set):
# a layer whose values no op changed since a step judged (a frozen norm, the adapters between
# two train_steps, every layer an eval or a reshard leaves alone) is judged once, not at each step
_JUDGED = {}
JUDGED_FIELDS = ("stored", "stored_alt", "registered", "registered_alt")


def vec(v):
    """Decodes observe.flat's float32 bytes to a float64 vector (do not modify it: it is shared)."""
    t = _DECODED.get(v)
    if t is None:
        t = _DECODED[v] = _decode(v)
    return t


def _decode(v):
    import base64
    raw = base64.b64decode(v)
    if not raw:  # a rank that holds no rows of this parameter
        return torch.zeros(0, dtype=torch.float64)
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).double()


def forget():
    """Drops the decoded values of the run just judged."""
    _DECODED.clear()
    _ASSEMBLED.clear()
    _JUDGED.clear()


def _chunk_rows(rows, world, rank):
    """(rows, start) of this rank's chunk; a rank past the last row holds none, from the end
    (narrow refuses a start past the size: world 4, a delta of 2 rows, seed 880408)."""
    c = (rows + world - 1) // world
    left = rows - c * rank
    return (0, rows) if left <= 0 else (min(left, c), c * rank)


# (r, step) -> {j: the step of j's report that r's report at `step` sees, or None for j's
# initial state}; set by set_peer_views before a run's reports are judged
_PEERS = {}


def _known_at_or_before(reports, idx):
    """The latest report at or before idx whose state is known (not one stuck in a collective)."""
    while idx >= 0 and not reports[idx][2]:
        idx -= 1
    return idx


def _paired_index(reports, t, step):
    """Index into a peer's reports (step, collectives issued in that op, state known) of its state
    where its collective of op `t` paired with rank r's latest one, r now reporting at `step`:
    just before op t when t comes later than r's step (it was still on its way there); else
    after op t and its later ops up to `step` that issue no collective (a rank blocks only in a
    collective's wait, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py::foreach_all_gather)."""
    if t > step:
        return _known_at_or_before(reports, max((m for m, q in enumerate(reports) if q[0] < t), default=-1))
    x = max((m for m, q in enumerate(reports) if q[0] <= t), default=-1)
    while 0 <= x and x + 1 < len(reports) and reports[x + 1][0] <= step and reports[x + 1][1] == 0:
        x += 1
    return _known_at_or_before(reports, x)


def _unpaired_index(reports, step):
    """No collective of r has paired yet: the peer's report of the same step if it ran it, else its
    latest one before (nothing observed ties their progress: the same step is the convention)."""
    return _known_at_or_before(reports, max((m for m, q in enumerate(reports) if q[0] <= step), default=-1))


def set_peer_views(obs, world, pairings):
    """Which report of each peer goes with each report, read from the pairings gloo made:
    `pairings[r]` lists, in r's issue order, {q: the step of rank q's op whose collective went
    with r's} for each of r's collectives the pool paired or let through (pool.py), so a rank out
    of step (`@R` ops) is judged against the peer values its collectives actually met."""
    _PEERS.clear()
    reports = [[(o["step"], len(o.get("collectives") or []), o.get("status") not in ("hang", "mismatch"))
                for o in obs[r]] for r in range(world)]
    for r in range(world):
        for step, _, _ in reports[r]:
            met = [p for p in pairings.get(r, []) if p.get(r, step + 1) <= step]
            seen = {}
            for j in range(world):
                if j == r:
                    continue
                t = met[-1].get(j) if met else None
                m = _unpaired_index(reports[j], step) if t is None else _paired_index(reports[j], t, step)
                seen[j] = reports[j][m][0] if m >= 0 else None
            _PEERS[(r, step)] = seen


def _view(r, j, step, init, vals):
    """Rank j's values as rank r sees them at `step`: j's latest report at or
    before the step of the report set_peer_views found for r's, else j's
    initial values."""
    if (r, step) in _PEERS:
        step = _PEERS[(r, step)].get(j, step)
        if step is None:
            return init[j]["values"]["s"]
    best = None
    for s in vals[j]:
        if s <= step and (best is None or s > best):
            best = s
    return vals[j][best]["s"] if best is not None else init[j]["values"]["s"]


def _sources(name, shape, r, step, world, init, vals, own):
    """What _full assembles `name` from: (True, its own text) where this rank holds every row (held
    whole before prepare or when added after it, or a shard holding all rows: its own values are
    the full tensor, whatever a peer holds, meta under ram-efficient loading); else (False, each
    rank's text as r sees it at `step`); None where a rank holds none."""
    mine = own.get(name)
    if mine is not None and vec(mine).numel() == math.prod(shape):
        return True, mine
    texts = []
    for j in range(world):
        src = own if j == r else _view(r, j, step, init, vals)
        v = src.get(name)
        if v is None:
            return None
        texts.append(v)
    return False, tuple(texts)


def _full(name, shape, r, step, world, init, vals, own):
    src = _sources(name, shape, r, step, world, init, vals, own)
    if src is None:
        return None
    whole, texts = src
    if whole:
        return vec(texts).reshape(shape)
    # the ranks' texts (and whose view: an unsharded tensor is the viewer's own) decide the
    # result, so an adapter no op moved is assembled once per run
    key = (tuple(shape), texts, r)
    if key not in _ASSEMBLED:
        _ASSEMBLED[key] = _assemble(texts, shape, world, r)
    return _ASSEMBLED[key]


def _assemble(texts, shape, world, r):
    t = torch.cat([vec(v) for v in texts])
    if t.numel() != math.prod(shape):  # a magnitude vector (out,) as well as a matrix
        if t.numel() == math.prod(shape) * world:  # not sharded: every rank holds it whole
            t = vec(texts[r])
        else:
            return None
    return t.reshape(shape)


def weight_name(layer, shapes):
    """The layer's own weight: `L.original_module.weight` under a ModulesToSaveWrapper
    (rank.shapes_of names it as seqfile.Scenario.base_name does)."""
    w = layer + ".weight"
    return w if w in shapes else f"{layer}.original_module.weight"


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


def dora_delta(w0, delta, magnitude, transposed=False):
    """What a DoRA merge onto W0 adds, read from the values (lora/variants.py::DoraLinearVariant.merge_safe):
    each row of W0 + delta rescaled by magnitude / its norm, less W0. Equal to delta while the
    magnitude still is the norm it was initialised to. A transformers Conv1D (`transposed`, weight
    (in, out)): its columns, as merge_safe transposes by fan_in_fan_out before the norm and after."""
    if transposed:
        return dora_delta(w0.T, delta.T, magnitude).T
    w = w0.to(torch.float64) + delta.to(torch.float64)
    factor = magnitude.to(torch.float64).reshape(-1, 1) / torch.linalg.norm(w, dim=1).reshape(-1, 1)
    return (factor * w - w0.to(torch.float64)).to(delta.dtype)


# fp32 keeps the real backend's tolerance: 1e-4 of the largest delta in play.
RELATIVE_FP32 = 1e-4
# A bf16 value rounds to within 2^-8 of itself (8 bits of mantissa). Every merge or
# unmerge of an adapter rounds twice (lora/layer.py::Linear.get_delta_weight casts the
# delta to the weight's dtype, then the in-place add rounds the sum), so element i
# of a bf16 weight is off by at most 2^-8 * (|W0_i| + 2 * sum_a max|delta_a|) per such
# event (the largest |delta_a| stands for |delta_a,i|: a square one-expert layer adds the
# transposed delta). Judged per element of W0 and over the merged adapters only: a tolerance
# from the largest |W0| and every delta would hide a step's change to a merged adapter (a
# few 1e-3) under an unmerged one's size.
BF16_ROUNDING = 2.0 ** -8


def _tolerance(d, scale, dtype="fp32", bound=None):
    """Per-element allowance: fp32 noise, and for bf16 `bound` (the rounding bound
    per element, already scaled by the number of rounding events)."""
    tol = RELATIVE_FP32 * scale + 2e-6
    if dtype == "bf16" and bound is not None:
        return bound + tol
    return torch.full_like(d, tol)


def _close(d, s, tol):
    if not d.numel():
        return True
    return bool(((d - s).abs() <= tol).all())


def _bound(w0, deltas, rounded, events):
    """The bf16 rounding bound per element after `events` merges and unmerges (None: no W0)."""
    if w0 is None:
        return None
    # an adapter's largest |delta|, not its own element: a square one-expert layer adds the transpose
    size = w0.abs() + 2 * sum(float(deltas[n].abs().max()) for n in rounded if n in deltas and deltas[n].numel())
    return BF16_ROUNDING * size * max(events, 1)


def classify(d, merged, deltas, dtype="fp32", w0=None, rounded=(), events=0):
    """`rounded`: the adapters merged into this weight at some step so far; `events`:
    how many adapter merges and unmerges it has seen (each one a bf16 rounding).
    Returns the class and the other classes `d` fits as well (a delta in play that
    is zero on these rows; corrupt when one merged now or before is), which the values cannot tell from it."""
    names = list(deltas)
    want = {n for n in names if n in merged}

    def total(sub):
        s = torch.zeros_like(d)
        for n in sub:
            s = s + deltas[n]
        return s

    scale = max([float(x.abs().max()) for x in deltas.values() if x.numel()] + [0.0])
    bound = _bound(w0, deltas, rounded, events) if dtype == "bf16" else None
    tol = _tolerance(d, scale, dtype, bound)
    exact = _close(d, total(want), tol)
    missing = extra = False
    for m in range(1 << len(names)):
        sub = {names[i] for i in range(len(names)) if (m >> i) & 1}
        if sub == want or not _close(d, total(sub), tol):
            continue
        if sub <= want:
            missing = True
        elif sub >= want:
            extra = True
    # An adapter merged now or at some step before (`rounded`) whose delta is zero on these rows (a
    # B row no step moved, as a ReLU unit dead for the whole batch leaves it): a copy of it the
    # weight kept from that merge, stale since, is zero here too (an unmerge a reshard dropped),
    # so the values cannot rule out the stale-merge reading, corrupt. An adapter never merged here
    # left no copy to be stale.
    blind = any(_close(deltas[n], torch.zeros_like(deltas[n]), tol) for n in names if n in want or n in rounded)
    fits = [c for c, ok in (("exact", exact), ("missing_delta", missing), ("extra_delta", extra)) if ok]
    got = fits[0] if fits else "corrupt"
    return got, fits[1:] + (["corrupt"] if blind and got != "corrupt" else [])


class RoundingLog:
    """Per rank and layer: the adapters merged at some step so far and the number of
    merge/unmerge events, read off the observations' merged lists in step order."""

    def __init__(self):
        self.prev, self.ever, self.events, self.history = {}, {}, {}, {}
        self.last = {}  # per tracked object: the values it held at its previous observation

    def note(self, r, layer, merged):
        key = (r, layer)
        prev = self.prev.get(key, set())
        self.events[key] = self.events.get(key, 0) + len(prev ^ merged)
        self.ever.setdefault(key, set()).update(merged)
        self.prev[key] = set(merged)
        return self.ever[key], self.events[key]

    def merged_before(self, r, layer):
        return self.prev.get((r, layer), set())

    def track(self, key, prior, event, observed, tol, w0=None):
        """bf16 weights: what `observed` (weight - W0, of one object: a rank's stored rows or
        the registered copy) holds, free of rounding: its previous history plus this step's
        merges and unmerges (`event`, None when a delta is unknown) when they landed on it, or
        the previous history when they did not (a merge on the copy leaves the shard alone).
        None from the first value that fits neither (a load, a mixed gather) on, and where
        both fit and the values cannot tell which happened."""
        h = None
        last, had = self.last.get(key), key in self.history
        self.last[key] = observed.clone()
        if prior is not None and prior.shape == observed.shape:
            fits = [c for c in ([prior + event] if event is not None else []) + [prior] if _close(observed, c, tol)]
            if len(fits) == 2 and not torch.equal(fits[0], fits[1]):
                # an edit the rounding bound cannot see (a small delta after a few bf16 roundings):
                # the bits say. A weight none of whose bits moved since its last observation was
                # not edited when the edit moves some element by a bf16 step or more (the in-place
                # add of lora/layer.py::Linear.merge rounds W + delta to the nearest bf16); one whose
                # bits moved was (crosscheck seed 39500430: the world-1 merge on the unsharded copy
                # left the shard's bits alone while the tolerance fitted the merge as well).
                moved = last is None or not had or last.shape != observed.shape or not torch.equal(last, observed)
                if moved:
                    fits = fits[:1]
                elif w0 is not None and bool((event.abs() >= 1.5 * _bf16_step(w0 + observed)).any()):
                    fits = fits[1:]
                else:
                    fits = []  # no bit moved and none would have: either reading fits the values
            h = fits[0] if fits else None
        self.history[key] = h
        return h


def _bf16_step(w):
    """The distance from each element to the next bf16 value above it in magnitude."""
    mag = w.abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
    return torch.pow(2.0, torch.floor(torch.log2(mag)) - 7)


def judge_layers(o, r, world, init, vals, log=None):
    step = o["step"]
    log = log if log is not None else RoundingLog()
    mine = vals[r].get(step)
    if mine is None:
        return
    shapes = init[r]["shapes"]
    for lo in o["layers"]:
        layer = lo["name"]
        merged = set(lo["merged"])
        # a modules_to_save layer's original_module is judged as any base weight: no LoRA
        # delta exists for it, so anything but W0 is corrupt
        wname = weight_name(layer, shapes)
        if wname not in mine["s"] or mine["s"][wname] is None:
            continue
        if layer in init[r].get("quant", ()):
            # packed 4-bit codes: a merge requantizes (docs/design/upstream-backend.md), which
            # these fp32 value checks cannot read; the layer's weight stays unjudged
            continue
        key = _layer_key(layer, wname, merged, r, step, world, init, vals, mine, log)
        if key in _JUDGED:
            noted, fields = _JUDGED[key]
            if noted:
                log.note(r, layer, merged)
            lo.update({f: list(v) if isinstance(v, list) else v for f, v in fields.items()})
            continue
        prev = log.prev.get((r, layer))
        _judge_layer(lo, layer, wname, merged, r, step, world, init, vals, mine, log)
        if key is not None:
            _JUDGED[key] = (log.prev.get((r, layer)) is not prev, {f: lo[f] for f in JUDGED_FIELDS if f in lo})


def _layer_key(layer, wname, merged, r, step, world, init, vals, mine, log):
    """Everything an fp32 judgement of the layer reads, as the values' texts: its stored rows and
    registered copy, each adapter factor's sources (_sources, and the copy registered beside the
    shard), what is merged now and ever, the merge events so far. None for bf16, whose judgement
    also reads the tracked history (RoundingLog.track), which every step moves."""
    if init[r].get("dtype", "fp32") == "bf16":
        return None
    shapes, cast = init[r]["shapes"], mine.get("u_cast", ())
    kl = (r, layer)
    prev = log.prev.get(kl, set())
    factors = []
    for a in init[r]["scaling"]:
        for n in (f"{layer}.lora_A.{a}", f"{layer}.lora_B.{a}", f"{layer}.lora_magnitude_vector.{a}"):
            if n in shapes and n in mine["s"]:
                factors.append((n, _sources(n, shapes[n], r, step, world, init, vals, mine["s"]), mine["u"].get(n),
                                n in cast))
    return (r, layer, mine["s"][wname], mine["u"].get(wname), wname in cast, frozenset(merged),
            frozenset(log.ever.get(kl, set()) | merged), log.events.get(kl, 0) + len(prev ^ merged), tuple(factors))


def _judge_layer(lo, layer, wname, merged, r, step, world, init, vals, mine, log):
    """Sets the layer's `stored` and `registered` (and their alternatives) from the values."""
    shapes = init[r]["shapes"]
    scaling = init[r]["scaling"]
    wshape = shapes[wname]
    out_f = wshape[0]
    w0 = vec(init[r]["w0"][layer]).reshape(wshape)
    n, start = _chunk_rows(out_f, world, r)
    s_local = vec(mine["s"][wname]).reshape([-1] + wshape[1:])
    full_stored = s_local.shape[0] == out_f and world > 1 and n != out_f
    rows = slice(0, out_f) if full_stored else slice(start, start + n)

    def deltas_for(registered):
        """Each adapter's delta on the values; None when one cannot be assembled from
        every rank's rows (a peer holds none, or rows of another shape): unjudged. A factor
        registered as a policy's bf16 copy that still equals its fp32 shard's cast is read
        from the shard: a merge on the shard added the shard's delta, and one on the copy is
        within the bf16 bound of it. A stale copy (a step moved the shard since the gather)
        is read as it is."""
        cast = mine.get("u_cast", ())

        def factor(name):
            whole = _full(name, shapes[name], r, step, world, init, vals, mine["s"])
            if not registered or name not in mine["u"]:
                return whole
            u = vec(mine["u"][name]).reshape(shapes[name])
            if name in cast and whole is not None and torch.equal(whole.to(torch.bfloat16).to(u.dtype), u):
                return whole
            return u

        ds = {}
        for a, sc in scaling.items():
            an, bn = f"{layer}.lora_A.{a}", f"{layer}.lora_B.{a}"
            if an not in shapes or an not in mine["s"]:
                continue
            A, B = factor(an), factor(bn)
            if A is None or B is None:
                return None
            ds[a] = delta_of(A, B, wshape) * sc
            if layer in init[r].get("transposed", ()):  # a Conv1D: peft lora/layer.py::Linear.get_delta_weight's transpose(fan_in_fan_out)
                ds[a] = ds[a].T
            mn = f"{layer}.lora_magnitude_vector.{a}"
            if mn in shapes and mn in mine["s"] and len(wshape) == 2:
                m = factor(mn)
                if m is None:
                    return None
                ds[a] = dora_delta(w0, ds[a], m, layer in init[r].get("transposed", ()))
        return ds

    ds = deltas_for(False)
    if ds is None:
        return  # stays `unjudged` (observe.py)
    dtype = init[r].get("dtype", "fp32")
    before = log.merged_before(r, layer)
    rounded, events = log.note(r, layer, merged)
    stored = {a: d[rows] for a, d in ds.items()}
    d_s = s_local - w0[rows]

    def event(deltas, shape):
        """This step's merges minus its unmerges, of the values the edit read."""
        e = torch.zeros(shape, dtype=torch.float64)
        for a in merged ^ before:
            if a not in deltas or list(deltas[a].shape) != list(shape):
                return None
            e = e + deltas[a] if a in merged else e - deltas[a]
        return e

    def fit_tol(d, deltas, w0_rows):
        scale = max([float(x.abs().max()) for x in deltas.values() if x.numel()] + [0.0])
        return _tolerance(d, scale, dtype, _bound(w0_rows, deltas, rounded, events))

    def judged(d, deltas, w0_rows, h):
        got, alt = classify(d, merged, deltas, dtype, w0_rows, rounded, events)
        if h is None or got == "corrupt":
            return got, alt
        # The bf16 bound grows with every merge and unmerge; after a few it can hide what a
        # step while merged changed (lora/layer.py::Linear.merge adds get_delta_weight of the
        # values at merge time, unmerge subtracts that of the values at unmerge time). The
        # weight's tracked history is free of rounding: it says what the weight holds.
        return classify(h, merged, deltas, rounded=rounded)

    h_s = h_u = None
    if dtype == "bf16":
        # before the first observation the shard holds W0: no history yet is a zero one
        prior_s = log.history.get((r, layer, "s"), torch.zeros_like(d_s))
        h_s = log.track((r, layer, "s"), prior_s, event(stored, d_s.shape), d_s, fit_tol(d_s, stored, w0[rows]),
                        w0[rows])
    lo["stored"], alt = judged(d_s, stored, w0[rows], h_s)
    if alt:
        lo["stored_alt"] = alt
    if wname in mine["u"]:
        u = vec(mine["u"][wname]).reshape(wshape)
        dsu = deltas_for(True)
        if dtype == "bf16":
            # a copy gathered at this step starts from the shard's history (world 1: the shard is all of it)
            prior_u = log.history.get((r, layer, "u"))
            if prior_u is None and world == 1:
                prior_u = prior_s
            h_u = log.track((r, layer, "u"), prior_u, event(dsu, u.shape), u - w0, fit_tol(u - w0, dsu, w0), w0)
        if dsu is None:
            return
        if dtype != "bf16" and wname in mine.get("u_cast", ()):
            # U is the policy's bf16 cast of the fp32 shard (torch _fsdp_param.py::
            # FSDPParam.init_dtype_attrs): the cast is one more bf16 rounding than the merges on it
            lo["registered"], alt = classify(u - w0, merged, dsu, "bf16", w0, rounded, events + 1)
        else:
            lo["registered"], alt = judged(u - w0, dsu, w0, h_u)
    else:
        log.history.pop((r, layer, "u"), None)
        lo["registered"] = lo["stored"]
    if alt:
        lo["registered_alt"] = alt


def judge_deltas(o, r, world, init, vals):
    """delta_weight: each active adapter's delta (this rank's rows of it when
    PEFT returned a sharded DTensor) against the full B @ A * scaling."""
    step = o["step"]
    mine = vals[r].get(step)
    if not mine or "deltas" not in mine:
        return
    layer = mine["delta_layer"]
    if layer in init[r].get("quant", ()):
        return  # a 4-bit layer's delta: unjudged, as its weight (judge_layers)
    shapes = init[r]["shapes"]
    wshape = shapes[weight_name(layer, shapes)]
    # a Conv1D (weight stored (in, out)): PEFT returns the transposed delta, (in, out), and a
    # sharded one is Shard(1), B's rows (peft lora/layer.py::Linear.get_delta_weight's
    # transpose(fan_in_fan_out)); B @ A is compared in that layout
    conv1d = layer in init[r].get("transposed", ())
    for i, (a, d) in enumerate(mine["deltas"].items()):
        # left `unjudged` (observe.py) wherever the values cannot settle it
        an, bn = f"{layer}.lora_A.{a}", f"{layer}.lora_B.{a}"
        A = _full(an, shapes[an], r, step, world, init, vals, mine["s"])
        B = _full(bn, shapes[bn], r, step, world, init, vals, mine["s"])
        if A is None or B is None or d["v"] is None:
            continue
        want = delta_of(A, B, wshape) * init[r]["scaling"][a]
        want = want.T if conv1d else want
        got = vec(d["v"])
        magnitude = None  # per element: what the bf16 roundings scale with
        # A or B registered as a MixedPrecisionPolicy's bf16 copy of its fp32 shard (torch
        # _fsdp_param.py::FSDPParam.init_dtype_attrs): each factor was rounded to bf16 before PEFT's
        # product (lora/layer.py::Linear.get_delta_weight multiplies in fp32 on CPU and casts the
        # delta back to bf16), so an element is off by up to 2^-8 per factor of sum_k |B_ik| |A_kj|.
        factor_cast = an in mine.get("u_cast", ()) or bn in mine.get("u_cast", ())
        products = delta_of(A.abs(), B.abs(), wshape) * abs(init[r]["scaling"][a]) if factor_cast else None
        products = products.T if conv1d and products is not None else products
        if d.get("partial"):
            # a Partial DTensor (B @ A on uneven shards) is the sum of the locals each rank holds
            # in that place: a peer out of step holds another adapter's (its i-th delta of this op)
            peers = [list(vals[q].get(step, {}).get("deltas", {}).values()) for q in range(world)]
            parts = [p[i] if i < len(p) else None for p in peers]
            if any(p is None or p["v"] is None or p["shape"] != d["shape"] for p in parts):
                continue
            got = sum(vec(p["v"]) for p in parts)
            # each local is rounded to bf16 on its own: the error scales with the locals, which
            # may cancel in the sum, not with the sum (seed 210016: out 2 < world 3, r = 3)
            magnitude = sum(vec(p["v"]).abs() for p in parts)
        if list(want.shape) != d["shape"]:
            o["deltas"][a] = "corrupt"
            continue
        if d["shard_dim"] is not None:  # this rank's chunk of a sharded DTensor
            dim = d["shard_dim"]
            n, start = _chunk_rows(want.shape[dim], world, r)
            want = want.narrow(dim, start, n)
            products = products.narrow(dim, start, n) if products is not None else None
        flat = want.reshape(-1)
        dtype = init[r].get("dtype", "fp32")
        # bf16: the delta itself is cast to the weight's dtype once (and a Partial sum of casts)
        if magnitude is None or magnitude.numel() != flat.numel():
            magnitude = flat.abs()
        bound = BF16_ROUNDING * (magnitude.reshape(-1) + flat.abs()) if dtype == "bf16" else None
        if products is not None and products.numel() == flat.numel():
            dtype = "bf16"
            bound = BF16_ROUNDING * (2 * products.reshape(-1) + 2 * flat.abs())
        ok = got.numel() == want.numel() and _close(
            got.reshape(-1), flat, _tolerance(flat, float(want.abs().max()) if want.numel() else 0.0, dtype, bound))
        o["deltas"][a] = "exact" if ok else "corrupt"


def judge_replicas(o, r, world, init, vals):
    """replica_diff: each whole adapter tensor no FSDP group manages (added
    after fully_shard, so nothing reduces its grad) whose values differ
    between this rank and a peer, compared bit for bit. Managed shards
    differ by design and are not compared. Same rule as the C++ observer.
    replica_coincident: such a tensor an AdamW step moved (torch/optim/adamw.py
    state["step"] > 0) that still equals every peer's, as lr * sign(g) of a
    first step can leave per-rank data's replicas bit-identical."""
    mine = vals[r].get(o["step"])
    if not mine or not o.get("groups"):
        return  # no values (a stuck rank), or before prepare (no FSDP yet)
    diff, same = [], []
    for p in o.get("params", []):
        n = p["name"]
        if p.get("group") or mine["s"].get(n) is None:
            continue
        peers = [_view(r, j, o["step"], init, vals).get(n) for j in range(world) if j != r]
        peers = [t for t in peers if t is not None]
        if any(t != mine["s"][n] for t in peers):
            diff.append(n)
        elif peers and mine.get("steps", {}).get(n, 0) > 0:
            same.append(n)
    if diff:
        o["replica_diff"] = diff
    if same:
        o["replica_coincident"] = same
