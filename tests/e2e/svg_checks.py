"""Checks of the SVG plots that relpos writes (compare.svg, inspect --svg,
the demo's accuracy.svg), by parsing them and by rendering them to PNG with
rsvg-convert (Debian: librsvg2-bin).

A plot is one or more panels (RenderSvg's <svg>, nested in one document for
compare and inspect). For each panel:
  - every series has its own colour (the legend's line colours are
    distinct, and every polyline uses one of them);
  - the tick labels of each axis are distinct and increasing;
  - nothing is drawn outside the panel's canvas: the panel is rendered
    alone with a white margin around its canvas (its viewBox grown by
    MARGIN on every side), and every pixel outside the canvas must be white
    or transparent; the title band must hold ink (the title was drawn).
"""
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib

import numpy as np

SVG_NS = "http://www.w3.org/2000/svg"
MARGIN = 100
ET.register_namespace("", SVG_NS)


def _tag(name):
    return f"{{{SVG_NS}}}{name}"


# ---- PNG ---------------------------------------------------------------

def _unfilter(raw, width, height, bpp):
    """PNG scanline filters (None, Sub, Up, Average, Paeth) undone."""
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prior = np.zeros(stride, dtype=np.int64)
    pos = 0
    for y in range(height):
        kind = raw[pos]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride,
                             offset=pos + 1).astype(np.int64)
        pos += 1 + stride
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prior) & 255
        elif kind == 1:
            # Sub: a running sum per channel.
            cur = np.cumsum(line.reshape(width, bpp), axis=0).reshape(-1) & 255
        else:
            cur = _unfilter_sequential(kind, line.tolist(), prior.tolist(), bpp)
        out[y] = cur
        prior = np.asarray(cur, dtype=np.int64)
    return out


def _unfilter_sequential(kind, line, prior, bpp):
    cur = [0] * len(line)
    for i, x in enumerate(line):
        a = cur[i - bpp] if i >= bpp else 0
        b = prior[i]
        if kind == 3:
            cur[i] = (x + ((a + b) >> 1)) & 255
            continue
        c = prior[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        cur[i] = (x + pred) & 255
    return np.asarray(cur, dtype=np.int64)


def read_png(path):
    """RGBA pixels [height, width, 4] of an 8-bit RGB/RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 4 if colour == 6 else 3
    pixels = _unfilter(zlib.decompress(idat), width, height, bpp)
    pixels = pixels.reshape(height, width, bpp)
    if bpp == 3:
        alpha = np.full((height, width, 1), 255, dtype=np.uint8)
        pixels = np.concatenate([pixels, alpha], axis=2)
    return pixels


def render(svg_text, png_path):
    """Renders SVG text to a PNG file with rsvg-convert; returns its pixels."""
    tool = shutil.which("rsvg-convert")
    assert tool, "rsvg-convert not found (Debian: apt-get install librsvg2-bin)"
    subprocess.run([tool, "-o", str(png_path)], input=svg_text.encode(),
                   check=True)
    return read_png(png_path)


# ---- SVG structure -----------------------------------------------------

def panels(svg_text):
    """The plot panels: the nested <svg> children, or the document itself."""
    root = ET.fromstring(svg_text)
    nested = [c for c in root if c.tag == _tag("svg")]
    return nested if nested else [root]


def size(panel):
    return int(float(panel.get("width"))), int(float(panel.get("height")))


def standalone(panel, margin=MARGIN):
    """The panel as its own document, its canvas grown by `margin` on every
    side (a white margin: anything drawn there was outside the canvas)."""
    w, h = size(panel)
    copy = ET.fromstring(ET.tostring(panel))
    for attr in ("x", "y"):
        copy.attrib.pop(attr, None)
    copy.set("width", str(w + 2 * margin))
    copy.set("height", str(h + 2 * margin))
    copy.set("viewBox", f"{-margin} {-margin} {w + 2 * margin} {h + 2 * margin}")
    return ET.tostring(copy, encoding="unicode")


def legend_colours(panel):
    """Colours of the legend's line samples (one per series)."""
    return [e.get("stroke") for e in panel.iter(_tag("line"))
            if e.get("stroke-width") == "2"]


def series_colours(panel):
    return [e.get("stroke") for e in panel.iter(_tag("polyline"))]


def texts(panel):
    for e in panel.iter(_tag("text")):
        yield e, "".join(e.itertext())


def tick_labels(panel):
    """(y-axis labels top to bottom, x-axis labels left to right)."""
    y_ticks = [(float(e.get("y")), t) for e, t in texts(panel)
               if e.get("text-anchor") == "end"]
    rows = {}
    for e, t in texts(panel):
        if e.get("text-anchor") == "middle" and e.get("y") is not None:
            rows.setdefault(float(e.get("y")), []).append((float(e.get("x")), t))
    # The x-axis tick row is the row of middle-anchored numbers.
    x_row = max((r for r in rows.values()
                 if all(re.fullmatch(r"-?[0-9.]+", t) for _, t in r)),
                key=len, default=[])
    return ([t for _, t in sorted(y_ticks)], [t for _, t in sorted(x_row)])


def title_band(panel):
    """Height of the band above the plot area (the y axis's top end)."""
    axis = [e for e in panel.iter(_tag("line"))
            if e.get("stroke") == "black" and e.get("x1") == e.get("x2")
            and float(e.get("y2")) - float(e.get("y1")) > 50]
    return float(axis[0].get("y1"))


def check_panel(panel, png_path):
    """Every check of the module docstring; returns a list of problems."""
    problems = []
    legend = legend_colours(panel)
    if len(set(legend)) != len(legend):
        problems.append(f"series share colours: {legend}")
    stray = set(series_colours(panel)) - set(legend)
    if stray:
        problems.append(f"polylines in colours without a legend entry: {stray}")
    for axis, labels in zip(("y", "x"), tick_labels(panel)):
        if len(labels) < 2:
            problems.append(f"{axis} axis has {len(labels)} tick labels")
        if len(set(labels)) != len(labels):
            problems.append(f"{axis} tick labels repeat: {labels}")
        values = [float(t) for t in labels]
        if axis == "y":
            values = values[::-1]  # listed top to bottom
        if values != sorted(values):
            problems.append(f"{axis} tick labels not increasing: {labels}")
    w, h = size(panel)
    pixels = render(standalone(panel), png_path)
    assert pixels.shape[:2] == (h + 2 * MARGIN, w + 2 * MARGIN), pixels.shape
    ink = (pixels[:, :, 3] > 0) & (pixels[:, :, :3].min(axis=2) < 250)
    inside = np.zeros_like(ink)
    inside[MARGIN:MARGIN + h, MARGIN:MARGIN + w] = True
    outside = ink & ~inside
    if outside.any():
        ys, xs = np.nonzero(outside)
        problems.append(
            f"{outside.sum()} pixels drawn outside the {w}x{h} canvas, e.g. "
            f"at x={xs[0] - MARGIN}, y={ys[0] - MARGIN} (canvas coordinates)")
    band = int(title_band(panel))
    if not ink[MARGIN:MARGIN + band, MARGIN:MARGIN + w].any():
        problems.append("nothing drawn in the title band")
    return problems
