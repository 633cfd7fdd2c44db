"""Virtual environments for a release set ("peft==0.17.1,accelerate==1.6.0"),
made on demand and cached under <releases>/<normalized set>/, where <releases> is
$FSDPSIM_RELEASES_DIR, else $XDG_CACHE_HOME/fsdpsim/releases, else
~/.cache/fsdpsim/releases: a per-user cache, never the source tree.

Every set shares .venv's one torch: the set's interpreter is .venv's base
Python, and a .pth file in its site-packages appends .venv's site-packages
after its own, so the set's peft/accelerate/transformers shadow .venv's while
torch (and anything the set does not replace) comes from .venv. pip runs
against the set's interpreter, so it sees torch 2.13.0 as installed and never
downloads another. Usage:

    python -m fsdpsim_upstream.release_env SET [--root DIR] [--releases DIR]
        (SET: peft==X[,accelerate==Y,transformers==Z], or peft=PATH: a local PEFT
        checkout or wheel, cached under peft-local-<hash of its path and commit or mtimes>)
    python -m fsdpsim_upstream.release_env --list peft

The first prints the set's Python on stdout (the last line; "-" for .venv's own pins); exit 3 on a malformed set
(`<set>:1:COL: ...`), exit 1 with "cannot run: <reason>" when the set cannot be
installed or imported. The second prints PEFT's final releases on PyPI,
oldest first, one a line (`fsdpsim versions --bisect`), from a copy kept
a day in the releases directory; exit 4 when PyPI cannot be reached and no copy
is kept.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

# The packages a set may pin: the upstream backend imports exactly these (rank.py's ready line).
PACKAGES = ("peft", "accelerate", "transformers")
# PEFT imports transformers. When a set leaves transformers out and the pinned one
# (.venv's) does not import with that PEFT, these are tried newest first.
TRANSFORMERS_FALLBACKS = ("4.57.3", "4.55.4", "4.53.3", "4.51.3", "4.49.0", "4.46.3")
IMPORT_TEST = ("import torch, accelerate, transformers, peft\n"
               "from peft import LoraConfig, get_peft_model\n"
               "from torch.distributed.fsdp import fully_shard\n"
               "import json\n"
               "print(json.dumps({'torch': torch.__version__, 'peft': peft.__version__,"
               " 'accelerate': accelerate.__version__, 'transformers': transformers.__version__}))\n")


class SetError(ValueError):
    """A malformed set: the message is `<set>:1:COL: expected ..., got ...`."""


def parse_set(text):
    """{"peft": "0.17.1", ...} from "peft==0.17.1[,accelerate==Y,...]"; SetError on bad input.
    "peft=PATH" (a local checkout directory or a wheel/sdist file) gives {"peft": "@/abs/PATH"}."""
    if text.startswith("peft=") and not text.startswith("peft=="):
        path = text[len("peft="):]
        if not path or not os.path.exists(path):
            raise SetError(f"{text}:1:6: expected peft==VERSION, or peft=PATH naming an existing PEFT checkout"
                           f" directory or wheel file, got '{path}'")
        return {"peft": "@" + os.path.abspath(path)}
    out = {}
    col = 1
    for part in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z_-]+)\s*==\s*([0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc|\.post|\.dev)[0-9]+)?)\s*", part)
        if not m:
            raise SetError(f"{text}:1:{col}: expected NAME==VERSION (NAME one of {', '.join(PACKAGES)}), got '{part}'")
        name = m.group(1).lower().replace("_", "-")
        if name not in PACKAGES:
            raise SetError(f"{text}:1:{col}: expected one of {', '.join(PACKAGES)}, got '{m.group(1)}'")
        if name in out:
            raise SetError(f"{text}:1:{col}: expected each package once, got '{name}' again")
        out[name] = m.group(2)
        col += len(part) + 1
    if "peft" not in out:
        raise SetError(f"{text}:1:1: expected a set that names peft==VERSION, got '{text}'")
    return out


def normalize(pins):
    """The set's canonical text and directory name: peft first, then the others by name."""
    if pins["peft"].startswith("@"):
        return "peft=" + pins["peft"][1:]
    names = ["peft"] + sorted(n for n in pins if n != "peft")
    return ",".join(f"{n}=={pins[n]}" for n in names)


def dir_name(pins):
    if pins["peft"].startswith("@"):  # a new commit, an edited file or a rebuilt wheel is a new environment
        import hashlib
        path = pins["peft"][1:]
        return "peft-local-" + hashlib.sha1((path + "\n" + local_identity(path)).encode()).hexdigest()[:12]
    return normalize(pins).replace("==", "-").replace(",", "+")


