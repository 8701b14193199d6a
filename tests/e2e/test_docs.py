"""Every example in README.md and docs/*.md runs as written.

Each fenced `sh`, `python` and `cpp` block is one test case (named
DOC:LINE), run as a reader would run it; the markers of doc_blocks.py adjust
sizes for the test or say why a block cannot run here (those are reported as
skipped, with the reason). How each language runs:

  sh      `bash -e -o pipefail`, in the document's scratch folder, which holds
          symlinks to the repository's top-level entries (so `build/...`,
          `bench/...`, `scripts/...` resolve) and whatever earlier blocks of
          the same document wrote; PATH starts with the relpos binary's
          folder and the Python environment's bin. `ctest` there is wrapped
          with --no-tests=error: a command that matches no test fails.
  python  the Python environment running pytest (relpos installed), same
          folder and PATH.
  (every)  OMP_WAIT_POLICY=passive unless the block sets it (speed only);
          a block whose output says that its test or benchmark filter
          matched nothing fails.
  cpp     compiled against the installed package (cmake --install into a
          scratch prefix, find_package(relpos), linked with relpos::relpos
          and relpos::api) and run in the same folder. A block without
          `main` is the body of `int main()`, its #include lines first.

Blocks of a document run in order and share its scratch folder, so a later
block may use what an earlier one made (a checkpoint, a file block); every
document gets its own folder. Shown blocks (`text`, `json`, ...) are not run,
but every fenced block must name its language.
"""
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

import doc_blocks
from conftest import ROOT, build_dir, relpos_binary

BLOCKS = doc_blocks.all_blocks()
# What a test or benchmark runner prints, exit status 0, when its filter
# matched nothing: a documented command that runs nothing fails.
NOTHING_RAN = ("No tests were found", "Total Tests: 0",
               "Failed to match any benchmarks")
TESTED = [b for b in BLOCKS if b.runs or b.file or b.output]


def _short(text, lines=40):
    parts = text.rstrip().split("\n")
    return "\n".join(parts[-lines:])


