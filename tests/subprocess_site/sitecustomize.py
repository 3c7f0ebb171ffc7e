"""Start-up of the tests' subprocesses (on their PYTHONPATH through tests/helpers.py).

The test extra installs tf-models-official, which brings scikit-learn and matplotlib, and Keras
imports both at start-up when they are installed (its scikit-learn wrappers and its image
gallery). That is about 1.9 s of the 6-7 s a subprocess spends importing TensorFlow here, paid
by every command a test runs. bert_tf never uses either, and a user's install of bert_tf has
neither, so the subprocesses start as that install does: both imports fail as if they were not
installed, which Keras handles. The pytest processes themselves keep them (Model Garden
cross-checks and a metrics check import them).

BERT_TF_TEST_NOT_INSTALLED (comma-separated top-level modules) adds to them: the benchmarks'
smoke tests hide torch, transformers and onnxruntime, so that a machine with the benchmark extra
runs them as CI's test install does.

This file replaces any sitecustomize module further down the path; the machines the suite runs
on have none.
"""

import os
import sys

_NOT_INSTALLED = ("sklearn", "matplotlib") + tuple(
    name for name in os.environ.get("BERT_TF_TEST_NOT_INSTALLED", "").split(",") if name)


class _NotInstalled:
  """A meta path finder that answers "not installed" for _NOT_INSTALLED and their submodules."""

  def find_spec(self, name, path=None, target=None):
    del path, target
    if name.partition(".")[0] in _NOT_INSTALLED:
      raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return None


sys.meta_path.insert(0, _NotInstalled())
