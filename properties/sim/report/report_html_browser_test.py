#!/usr/bin/env python3
"""`fsdpsim report` and `fsdpsim hunt --html` in headless Chromium: what is drawn, not only the file.

1. `fsdpsim report seed000 --html page.html` (exit 1: findings), self-contained
   (no URL, no script, no external resource).
2. A copy of the page with a probe script appended is loaded with
   `chromium --headless --dump-dom`: the probe records, after layout, every
   cell's box and computed colours, and the requires_grad cells' colours.
3. `chromium --headless --screenshot` of the page itself at the same width:
   the pixels at each cell's left stripe are the finding red exactly where the
   spec fired (S3 at step 4, S1 at steps 5 and 6) and grey elsewhere; seed
   000's two ranks see the same, so they are one column ("ranks 0-1").
4. At 1400 x 900, a reader's window: the report opens on its summary box (its
   blue in the screenshot's top rows, the jump link to step 4), the document is
   no wider than the window; the hunt page (a short hunt) shows its counts per
   verdict and its first root cause's section in the first screen, no wider
   than the window either, and its filter hides the rows a text does not match.

Usage: report_html_browser_test.py FSDPSIM SEQ_FILE [--screenshot-out PNG] [--docs-dir DIR]
(--screenshot-out keeps the wide screenshot cropped to the first 6 rows; --docs-dir writes
report-html.png and hunt-html.png, the 1400 px first screens, for docs/guide/img.)
"""
import html
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zlib

FINDING_RED = (0xD9, 0x30, 0x25)
STRIPE_GREY = (0xC8, 0xCC, 0xD2)
RG_ON = "rgb(183, 225, 193)"  # #b7e1c1
RG_OFF = "rgb(236, 239, 241)"  # #eceff1
WIDTH = 1700
READER = (1400, 900)  # the window a reader opens the pages in
BOX_BLUE = (0xE8, 0xF0, 0xFE)  # report's summary box (.box)
STRIPE_BLUE = (0x1A, 0x73, 0xE8)

