"""Smoke runs of the benchmarks that train whole runs in worker processes or in process
(time_to_quality.py, distillation.py), each in a few settings of seconds
(tests/benchmarks/smoke.py). Their results files keep the layout of the committed ones, which
--from_results and the quoted-figure tests read. The scores of a few steps are noise: the tests
check that every run and evaluation is there."""

import os

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


def test_distillation(tmp_path):
  out, content = smoke.run("distillation", tmp_path, own_layout=True)
  assert "| setting | seeds | dev accuracy | training examples/s |" in out
  assert [row["setting"] for row in content["rows"]] == [
      "teacher (6 layers, 360 labelled)", "student (3 layers, 16 labelled) alone",
      "student (3 layers, 16 labelled) distilled"]
  assert content["rows"][0]["eval_accuracy"] > 0.8  # the teacher's two real epochs
  assert content["args"]["smoke"] is True and content["versions"]["tensorflow"]


@smoke.LONG
def test_distillation_goals(tmp_path):
  """--goals on the smoke settings: the cached twin, the tagger, both exports of the teacher
  and the student timed side by side, the goal lines; no plot without matplotlib."""
  out, content = smoke.run("distillation", tmp_path, "--goals", own_layout=True, timeout=1200)
  assert [row["setting"] for row in content["rows"]] == [
      "teacher (6 layers, 360 labelled)", "student (3 layers, 16 labelled) alone",
      "student (3 layers, 16 labelled) distilled",
      "student (3 layers, 16 labelled) distilled, cached teacher",
      "tagger teacher (6 layers, 32 sentences)", "tagger student (3 layers, 32 sentences) alone",
      "tagger student (3 layers, 32 sentences) distilled"]
  rows = {row["setting"]: row for row in content["rows"]}
  assert all(row["train_seconds"] > 0 for row in content["rows"])
  assert rows["student (3 layers, 16 labelled) distilled, cached teacher"]["cache_seconds"] > 0
  assert rows["student (3 layers, 16 labelled) distilled"]["cache_seconds"] == 0
  assert rows["student (3 layers, 16 labelled) distilled"]["teacher_cpu_seconds"] > 0
  assert rows["student (3 layers, 16 labelled) alone"]["teacher_cpu_seconds"] < 0.01
  serving = content["serving"]
  assert serving["rows"] == ["teacher: text model", "teacher: classifier export",
                             "student: text model", "student: classifier export"]
  for row in serving["rows"]:
    for name in ("short", "long"):
      assert serving["summary"][row][name]["p50_ms"] > 0
      assert serving["summary"][row][name]["batch32_per_s"] > 0
  # The exports classify the dev sentences as their runs measured.
  assert serving["export_dev_accuracy"] == {
      "teacher": rows["teacher (6 layers, 360 labelled)"]["eval_accuracy"],
      "student": rows["student (3 layers, 16 labelled) distilled"]["eval_accuracy"]}
  goals = content["goals"]
  assert set(goals) == {"accuracy", "cost", "serving"}
  assert set(goals["accuracy"]) == {"retention", "gain_16", "tagging_gain", "tagging_f1_gain",
                                    "tagging_retention"}
  tagger = rows["tagger teacher (6 layers, 32 sentences)"]["eval_accuracy"]
  retention = goals["accuracy"]["tagging_retention"]
  assert retention["teacher"] == tagger
  assert retention["per_seed"] == {
      seed: rows["tagger student (3 layers, 32 sentences) distilled"]["eval_accuracy"] / tagger
      for seed in retention["per_seed"]}
  text = goals["serving"]["text model"]
  short = serving["summary"]["teacher: text model"]["short"]["p50_ms"] / \
      serving["summary"]["student: text model"]["short"]["p50_ms"]
  assert abs(text["short_b1_p50"] - short) < 1e-9
  assert set(goals["cost"]) == {
      "cached_with_cache_pass", "cached_training_phase", "uncached_training_phase",
      "cached_steady_seconds_per_example", "uncached_steady_seconds_per_example",
      "cpu_cached_with_cache_pass", "cpu_cached_training_phase", "cpu_uncached_training_phase",
      "cpu_cached_with_teacher"}
  assert [line for line in content["goal_lines"] if line.startswith("tagger: distilled")] == [
      "tagger: distilled student's dev token accuracy / the teacher's "
      f"({tagger:.3f}): median {retention['median']:.3f}, per seed "
      f"{next(iter(retention['per_seed'].values())):.3f}"]  # the smoke run's one seed
  assert len(content["goal_lines"]) == 16 and content["goal_lines"][-2].startswith(
      "serving, text model: the teacher's p50 / the student's, batch 1, short")
  assert "matplotlib not installed: no plot" in out and content["plot"] is None


def test_time_to_quality_from_results_plots_into_output_dir(tmp_path):
  """--from_results reprints a committed run and draws its plot in --output_dir, never beside
  the results file (which would land in the repository)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from tests import helpers  # pylint: disable=g-import-not-at-top
  results = os.path.join(helpers.REPO_ROOT, "benchmarks", "results",
                         "time_to_quality_f32_6min_2026-12-05.json")
  before = sorted(os.listdir(os.path.dirname(results)))
  done = subprocess.run(
      [sys.executable, os.path.join(helpers.REPO_ROOT, "benchmarks", "time_to_quality.py"),
       f"--from_results={results}", f"--output_dir={tmp_path}"], capture_output=True,
      text=True, cwd=helpers.REPO_ROOT, env=helpers.subprocess_env(), timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert "| Model Garden BertPretrainerV2 |" in done.stdout
  assert sorted(os.listdir(os.path.dirname(results))) == before
  if "matplotlib is not installed" not in done.stdout:
    assert f"plot: {tmp_path / 'time_to_quality.png'}" in done.stdout