class Runner:
    """Runs blocks on demand, in document order, and keeps their results."""

    def __init__(self, scratch: pathlib.Path):
        self.scratch = scratch
        self.results = {}   # block name -> CompletedProcess (or None: written)
        self.seconds = {}
        self.by_id = {b.id: b for b in BLOCKS if b.id}
        self.shims = scratch / "shims"
        self.shims.mkdir()
        self._make_shims()
        self._cpp = None    # block name -> (executable or None, build log)

    # -- environment -----------------------------------------------------

    def _make_shims(self):
        ctest = shutil.which("ctest")
        if ctest:
            shim = self.shims / "ctest"
            shim.write_text(f'#!/bin/sh\nexec "{ctest}" --no-tests=error "$@"\n')
            shim.chmod(0o755)

    def _path(self):
        return os.pathsep.join([str(self.shims), str(relpos_binary().parent),
                                str(pathlib.Path(sys.executable).parent),
                                os.environ.get("PATH", "")])

    def env(self, block):
        env = dict(os.environ)
        env["PATH"] = self._path()
        env.pop("PYTHONPATH", None)
        # OpenMP threads sleep instead of spinning at barriers: the same
        # results (docs/training.md), far faster on a machine that other
        # jobs share. A block's own env marker wins.
        env.setdefault("OMP_WAIT_POLICY", "passive")
        env.update(dict(block.env))
        return env

    def folder(self, doc):
        """The document's scratch folder, made on first use."""
        d = self.scratch / doc.replace("/", "_").replace(".md", "")
        if not d.exists():
            d.mkdir()
            for entry in ROOT.iterdir():
                if entry.name.startswith(".") or entry.name == "build":
                    continue
                (d / entry.name).symlink_to(entry)
            (d / "build").mkdir()
            (d / "build" / build_dir().name).symlink_to(build_dir())
        return d

    # -- running ---------------------------------------------------------

    def ensure(self, block):
        """Runs (or writes) `block` after every earlier block of its
        document; returns its result."""
        for earlier in BLOCKS:
            if earlier.doc != block.doc:
                continue
            if earlier.line > block.line:
                break
            if earlier.name not in self.results and (earlier.runs or
                                                     earlier.file):
                if earlier is block or not self.unavailable(earlier):
                    self._do(earlier)
        return self.results.get(block.name)

    def unavailable(self, block):
        """Why `block` cannot run here ("" if it can)."""
        if block.skip:
            return block.skip
        for need in block.requires:
            why = _missing_module(need)
            if why:
                return why
        for command in block.requires_commands:
            if not shutil.which(command, path=self._path()):
                return f"needs the command {command} (not on PATH)"
        return ""

    def _do(self, block):
        folder = self.folder(block.doc)
        start = time.monotonic()
        if block.file:
            (folder / block.file).write_text(block.program())
            self.results[block.name] = None
            return
        if block.language == "sh":
            script = folder / f".block-{block.line}.sh"
            script.write_text(block.program())
            cmd = ["bash", "-e", "-o", "pipefail", script.name]
        elif block.language == "python":
            script = folder / f"block_{block.line}.py"
            script.write_text(block.program())
            cmd = [sys.executable, script.name]
        else:
            executable, log = self.cpp()[block.name]
            if executable is None:
                self.results[block.name] = subprocess.CompletedProcess(
                    [], 1, "", f"compile error:\n{log}")
                return
            cmd = [str(executable)]
        try:
            r = subprocess.run(cmd, cwd=folder, env=self.env(block),
                               capture_output=True, text=True,
                               timeout=block.timeout)
        except subprocess.TimeoutExpired as e:
            r = subprocess.CompletedProcess(
                cmd, -1, e.stdout or "", f"timed out after {block.timeout} s")
        self.results[block.name] = r
        self.seconds[block.name] = time.monotonic() - start

    # -- C++ -------------------------------------------------------------

    def cpp(self):
        """Builds every cpp block once; block name -> (executable, log)."""
        if self._cpp is not None:
            return self._cpp
        work = self.scratch / "cpp"
        prefix, src, build = work / "prefix", work / "src", work / "build"
        src.mkdir(parents=True)
        subprocess.run(["cmake", "--install", str(build_dir()), "--prefix",
                        str(prefix)], check=True, capture_output=True)
        blocks = [b for b in BLOCKS if b.language == "cpp" and b.runs
                  and not self.unavailable(b)]
        lists = ["cmake_minimum_required(VERSION 3.25)",
                 "project(relpos_doc_blocks LANGUAGES CXX)",
                 "find_package(relpos REQUIRED)"]
        names = {}
        for k, b in enumerate(blocks):
            target = f"block{k}"
            names[b.name] = target
            (src / f"{target}.cc").write_text(
                f"// {b.name}\n" + cpp_program(b.program()))
            lists += [f"add_executable({target} {target}.cc)",
                      f"target_link_libraries({target} PRIVATE relpos::relpos "
                      "relpos::api)"]
        (src / "CMakeLists.txt").write_text("\n".join(lists) + "\n")
        log = ""
        configure = subprocess.run(
            ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}"],
            capture_output=True, text=True)
        log += configure.stdout + configure.stderr
        if configure.returncode == 0:
            jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
            built = subprocess.run(
                ["cmake", "--build", str(build), "-j", jobs, "--", "-k", "0"],
                capture_output=True, text=True)
            log += built.stdout + built.stderr
        self._cpp = {}
        for name, target in names.items():
            exe = build / target
            self._cpp[name] = (exe if exe.exists() else None,
                               _cpp_log(log, target))
        return self._cpp


_VERSIONS = {}


def _missing_module(need):
    """"" if the module `need` ("numpy", "torch>=2") imports (at that version
    or later), else why not."""
    name, _, minimum = need.partition(">=")
    if importlib.util.find_spec(name) is None:
        return f"needs the Python module {name} (not importable)"
    if not minimum:
        return ""
    if name not in _VERSIONS:
        _VERSIONS[name] = str(getattr(importlib.import_module(name),
                                      "__version__", "0"))
    found = _VERSIONS[name]
    if _version_tuple(found) < _version_tuple(minimum):
        return f"needs {name} >= {minimum} (found {found})"
    return ""


