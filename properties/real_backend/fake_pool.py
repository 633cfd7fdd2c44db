"""A stand-in for fsdpsim_upstream.pool (real_backend/upstream/protocol.md)
for the client's tests: no torch, plain python3. Chosen with
FSDPSIM_UPSTREAM_MODULE=fake_pool and PYTHONPATH=<repo>/properties/real_backend.

It answers every run with the observation lines of the file $FAKE_POOL_OBS
(lines without "op", e.g. findings, are skipped) and a done line.
$FAKE_POOL_MODE changes that:
  garbage      a line that is not JSON in the middle of a run
  die          one observation, "fake rank 1 died: boom" on stderr, exit 1
  error_event  {"event":"error","message":"rank 1 died (exit 1): boom"}
  no_ready     never sends the ready line
  exit_early   "ModuleNotFoundError: No module named 'peft'" on stderr, exit 1, before ready
  stubborn     ignores quit, stdin EOF and SIGTERM (the client must SIGKILL)
$FAKE_POOL_START_S: seconds it takes before its ready line, as torch's import does.
$FAKE_POOL_UNOBSERVED: a comma list sent as the ready line's "unobserved".
$FAKE_POOL_PIDFILE: its pid and its W "rank" children's pids, one a line.
$FAKE_POOL_LOG: the argv and every request it reads, appended as lines.
"""
import json
import os
import signal
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    world = int(args[args.index("--world") + 1])
    mode = os.environ.get("FAKE_POOL_MODE", "")
    log = os.environ.get("FAKE_POOL_LOG")

    def note(text):
        if log:
            with open(log, "a") as f:
                f.write(text + "\n")

    note("argv " + " ".join(args))
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The "ranks" inherit its stdout, as real ones may: the client cannot
    # count on EOF to see the coordinator die.
    ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(world)]
    pidfile = os.environ.get("FAKE_POOL_PIDFILE")
    if pidfile:
        with open(pidfile, "w") as f:
            f.write("\n".join(str(p) for p in [os.getpid()] + [r.pid for r in ranks]) + "\n")
    if mode == "exit_early":
        sys.stderr.write("Traceback (most recent call last):\nModuleNotFoundError: No module named 'peft'\n")
        sys.exit(1)
    if mode == "no_ready":
        time.sleep(600)
    time.sleep(float(os.environ.get("FAKE_POOL_START_S", "0")))
    ready = {"event": "ready", "world": world,
             "versions": {"torch": "2.13.0+cpu", "peft": "0.21.2", "accelerate": "1.15.0", "transformers": "5.24.0",
                          "python": "3.11.7"}}
    unobserved = os.environ.get("FAKE_POOL_UNOBSERVED")
    if unobserved:
        ready["unobserved"] = unobserved.split(",")
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        note("request " + line.strip())
        req = json.loads(line)
        if req["cmd"] == "quit":
            if mode == "stubborn":
                continue
            break
        obs = []
        if os.environ.get("FAKE_POOL_OBS"):
            with open(os.environ["FAKE_POOL_OBS"]) as f:
                obs = [l.strip() for l in f if l.strip() and "op" in json.loads(l)]
        if mode == "garbage":
            if obs:
                print(obs[0], flush=True)
            print("this is not json", flush=True)
            continue
        if mode == "die":
            if obs:
                print(obs[0], flush=True)
            sys.stderr.write("fake rank 1 died: boom\n")
            sys.stderr.flush()
            sys.exit(1)
        if mode == "error_event":
            print(json.dumps({"event": "error", "message": "rank 1 died (exit 1): boom"}), flush=True)
            continue
        for o in obs:
            print(o, flush=True)
        print(json.dumps({"event": "done", "ms": 1.5, "restarted": False, "prepared_by": "ram_efficient"}), flush=True)
    if mode == "stubborn":
        time.sleep(600)
    for r in ranks:
        r.kill()


if __name__ == "__main__":
    main()
