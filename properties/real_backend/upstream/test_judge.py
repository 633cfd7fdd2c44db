"""Tests of the upstream backend's judge (real_backend/upstream/fsdpsim_upstream/judge.py)
on hand-made rank reports, no ranks started: a bf16 weight's class after merges and
unmerges, where the rounding bound alone cannot see a step taken while merged. Run by
ctest with the project's .venv python (label `upstream`)."""
import base64
import os
import sys
import unittest

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

from fsdpsim_upstream import judge  # noqa: E402


def enc(t):
    return base64.b64encode(t.to(torch.float32).contiguous().numpy().tobytes()).decode()


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


class Bf16History(unittest.TestCase):
    """World 1, one layer lin0 (4, 3) in bf16, one adapter `a` (r = 1, scaling 1)."""

    def setUp(self):
        g = torch.Generator().manual_seed(7)
        self.w0 = bf16(torch.rand(4, 3, generator=g) + 0.5)
        self.A = bf16(torch.rand(1, 3, generator=g) * 0.5)
        self.B = bf16(torch.rand(4, 1, generator=g) * 0.5)
        self.init = {0: {"shapes": {"lin0.weight": [4, 3], "lin0.lora_A.a": [1, 3], "lin0.lora_B.a": [4, 1]},
                         "scaling": {"a": 1.0}, "dtype": "bf16", "w0": {"lin0": enc(self.w0)},
                         "values": {"s": {"lin0.weight": enc(self.w0), "lin0.lora_A.a": enc(self.A),
                                          "lin0.lora_B.a": enc(self.B)}}}}
        self.vals = {0: {}}
        self.log = judge.RoundingLog()

    def report(self, step, w, A, B, merged):
        """One step's observation and values; returns the stored class the judge gives."""
        self.vals[0][step] = {"s": {"lin0.weight": enc(w), "lin0.lora_A.a": enc(A), "lin0.lora_B.a": enc(B)},
                              "u": {}}
        o = {"step": step, "rank": 0, "layers": [{"name": "lin0", "merged": merged}]}
        judge.judge_layers(o, 0, 1, self.init, self.vals, self.log)
        return o["layers"][0]["stored"]

    def merge_unmerge_merge(self):
        d = bf16(self.B @ self.A)  # lora/layer.py::Linear.get_delta_weight casts to the weight's dtype
        w = bf16(self.w0 + d)
        self.assertEqual(self.report(0, w, self.A, self.B, ["a"]), "exact")
        w = bf16(w - d)
        self.assertEqual(self.report(1, w, self.A, self.B, []), "exact")
        w = bf16(w + d)
        self.assertEqual(self.report(2, w, self.A, self.B, ["a"]), "exact")
        return w

    def test_step_while_merged_is_corrupt_after_three_roundings(self):
        w = self.merge_unmerge_merge()
        A2, B2 = bf16(self.A + 0.004), bf16(self.B - 0.004)  # an optimizer step of lr 4e-3
        # the change is inside the bound of three rounding events, so only the history sees it
        moved = float((B2 @ A2 - self.B @ self.A).abs().max())
        bound = float(judge.BF16_ROUNDING * (self.w0.abs() + 2 * (self.B @ self.A).abs().max()).min() * 3)
        self.assertLess(moved, bound)
        self.assertEqual(self.report(3, w, A2, B2, ["a"]), "corrupt")
        # unmerging subtracts the new values' delta: W0 + d(old) - d(new), still no set of current deltas
        d2 = bf16(B2 @ A2)
        self.assertEqual(self.report(4, bf16(w - d2), A2, B2, []), "corrupt")

    def test_unchanged_adapter_stays_exact(self):
        w = self.merge_unmerge_merge()
        self.assertEqual(self.report(3, w, self.A, self.B, ["a"]), "exact")
        self.assertEqual(self.report(4, bf16(w - bf16(self.B @ self.A)), self.A, self.B, []), "exact")

    def test_a_merge_that_did_not_land_is_missing_delta(self):
        # the merge ran on the unsharded copy and the reshard dropped it: the shard is W0
        self.assertEqual(self.report(0, self.w0, self.A, self.B, ["a"]), "missing_delta")
        # an unmerge that lands on the shard then leaves W0 - d: no set of current deltas
        d = bf16(self.B @ self.A)
        self.assertEqual(self.report(1, bf16(self.w0 - d), self.A, self.B, []), "corrupt")


    def merged_small_after_merge_unmerge(self, scale):
        """Merge and unmerge `a` (two bf16 roundings on the shard), then a step that leaves B at
        `scale`: the third event's bound (~2e-2) fits a delta of that size both ways."""
        d = bf16(self.B @ self.A)
        w = bf16(self.w0 + d)
        self.report(0, w, self.A, self.B, ["a"])
        w = bf16(w - d)
        self.assertEqual(self.report(1, w, self.A, self.B, []), "exact")
        return w, bf16(torch.full_like(self.B, scale))

    def test_a_merge_that_left_every_bit_of_the_shard_is_missing_delta(self):
        # crosscheck seed 39500430: the merge edited the unsharded copy; no bit of the shard moved
        w, B2 = self.merged_small_after_merge_unmerge(0.03)
        self.assertEqual(self.report(2, w, self.A, B2, ["a"]), "missing_delta")

    def test_a_merge_that_moved_the_bits_is_exact(self):
        w, B2 = self.merged_small_after_merge_unmerge(0.03)
        self.assertEqual(self.report(2, bf16(w + bf16(B2 @ self.A)), self.A, B2, ["a"]), "exact")

    def test_a_delta_below_every_bf16_step_fits_both(self):
        # no bit would have moved either way: the values cannot tell, so both readings are named
        w, B2 = self.merged_small_after_merge_unmerge(1e-5)
        self.vals[0][2] = {"s": {"lin0.weight": enc(w), "lin0.lora_A.a": enc(self.A), "lin0.lora_B.a": enc(B2)},
                           "u": {}}
        o = {"step": 2, "rank": 0, "layers": [{"name": "lin0", "merged": ["a"]}]}
        judge.judge_layers(o, 0, 1, self.init, self.vals, self.log)
        lo = o["layers"][0]
        self.assertEqual({lo["stored"]} | set(lo.get("stored_alt", [])) >= {"exact", "missing_delta"}, True, lo)