def local_identity(path):
    """What changes when the local PEFT does: a checkout's commit and uncommitted
    changes, else the newest modification time and size of its files."""
    if os.path.isdir(os.path.join(path, ".git")) or os.path.isfile(os.path.join(path, ".git")):
        head = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain"], capture_output=True, text=True).stdout
        if head:
            import hashlib
            return f"git {head} {hashlib.sha1(dirty.encode()).hexdigest() if dirty else 'clean'}"
    newest, total = os.path.getmtime(path), 0
    for d, dirs, files in os.walk(path):
        dirs[:] = [x for x in dirs if x not in (".git", "__pycache__", "build")]
        for f in files:
            st = os.stat(os.path.join(d, f))
            newest, total = max(newest, st.st_mtime), total + st.st_size
    return f"mtime {newest} size {total}"


def base_python(root):
    return os.path.join(root, ".venv", "bin", "python")


def site_packages(python):
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()


def import_test(python):
    """(versions dict, None) or (None, the error's last line)."""
    r = subprocess.run([python, "-c", IMPORT_TEST], capture_output=True, text=True, env=clean_env())
    if r.returncode == 0:
        return json.loads(r.stdout.strip().splitlines()[-1]), None
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    return None, lines[-1] if lines else f"exit {r.returncode}"


def clean_env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the set's own packages, not a caller's
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def pip(root, python, args, log):
    # .venv's pip, pointed at the set's interpreter (pip --python): no pip installed per set.
    cmd = [base_python(root), "-m", "pip", "--python", python, "install", "-q", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env())
    log.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        lines = [l for l in r.stderr.strip().splitlines() if l.strip() and not l.startswith("WARNING")]
        raise RuntimeError(lines[-1] if lines else f"pip exit {r.returncode}")


def build(root, pins, target):
    """Makes the environment in `target`; returns its record (what was installed and why)."""
    t0 = time.monotonic()
    subprocess.run([base_python(root), "-m", "venv", "--without-pip", target], check=True)
    py = os.path.join(target, "bin", "python")
    shared = site_packages(base_python(root))
    # A .pth line is appended to sys.path after the directory holding it: the set's packages win.
    with open(os.path.join(site_packages(py), "zz-fsdpsim-shared-venv.pth"), "w") as f:
        f.write(shared + "\n")
    record = {"set": normalize(pins), "transformers_chosen": None}
    local = pins["peft"][1:] if pins["peft"].startswith("@") else None
    if local:
        record["source"] = {"path": local, "identity": local_identity(local)}
    with open(os.path.join(target, "install.log"), "w") as log:
        # A local PEFT is built with .venv's setuptools (no build isolation: no download);
        # its dependencies .venv already satisfies are not installed again.
        pip(root, py, ["--no-build-isolation", local] if local else [f"{n}=={v}" for n, v in pins.items()], log)
        versions, error = import_test(py)
        if versions is None and "transformers" not in pins:
            tried = [f"transformers {shared_version(root, 'transformers')}: {error}"]
            for tv in TRANSFORMERS_FALLBACKS:
                pip(root, py, [f"transformers=={tv}"], log)
                versions, error = import_test(py)
                if versions is not None:
                    record["transformers_chosen"] = f"{tv} (the newest of the fallbacks that imports; {tried[0]})"
                    break
                tried.append(f"transformers {tv}: {error}")
        if versions is None:
            raise RuntimeError(f"import fails: {error}")
    if not versions["torch"].startswith(shared_version(root, "torch")):
        raise RuntimeError(f"torch {versions['torch']} instead of .venv's shared one")
    record["versions"] = versions
    record["build_seconds"] = round(time.monotonic() - t0, 1)
    with open(os.path.join(target, "fsdpsim-release.json"), "w") as f:
        json.dump(record, f, indent=1)
    return record


def shared_version(root, name):
    from importlib import metadata
    for d in metadata.distributions(path=[site_packages(base_python(root))]):
        if d.metadata["Name"].lower() == name:
            return d.version.split("+")[0]
    return "?"


def releases_dir():
    """The cache of release environments: $FSDPSIM_RELEASES_DIR, else the XDG cache
    ($XDG_CACHE_HOME, else ~/.cache)/fsdpsim/releases. Per user and outside the
    sources, which may be read-only, shared, or a checkout someone cleans."""
    override = os.environ.get("FSDPSIM_RELEASES_DIR")
    if override:
        return override
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache or not os.path.isabs(cache):  # the XDG base-directory spec: a relative value is ignored
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "fsdpsim", "releases")


