"""The session's build without its former repeated work (fsdpsim_upstream/session.py): `seed_cpu`
draws as torch.manual_seed does on CPU, and W0 read off the net just built (instead of a second
net drawn from the same seed) leaves W0, the adapters PEFT drew after it and the generator as the
two-build path left them; a meta rank (ram-efficient loading) and a 4-bit layer still build their
W0 apart. One process, world 1 and 2 sessions built up to PEFT's injection (no process group:
nothing before `prepare` communicates). `.venv/bin/python properties/real_backend/upstream/test_session_build.py`."""
import os
import sys
import tempfile
import unittest

import torch_caches  # noqa: F401  (first: torch's caches in a directory removed at exit)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

import torch  # noqa: E402

from fsdpsim_upstream import profiles, seqfile  # noqa: E402
from fsdpsim_upstream.session import Net, Session, quantize, seed_cpu  # noqa: E402

HEAD = """world {world}
seed 7
profile upstream
{dtype}{loading}layer lin0 10 20
layer lin1 20 6 {lin1}
adapter default r=4 alpha=8 targets=lin0,lin1 init={init}
adapter other r=2 alpha=2 targets=lin0
fully_shard root reshard_after_forward=true
optimizer trainable
---
forward
"""


def session(text, rank=0):
    scen, ops = seqfile.parse(text)
    s = Session(scen, ops, rank, scen.world, None, profiles.resolve(scen.profile, scen.sets), tempfile.gettempdir())
    s.dtype = torch.bfloat16 if scen.dtype == "bf16" else torch.float32  # as Session.build sets it
    return s


def built(text, rank=0, former=False):
    """(W0, the model's state dict, the generator's state) after the build up to PEFT's injection;
    `former`: as the build drew before, a second net from the seed for W0 right after the first."""
    s = session(text, rank)
    real = Session.base_net

    def two_nets(self):
        net = real(self)
        torch.manual_seed(self.scen.seed)
        cpu = quantize(Net(self.scen.layers).to(self.dtype), self.scen.layers)
        self.former_w0 = {l.name: getattr(cpu, l.name).weight.detach().clone() for l in self.scen.layers}
        return net

    if former:
        Session.base_net = two_nets
    try:
        s.build_model()
    finally:
        Session.base_net = real
    sd = {k: v.detach().clone() for k, v in s.pm.state_dict().items() if v.device.type != "meta"}
    return (s.former_w0 if former else s.w0), sd, torch.get_rng_state()


class SessionBuildTest(unittest.TestCase):
    def test_seed_cpu_draws_as_manual_seed(self):
        torch.manual_seed(12345)
        want = torch.randn(16)
        seed_cpu(12345)
        self.assertTrue(torch.equal(torch.randn(16), want))
        seed_cpu(-3)  # torch remaps a negative seed; the same call underneath
        a = torch.randn(4)
        torch.manual_seed(-3)
        self.assertTrue(torch.equal(torch.randn(4), a))

    def check(self, text, rank=0):
        w0, sd, rng = built(text, rank)
        w0_ref, sd_ref, rng_ref = built(text, rank, former=True)
        self.assertEqual(sorted(w0), sorted(w0_ref))
        for k in w0:
            self.assertEqual(w0[k].device.type, "cpu", k)
            self.assertTrue(torch.equal(w0[k], w0_ref[k]), k)
        self.assertEqual(sorted(sd), sorted(sd_ref))
        for k in sd:
            self.assertTrue(torch.equal(sd[k], sd_ref[k]), k)
        self.assertTrue(torch.equal(rng, rng_ref))

    def test_w0_from_the_built_net(self):
        for dtype in ("", "dtype bf16\n"):
            for init in ("zero", "random"):
                for lin1 in ("", "experts=3"):
                    with self.subTest(dtype=dtype, init=init, lin1=lin1):
                        self.check(HEAD.format(world=1, dtype=dtype, loading="", lin1=lin1, init=init))

    def test_meta_rank_draws_w0_as_rank_0(self):
        text = HEAD.format(world=2, dtype="", loading="loading ram_efficient\n", lin1="", init="random")
        w0_1 = built(text, rank=1)[0]
        w0_0 = built(text, rank=0)[0]
        for k in w0_0:
            self.assertEqual(w0_1[k].device.type, "cpu", k)
            self.assertTrue(torch.equal(w0_1[k], w0_0[k]), k)


if __name__ == "__main__":
    unittest.main()
