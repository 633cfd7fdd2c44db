"""What the command-line convention tests (cli_json, cli_junit, cli_progress) share:
running the built fsdpsim, the fake upstream pool, altered observations, and
collecting problems."""
import json
import os
import shutil
import subprocess
import sys


def upstream_session(prefix):
    """The Session of a test that needs .venv (label upstream): sys.argv's FSDPSIM and
    REPO_ROOT, a fresh temporary directory; exit 77 (ctest's skip) without .venv."""
    import tempfile
    s = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix=prefix))
    if not os.access(os.path.join(s.root, ".venv", "bin", "python"), os.X_OK):
        shutil.rmtree(s.tmp, ignore_errors=True)
        sys.exit(77)
    return s


class Session:
    def __init__(self, fsdpsim, root, tmp):
        self.fsdpsim, self.root, self.tmp = fsdpsim, root, tmp
        self.reg = os.path.join(root, "corpus", "regressions")
        self.seed000 = os.path.join(self.reg, "seed000_merged_set_adapter_w2.seq")
        self.problems = []

    def check(self, cond, msg):
        if not cond:
            self.problems.append(msg)

    def run(self, args, env=None, timeout=600):
        return subprocess.run([self.fsdpsim] + args, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))

    def fake_pool(self, obs_file):
        """The environment under which the upstream backend is properties/real_backend/fake_pool.py replaying obs_file."""
        return {"FSDPSIM_PYTHON": "python3", "FSDPSIM_UPSTREAM_MODULE": "fake_pool",
                "PYTHONPATH": os.path.join(self.root, "properties", "real_backend"), "FAKE_POOL_OBS": obs_file}

    def altered(self, obs_text, name):
        """`run --json` output with step 1 rank 0's `disabled` flipped, written to TMP/name: a difference any run against it reports."""
        out = []
        for line in obs_text.splitlines():
            o = json.loads(line)
            if o.get("type") == "observation" and o["step"] == 1 and o["rank"] == 0:
                o["disabled"] = not o["disabled"]
            out.append(json.dumps(o))
        path = os.path.join(self.tmp, name)
        open(path, "w").write("\n".join(out) + "\n")
        return path

    def wrong_seed000(self):
        """Seed 000 with its first expected finding changed: check fails it."""
        path = os.path.join(self.tmp, "wrong.seq")
        open(path, "w").write(open(self.seed000).read().replace("finding=S3", "finding=S2", 1))
        return path

    def divergent_seed7_pool(self):
        """A fake pool on which `crosscheck --seed 7 --count 1 --against upstream` diverges."""
        seq7 = os.path.join(self.tmp, "seq7.seq")
        open(seq7, "w").write(self.run(["random", "--seed", "7", "--count", "1"]).stdout)
        return self.fake_pool(self.altered(self.run(["run", seq7, "--json"]).stdout, "obs7.jsonl"))

    def finish(self, ok_message):
        shutil.rmtree(self.tmp, ignore_errors=True)
        for p in self.problems:
            print("FAIL: " + p)
        if not self.problems:
            print("ok: " + ok_message)
        return 1 if self.problems else 0
