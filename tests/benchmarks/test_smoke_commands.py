"""Smoke runs of the benchmarks that run the documented commands on all-MiniLM-L6-v2's real
weights (grouping_accuracy.py, multiple_choice.py): a few examples, one epoch, one seed
(tests/benchmarks/smoke.py). The scores of two training steps are noise: the tests check that
each run finished with a score in range and the results file holds it."""

import pytest

from tests.benchmarks import smoke

pytestmark = pytest.mark.slow(weight=3)  # 30-70 s each: every run is a command in its own process


def test_grouping_accuracy(tmp_path):
  out, results = smoke.run("grouping_accuracy", tmp_path)
  assert "smoke: the author task only" in out
  assert "author group_by_length   over seeds 1: eval_accuracy" in out
  runs = results["runs"]["author"]
  assert [(run["setting"], run["seed"]) for run in runs] == [("group_by_length", 1)]
  assert all(0 <= run["eval_accuracy"] <= 1 and run["examples_per_second"] > 0 for run in runs)
  assert results["settings"]["author_train"] == 64


def test_multiple_choice(tmp_path):
  out, content = smoke.run("multiple_choice", tmp_path, own_layout=True)
  assert "smoke: hf left out (it needs torch and transformers" in out
  assert "| seed | system | dev accuracy | training examples/s | wall s |" in out
  (run,) = content["runs"]
  assert run["system"] == "ours" and run["accuracy"] in {k / 32 for k in range(33)}
  # What --packing=auto chose, read from the run's log (the page's row names it).
  assert run["packing"] in {"exact", "none"}
  assert set(content["medians"]) == {"ours"}
  # The committed files' layout, with the shared facts beside it.
  assert {"settings", "cpu", "runs", "medians", "command", "date", "machine",
          "versions"} <= set(content)
  assert content["settings"]["epochs"] == 1.0


def test_serving_precision(tmp_path):
  """Four training steps, then the same run exported in float32 and in bfloat16 and asked the
  dev pairs: the answers of two exports of one model, whatever its accuracy."""
  out, content = smoke.run("serving_precision", tmp_path, own_layout=True)
  assert "--num_train_epochs=0.35" in out
  assert content["model"].endswith("[smoke: 4 steps]")
  assert content["task"] == "tests/data/classifier/pairs (dev, 120 pairs)"
  assert 0 <= content["answers_changed"] <= 120
  assert 0 <= content["mean_probability_change"] <= content["max_probability_change"] < 0.5
  assert content["cpu"]["cpus"] >= 1 and content["versions"]["tensorflow"]
