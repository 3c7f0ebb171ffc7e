"""Smoke runs of the benchmarks that train whole runs in worker processes or in process
(time_to_quality.py, distillation.py), each in a few settings of seconds
(tests/benchmarks/smoke.py). Their results files keep the layout of the committed ones, which
--from_results and the quoted-figure tests read. The scores of a few steps are noise: the tests
check that every run and evaluation is there."""

import pytest

from tests.benchmarks import smoke

pytestmark = pytest.mark.slow(weight=5)  # about a minute each


def test_time_to_quality(tmp_path):
  out, content = smoke.run("time_to_quality", tmp_path, own_layout=True)
  assert "smoke: hf left out (it needs torch and transformers" in out
  assert "plot: none, matplotlib is not installed" in out  # hidden here, as in CI
  assert sorted(run["system"] for run in content["runs"]) == ["model_garden", "ours"]
  assert len(content["points"]) == 2
  for run in content["runs"]:
    assert len(run["curve"]) == 2 and run["curve"][-1]["steps"] > run["curve"][0]["steps"] > 0
  assert {"settings", "points", "target", "mixed_precision", "runs", "command", "date",
          "machine", "versions"} <= set(content)


@smoke.LONG
def test_distillation(tmp_path):
  out, content = smoke.run("distillation", tmp_path, own_layout=True)
  assert "| setting | seeds | dev accuracy | training examples/s |" in out
  assert [row["setting"] for row in content["rows"]] == [
      "teacher (6 layers, 360 labelled)", "student (3 layers, 16 labelled) alone",
      "student (3 layers, 16 labelled) distilled"]
  assert content["rows"][0]["eval_accuracy"] > 0.8  # the teacher's two real epochs
  assert content["args"]["smoke"] is True and content["versions"]["tensorflow"]
