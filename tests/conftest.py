"""Test set-up: quiet TensorFlow logs, the repository root importable, Hypothesis profiles.

Under CI (CI=true) Hypothesis runs derandomized: the same examples on every run, so a red CI
means a change broke something, not an unlucky draw. `pytest -m "not slow"` is the fast subset
for the edit loop (subprocess, CLI and learning tests carry the `slow` marker; CI runs all).
"""

import collections
import gc
import logging
import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One intra-op thread per TensorFlow process (the test workers and, through the environment
# they pass on, the commands they start): the suite runs three workers on two cores, and a
# pool of one thread per core in each process made the workers preempt each other's kernels;
# with one thread the same tests took 11-15% less time (two subsets, in both orders). Tests
# of our thread flags set their own values.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

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


def pytest_configure(config):
  """Under pytest-xdist's --dist loadfile, files are handed to the workers in the order that
  pytest_collection_modifyitems below gives, not re-sorted by xdist by their number of tests
  (its default: which sent the files of a few long tests, such as the run_pretraining kill
  test, last, so one worker ran on alone at the end)."""
  if hasattr(config.option, "loadscopereorder"):
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
  """Files with more `slow` tests first (the longest work first, so the workers finish
  together). The sort is stable and a file's tests are collected together, so each file's
  tests keep their order and files with as many slow tests keep the collection's order.
  Deterministic, as xdist requires of every worker's collection. A test that alone takes as
  long as several slow tests says so: @pytest.mark.slow(weight=N) counts it N times."""

  def file_of(item):
    return item.nodeid.split("::", 1)[0]

  slow = collections.Counter()
  for item in items:
    marker = item.get_closest_marker("slow")
    if marker:
      slow[file_of(item)] += marker.kwargs.get("weight", 1)
  items.sort(key=lambda item: -slow[file_of(item)])


# Python's cycle collector, tuned for a test process that holds TensorFlow, Keras and every
# traced graph of its earlier tests: with the default thresholds (700, 10, 10) a worker ran
# about 2,200 collections per test file, 15 of them full ones of about 0.3 s each, 6-11% of its
# CPU time (tests/training/test_length_buckets.py and tests/tasks/test_packing_run.py, timed with
# gc.callbacks); with the youngest generation collected every 50,000 allocations and what
# collection imported frozen (below), 24 collections, 3 of them full, 1.4 s against 4-7 s.
# Garbage without cycles is freed at once either way; the tools themselves keep Python's
# defaults.
gc.set_threshold(50_000, 20, 20)


def pytest_collection_finish(session):  # pylint: disable=unused-argument
  """Moves what collection created (TensorFlow, Keras, the test modules) out of the collector's
  sight: a full collection no longer walks those millions of long-lived objects again."""
  gc.collect()
  gc.freeze()


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
