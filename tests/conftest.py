"""Shared test set-up: quiet TensorFlow logs and a repo-root import path."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

TEST_DATA = os.path.join(REPO_ROOT, "tests", "data")
