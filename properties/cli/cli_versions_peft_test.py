#!/usr/bin/env python3
"""`fsdpsim versions --peft PATH` on a real local PEFT: a checkout-like
directory (pyproject.toml + src/peft) made from the pinned PEFT in .venv. As
it is, seed 000's root cause verdict does not change (exit 0); with
PeftModel.set_adapter made to raise, it does (exit 1, one `changed:` line).
Each variant is a new environment in a temporary releases directory (pip
builds it with .venv's setuptools, nothing downloaded).

Usage: cli_versions_peft_test.py FSDPSIM REPO_ROOT   (exit 77 without .venv)
"""
import glob
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import upstream_session  # noqa: E402

S = upstream_session("fsdpsim-versions-peft-")
check, fsdpsim, TMP = S.check, S.run, S.tmp
seq = os.path.join(S.root, "docs", "findings", "flag-on-copy.set_adapter.seq")
pinned = glob.glob(os.path.join(S.root, ".venv", "lib", "python3*", "site-packages", "peft"))[0]
src = os.path.join(TMP, "peft-checkout")
shutil.copytree(pinned, os.path.join(src, "src", "peft"), ignore=shutil.ignore_patterns("__pycache__"))
open(os.path.join(src, "pyproject.toml"), "w").write(
    '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
    '[project]\nname = "peft"\nversion = "0.21.2+local"\n\n[tool.setuptools.packages.find]\nwhere = ["src"]\n')
env = {"FSDPSIM_RELEASES_DIR": os.path.join(TMP, "releases")}

t0 = time.monotonic()
r = fsdpsim(["versions", "--peft", src, seq], env=env)
print("unchanged copy: %.1f s" % (time.monotonic() - t0))
check(r.returncode == 0 and "1 file, 0 changed from peft 0.21.2 to peft " + src in r.stdout,
      "unchanged: exit %d: %s %s" % (r.returncode, r.stdout[-800:], r.stderr[-800:]))

model = os.path.join(src, "src", "peft", "peft_model.py")
text = open(model).read()
edited = text.replace("    def set_adapter(self, adapter_name: str", "    def set_adapter(self, *a, **k):\n        raise ValueError('local edit')\n\n    def _old_set_adapter(self, adapter_name: str", 1)
check(edited != text, "peft_model.py no longer has `def set_adapter(self, adapter_name: str`")
open(model, "w").write(edited)
t0 = time.monotonic()
r = fsdpsim(["versions", "--peft", src, seq], env=env)
print("edited copy: %.1f s" % (time.monotonic() - t0))
check(r.returncode == 1 and "changed: %s: reproduces -> does not reproduce" % seq in r.stdout and "1 changed" in r.stdout,
      "edited: exit %d: %s %s" % (r.returncode, r.stdout[-800:], r.stderr[-800:]))
check(len(glob.glob(os.path.join(TMP, "releases", "peft-local-*", "fsdpsim-release.json"))) == 2,
      "the edit did not make a second environment: %s" % os.listdir(os.path.join(TMP, "releases")))
sys.exit(S.finish("versions --peft a local PEFT: unchanged exit 0, edited exit 1"))
