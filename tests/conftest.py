"""Test set-up: quiet TensorFlow logs, the repository root importable, Hypothesis profiles.

Under CI (CI=true) Hypothesis runs derandomized: the same examples on every run, so a red CI
means a change broke something, not an unlucky draw. `pytest -m "not slow"` is the fast subset
for the edit loop (subprocess, CLI and learning tests carry the `slow` marker; CI runs all).

Under `-n 3 --dist loadfile` each file runs whole in one process, files handed out in the order
of the collection. The heaviest files go first (pytest_collection_modifyitems), so the last ones
to start are short and the processes finish together; xdist's own reordering (files with the most
tests first) is turned off, since our heaviest files hold a few long tests, and that order left
them for the end: one process ran them alone for the suite's last minutes.
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


# The estimated cost of a test for the file order above: a `slow` test takes 10 s to minutes, the
# others well under a second. A rough weight is enough to put the long files first.
SLOW_TEST_WEIGHT = 30.0
QUICK_TEST_WEIGHT = 0.3


def pytest_configure(config):
  if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the collection's order
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
  """Files by their estimated cost, heaviest first; the tests of a file keep their order."""
  del config
  cost = {}
  for item in items:
    weight = SLOW_TEST_WEIGHT if item.get_closest_marker("slow") else QUICK_TEST_WEIGHT
    cost[item.path] = cost.get(item.path, 0.0) + weight
  first_seen = {}
  for index, item in enumerate(items):
    first_seen.setdefault(item.path, index)
  items.sort(key=lambda item: (-cost[item.path], first_seen[item.path]))
