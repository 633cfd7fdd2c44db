"""The only way the upstream pool signals or waits for a process (the C++ side's
real_backend/child_signal.hpp): its own children, by pid. os.kill reads 0 as
"my own process group" and -1 as "every process I may signal", so a pid <= 1 (a
zeroed or missing entry; 1 is init) is refused here and nothing is sent."""
import os


def signallable(pid):
    return isinstance(pid, int) and pid > 1


def signal_child(pid, sig):
    """os.kill(pid, sig) for a child; False (nothing sent) for pid <= 1 or a process already gone."""
    if not signallable(pid):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def signal_group(pgid, sig):
    """os.killpg(pgid, sig) for a group this process made (start_new_session); False (nothing sent)
    for pgid <= 1, where killpg would reach the caller's own group or every process."""
    if not signallable(pgid):
        return False
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def process_exists(pid):
    """Whether a process `pid` exists (signal 0; one of another user's counts); False for pid <= 1."""
    if not signallable(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_child(pid, flags=0):
    """os.waitpid(pid, flags) for one child; (0, 0) for pid <= 1, where waitpid would reap any child."""
    if not signallable(pid):
        return 0, 0
    return os.waitpid(pid, flags)
