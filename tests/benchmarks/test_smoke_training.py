"""Smoke runs of the training-step benchmarks (model_step.py, pretraining.py, profile_step.py):
the tiny preset, a few steps, one round (tests/benchmarks/smoke.py). The figures are timings:
the tests check the rows and the results file, not the speeds."""

import pytest

from tests.benchmarks import smoke

pytestmark = pytest.mark.slow(weight=2)  # 10-35 s each


def test_model_step(tmp_path):
  out, results = smoke.run("model_step", tmp_path)
  assert "smoke: hf_torch left out" in out
  assert "| preset | mode | system | examples/s | tokens/s | GFLOP/s | of peak |" in out
  assert [(row["mode"], row["system"]) for row in results["rows"]] == [
      (mode, system) for mode in ("forward", "train")
      for system in ("ours", "ours_xla", "model_garden")]
  assert all(row["preset"] == "tiny" and row["examples_per_second"] > 0
             for row in results["rows"])
  assert results["rows"][2]["vs_model_garden"] == 1.0
  assert results["batch_size"] == 4 and results["peak_gflops"] > 0


def test_pretraining(tmp_path):
  out, results = smoke.run("pretraining", tmp_path)
  assert "| preset | run | steps/s | examples/s (min-max) |" in out
  assert [row["run"] for row in results["rows"]] == [
      "ours, records", "ours, synthetic", "Model Garden, records"]
  assert results["rows"][-1]["ours_over_model_garden"] == 1.0
  assert results["max_seq_length"] == 64 and results["steps"] == 2


def test_profile_step(tmp_path):
  out, results = smoke.run("profile_step", tmp_path)
  assert "| op (self time) | ms a step | share |" in out
  (profile,) = results["profiles"]
  assert profile["system"] == "ours_packed" and profile["busy_ms_a_step"] > 0
  assert abs(sum(op["share"] for op in profile["ops"]) - 1) < 0.2  # the top rows of all ops
  assert profile["xla_functions"], "the fused kernels ran no XLA function"


def test_profile_step_multiple_choice(tmp_path):
  """run_multiple_choice's own step, profiled in the script's process (its flags apart from the
  script's): MiniLM on the first 32 committed examples, one warm-up, one untraced, one traced."""
  out, results = smoke.run("profile_step", tmp_path, "--profile_task=multiple_choice")
  (profile,) = results["profiles"]
  assert profile["system"].startswith("ours, multiple choice (all-MiniLM-L6-v2, batch 8 x 4")
  assert results["task"] == "multiple_choice" and results["steps"] == 1
  assert profile["examples_per_second_untraced"] > 0 and profile["busy_ms_a_step"] > 0
  assert {"_MklMatMul", "ResourceApplyAdam"} <= {op["op"] for op in profile["ops"]}
  assert "| XLA functions (fused.py), all |" in out
