"""Loaded by every Python process `fsdpsim record` starts (this folder is put first on
PYTHONPATH, and torchrun passes the environment on to its ranks). It does nothing unless
FSDPSIM_RECORD_DIR names the run's event folder; then it installs the tracer, which only
watches the libraries' public entry points as the script calls them. A sitecustomize of the
user's own, further down sys.path, still runs: this one would otherwise hide it."""

import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("FSDPSIM_RECORD_DIR"):
    import fsdpsim_record_tracer

    fsdpsim_record_tracer.install(os.environ["FSDPSIM_RECORD_DIR"])


def _run_the_next_sitecustomize():
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_run_the_next_sitecustomize()
