"""How the coordinator (pool.py) makes its rank processes. Importing torch, PEFT,
accelerate and transformers takes each Python about 4 s of CPU, so W ranks and the
coordinator importing side by side on two cores took 4-9 s per pool start. The
coordinator imports them once (`preload`) and forks each rank from itself: a rank
begins with every library loaded and only joins the process group. A fork is safe
here because the imports open no file and start no thread that holds a lock the
child needs (the same assumption PyTorch's DataLoader workers make); the coordinator
runs torch ops (judge.py) on one thread only. `FSDPSIM_UPSTREAM_SPAWN=exec` starts
each rank in a fresh interpreter instead, as before (the bench compares the two)."""
import io
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings

from . import children

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fork_mode():
    return os.environ.get("FSDPSIM_UPSTREAM_SPAWN", "fork") != "exec"


def preload(pool_dir):
    """What a rank imports (rank.py, session.py and what they import), once, in the
    coordinator, with the warnings the ranks filter out kept off the coordinator's
    stderr (fsdpsim reads its last line as the reason of a failure). torch's compile
    caches, which an import already creates, go inside the pool's directory as the
    ranks' do (pool.py's RankProc), not into $TMPDIR/torchinductor_<user>."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(pool_dir, "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(pool_dir, "triton"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        import torch.distributed  # noqa: F401
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
        import accelerate  # noqa: F401
        import peft  # noqa: F401
        import transformers  # noqa: F401

        from . import observe, profiles, rank, seqfile, session  # noqa: F401
    torch.set_num_threads(1)  # the judge's tensor ops: no OpenMP team a fork would inherit


class ForkedProc:
    """The part of subprocess.Popen that pool.py uses, for a rank forked from the coordinator."""

    def __init__(self, env, log):
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(env, in_r, out_w, log.fileno() if log else 2)
        os.close(in_r)
        os.close(out_w)
        self.pid = pid
        self.returncode = None
        self.stdin = os.fdopen(in_w, "w", buffering=1)
        self.stdout = os.fdopen(out_r, "r")

    def poll(self):
        if self.returncode is None:
            pid, status = children.wait_child(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)  # -N for signal N, as Popen
        return self.returncode

    def wait(self, timeout=None):
        end = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            if end is not None and time.time() >= end:
                raise subprocess.TimeoutExpired("rank", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self):
        if self.poll() is None:
            children.signal_child(self.pid, signal.SIGKILL)


def _child(env, in_r, out_w, err_fd):
    """The forked rank: the coordinator's signal handlers, standard streams, pipes and
    environment replaced by a rank's, then rank.main; never returns into the coordinator."""
    code = 1
    try:
        try:  # `ps`/`pgrep fsdpsim-rank` tell it from the coordinator, whose command line it keeps
            import ctypes
            ctypes.CDLL("libc.so.6").prctl(15, f"fsdpsim-rank{env.get('RANK', '')}".encode(), 0, 0, 0)  # PR_SET_NAME
        except OSError:
            pass
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_fd, 2)
        # the coordinator's own pipes (to fsdpsim, to the ranks forked before) must not stay
        # open here: their ends would not see EOF when the coordinator or a peer goes
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.environ.clear()
        os.environ.update(env)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, write_through=True)
        warnings.filterwarnings("ignore")
        from . import rank
        rank.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def spawn(env, log):
    """A rank process with this environment and stderr: forked, or in a fresh interpreter."""
    if fork_mode():
        return ForkedProc(env, log)
    return subprocess.Popen([sys.executable, "-u", "-m", "fsdpsim_upstream.rank"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                            text=True, bufsize=1)
