#!/usr/bin/env python3
"""Checks the HTML report as headless Chromium parsed and drew it (tests/report/render_check.sh).

  check_render.py dom DOM EXPECT          the DOM (chromium --dump-dom) holds every chart element
                                          with the fixture's hand-computed numbers, and nothing
                                          active (script, img, event handlers)
  check_render.py png PNG DOM EXPECT      the screenshot shows the charts: the bar and line
                                          colours, in the right amounts, places and order

Prints "ok NAME" or "FAIL NAME: detail" per check; exits 1 if any failed. Standard library only
(the PNG is decoded with zlib and struct), so any Python 3.9+ runs it.
"""
from __future__ import annotations

import json
import struct
import sys
import zlib
from html.parser import HTMLParser
from itertools import accumulate
from typing import Any

failures = 0


def check(name: str, cond: bool, detail: str = "") -> None:
    global failures
    if cond:
        print(f"ok {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {detail}")


class Dom(HTMLParser):
    """Every element with its attributes, and the text of the task table's id cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.id_cells: list[str] = []
        self._in_id: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag == "td" and "id" in a.get("class", "").split():
            self._in_id = []

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._in_id is not None:
            self.id_cells.append("".join(self._in_id))
            self._in_id = None

    def handle_data(self, data: str) -> None:
        if self._in_id is not None:
            self._in_id.append(data)

    def with_class(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and cls in a.get("class", "").split()]

    def by_id(self, ident: str) -> list[tuple[str, dict[str, str]]]:
        return [(t, a) for t, a in self.elements if a.get("id") == ident]


def load_dom(path: str) -> Dom:
    dom = Dom()
    with open(path, encoding="utf-8") as f:
        dom.feed(f.read())
    dom.close()
    return dom


def near(a: float, b: float, eps: float = 0.0006) -> bool:
    return abs(a - b) <= eps


def check_dom(dom: Dom, ex: dict[str, Any]) -> None:
    for ident in ("chart-rates", "chart-fastp", "chart-hist"):
        found = dom.by_id(ident)
        check(f"svg #{ident} present", len(found) == 1 and found[0][0] == "svg", str(found)[:200])
    check("summary table present", len(dom.by_id("summary-table")) == 1)
    rows = [a for t, a in dom.elements if t == "tr" and a.get("class") in ("level", "all")]
    check("summary table: a row per level and one overall", len(rows) == len(ex["groups"]),
          f"{len(rows)} rows")

    # rates chart: three bars per level and overall, heights proportional to the rates
    full = [float(a["height"]) for a in dom.with_class("rect", "bar-pass")
            if near(float(a.get("data-rate", "-1")), 1.0)]
    unit = full[0] if full else 0.0
    for cls, want in ex["rates"].items():
        bars = [a for a in dom.with_class("rect", cls) if "bar" in a["class"].split()]
        levels = [a.get("data-level") for a in bars]
        check(f"{cls}: one bar per level and overall", levels == ex["groups"], str(levels))
        bad = [(a.get("data-level"), a.get("data-rate"), a.get("height")) for a in bars
               if not near(float(a.get("data-rate", "nan")), want.get(a.get("data-level"), -1))
               or abs(float(a.get("height", "-9")) - want.get(a.get("data-level"), 0) * unit) > 1]
        check(f"{cls}: rates and heights match the hand-computed ones", unit > 0 and not bad,
              f"unit {unit}, wrong: {bad}")

    # fast_p: two polylines with every point, the values at p = 0, 1, 2 as computed by hand
    for name in ("eager", "compile"):
        lines = dom.with_class("polyline", f"fastp-{name}")
        check(f"fast_p {name}: one polyline", len(lines) == 1, f"{len(lines)} found")
        if len(lines) != 1:
            continue
        values = [float(v) for v in lines[0].get("data-values", "").split()]
        points = [tuple(float(c) for c in p.split(",")) for p in lines[0].get("points", "").split()]
        check(f"fast_p {name}: {ex['fast_p_points']} values", len(values) == ex["fast_p_points"],
              f"{len(values)} values")
        wrong = {p: values[int(p) * 10] for p, v in ex["fast_p"][name].items()
                 if len(values) == ex["fast_p_points"] and not near(values[int(p) * 10], v)}
        check(f"fast_p {name}: fast_0, fast_1, fast_2 (strictly greater than p)", not wrong
              and len(values) == ex["fast_p_points"], f"wrong: {wrong}")
        ys = [p[1] for p in points]
        check(f"fast_p {name}: drawn non-increasing across the plot",
              len(points) >= ex["fast_p_points"] and ys == sorted(ys)
              and points[-1][0] - points[0][0] > 500, f"{len(points)} points")

    # histogram of speed-ups vs compile: one bar per bin, counts as computed by hand
    bars = dom.with_class("rect", "hist-bar")
    check(f"histogram: {ex['hist_bins']} bins", len(bars) == ex["hist_bins"], f"{len(bars)}")
    counts = {a.get("data-bin"): int(a.get("data-count", "-1")) for a in bars}
    want = {str(i): ex["hist"].get(str(i), 0) for i in range(ex["hist_bins"])}
    check("histogram: counts per bin", counts == want, f"{counts} != {want}")
    faster = [a.get("data-bin") for a in bars if "hist-faster" in a["class"].split()]
    check("histogram: bins above 1x are the faster colour",
          faster == [str(i) for i in range(9, ex["hist_bins"])], str(faster))

    # nothing active, and the hostile task id is text
    active = [t for t, a in dom.elements if t in ("script", "img", "iframe", "object", "embed",
                                                  "link", "base", "form")]
    handlers = [k for _, a in dom.elements for k in a if k.startswith("on")]
    check("no script, img, link or other active element", not active, str(active))
    check("no event-handler attribute", not handlers, str(handlers))
    check("the hostile task id is shown as text", ex["hostile_id"] in dom.id_cells,
          str(dom.id_cells[-3:]))


def read_png(path: str) -> tuple[int, int, int, list[bytes]]:
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat = 8, []
    width = height = colour = bpp = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}")
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    m7 = int.from_bytes(b"\x7f" * stride, "big")
    m8 = int.from_bytes(b"\x80" * stride, "big")
    rows: list[bytes] = []
    prev = bytes(stride)
    low = (255).__and__
    for y in range(height):
        off = y * (stride + 1)
        kind_f, cur = raw[off], raw[off + 1:off + 1 + stride]
        if kind_f == 0:
            line = bytes(cur)
        elif kind_f == 2:  # up: bytewise add without carries between bytes
            a, b = int.from_bytes(cur, "big"), int.from_bytes(prev, "big")
            line = (((a & m7) + (b & m7)) ^ ((a ^ b) & m8)).to_bytes(stride, "big")
        elif kind_f == 1:  # sub: a running sum per channel
            out = bytearray(stride)
            for c in range(bpp):
                out[c::bpp] = bytes(map(low, accumulate(cur[c::bpp])))
            line = bytes(out)
        else:  # average, Paeth
            out = bytearray(cur)
            for x in range(stride):
                left = out[x - bpp] if x >= bpp else 0
                up = prev[x]
                if kind_f == 3:
                    out[x] = (out[x] + ((left + up) >> 1)) & 255
                else:
                    ul = prev[x - bpp] if x >= bpp else 0
                    p = left + up - ul
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                    pred = left if pa <= pb and pa <= pc else up if pb <= pc else ul
                    out[x] = (out[x] + pred) & 255
            line = bytes(out)
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def colour_pixels(rows: list[bytes], bpp: int, hexcolour: str) -> tuple[int, set[int], int]:
    """Pixels of exactly this colour: their number, their columns, the first row with one."""
    pat = bytes.fromhex(hexcolour.lstrip("#")) + (b"\xff" if bpp == 4 else b"")
    count, columns, top = 0, set(), -1
    for y, row in enumerate(rows):
        if pat not in row:
            continue
        i = row.find(pat)
        while i >= 0:
            if i % bpp == 0:
                count += 1
                columns.add(i // bpp)
                if top < 0:
                    top = y
                i = row.find(pat, i + bpp)
            else:
                i = row.find(pat, i + 1)
    return count, columns, top


def segments(columns: set[int]) -> int:
    return sum(1 for x in columns if x - 1 not in columns)


def check_png(png: str, dom: Dom, ex: dict[str, Any]) -> None:
    width, height, bpp, rows = read_png(png)
    check("screenshot is 1280 px wide", width == 1280, f"{width}x{height}")
    white = b"\xff" * (width * bpp)
    drawn = sum(1 for r in rows if r != white)
    seen: set[bytes] = set()
    for r in rows[::8]:
        seen.update(r[i:i + 3] for i in range(0, len(r), bpp * 4))
    check("screenshot is not blank", drawn > height // 4 and len(seen) > 30,
          f"{drawn} non-white rows, {len(seen)} colours sampled")

    colours = ex["colours"]
    tops: dict[str, int] = {}
    for cls in ("bar-pass", "bar-eager", "bar-compile", "hist-slower", "hist-faster"):
        shown = [a for a in dom.with_class("rect", cls) if float(a.get("height", "0")) >= 1 and float(a["width"]) >= 3]
        area = sum(float(a["width"]) * float(a["height"]) for a in shown)
        count, columns, top = colour_pixels(rows, bpp, colours[cls])
        tops[cls] = top
        bars = sum(1 for a in shown if "legend-swatch" not in a.get("class", "").split())
        legend = len(shown) - bars
        check(f"{cls} ({colours[cls]}): {bars} bars and {legend} legend swatch drawn apart",
              segments(columns) == len(shown), f"{segments(columns)} column runs")
        check(f"{cls}: pixel count matches the bars' area", 0.9 * area <= count <= 1.02 * area + 64,
              f"{count} pixels for {area:.0f} px of bars")
    for cls in ("fastp-eager", "fastp-compile"):
        count, columns, top = colour_pixels(rows, bpp, colours[cls])
        tops[cls] = top
        check(f"{cls} ({colours[cls]}): the line is drawn across the plot",
              count >= 600 and max(columns, default=0) - min(columns, default=0) > 500,
              f"{count} pixels over columns {min(columns, default=0)}-{max(columns, default=0)}")
    order = [tops["bar-pass"], tops["fastp-eager"], tops["hist-faster"]]
    check("charts in order: rates, fast_p, histogram", -1 not in order and order == sorted(order),
          str(order))


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 4 and argv[1] == "dom":
            check_dom(load_dom(argv[2]), json.load(open(argv[3])))
        elif len(argv) == 5 and argv[1] == "png":
            check_png(argv[2], load_dom(argv[3]), json.load(open(argv[4])))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (OSError, ValueError, KeyError, IndexError, zlib.error) as e:
        check(f"{argv[1]} checks ran to the end", False, repr(e))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