class NoDefaultVerdicts(unittest.TestCase):
    """A class the values cannot settle stays `unjudged` (observe.py pre-fills it so): the judge
    never leaves a default verdict behind."""

    def setUp(self):
        A, B = torch.ones(1, 3), torch.ones(4, 1)
        shapes = {"lin0.weight": [4, 3], "lin0.lora_A.a": [1, 3], "lin0.lora_B.a": [4, 1]}
        self.init = {r: {"shapes": shapes, "scaling": {"a": 1.0}, "dtype": "fp32", "w0": {"lin0": enc(torch.zeros(4, 3))},
                         "values": {"s": {"lin0.weight": enc(torch.zeros(2, 3)), "lin0.lora_A.a": enc(A[:, :0]),
                                          "lin0.lora_B.a": enc(B[2 * r:2 * r + 2])}}} for r in range(2)}

    def judged_stored(self):
        vals = {0: {1: {"s": {"lin0.weight": enc(torch.zeros(2, 3)), "lin0.lora_A.a": enc(torch.ones(1, 3)),
                              "lin0.lora_B.a": enc(torch.zeros(2, 1))}, "u": {}}}, 1: {}}
        o = {"step": 1, "rank": 0, "layers": [{"name": "lin0", "merged": [], "stored": "unjudged",
                                               "registered": "unjudged"}]}
        judge.judge_layers(o, 0, 2, self.init, vals)
        return o["layers"][0]["stored"]

    def test_a_peer_without_values_leaves_the_stored_weight_unjudged(self):
        # rank 1 reports B's rows as a tensor of another size: the full B cannot be assembled
        self.init[1]["values"]["s"]["lin0.lora_B.a"] = enc(torch.ones(5))
        self.assertEqual(self.judged_stored(), "unjudged")

    def test_a_factor_this_rank_holds_whole_needs_no_peer(self):
        # rank 0 holds every row of A (one row): a peer's A on meta (no values) changes nothing
        self.init[1]["values"]["s"]["lin0.lora_A.a"] = None
        self.assertEqual(self.judged_stored(), "exact")

    def test_a_partial_delta_sums_the_peers_locals_in_place_whatever_adapter_they_hold(self):
        # rank 1 computed adapter b's delta in the place rank 0 computed a's: the sum mixes them
        B = torch.ones(4, 1)
        half = (B @ torch.ones(1, 3)) / 2  # a's full delta is B @ A = all ones

        def held(r, local):
            s = {"lin0.weight": enc(torch.zeros(2, 3)), "lin0.lora_A.a": enc(torch.ones(1, 3)[:1 - r]),
                 "lin0.lora_B.a": enc(B[2 * r:2 * r + 2])}
            return {"s": s, "u": {}, "delta_layer": "lin0", "deltas": local}

        def local(adapter, v):
            return {adapter: {"shard_dim": None, "partial": True, "shape": [4, 3], "v": enc(v)}}

        def judged(peer):
            vals = {0: {1: held(0, local("a", half))}, 1: {1: held(1, peer)}}
            o = {"step": 1, "rank": 0, "deltas": {"a": "unjudged"}}
            judge.judge_deltas(o, 0, 2, self.init, vals)
            return o["deltas"]["a"]

        self.assertEqual(judged(local("a", half)), "exact")
        self.assertEqual(judged(local("b", half * 3)), "corrupt")
        self.assertEqual(judged({}), "unjudged")  # the peer computed none: nothing to sum


