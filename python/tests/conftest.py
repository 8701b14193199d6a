"""With RELPOS_TEST_NO_SKIPS=1 (scripts/test-pypi.sh sets it: there every
optional dependency is installed) a skipped test fails the run: a test that
skips because PyTorch, Triton, transformers or CTranslate2 is missing or
broken is a failure there, not a quiet pass. Elsewhere (scripts/test-python.sh
on Debian's Python) skips stay skips, listed with their reasons by -rs."""

import os

import pytest


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("RELPOS_TEST_NO_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(
            f"RELPOS_TEST_NO_SKIPS=1: {len(skipped)} test(s) skipped where "
            f"every dependency is installed: that is a failure (reasons "
            f"below)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
