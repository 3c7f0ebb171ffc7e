"""Test set-up: quiet TensorFlow logs, the repository root importable, Hypothesis profiles.

Under CI (CI=true) Hypothesis runs derandomized: the same examples on every run, so a red CI
means a change broke something, not an unlucky draw. `pytest -m "not slow"` is the fast subset
for the edit loop (subprocess, CLI and learning tests carry the `slow` marker; CI runs all).
"""

import logging
import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)
# Before any test imports TensorFlow, so tests run on the kernels the commands choose (oneDNN
# on x86-64 unless TF_ENABLE_ONEDNN_OPTS is set): importing bert_tf changes nothing.
from bert_tf import cli  # pylint: disable=g-import-not-at-top,wrong-import-position

cli.choose_cpu_kernels()

try:
  from hypothesis import settings as hypothesis_settings
except ImportError:  # hypothesis is a test extra; without it, its tests fail to import anyway
  hypothesis_settings = None

if hypothesis_settings is not None:
  hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
  hypothesis_settings.register_profile("dev", print_blob=True)
  hypothesis_settings.load_profile(
      "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev")


@pytest.fixture(autouse=True)
def _absl_logs_reach_caplog():
  """Every test starts with the "absl" logger passing everything on (level NOTSET), and gets
  its level back afterwards. Parsing a tool's flags sets that level from absl's --verbosity
  (WARNING by default); when that happened in an earlier test or in a module fixture, a later
  test's caplog missed INFO lines, depending on which tests a worker had run before."""
  logger = logging.getLogger("absl")
  level = logger.level
  logger.setLevel(logging.NOTSET)
  yield
  logger.setLevel(level)