class PolicyCopies(unittest.TestCase):
    """Under a MixedPrecisionPolicy U holds bf16 copies of fp32 shards (`u_cast`): a delta_weight
    PEFT computes from the copies of A and B carries their rounding, which the judge allows."""

    def setUp(self):
        g = torch.Generator().manual_seed(5)
        self.A, self.B = torch.randn(4, 6, generator=g), torch.randn(5, 4, generator=g)
        shapes = {"lin0.weight": [5, 6], "lin0.lora_A.a": [4, 6], "lin0.lora_B.a": [5, 4]}
        self.init = {0: {"shapes": shapes, "scaling": {"a": 2.0}, "dtype": "fp32",
                         "w0": {"lin0": enc(torch.zeros(5, 6))}, "values": {"s": {}}}}

    def judged(self, delta, cast):
        s = {"lin0.weight": enc(torch.zeros(5, 6)), "lin0.lora_A.a": enc(self.A), "lin0.lora_B.a": enc(self.B)}
        u = {"lin0.lora_A.a": enc(self.A.bfloat16()), "lin0.lora_B.a": enc(self.B.bfloat16())}
        vals = {0: {1: {"s": s, "u": u, "u_cast": list(u) if cast else [], "delta_layer": "lin0",
                        "deltas": {"a": {"shard_dim": None, "partial": False, "shape": [5, 6], "v": enc(delta)}}}}}
        o = {"step": 1, "rank": 0, "deltas": {"a": "unjudged"}}
        judge.judge_deltas(o, 0, 1, self.init, vals)
        return o["deltas"]["a"]

    def test_a_delta_of_the_bf16_copies_is_exact(self):
        # lora/layer.py::Linear.get_delta_weight on CPU: the bf16 factors multiplied in fp32, cast back
        on_copies = ((self.B.bfloat16().float() @ self.A.bfloat16().float()) * 2.0).bfloat16()
        self.assertEqual(self.judged(on_copies, cast=True), "exact")
        self.assertEqual(self.judged(on_copies, cast=False), "corrupt")  # fp32 factors: no such rounding
        self.assertEqual(self.judged(on_copies.float() + 0.25, cast=True), "corrupt")


