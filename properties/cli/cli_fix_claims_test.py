"""Every "removes it" fsdpsim prints comes from a re-run on the model (sim/findings/fix_claim.hpp): the
report's box on the policy/reference regression (set_adapter_reshard=unmerge_first only moves its
S2 to step 4) names what remains instead of a fix; `findings --check` fails a page whose claim a
re-run does not bear out; `triage --check` fails a `# fix:` line a re-run does not bear out."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util  # noqa: E402

CLAIM = "`fsdpsim run weight-on-copy.merge-unmerge.seq --set set_adapter_reshard=unmerge_first` shows the finding gone"


def main():
    fsdpsim, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="fsdpsim-fix-claims-")
    S = cli_util.Session(fsdpsim, root, tmp)
    repro = os.path.join(S.reg, "policy_reference_unmerge_after_eval.seq")

    page = os.path.join(tmp, "r.html")
    r = S.run(["report", repro, "--html", page])
    S.check(r.returncode == 1, "report exit %d: %s" % (r.returncode, r.stderr))
    box = re.search(r'<div class="box" id="summary">.*?</div>', open(page, encoding="utf-8").read(), re.S)
    box = box.group(0) if box else ""
    S.check("weight-on-copy/merge-unmerge" in box, "the box names another root cause: %s" % box[:300])
    S.check("</code> removes it" not in box, "the box claims a switch removes it: %s" % box)
    S.check("No modelled fix removes it" in box and "re-run on the model" in box, "the box does not say what the re-run showed")
    S.check("S2 step 4 rank 0: layer lin0 merged=[] but its shard is extra_delta" in box, "the box does not name the finding that remains")

    # A page claiming what its sequence does not show: the policy/reference file as the kept
    # sequence, the claim added to its page.
    fd = os.path.join(tmp, "findings")
    shutil.copytree(os.path.join(root, "docs", "findings"), fd)
    shutil.copy(repro, os.path.join(fd, "weight-on-copy.merge-unmerge.seq"))
    with open(os.path.join(fd, "weight-on-copy.merge-unmerge.md"), "a", encoding="utf-8") as f:
        f.write("\n" + CLAIM + ".\n")
    c = S.run(["findings", "--check", "--out", fd])
    S.check(c.returncode == 1, "findings --check exit %d on a false claim" % c.returncode)
    S.check(re.search(r"weight-on-copy\.merge-unmerge\.md: claims " + re.escape(CLAIM) + r"; a re-run on the model still shows \d+ finding",
                      c.stderr) is not None, "findings --check does not name the false claim: %s" % c.stderr[:600])
    S.check("S2 step 4 rank 0" in c.stderr, "findings --check does not name what remains")

    # A `# fix:` line the re-run does not bear out (it was triage's own verdict before).
    div = os.path.join(root, "corpus", "divergences", "unmerged_zero_rows_stale_copy_world3.seq")
    stale = os.path.join(tmp, "stale_fix.seq")
    with open(stale, "w", encoding="utf-8") as f:
        f.write("# signature: S2:ok | merge(S) unshard(S) set_adapter(U) *(U)\n"
                "# fix: removed by set_adapter_reshard=unmerge_first (re-run on the model; peft)\n" + open(div, encoding="utf-8").read())
    t = S.run(["triage", "--check", stale])
    S.check(t.returncode == 1, "triage --check exit %d on a false fix line" % t.returncode)
    S.check("fix line says 'removed by set_adapter_reshard=unmerge_first" in t.stderr and "no single patched switch removes it" in t.stderr,
            "triage --check does not name the false fix line: %s" % t.stderr)
    S.check("\tunreported\t" in t.stdout, "triage calls it %s" % t.stdout)
    return S.finish("fix claims are re-run")


if __name__ == "__main__":
    sys.exit(main())
