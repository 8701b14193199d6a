"""The fenced code blocks of README.md and docs/*.md, with their doctest
markers (docs/conventions.md, "Examples in the docs are tests").

Every fenced block names its language. `sh`, `python` and `cpp` blocks are
run by test_docs.py; any other language (`text`, `json`, ...) is shown, not
run. Markers are HTML comments on the lines directly above a block's opening
fence (no blank line between), one directive each:

  <!-- doctest: skip REASON -->           not run; the reason is reported
  <!-- doctest: requires MODULE ... -->   skipped (with that reason) unless
                                          these Python modules import;
                                          MODULE>=VERSION also checks its
                                          __version__ ("torch>=2")
  <!-- doctest: requires-command CMD --> skipped unless CMD is on PATH
  <!-- doctest: replace "OLD" "NEW" -->   run with OLD replaced by NEW (must
                                          occur in the block: a stale marker
                                          fails); to keep a test small
  <!-- doctest: env NAME=VALUE ... -->    run with these variables
  <!-- doctest: timeout SECONDS -->       limit (default 300)
  <!-- doctest: exit N -->                the block must exit with status N
  <!-- doctest: file NAME -->             written to NAME in the scratch
                                          folder instead of run (for a later
                                          block to use); any language
  <!-- doctest: id NAME -->               names a run block (unique over all
                                          documents) for `output NAME`
  <!-- doctest: output [NAME] -->         on a shown block: each of its lines
                                          (trailing blanks ignored) must be a
                                          line of the stdout of block NAME, or
                                          of the previous run block of this
                                          document, in the same order (other
                                          lines may come between)

`python3 tests/e2e/doc_blocks.py` lists every block and what the test does
with it, without running anything.
"""
import dataclasses
import pathlib
import re
import shlex
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN_LANGUAGES = ("sh", "python", "cpp")
DIRECTIVES = ("skip", "requires", "requires-command", "replace", "env",
              "timeout", "exit", "file", "id", "output")
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+)\s*([^\s`]*)\s*(.*)$")


class DocError(Exception):
    """A malformed block or marker (the doc test fails on it)."""


@dataclasses.dataclass
class Block:
    doc: str            # "docs/python.md"
    line: int           # line of the opening fence, 1-based
    language: str       # "sh", "python", "cpp", "text", ... ("" if none)
    text: str           # the block's content, indentation removed
    skip: str = ""
    requires: tuple = ()
    requires_commands: tuple = ()
    replacements: tuple = ()   # (old, new) pairs
    env: tuple = ()            # (name, value) pairs
    timeout: float = 300.0
    exit_code: int = 0
    file: str = ""
    id: str = ""
    output: bool = False
    output_of: str = ""        # block id; "" = the previous run block

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and not self.file

    def program(self) -> str:
        """The text to run, with every replacement applied."""
        text = self.text
        for old, new in self.replacements:
            if old not in text:
                raise DocError(f"{self.name}: replace marker: {old!r} does "
                               "not occur in the block")
            text = text.replace(old, new)
        return text

    def plan(self) -> str:
        """What the test does with the block, in words."""
        if self.file:
            return f"written to {self.file}"
        if self.output:
            return f"checked against the output of {self.output_of or 'the previous run block'}"
        if not self.runs:
            return "shown, not run"
        if self.skip:
            return f"skipped: {self.skip}"
        extra = []
        if self.requires:
            extra.append("needs " + ", ".join(self.requires))
        if self.requires_commands:
            extra.append("needs " + ", ".join(self.requires_commands))
        if self.replacements:
            extra.append(f"{len(self.replacements)} replacement(s)")
        return "run" + (f" ({'; '.join(extra)})" if extra else "")


def _apply(block: Block, directive: str, where: str) -> None:
    try:
        words = shlex.split(directive)
    except ValueError as e:
        raise DocError(f"{where}: marker {directive!r}: {e}") from None
    if not words or words[0] not in DIRECTIVES:
        raise DocError(f"{where}: unknown doctest directive {directive!r} "
                       f"(known: {', '.join(DIRECTIVES)})")
    kind, args = words[0], words[1:]
    if kind == "skip":
        if not args:
            raise DocError(f"{where}: skip needs a reason")
        block.skip = " ".join(args)
    elif kind == "requires":
        block.requires += tuple(args)
    elif kind == "requires-command":
        block.requires_commands += tuple(args)
    elif kind == "replace":
        if len(args) != 2:
            raise DocError(f"{where}: replace takes \"OLD\" \"NEW\"")
        block.replacements += ((args[0], args[1]),)
    elif kind == "env":
        for a in args:
            if "=" not in a:
                raise DocError(f"{where}: env takes NAME=VALUE, got {a!r}")
            block.env += (tuple(a.split("=", 1)),)
    elif kind == "timeout":
        block.timeout = float(args[0])
    elif kind == "exit":
        block.exit_code = int(args[0])
    elif kind == "file":
        block.file = args[0]
    elif kind == "id":
        block.id = args[0]
    elif kind == "output":
        block.output = True
        block.output_of = args[0] if args else ""


def parse(doc_path: pathlib.Path, root: pathlib.Path = ROOT) -> list:
    """The fenced blocks of one Markdown file, markers applied."""
    doc = doc_path.relative_to(root).as_posix()
    lines = doc_path.read_text().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if MARKER.match(lines[i]) and not _marks_fence(lines, i):
                raise DocError(f"{doc}:{i + 1}: doctest marker not directly "
                               "above a fenced block")
            i += 1
            continue
        indent, fence, language = m.group(1), m.group(2), m.group(3)
        start, body = i, []
        i += 1
        while i < len(lines) and not re.match(
                rf"^\s*{fence}\s*$", lines[i]):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else
                        line.lstrip())
            i += 1
        if i == len(lines):
            raise DocError(f"{doc}:{start + 1}: fenced block never closed")
        block = Block(doc=doc, line=start + 1, language=language,
                      text="\n".join(body) + "\n")
        j = start - 1
        markers = []
        while j >= 0 and MARKER.match(lines[j]):
            markers.append((j, MARKER.match(lines[j]).group(1)))
            j -= 1
        for j, directive in reversed(markers):
            _apply(block, directive, f"{doc}:{j + 1}")
        blocks.append(block)
        i += 1
    return blocks


def _marks_fence(lines, i):
    """True if the marker on line i belongs to a fence below it."""
    j = i + 1
    while j < len(lines) and MARKER.match(lines[j]):
        j += 1
    return j < len(lines) and FENCE.match(lines[j]) is not None


def documents(root: pathlib.Path = ROOT) -> list:
    """README.md, then docs/*.md in name order."""
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def all_blocks(root: pathlib.Path = ROOT) -> list:
    blocks = []
    for doc in documents(root):
        blocks.extend(parse(doc, root))
    return blocks


def main() -> int:
    counts = {}
    for b in all_blocks():
        plan = b.plan()
        key = ("written to a file" if b.file else
               "output checked" if b.output else
               "shown" if not b.runs else
               "skipped" if b.skip else "run")
        counts[key] = counts.get(key, 0) + 1
        first = b.text.strip().split("\n")[0][:60]
        print(f"{b.name:28} {b.language or '(none)':7} {plan}  | {first}")
    print(", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