class ChunkRows(unittest.TestCase):
    """Each rank's chunk of a dim sharded as FSDP and DTensor shard it: ceil(rows / world) per
    rank, the last ones short or empty."""

    def test_a_rank_past_the_last_row_takes_an_empty_chunk_at_the_end(self):
        # E 2 experts at world 4 (crosscheck seed 880408): ranks 2 and 3 hold none
        self.assertEqual([judge._chunk_rows(2, 4, r) for r in range(4)], [(1, 0), (1, 1), (0, 2), (0, 2)])
        self.assertEqual([judge._chunk_rows(10, 4, r) for r in range(4)], [(3, 0), (3, 3), (3, 6), (1, 9)])
        for r in range(4):
            n, start = judge._chunk_rows(2, 4, r)
            self.assertEqual(torch.zeros(2, 3).narrow(0, start, n).shape[0], n)


class ZeroRows(unittest.TestCase):
    """judge.classify where an adapter's delta is zero on the rows judged (a B row no step moved):
    the values fit the stale-merge reading too, so `corrupt` is among the other readings."""

    def test_a_merged_delta_zero_on_these_rows_also_fits_corrupt(self):
        zero, other = torch.zeros(1, 3), torch.full((1, 3), 0.5)
        got, alt = judge.classify(torch.zeros(1, 3), {"a"}, {"a": zero, "b": other})
        self.assertEqual(got, "exact")
        self.assertEqual(alt, ["missing_delta", "corrupt"])

    def test_an_unmerged_delta_zero_on_these_rows_fits_corrupt_once_merged_before(self):
        # W0 with nothing merged: exact, and a kept copy of `a` (extra) or a stale one (corrupt: an
        # unmerge a reshard dropped, `a` trained since) fit too (crosscheck seed 39200252, world 3)
        got, alt = judge.classify(torch.zeros(1, 3), set(), {"a": torch.zeros(1, 3)}, rounded={"a"})
        self.assertEqual((got, alt), ("exact", ["extra_delta", "corrupt"]))
        # never merged on this weight: no copy of it to be stale (S5 keeps a rank's exact apart)
        got, alt = judge.classify(torch.zeros(1, 3), set(), {"a": torch.zeros(1, 3)})
        self.assertEqual((got, alt), ("exact", ["extra_delta"]))

    def test_a_merged_delta_that_is_not_zero_does_not(self):
        d = torch.full((1, 3), 0.25)
        got, alt = judge.classify(d, {"a"}, {"a": d, "b": torch.full((1, 3), 0.5)})
        self.assertEqual((got, alt), ("exact", []))