def _version_tuple(text):
    """"2.15.0+cu132" -> (2, 15, 0); "1.13.0a0" -> (1, 13, 0)."""
    m = re.match(r"\d+(\.\d+)*", text)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def cpp_program(text):
    """A cpp block as a whole program: as written if it has a main,
    otherwise its #include lines, then the rest as the body of main."""
    if "int main(" in text:
        return text
    lines = text.split("\n")
    includes = [l for l in lines if l.lstrip().startswith("#include")]
    body = [l for l in lines if not l.lstrip().startswith("#include")]
    return ("\n".join(includes) + "\n\nint main() {\n" +
            "\n".join("  " + l if l else l for l in body) + "\n  return 0;\n}\n")


def _cpp_log(log, target):
    """The lines of a build log about one target (or all of it)."""
    mine = [l for l in log.split("\n") if f"{target}.cc" in l or "error" in l]
    return "\n".join(mine[:60]) if mine else _short(log)


@pytest.fixture(scope="session")
def runner(tmp_path_factory, relpos_bin):
    return Runner(tmp_path_factory.mktemp("docs"))


def test_every_fenced_block_names_its_language():
    unnamed = [b.name for b in BLOCKS if not b.language]
    assert not unnamed, (
        "fenced blocks without a language (sh, python, cpp run; text, json, "
        f"... are shown): {unnamed}")


def test_markers_are_consistent():
    problems = []
    ids = [b.id for b in BLOCKS if b.id]
    problems += [f"id {i} used twice" for i in set(ids) if ids.count(i) > 1]
    for b in BLOCKS:
        if b.output and (b.runs or b.file):
            problems.append(f"{b.name}: an output block is shown, not run")
        if b.output_of and b.output_of not in ids:
            problems.append(f"{b.name}: output of unknown id {b.output_of}")
        if (b.id or b.replacements or b.skip) and not b.runs:
            problems.append(f"{b.name}: marker on a block that does not run")
        try:
            b.program()
        except doc_blocks.DocError as e:
            problems.append(str(e))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", TESTED, ids=[b.name for b in TESTED])
def test_block(block, runner):
    if block.output:
        source = runner.by_id.get(block.output_of) if block.output_of else \
            _previous_run_block(block)
        assert source is not None, f"{block.name}: no run block before it"
        _check_output(block, source, runner)
        return
    if block.runs:
        why = runner.unavailable(block)
        if why:
            pytest.skip(f"{block.name}: {why}")
    result = runner.ensure(block)
    if block.file:
        return
    for sign in NOTHING_RAN:
        assert sign not in result.stdout + result.stderr, (
            f"{block.name}: a command matched nothing ({sign!r})\n"
            f"{_short(result.stdout + result.stderr)}")
    assert result.returncode == block.exit_code, (
        f"{block.name} exited {result.returncode} (expected "
        f"{block.exit_code})\n--- stdout\n{_short(result.stdout)}\n"
        f"--- stderr\n{_short(result.stderr)}")


def _previous_run_block(block):
    before = [b for b in BLOCKS if b.doc == block.doc and b.line < block.line
              and b.runs]
    return before[-1] if before else None


def _check_output(block, source, runner):
    why = runner.unavailable(source)
    if why:
        pytest.skip(f"{block.name}: its block {source.name} cannot run here: {why}")
    result = runner.ensure(source)
    assert result is not None and result.returncode == source.exit_code, (
        f"{source.name} did not run cleanly")
    actual = [l.rstrip() for l in result.stdout.split("\n")]
    at = 0
    for want in block.text.split("\n"):
        want = want.rstrip()
        if not want:
            continue
        while at < len(actual) and actual[at] != want:
            at += 1
        assert at < len(actual), (
            f"{block.name}: the line\n  {want}\nis not in the output of "
            f"{source.name} (in order); it printed:\n{_short(result.stdout, 80)}")
        at += 1