def ensure(root, text, releases=None):
    """(python path, record) of the set's environment, built when absent."""
    import fcntl
    pins = parse_set(text)
    if not pins["peft"].startswith("@") and all(shared_version(root, n) == v for n, v in pins.items()):
        # the pinned release set is .venv itself: nothing to build
        return base_python(root), {"set": normalize(pins), "shared": True}
    releases = releases or releases_dir()
    os.makedirs(releases, exist_ok=True)
    final = os.path.join(releases, dir_name(pins))
    stamp = os.path.join(final, "fsdpsim-release.json")
    with open(os.path.join(releases, dir_name(pins) + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two commands asking for one set build it once
        if not os.path.exists(stamp):
            tmp = final + f".tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                build(root, pins, tmp)
            except (RuntimeError, subprocess.CalledProcessError) as e:
                shutil.rmtree(tmp, ignore_errors=True)
                raise RuntimeError(str(e)) from None
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)  # the interpreter finds its site-packages from its own path
        with open(stamp) as f:
            return os.path.join(final, "bin", "python"), json.load(f)


LIST_MAX_AGE_S = 86400  # a day: a new PEFT release shows up by the next nightly


def list_releases(root, package, releases=None):
    """The package's final, unyanked releases on PyPI (its JSON API), oldest first.
    PyPI itself, not pip's index list: pip merges every configured index and
    find-links directory, and a local mirror holding one wheel would pass for
    the whole history. $FSDPSIM_PYPI_URL replaces https://pypi.org (tests)."""
    import urllib.request
    releases = releases or releases_dir()
    cache = os.path.join(releases, f"pypi-{package}.txt")
    if os.path.exists(cache) and time.time() - os.path.getmtime(cache) < LIST_MAX_AGE_S:
        with open(cache) as f:
            return [l.strip() for l in f if l.strip() and not l.startswith("#")]
    url = os.environ.get("FSDPSIM_PYPI_URL", "https://pypi.org").rstrip("/") + f"/pypi/{package}/json"
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = json.load(r)
    except (OSError, ValueError) as e:
        if os.path.exists(cache):  # a stale list beats none; say so
            print(f"release_env: {package}'s releases from {cache} ({url}: {e})", file=sys.stderr)
            with open(cache) as f:
                return [l.strip() for l in f if l.strip() and not l.startswith("#")]
        raise LookupError(f"cannot list {package}'s releases: {url}: {e}; offline? name them: --releases A,B,C") from None
    final = re.compile(r"[0-9]+(\.[0-9]+)*")  # no a/b/rc/dev/post tail
    versions = [v for v, files in data.get("releases", {}).items()
                if final.fullmatch(v) and files and not all(f.get("yanked") for f in files)]
    versions.sort(key=lambda v: tuple(int(x) for x in v.split(".")))
    os.makedirs(releases, exist_ok=True)
    with open(cache + ".tmp", "w") as f:
        f.write(f"# {url}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        f.write("".join(v + "\n" for v in versions))
    os.replace(cache + ".tmp", cache)
    return versions


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m fsdpsim_upstream.release_env")
    ap.add_argument("set", nargs="?")
    ap.add_argument("--list", metavar="PACKAGE", choices=["peft"], help="print the package's releases, oldest first")
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
    ap.add_argument("--releases", default=None, help="cache directory (default: $FSDPSIM_RELEASES_DIR, else $XDG_CACHE_HOME/fsdpsim/releases, "
                    "else ~/.cache/fsdpsim/releases)")
    ap.add_argument("--normalize", action="store_true", help="print the normalized set and exit")
    args = ap.parse_args(argv)
    if args.list:
        try:
            print("\n".join(list_releases(args.root, args.list, args.releases)))
            return 0
        except LookupError as e:
            print(str(e), file=sys.stderr)
            return 4
    if args.set is None:
        ap.error("expected a release set or --list peft")
    try:
        if args.normalize:
            print(normalize(parse_set(args.set)))
            return 0
        python, record = ensure(args.root, args.set, args.releases)
    except SetError as e:
        print(str(e), file=sys.stderr)
        return 3
    except RuntimeError as e:
        print(f"cannot run: {args.set}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(record), file=sys.stderr)
    # "-": the pinned set, whatever Python the caller runs by default ($FSDPSIM_PYTHON or .venv)
    print("-" if record.get("shared") else python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