class PeerViews(unittest.TestCase):
    """Which peer report goes with a rank's: read from the pairings the pool made (pool.py::
    Pool.note_pairing), never from a rule over collective counts."""

    @staticmethod
    def obs(*ops):
        return [{"step": s, "collectives": [{}] * n, "status": st} for s, n, st in ops]

    @staticmethod
    def pairings(*pairs):
        """Each pairing as {rank: step}, listed for every rank in it, in issue order."""
        out = {}
        for p in pairs:
            for r in p:
                out.setdefault(r, []).append(p)
        return out

    def test_an_extra_op_waiting_for_a_later_peer_op_sees_the_peer_just_before_it(self):
        # rank 1's @1 eval (step 4) pairs with rank 0's eval of step 7: rank 0 has stepped
        # (merged_experts_eval_waits_for_peer_step.seq's shape)
        judge.set_peer_views([self.obs((3, 2, "ok"), (5, 0, "ok"), (6, 0, "ok"), (7, 2, "ok"), (8, 0, "ok")),
                              self.obs((3, 2, "ok"), (4, 2, "ok"), (5, 0, "ok"), (7, 1, "hang"))], 2,
                             self.pairings({0: 3, 1: 3}, {0: 3, 1: 3}, {0: 7, 1: 4}, {0: 7, 1: 4}, {1: 7}))
        self.assertEqual(judge._PEERS[(1, 4)][0], 6)
        # past its partner op a peer has run its ops without collectives; a hung one is not seen
        self.assertEqual(judge._PEERS[(0, 7)][1], 5)
        self.assertEqual(judge._PEERS[(0, 8)][1], 5)
        self.assertEqual(judge._PEERS[(0, 3)][1], 3)

    def test_the_pairing_decides_where_the_same_step_would_not(self):
        # rank 1's extra `@1 delta_weight` (step 2) gathers with rank 0's forward of step 3; rank
        # 1's own forward of step 3 then waits for rank 0's merge (step 4): rank 0's report of step
        # 3 met rank 1 as it was after step 2, though rank 1 has a report of step 3 too
        judge.set_peer_views([self.obs((1, 1, "ok"), (3, 1, "ok"), (4, 1, "ok")),
                              self.obs((1, 1, "ok"), (2, 1, "ok"), (3, 1, "ok"), (4, 1, "hang"))], 2,
                             self.pairings({0: 1, 1: 1}, {0: 3, 1: 2}, {0: 4, 1: 3}, {1: 4}))
        self.assertEqual(judge._PEERS[(0, 3)][1], 2)
        self.assertEqual(judge._PEERS[(0, 4)][1], 3)
        self.assertEqual(judge._PEERS[(1, 2)][0], 1)  # rank 0 was still on its way to step 3
        self.assertEqual(judge._PEERS[(1, 4)][0], 4)  # its unpaired last: the same step

    def test_nothing_yet_is_the_initial_state(self):
        judge.set_peer_views([self.obs((1, 0, "ok")), self.obs((2, 0, "ok"))], 2, {})
        self.assertIsNone(judge._PEERS[(0, 1)][1])
        self.assertEqual(judge._PEERS[(1, 2)][0], 1)


class DecodedOnce(unittest.TestCase):
    """The judge decodes each rank text once per run and shares the vector (judge.py, _DECODED and
    _ASSEMBLED): no judging step may write into a shared vector, and forget() empties both."""

    def setUp(self):
        judge.forget()
        self.case = Bf16History("merge_unmerge_merge")
        self.case.setUp()

    def test_a_text_is_decoded_once_and_judging_leaves_the_vectors_as_decoded(self):
        decoded = []
        real = judge._decode
        judge._decode = lambda v: decoded.append(v) or real(v)
        try:
            self.case.merge_unmerge_merge()  # three steps of the same A and B
            self.assertEqual(len(decoded), len(set(decoded)), "a text was decoded twice in one run")
            for text, t in judge._DECODED.items():
                self.assertTrue(torch.equal(t, real(text)), "judging wrote into a shared decoded vector")
        finally:
            judge._decode = real
        self.assertTrue(judge._ASSEMBLED or judge._DECODED)
        judge.forget()
        self.assertEqual((judge._DECODED, judge._ASSEMBLED), ({}, {}))



