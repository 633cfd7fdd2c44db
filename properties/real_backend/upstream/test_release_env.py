"""Release sets (release_env.py) and the harness-level failures that make a
release `cannot run` a sequence (outcomes.py::harness_level, rank.py's `fail`).
No environment is built here: `fsdpsim versions`' ctest does that. Run by
ctest with the project's .venv python (label `upstream`)."""
import os
import sys
import unittest

import torch_caches  # noqa: F401  (first: torch's caches in a directory removed at exit)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

from fsdpsim_upstream import release_env  # noqa: E402
from fsdpsim_upstream.session import harness_level  # noqa: E402


class Sets(unittest.TestCase):
    def test_normalized_peft_first(self):
        pins = release_env.parse_set("transformers==4.51.3,accelerate==1.6.0,peft==0.15.2")
        self.assertEqual(release_env.normalize(pins), "peft==0.15.2,accelerate==1.6.0,transformers==4.51.3")
        self.assertEqual(release_env.dir_name(pins), "peft-0.15.2+accelerate-1.6.0+transformers-4.51.3")

    def test_bad_sets_name_their_column(self):
        for text, want in (("peft==0.17.1,torch==2.1", "peft==0.17.1,torch==2.1:1:14: expected one of"),
                           ("peft=0.17.1", "peft=0.17.1:1:6: expected peft==VERSION, or peft=PATH"),
                           ("accelerate==1.6.0", "accelerate==1.6.0:1:1: expected a set that names peft")):
            with self.assertRaises(release_env.SetError) as c:
                release_env.parse_set(text)
            self.assertTrue(str(c.exception).startswith(want), str(c.exception))

    def test_a_local_peft_is_one_environment_per_content(self):
        import shutil
        import tempfile
        import time
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname = 'peft'\n")
        pins = release_env.parse_set("peft=" + d)
        self.assertEqual(release_env.normalize(pins), "peft=" + os.path.abspath(d))
        first = release_env.dir_name(pins)
        self.assertTrue(first.startswith("peft-local-"), first)
        self.assertEqual(release_env.dir_name(pins), first)
        time.sleep(0.01)
        open(os.path.join(d, "pyproject.toml"), "a").write("# edited\n")
        self.assertNotEqual(release_env.dir_name(pins), first)  # an edit is a new environment

    def test_pinned_set_is_venv_itself(self):
        python, record = release_env.ensure(ROOT, "peft==" + release_env.shared_version(ROOT, "peft"))
        self.assertEqual(python, release_env.base_python(ROOT))
        self.assertTrue(record["shared"])


class HarnessLevel(unittest.TestCase):
    def raised(self, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the test looks at any exception
            return e
        self.fail("no exception")

    def harness_call(self, source):
        """A function whose code lies in the harness's directory, as session.py's ops do."""
        import fsdpsim_upstream
        here = os.path.join(os.path.dirname(fsdpsim_upstream.__file__), "session_stand_in.py")
        scope = {}
        exec(compile(source, here, "exec"), scope)  # noqa: S102 - a stand-in frame, no file written
        return scope["call"]

    def test_missing_api_called_from_the_harness(self):
        import torch.nn as nn
        missing = self.harness_call("def call(m):\n    return m.set_adapter_no_release_has('x')\n")
        self.assertTrue(harness_level(self.raised(lambda: missing(nn.Linear(2, 2)))))  # via nn.Module.__getattr__
        keyword = self.harness_call("import torch.nn as nn\ndef call():\n    return nn.Linear(2, 2, no_such_keyword=1)\n")
        self.assertTrue(harness_level(self.raised(keyword)))  # TypeError at the harness's call
        # the same calls from outside the harness are not the harness's
        self.assertFalse(harness_level(self.raised(lambda: nn.Linear(2, 2).set_adapter_no_release_has("x"))))

    def test_errors_inside_libraries_stay_observations(self):
        self.assertFalse(harness_level(self.raised(lambda: {}["k"])))  # KeyError: an op's status
        deeper = self.harness_call("import json\ndef call():\n    return json.loads(None)\n")
        self.assertFalse(harness_level(self.raised(deeper)))  # TypeError raised inside the library (json/__init__.py)


if __name__ == "__main__":
    unittest.main()
