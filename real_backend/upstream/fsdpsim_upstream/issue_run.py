"""Runs one repro script for a draft issue body and reports, as JSON, the command a user would type, its exit code,
the tail of its output and a short environment summary in the spirit of `python -m torch.utils.collect_env`.
`python -m fsdpsim_upstream.issue_run SCRIPT --out FILE [--timeout SECONDS]`: the script runs under torchrun when it
uses torch.distributed (its world from the script), else under plain python, in a temporary directory under TMPDIR
that is removed afterwards; a run past the time limit is killed with its whole process group."""
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile

from .pool import free_port
from .children import signal_group
from .repro_run import launch_of

TAIL_LINES = 60
# torchrun's own report of a failed rank, after the rank's output: the launcher's traceback, not the bug's.
LAUNCHER_FAILURE = "torch/distributed/elastic/multiprocessing/api.py"


def readable(out, work):
    """The run's output as a reader of the issue needs it: the temporary directory and this machine's
    site-packages path left out, torchrun's launcher report of the failed rank cut (the exit code says it)."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if LAUNCHER_FAILURE in line and "failed" in line:
            lines = lines[:i]
            break
    site = sysconfig.get_paths()["purelib"]
    text = "\n".join(lines[-TAIL_LINES:])
    for path, short in ((work + os.sep, ""), (work, "."), (os.path.realpath(site) + os.sep, "site-packages/"), (site + os.sep, "site-packages/")):
        text = text.replace(path, short)
    return text + "\n"


def versions():
    """The summary the trackers ask for: OS, Python, the four libraries, the accelerator and backend."""
    import torch

    lines = [f"OS: {platform.platform()}", f"Python: {platform.python_version()}"]
    for pkg in ("torch", "peft", "accelerate", "transformers", "numpy"):
        try:
            lines.append(f"{pkg}: {importlib.metadata.version(pkg)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"{pkg}: not installed")
    cuda = torch.cuda.is_available()
    lines.append(f"CUDA available: {cuda}; run on CPU with the gloo backend")
    lines.append(f"CPU count: {os.cpu_count()}")
    return "\n".join(lines)


def command_for(script_text, name):
    """(argv, the command as a user types it), as the script's own `Run:` line says."""
    launcher, world = launch_of(script_text)
    if launcher == "torchrun":
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        return ([torchrun, f"--nproc_per_node={world}", f"--master_port={free_port()}", name],
                f"torchrun --nproc_per_node={world} {name}")
    return [sys.executable, name], f"python {name}"


def run(script, timeout):
    with open(script) as f:
        text = f.read()
    name = os.path.basename(script)
    argv, shown = command_for(text, name)
    work = tempfile.mkdtemp(prefix="issue_run.")
    try:
        shutil.copy(script, os.path.join(work, name))
        # TMPDIR inside `work`: torchrun's torchelastic_* logs and the libraries' compile caches go with it
        proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env=dict(os.environ, TMPDIR=work))
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            signal_group(proc.pid, signal.SIGKILL)  # the session it started, never ours
            out, _ = proc.communicate()
        return {"command": shown, "exit_code": proc.returncode, "timed_out": timed_out, "output": readable(out, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    args = sys.argv[1:]
    if len(args) < 3 or "--out" not in args:
        print("usage: python -m fsdpsim_upstream.issue_run SCRIPT --out FILE [--timeout SECONDS]", file=sys.stderr)
        return 3
    script = args[0]
    out_path = args[args.index("--out") + 1]
    timeout = float(args[args.index("--timeout") + 1]) if "--timeout" in args else 300.0
    if not os.path.isfile(script):
        result = {"not_run": f"no script at {script}"}
    else:
        try:
            result = run(script, timeout)
        except OSError as e:
            result = {"not_run": f"it could not start: {e}"}
    try:
        result["versions"] = versions()
    except Exception as e:  # an environment without torch still gets a body
        result.setdefault("versions", "")
        result.setdefault("not_run", f"the environment could not be queried: {e}")
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