class JudgedOnce(unittest.TestCase):
    """A layer whose values no op changed is judged once per run (judge.py, _JUDGED): the memo's
    key holds everything the judgement reads, so a step that changed the stored rows, a factor or
    what is merged is judged afresh, and a layer no adapter targets still is. World 1, fp32, lin0
    (4, 3) with adapter `a` (r = 1, scaling 1), norm (4,) with none."""

    def setUp(self):
        judge.forget()
        g = torch.Generator().manual_seed(3)
        self.w0, self.n0 = torch.randn(4, 3, generator=g), torch.ones(4)
        self.A, self.B = torch.randn(1, 3, generator=g), torch.randn(4, 1, generator=g)
        shapes = {"lin0.weight": [4, 3], "lin0.lora_A.a": [1, 3], "lin0.lora_B.a": [4, 1], "norm.weight": [4]}
        self.init = {0: {"shapes": shapes, "scaling": {"a": 1.0}, "dtype": "fp32",
                         "w0": {"lin0": enc(self.w0), "norm": enc(self.n0)}, "values": {"s": {}}}}
        self.vals, self.log, self.step = {0: {}}, judge.RoundingLog(), 0

    def tearDown(self):
        judge.forget()

    def report(self, w, merged, B=None, norm=None):
        """The classes of lin0 and norm at the next step."""
        self.step += 1
        B = self.B if B is None else B
        self.vals[0][self.step] = {"s": {"lin0.weight": enc(w), "lin0.lora_A.a": enc(self.A), "lin0.lora_B.a": enc(B),
                                         "norm.weight": enc(self.n0 if norm is None else norm)}, "u": {}}
        o = {"step": self.step, "rank": 0, "layers": [
            {"name": n, "merged": m, "stored": "unjudged", "registered": "unjudged"}
            for n, m in (("lin0", merged), ("norm", []))]}
        judge.judge_layers(o, 0, 1, self.init, self.vals, self.log)
        return [(lo["stored"], lo["registered"]) for lo in o["layers"]]

    def test_a_step_that_changed_nothing_is_judged_from_the_memo_alike(self):
        first = self.report(self.w0, [])
        calls = []
        real = judge._judge_layer
        judge._judge_layer = lambda *a: calls.append(a[1]) or real(*a)
        try:
            self.assertEqual(self.report(self.w0, []), first)
        finally:
            judge._judge_layer = real
        self.assertEqual(first, [("exact", "exact")] * 2)
        self.assertEqual(calls, [], "an unchanged layer was judged again")

    def test_changed_rows_a_changed_factor_or_a_merge_are_judged_afresh(self):
        self.report(self.w0, [])
        self.assertEqual(self.report(self.w0 + 1, [])[0][0], "corrupt")  # the stored rows moved
        self.assertEqual(self.report(self.w0, [], norm=self.n0 * 2)[1][0], "corrupt")  # a frozen norm's
        self.assertEqual(self.report(self.w0 + self.B @ self.A, ["a"])[0][0], "exact")  # merged now
        # the same weight and merged list, another B: the merged delta no longer matches the weight
        self.assertEqual(self.report(self.w0 + self.B @ self.A, ["a"], B=self.B * 3)[0][0], "corrupt")
        self.assertEqual(self.report(self.w0 + self.B @ self.A, ["a"])[0][0], "exact")


class DoraMerge(unittest.TestCase):
    """World 1, fp32, one layer lin0 (4, 3), one DoRA adapter `a` (r = 1, scaling 1) whose magnitude
    a step moved off the weight norm: its merge rescales the rows (lora/variants.py::
    DoraLinearVariant.merge_safe), which the judge reads from the values."""

    def test_rescaled_merge_is_exact_and_plain_lora_sum_is_not(self):
        g = torch.Generator().manual_seed(11)
        w0 = torch.rand(4, 3, generator=g) + 0.5
        A = torch.rand(1, 3, generator=g) * 0.5
        B = torch.rand(4, 1, generator=g) * 0.5
        m = torch.linalg.norm(w0 + B @ A, dim=1) * 1.1  # a step moved the magnitude
        shapes = {"lin0.weight": [4, 3], "lin0.lora_A.a": [1, 3], "lin0.lora_B.a": [4, 1],
                  "lin0.lora_magnitude_vector.a": [4]}
        init = {0: {"shapes": shapes, "scaling": {"a": 1.0}, "dtype": "fp32", "w0": {"lin0": enc(w0)}}}

        def stored(w):
            vals = {0: {0: {"s": {"lin0.weight": enc(w), "lin0.lora_A.a": enc(A), "lin0.lora_B.a": enc(B),
                                  "lin0.lora_magnitude_vector.a": enc(m)}, "u": {}}}}
            o = {"step": 0, "rank": 0, "layers": [{"name": "lin0", "merged": ["a"]}]}
            judge.judge_layers(o, 0, 1, init, vals, judge.RoundingLog())
            return o["layers"][0]["stored"]

        merged = (m / torch.linalg.norm(w0 + B @ A, dim=1)).reshape(-1, 1) * (w0 + B @ A)
        self.assertEqual(stored(merged), "exact")
        self.assertEqual(stored(w0 + B @ A), "corrupt")
        self.assertEqual(stored(w0), "missing_delta")

    def test_a_conv1d_merge_rescales_the_columns(self):
        """A transformers Conv1D (gpt2's c_attn: weight (in, out), `transposed`): merge_safe takes
        the norm of each output's column and rescales the columns (transpose by fan_in_fan_out)."""
        g = torch.Generator().manual_seed(13)
        w0 = torch.rand(3, 4, generator=g) + 0.5  # (in, out)
        A = torch.rand(1, 3, generator=g) * 0.5
        B = torch.rand(4, 1, generator=g) * 0.5
        d = (B @ A).T
        m = torch.linalg.norm(w0 + d, dim=0) * 1.1
        shapes = {"c.weight": [3, 4], "c.lora_A.a": [1, 3], "c.lora_B.a": [4, 1], "c.lora_magnitude_vector.a": [4]}
        init = {0: {"shapes": shapes, "scaling": {"a": 1.0}, "dtype": "fp32", "w0": {"c": enc(w0)},
                    "transposed": ["c"]}}

        def stored(w):
            vals = {0: {0: {"s": {"c.weight": enc(w), "c.lora_A.a": enc(A), "c.lora_B.a": enc(B),
                                  "c.lora_magnitude_vector.a": enc(m)}, "u": {}}}}
            o = {"step": 0, "rank": 0, "layers": [{"name": "c", "merged": ["a"]}]}
            judge.judge_layers(o, 0, 1, init, vals, judge.RoundingLog())
            return o["layers"][0]["stored"]

        self.assertEqual(stored((m / torch.linalg.norm(w0 + d, dim=0)).reshape(1, -1) * (w0 + d)), "exact")
        self.assertEqual(stored(w0 + d), "corrupt")