PROBE = r"""<script>
(function () {
  const out = {doc: [document.documentElement.scrollWidth, document.documentElement.scrollHeight], cells: [], params: [], groups: []};
  for (const td of document.querySelectorAll('td.cell')) {
    const r = td.getBoundingClientRect(), cs = getComputedStyle(td);
    out.cells.push({step: +td.dataset.step, rank: +td.dataset.rank, ranks: td.dataset.ranks.split(' ').map(Number),
                    backend: td.dataset.backend, findings: td.dataset.findings,
                    x: r.left, y: r.top, w: r.width, h: r.height, stripe: cs.borderLeftColor, stripeWidth: cs.borderLeftWidth,
                    bg: cs.backgroundColor, text: td.innerText});
    for (const tr of td.querySelectorAll('tr[data-param]')) {
      const tds = tr.querySelectorAll('td');
      out.params.push({step: +td.dataset.step, rank: +td.dataset.rank, param: tr.dataset.param, split: tr.classList.contains('split'),
                       reg: tds[1].innerText, s: getComputedStyle(tds[2]).backgroundColor, u: getComputedStyle(tds[3]).backgroundColor,
                       nameBg: getComputedStyle(tds[0]).backgroundColor});
    }
    for (const g of td.querySelectorAll('svg.groups g.group')) {
      const rect = g.querySelector('rect'), b = rect.getBoundingClientRect();
      out.groups.push({step: +td.dataset.step, rank: +td.dataset.rank, group: g.dataset.group, fill: getComputedStyle(rect).fill, w: b.width, h: b.height});
    }
  }
  const box = document.getElementById('summary');
  if (box) { const b = box.getBoundingClientRect(); out.box = {x: b.left, y: b.top, w: b.width, h: b.height, bg: getComputedStyle(box).backgroundColor}; }
  const jump = document.querySelector('a.jump');
  out.jump = jump ? jump.getAttribute('href') : null;
  out.window = [window.innerWidth, window.innerHeight];
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def chromium(args, tmp):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        fail("chromium is not installed: run `bash .ci/install-deps.sh` (Debian package chromium)")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
           "--user-data-dir=" + os.path.join(tmp, "profile"), "--no-first-run", "--disable-crash-reporter"] + args
    # Its own session, so that its helper processes go with it.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=240)  # generous: the machine may be loaded
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        fail("chromium timed out: " + " ".join(args))
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if p.returncode != 0:
        fail("chromium exit %d: %s" % (p.returncode, err.decode(errors="replace")[-2000:]))
    return out.decode()


def read_png(path):
    """8-bit RGB/RGBA, non-interlaced (what Chromium writes) -> (w, h, rows of (r,g,b))."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(path + " is not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                fail("unexpected PNG format depth=%d colour type=%d interlace=%d" % (depth, ctype, interlace))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p_ = a + b - c
                pa, pb, pc = abs(p_ - a), abs(p_ - b), abs(p_ - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def close(px, want, tol=6):
    return all(abs(a - b) <= tol for a, b in zip(px, want))


def main():
    fsdpsim, seq = sys.argv[1], sys.argv[2]
    keep = sys.argv[sys.argv.index("--screenshot-out") + 1] if "--screenshot-out" in sys.argv else None
    docs = sys.argv[sys.argv.index("--docs-dir") + 1] if "--docs-dir" in sys.argv else None
    with tempfile.TemporaryDirectory(prefix="fsdpsim-report-") as tmp:
        page = os.path.join(tmp, "page.html")
        r = subprocess.run([fsdpsim, "report", seq, "--html", page], capture_output=True, text=True, timeout=300)
        if r.returncode != 1 or "wrote " + page not in r.stdout:
            fail("fsdpsim report exit %d (expected 1, findings): %s %s" % (r.returncode, r.stdout, r.stderr))
        text = open(page, encoding="utf-8").read()
        for bad in ("http:", "https:", "<script", "<link", " src=", "@import"):
            if bad in text:
                fail("the page is not self-contained: it contains %r" % bad)

        # 2. What the browser laid out and coloured.
        probe = os.path.join(tmp, "probe.html")
        open(probe, "w", encoding="utf-8").write(text.replace("</body>", PROBE + "</body>"))
        dom = chromium(["--window-size=%d,1000" % WIDTH, "--dump-dom", "file://" + probe], tmp)
        start = dom.find('<pre id="probe">')
        if start < 0:
            fail("the probe did not run (no <pre id=probe> in the DOM after load)")
        info = json.loads(html.unescape(dom[start + len('<pre id="probe">'):dom.find("</pre>", start)]))
        cells = {(c["step"], r): c for c in info["cells"] if c["backend"] == "model" for r in c["ranks"]}
        if any(c["ranks"] != [0, 1] for c in info["cells"]):
            fail("seed 000's ranks see the same at every step: one column for ranks 0-1 expected, got %s"
                 % sorted({tuple(c["ranks"]) for c in info["cells"]}))
        expect = {(4, 0): "S3", (4, 1): "S3", (5, 0): "S1", (5, 1): "S1", (6, 0): "S1", (6, 1): "S1"}
        if sorted(cells) != [(s, r) for s in range(1, 7) for r in range(2)]:
            fail("expected cells for steps 1-6 on ranks 0 and 1, got %s" % sorted(cells))
        for key, c in cells.items():
            if c["w"] < 100 or c["h"] < 40:
                fail("cell %s is not drawn at a readable size: %sx%s" % (key, c["w"], c["h"]))
            want = expect.get(key, "")
            if c["findings"] != want:
                fail("cell %s findings %r, expected %r" % (key, c["findings"], want))
            colour = "rgb(217, 48, 37)" if want else "rgb(200, 204, 210)"
            if c["stripe"] != colour or c["stripeWidth"] != "6px":
                fail("cell %s stripe %s %s, expected %s 6px" % (key, c["stripe"], c["stripeWidth"], colour))
            if want and want not in c["text"]:
                fail("cell %s does not show %s: %r" % (key, want, c["text"][:200]))
        if "no_grad_fn" not in cells[(5, 0)]["text"] or "element 0 of tensors does not require grad" not in cells[(5, 0)]["text"]:
            fail("step 5 does not show the no_grad_fn error and its message")
        # requires_grad drawn per parameter: after set_adapter other, U flipped on, S not.
        ps = {(p["step"], p["rank"], p["param"]): p for p in info["params"]}
        p = ps.get((3, 0, "lin0.lora_A.other"))
        if not p or p["reg"] != "U" or p["s"] != RG_OFF or p["u"] != RG_ON or not p["split"] or p["nameBg"] == "rgba(0, 0, 0, 0)":
            fail("step 3 lin0.lora_A.other should be drawn U registered, S.rg off, U.rg on, highlighted: %s" % p)
        p = ps.get((4, 0, "lin0.lora_A.other"))
        if not p or p["reg"] != "S" or p["s"] != RG_OFF:
            fail("step 4 lin0.lora_A.other should be drawn S registered with S.rg off (the flip was dropped): %s" % p)
        groups = {(g["step"], g["rank"], g["group"]): g for g in info["groups"]}
        if groups[(1, 0, "root")]["fill"] != "rgb(26, 115, 232)" or groups[(4, 0, "root")]["fill"] != "rgb(255, 255, 255)":
            fail("groups: root should be drawn unsharded (blue) after eval and sharded (white) after the train_step")
        if "reshard dropped changes" not in dom or "nothing changed on an unsharded copy is lost at reshard" not in dom:
            fail("the S3 finding and its explanation are not on the page")

        # 3. The pixels.
        height = int(info["doc"][1]) + 20
        shot = os.path.join(tmp, "shot.png")
        chromium(["--window-size=%d,%d" % (WIDTH, height), "--screenshot=" + shot, "file://" + page], tmp)
        w, h, rows = read_png(shot)
        for key, c in cells.items():
            x, y = int(c["x"]) + 2, int(c["y"] + c["h"] / 2)
            if y >= h or x >= w:
                fail("cell %s at (%d,%d) is outside the %dx%d screenshot" % (key, x, y, w, h))
            want = FINDING_RED if key in expect else STRIPE_GREY
            if not close(rows[y][x], want):
                fail("pixel at cell %s stripe (%d,%d) is %s, expected %s" % (key, x, y, rows[y][x], want))
        if keep:
            last = max(c["y"] + c["h"] for c in cells.values())
            crop = min(h, int(last) + 16)
            # Cut the white margin on the right: the last column with anything drawn.
            right = next((x for x in range(w - 1, -1, -1) if any(r[x] != (255, 255, 255) for r in rows[:crop:4])), w - 1)
            write_png(keep, [r[:min(w, right + 16)] for r in rows[:crop]])
        # 4. A reader's window: the summary box first.
        info, rows = in_reader_window(page, tmp, "report")
        b = info.get("box")
        if not b or b["bg"] != "rgb(232, 240, 254)":
            fail("the report has no summary box (#summary with the box's blue): %s" % b)
        if b["y"] > 40:
            fail("the summary box is not the first thing on the page: it starts at y=%d" % b["y"])
        if info["jump"] != "#step-4":
            fail("the summary's jump link goes to %r, expected #step-4 (the first finding)" % info["jump"])
        top = rows[int(b["y"]) + 4:int(b["y"]) + 24]
        blue = sum(close(px, BOX_BLUE, 3) for r in top for px in r)
        stripe = sum(close(r[int(b["x"]) + 3], STRIPE_BLUE, 8) for r in top)
        if blue < 0.5 * len(top) * b["w"] or stripe < len(top):
            fail("the screenshot's top rows do not show the summary box: %d box-blue pixels of %d, stripe %d/%d rows"
                 % (blue, len(top) * b["w"], stripe, len(top)))
        if docs:
            write_png(os.path.join(docs, "report-html.png"), [r[:READER[0]] for r in rows[:620]])
        hunt_page(fsdpsim, tmp, docs)
    print("ok: seed 000 drawn with S3 at step 4 and S1 at steps 5-6 on ranks 0-1 (DOM and pixels); "
          "at 1400 px the report opens on its summary and the hunt page on its counts and groups, neither wider than the window")


HUNT_PROBE = r"""<script>
(function () {
  const out = {doc: [document.documentElement.scrollWidth, document.documentElement.scrollHeight], rcs: []};
  for (const rc of document.querySelectorAll('section.rc')) {
    const r = rc.getBoundingClientRect(), cs = getComputedStyle(rc);
    out.rcs.push({id: rc.querySelector('h2').textContent, verdict: rc.dataset.verdict, x: r.left, y: r.top, h: r.height,
                  border: cs.borderLeftColor, borderWidth: cs.borderLeftWidth, rows: rc.querySelectorAll('tr.class-row').length});
  }
  const c = document.querySelector('p.counts');
  out.counts = c ? {text: c.textContent, y: c.getBoundingClientRect().top} : null;
  // The filter: the first root cause's id typed in the box leaves its classes only.
  const q = document.getElementById('q');
  const visible = () => Array.from(document.querySelectorAll('tr.class-row')).filter(tr => tr.offsetParent !== null).length;
  out.before = visible();
  q.value = out.rcs.length ? out.rcs[0].id : '';
  q.dispatchEvent(new Event('input'));
  out.typed = visible();
  out.shown = document.getElementById('shown').textContent;
  // A class's name typed: its row only, even where its root cause has others.
  const many = Array.from(document.querySelectorAll('section.rc')).find(rc => rc.querySelectorAll('tr.class-row').length > 1);
  out.one = many ? many.querySelector('tr.class-row').dataset.class : null;
  q.value = out.one || '';
  q.dispatchEvent(new Event('input'));
  out.typedOne = visible();
  q.value = '';
  q.dispatchEvent(new Event('input'));
  const box = document.querySelector('input.verdict[value="' + (out.rcs.length ? out.rcs[0].verdict : '') + '"]');
  if (box) { box.checked = false; box.dispatchEvent(new Event('change')); }
  out.unchecked = visible();
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def in_reader_window(page, tmp, name, probe=PROBE):
    """The page at 1400 x 900: the probe's record (document no wider than the window) and the screenshot's rows."""
    text = open(page, encoding="utf-8").read()
    probed = os.path.join(os.path.dirname(page), name + "-probe.html")
    open(probed, "w", encoding="utf-8").write(text.replace("</body>", probe + "</body>"))
    dom = chromium(["--window-size=%d,%d" % READER, "--dump-dom", "file://" + probed], tmp)
    start = dom.find('<pre id="probe">')
    if start < 0:
        fail("%s: the probe did not run at 1400 px" % name)
    info = json.loads(html.unescape(dom[start + len('<pre id="probe">'):dom.find("</pre>", start)]))
    if info["doc"][0] > READER[0]:
        fail("%s: the page is %d px wide in a %d px window (it scrolls sideways)" % (name, info["doc"][0], READER[0]))
    shot = os.path.join(tmp, name + "-1400.png")
    chromium(["--window-size=%d,%d" % READER, "--screenshot=" + shot, "file://" + page], tmp)
    w, h, rows = read_png(shot)
    if (w, h) != READER:
        fail("%s: screenshot is %dx%d, expected %dx%d" % (name, w, h, READER[0], READER[1]))
    return info, rows


def hunt_page(fsdpsim, tmp, docs):
    """A short hunt's page (C++ backend only: no .venv needed) in a reader's window."""
    os.makedirs(os.path.join(tmp, "pages"))
    page = os.path.join(tmp, "pages", "hunt.html")
    env = dict(os.environ, FSDPSIM_PYTHON="/nonexistent")
    r = subprocess.run([fsdpsim, "hunt", "--seconds", "6", "--seed", "3", "--out", os.path.join(tmp, "hunt"), "--html", page, "--quiet"],
                       capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0:
        fail("fsdpsim hunt exit %d: %s %s" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    info, rows = in_reader_window(page, tmp, "hunt", HUNT_PROBE)
    rcs = info["rcs"]
    if len(rcs) < 2 or not info["counts"]:
        fail("the hunt page has %d root cause sections and counts %s" % (len(rcs), info["counts"]))
    if info["counts"]["y"] > 80 or "misuse" not in info["counts"]["text"]:
        fail("the counts per verdict are not at the top: %s" % info["counts"])
    first = rcs[0]
    if first["y"] + 30 > READER[1]:
        fail("the first root cause's section starts below the first screen (y=%d)" % first["y"])
    # Its left border, in the pixels: the grouping is drawn, not only in the DOM.
    want = tuple(int(v) for v in first["border"][4:-1].split(", "))
    x, y = int(first["x"]) + 1, int(first["y"]) + 12
    if first["borderWidth"] != "4px" or not close(rows[y][x], want, 3):
        fail("pixel at the first root cause's border (%d,%d) is %s, expected %s %s" % (x, y, rows[y][x], first["border"], first["borderWidth"]))
    if not (0 < info["typed"] < info["before"]) or info["typed"] != first["rows"] or info["shown"] != "%d classes shown" % first["rows"]:
        fail("typing %r in the filter shows %d of %d rows (%r), expected its %d classes" % (first["id"], info["typed"], info["before"],
                                                                                       info["shown"], first["rows"]))
    if not info["one"] or info["typedOne"] != 1:
        fail("typing the class name %r in the filter shows %d rows, expected 1" % (info["one"], info["typedOne"]))
    same = sum(rc["rows"] for rc in rcs if rc["verdict"] == first["verdict"])
    if info["unchecked"] != info["before"] - same:
        fail("unchecking %s shows %d rows, expected %d" % (first["verdict"], info["unchecked"], info["before"] - same))
    if docs:
        write_png(os.path.join(docs, "hunt-html.png"), [r[:READER[0]] for r in rows[:620]])


def write_png(path, rows):
    w, h = len(rows[0]), len(rows)
    raw = b"".join(b"\x00" + bytes(v for px in r for v in px) for r in rows)

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    main()
