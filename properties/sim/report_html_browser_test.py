#!/usr/bin/env python3
"""`fsdpsim report` draws seed 000 in headless Chromium: what is drawn, not only the file.

1. `fsdpsim report seed000 --html page.html` (exit 1: findings), self-contained
   (no URL, no script, no external resource).
2. A copy of the page with a probe script appended is loaded with
   `chromium --headless --dump-dom`: the probe records, after layout, every
   cell's box and computed colours, and the requires_grad cells' colours.
3. `chromium --headless --screenshot` of the page itself at the same width:
   the pixels at each cell's left stripe are the finding red exactly where the
   spec fired (S3 at step 4, S1 at steps 5 and 6) and grey elsewhere.

Usage: report_html_browser_test.py FSDPSIM SEQ_FILE [--screenshot-out PNG]
(--screenshot-out also keeps the screenshot, cropped to the first 6 rows, for docs/.)
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

PROBE = r"""<script>
(function () {
  const out = {doc: [document.documentElement.scrollWidth, document.documentElement.scrollHeight], cells: [], params: [], groups: []};
  for (const td of document.querySelectorAll('td.cell')) {
    const r = td.getBoundingClientRect(), cs = getComputedStyle(td);
    out.cells.push({step: +td.dataset.step, rank: +td.dataset.rank, backend: td.dataset.backend, findings: td.dataset.findings,
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
        out, err = p.communicate(timeout=90)
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
    with tempfile.TemporaryDirectory(prefix="fsdpsim-report-") as tmp:
        page = os.path.join(tmp, "page.html")
        r = subprocess.run([fsdpsim, "report", seq, "--html", page], capture_output=True, text=True, timeout=120)
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
        cells = {(c["step"], c["rank"]): c for c in info["cells"] if c["backend"] == "model"}
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
    print("ok: seed 000 drawn with S3 at step 4 and S1 at steps 5-6 on both ranks (DOM and pixels)")


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