class Conv1DDelta(unittest.TestCase):
    """delta_weight on a transformers Conv1D (gpt2's c_attn, weight stored (in, out)): PEFT returns
    the transposed B @ A (lora/layer.py::Linear.get_delta_weight, transpose(fan_in_fan_out)), at
    world 2 a Shard(1) DTensor whose local is this rank's columns (B's rows). Crosscheck --draw
    models seed 119 read it `corrupt` while the judge compared B @ A untransposed."""

    def setUp(self):
        g = torch.Generator().manual_seed(3)
        self.A, self.B = torch.randn(2, 4, generator=g), torch.randn(6, 2, generator=g)  # in 4, out 6, r 2
        shapes = {"c.weight": [4, 6], "c.lora_A.a": [2, 4], "c.lora_B.a": [6, 2]}
        self.init = {r: {"shapes": shapes, "scaling": {"a": 0.5}, "dtype": "fp32", "transposed": ["c"],
                         "w0": {"c": enc(torch.zeros(4, 6))}} for r in range(2)}

    def judged(self, local, shape):
        def held(r, v):
            s = {"c.weight": enc(torch.zeros(2, 6)), "c.lora_A.a": enc(self.A[r:r + 1]), "c.lora_B.a": enc(self.B[3 * r:3 * r + 3])}
            return {"s": s, "u": {}, "delta_layer": "c",
                    "deltas": {"a": {"shard_dim": 1, "partial": False, "shape": shape, "v": enc(v)}}}
        vals = {0: {1: held(0, local)}, 1: {1: held(1, local)}}
        o = {"step": 1, "rank": 0, "deltas": {"a": "unjudged"}}
        judge.judge_deltas(o, 0, 2, self.init, vals)
        return o["deltas"]["a"]

    def test_the_transposed_delta_s_columns_are_exact(self):
        delta = (self.B @ self.A).T * 0.5  # (in, out): rank 0 holds its first 3 columns
        self.assertEqual(self.judged(delta[:, :3], [4, 6]), "exact")
        self.assertEqual(self.judged(delta[:, 3:], [4, 6]), "corrupt")  # rank 1's columns
        self.assertEqual(self.judged((self.B @ self.A)[:3] * 0.5, [6, 4]), "corrupt")  # untransposed rows


if __name__ == "__main__":
    unittest.main()
