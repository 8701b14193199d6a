"""relpos.translate.read_catalog against Python's own .mo reader.

Python's gettext module (standard library) parses GNU .mo files
independently of relpos. Catalogs written here (both byte orders, contexts,
plural entries, a Latin-1 charset) must read the same through both; so must
every catalog installed under /usr/share/locale/de/LC_MESSAGES that Python's
reader accepts (none are needed: a fresh machine has few or none). Hostile
files raise RuntimeError naming the file.
"""

import gettext
import glob
import os
import struct
import sys

import pytest

from relpos import translate

# The .mo writer of the fuzzers' seed script (fuzz/make_corpus.py), written
# from the GNU gettext manual independently of relpos's C++.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "fuzz"))
from make_corpus import mo as _mo, mo_header  # noqa: E402


def _python_view(path):
    """{(context, msgid): msgstr} of singular forms, as Python reads them."""
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog
    out = {}
    for key, value in catalog.items():
        if isinstance(key, tuple):  # plural: (msgid, form index)
            if key[1] != 0:
                continue
            key = key[0]
        if key == "":
            continue  # the header
        context, sep, msgid = key.rpartition("\x04")
        out[(context if sep else None, msgid)] = value
    return out


def _relpos_view(path):
    c = translate.read_catalog(path)
    return {(ctx, msgid): msgstr for ctx, msgid, msgstr, _, _ in c["messages"]}


@pytest.mark.parametrize("big_endian", [False, True])
def test_generated_catalogs_read_as_python_reads_them(tmp_path, big_endian):
    entries = [
        mo_header(b"UTF-8"),
        (b"File", b"Datei"),
        (b"Open %s", "%s öffnen".encode()),
        (b"menu\x04Quit", b"Beenden"),
        (b"%d file\x00%d files", b"%d Datei\x00%d Dateien"),
    ]
    path = tmp_path / "x.mo"
    path.write_bytes(_mo(entries, big_endian))
    assert _relpos_view(path) == _python_view(path)
    c = translate.read_catalog(path)
    assert (c["language"], c["charset"], c["has_header"]) == ("de", "UTF-8", True)
    plural = [m for m in c["messages"] if m[3]]
    assert plural == [(None, "%d file", "%d Datei", True, False)]

    latin = tmp_path / "latin.mo"
    latin.write_bytes(_mo([mo_header(b"ISO-8859-1"),
                           (b"Open file", "Datei öffnen".encode("latin-1"))]))
    assert _relpos_view(latin) == _python_view(latin) == {
        (None, "Open file"): "Datei öffnen"}


def test_installed_german_catalogs_read_as_python_reads_them():
    compared = 0
    for path in sorted(glob.glob("/usr/share/locale/de/LC_MESSAGES/*.mo")):
        try:
            want = _python_view(path)
        except Exception:  # Python's reader refuses some (no charset, bad bytes)
            continue
        got = _relpos_view(path)
        # relpos leaves out entries that are not valid in the charset and
        # Python would have refused the file for them, so the views are equal.
        assert got == want, path
        compared += 1
    if compared == 0:
        pytest.skip("no German catalogs installed under /usr/share/locale "
                    "(the generated catalogs above are the test)")


def test_hostile_catalogs_raise_naming_the_file(tmp_path):
    good = _mo([mo_header(b"UTF-8"), (b"a", b"b")])
    cases = {
        "short.mo": good[:20],
        "magic.mo": b"\0" * 40,
        "count.mo": good[:8] + struct.pack("<I", 0xFFFFFFFF) + good[12:],
        "cut.mo": good[:-3],
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(RuntimeError, match=name):
            translate.read_catalog(path)
    with pytest.raises(RuntimeError, match="missing.mo"):
        translate.read_catalog(tmp_path / "missing.mo")


def test_load_parallel_text_from_a_tsv_file(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"item {i}\tEintrag {i}\n" for i in range(50)) +
                    "same\tsame\n", encoding="utf-8")
    text = translate.load_parallel_text(path)
    assert text["split"] == "by message"
    assert text["stats"]["pairs"] == 50 and text["stats"]["identical"] == 1
    assert len(text["train"]) + len(text["test"]) == 50
    assert all(t.startswith("Eintrag ") for _, t, _ in text["train"])
    with pytest.raises(ValueError, match="both 'de'"):
        translate.load_parallel_text(path, "de", "de")
