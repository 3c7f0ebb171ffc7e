"""Runs a benchmark script's --smoke in a subprocess, as CI's install would (tests/benchmarks/
test_smoke_*.py): torch, transformers and onnxruntime look uninstalled (the benchmark extra
brings them, the test extra does not), the results file goes to the test's folder, and the
run's output and results file come back for the test to check."""

import json
import os
import subprocess
import sys

import pytest

from tests import helpers

BENCHMARKS = os.path.join(helpers.REPO_ROOT, "benchmarks")
# What the test extra leaves out and some benchmarks use (their peers, ONNX export, plots).
NOT_INSTALLED = "torch,transformers,onnxruntime,tf2onnx,onnx,optimum"
# A smoke run that takes minutes even on the tiny settings (distillation.py --goals: two
# teachers' real fine-tuning, five students and four exports timed): run with BERT_TF_LONG_SMOKE=1,
# skipped otherwise with this reason in the summary, so that the suite stays within its time on
# 2 cores. The same script's plain --smoke runs in the suite.
LONG = pytest.mark.skipif(
    os.environ.get("BERT_TF_LONG_SMOKE", "") not in ("1", "true", "yes"),
    reason="a smoke run of minutes (the suite's time on 2 cores): BERT_TF_LONG_SMOKE=1 runs it")
# Every results file's keys (benchmarks/results_file.py).
RECORD_KEYS = {"benchmark", "command", "date", "written", "smoke", "machine", "versions",
               "results"}


def run(script, tmp_path, *flags, timeout=600, own_layout=False):
  """Runs `python benchmarks/SCRIPT.py --smoke --results_file=... FLAGS` from the repository
  root; returns (its stdout, its results file's measured values). Fails the test on a non-zero
  exit, a missing results file, or a file without the shared keys; with own_layout (the scripts
  whose committed files keep their own layout) the whole file comes back for the test to check."""
  path = os.path.join(str(tmp_path), f"{script}.json")
  command = [sys.executable, os.path.join(BENCHMARKS, f"{script}.py"), "--smoke",
             f"--results_file={path}", *flags]
  done = subprocess.run(command, capture_output=True, text=True, cwd=helpers.REPO_ROOT,
                        env=helpers.subprocess_env(BERT_TF_TEST_NOT_INSTALLED=NOT_INSTALLED),
                        timeout=timeout, check=False)
  assert done.returncode == 0, (done.stdout[-3000:] + "\n" + done.stderr[-3000:])
  assert f"results: {path}" in done.stdout
  with open(path, encoding="utf-8") as f:
    content = json.load(f)
  assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
  if own_layout:
    assert content["smoke"] is True
    return done.stdout, content
  assert set(content) == RECORD_KEYS, sorted(content)
  assert content["benchmark"] == script and content["smoke"] is True
  assert content["command"].startswith(f"python benchmarks/{script}.py --smoke")
  assert content["machine"]["cpus"] >= 1 and content["versions"]["tensorflow"].startswith("2.")
  return done.stdout, content["results"]
