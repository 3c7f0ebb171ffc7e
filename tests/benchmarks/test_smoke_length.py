"""Smoke runs of the length-aware benchmarks (length_aware.py, packed_pretraining.py): the tiny
config, a few short-sentence examples, one round of one step (tests/benchmarks/smoke.py). The
figures are timings: the tests check the rows and the results file, not the speeds."""

import pytest

from tests.benchmarks import smoke

pytestmark = pytest.mark.slow(weight=3)  # 30-40 s each on a busy 2-core machine


def test_length_aware(tmp_path):
  out, results = smoke.run("length_aware", tmp_path)
  assert "smoke: hf_dynamic left out" in out
  assert "smoke: the serving rows left out" in out
  assert "| task (real length) | system | examples/s | ratio | goal | real-token GFLOP/s |" in out
  assert [row["system"] for row in results["training"]] == [
      "ours, packed rows (exact) + length buckets", "ours, packed rows (static: one shape)",
      "ours, length buckets", "ours, fixed length", "Model Garden, fixed length"]
  assert all(row["task"].startswith("short (mean") for row in results["training"])
  assert results["serving"] == []
  # Written after the task and again at the end, so a run cut short keeps its finished tasks.
  assert out.count("results: ") == 2 and results["complete"] is True
  assert results["settings"]["squad_systems"] == ["ours_packed", "ours_static", "ours",
                                                  "hf_dynamic"]


def test_packed_pretraining(tmp_path):
  out, results = smoke.run("packed_pretraining", tmp_path)
  assert "| system | instances/s | real tokens/s | real tokens / positions |" in out
  assert [row["system"] for row in results["rows"]] == ["unpacked", "exact", "static"]
  shares = {row["system"]: row["real_token_share"] for row in results["rows"]}
  assert shares["unpacked"] < shares["exact"] and shares["unpacked"] < shares["static"]
  assert results["config"]["num_hidden_layers"] == 2
