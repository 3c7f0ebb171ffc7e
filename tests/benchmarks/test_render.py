"""benchmarks/render.py: the committed pages' benchmark tables are the ones rendered from the
committed results files, a stale or unknown table is caught, and rewriting restores a table."""

import os
import sys

import pytest

from tests.helpers import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
import render  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_the_committed_pages_hold_the_rendered_tables():
  found = []
  for page in render.PAGES:
    with open(page, encoding="utf-8") as f:
      text = f.read()
    rendered, names = render.render_page(text)
    found += names
    assert rendered == text, f"{page}: run python benchmarks/render.py"
  assert sorted(found) == sorted(render.TABLES)  # every table marked once
  assert render.main(["--check"]) == 0


def test_a_changed_figure_is_caught_and_rewritten():
  page = ("intro\n<!-- table: t -->\n| a |\n| --- |\n| 1 |\n<!-- end table -->\nafter\n"
          "<!-- table: u -->\n| b |\n<!-- end table -->\n")
  tables = {"t": lambda: ["| a |", "| --- |", "| 2 |"], "u": lambda: ["| b |"]}
  rendered, names = render.render_page(page, tables)
  assert names == ["t", "u"]
  assert rendered == page.replace("| 1 |", "| 2 |")
  assert render.render_page(rendered, tables) == (rendered, ["t", "u"])


def test_a_marker_without_a_table_is_refused():
  with pytest.raises(ValueError, match=r"<!-- table: nowhere -->: no such table"):
    render.render_page("<!-- table: nowhere -->\n| x |\n<!-- end table -->\n", {})


def test_the_rendered_tables_read_their_results_files():
  """Spot checks against the files' own numbers, formatted as the page prints them."""
  lines = render.multiple_choice("multiple_choice_2026-12-06_speed.json", packing="none")
  medians = render.read("multiple_choice_2026-12-06_speed.json")["medians"]
  ratio = medians["ours_bf16"]["examples_per_second"] / medians["hf"]["examples_per_second"]
  bf16 = medians["ours_bf16"]
  assert lines[3] == (f"| ours, `--mixed_precision=bfloat16` | {bf16['accuracy']:.3f} | "
                      f"{bf16['examples_per_second']:.2f} | {ratio:.2f}x |")
  # A run with --adam_bias_correction says so in ours' rows; Hugging Face's row is unchanged.
  adam_bc = render.multiple_choice("multiple_choice_2026-12-06_adam_bc.json", packing="none")
  assert adam_bc[2].startswith("| ours, `--adam_bias_correction` (float32;")
  assert adam_bc[3].startswith("| Hugging Face `BertForMultipleChoice` |")
  assert not any("--adam_bias_correction" in line for line in lines)
  serving = render.read("serving_peers_2026-12-06.json")["summary"]["1"]
  figures = render.serving_figures("serving_peers_2026-12-06.json")
  onnx = [line for line in figures if line.startswith("| ONNX Runtime |")][0]
  assert onnx.split(" | ")[1].replace("**", "") == (
      f"{serving['ONNX Runtime']['short']['p50_ms']:.2f} / "
      f"{serving['ONNX Runtime']['short']['p99_ms']:.2f}")


def test_the_time_to_quality_runs_table_reads_each_run_file():
  """One row per kept run, newest first: the speed ratio is the median training-clock rates of
  the file's runs, and a run whose median curve of ours never reached a target shows '-'."""
  lines = render.time_to_quality_runs()
  assert len(lines) == 2 + len(render.TTQ_RUNS)
  runs = render.read("time_to_quality_f32_warmup300_2026-12-04.json")["runs"]

  def rate(system):
    values = sorted((r["curve"][-1]["examples"] - r["batch_size"]) / r["curve"][-1]["seconds"]
                    for r in runs if r["system"] == system)
    return values[len(values) // 2]  # three seeds each: the middle one

  both = lines[2 + list(render.TTQ_RUNS).index("time_to_quality_f32_warmup300_2026-12-04.json")]
  cells = both.split(" | ")
  ours = rate("ours_adam_bc")
  assert cells[1:4] == ["float32, 300", "7-9, 10",
                        f"{ours / rate('model_garden'):.2f}x ({ours / rate('hf'):.2f}x)"]
  assert cells[6].startswith("**4 of 4**: ")  # against Hugging Face, every goal
  stopped = lines[-1].split(" | ")
  assert stopped[1] == "bfloat16, 50" and stopped[4].startswith("1 of 4: -, -, -, ")


def test_the_serving_goals_table_reads_its_results_file():
  """The batch-1 cell is ONNX Runtime's p50 over ours; met only at the goal's bound or above."""
  summary = render.read("serving_peers_2026-12-06.json")["summary"]["1"]
  lines = render.serving_goals("serving_peers_2026-12-06.json")
  speed = summary["ONNX Runtime"]["short"]["p50_ms"] / summary["ours"]["short"]["p50_ms"]
  float32 = lines[2].split(" | ")[1]
  assert float32 == (f"**met ({speed:.2f}x)**" if speed >= 1.25 else f"missed ({speed:.2f}x)")
  assert render._goal_cell(1.2, 1.2) == "**met (1.20x)**"  # pylint: disable=protected-access
  assert render._goal_cell(1.19, 1.2) == "missed (1.19x)"  # pylint: disable=protected-access
  short = summary["ours"]["short"]["p99_ms"] / summary["ours"]["short"]["p50_ms"]
  assert f"({short:.2f}" in lines[5].split(" | ")[1]


def test_the_multiple_choice_table_says_what_packing_auto_chose(tmp_path, monkeypatch):
  """Ours' default row names the mode its runs recorded (or, for a file from before they did,
  the one given); runs that chose differently are refused, not summed into one row."""
  import json  # pylint: disable=g-import-not-at-top
  medians = {"ours": dict(accuracy=0.5, examples_per_second=9.0),
             "hf": dict(accuracy=0.4, examples_per_second=5.0)}
  file = lambda *modes: json.dumps(dict(settings={}, medians=medians, runs=[
      dict(seed=k, system="ours", **({"packing": mode} if mode else {}))
      for k, mode in enumerate(modes)] + [dict(seed=0, system="hf")]))
  (tmp_path / "packed.json").write_text(file("exact", "exact"))
  (tmp_path / "old.json").write_text(file(None))
  (tmp_path / "mixed.json").write_text(file("exact", "none"))
  monkeypatch.setattr(render, "RESULTS", str(tmp_path))
  assert render.multiple_choice("packed.json")[2] == (
      "| ours, defaults (float32; `--packing=auto` packs these batches' pairs into rows) | "
      "0.500 | 9.00 | 1.80x |")
  assert "leaves these batches unpacked" in render.multiple_choice("old.json", packing="none")[2]
  with pytest.raises(ValueError, match=r"mixed.json: ours' runs chose --packing"):
    render.multiple_choice("mixed.json")
  with pytest.raises(ValueError, match=r"old.json"):
    render.multiple_choice("old.json")


def test_the_multiple_choice_seeds_table_pairs_each_seed(tmp_path, monkeypatch):
  """One row per seed run by both systems (a seed one system lacks is left out), the points
  ours - Hugging Face, the medians, and the differences' mean, standard error and range, over
  the runs of several files."""
  import json  # pylint: disable=g-import-not-at-top
  runs = lambda *rows: {"runs": [dict(seed=seed, system=system, accuracy=accuracy)
                                 for seed, system, accuracy in rows]}
  (tmp_path / "a.json").write_text(json.dumps(runs(
      (1, "ours", 0.5), (1, "hf", 0.48), (2, "ours", 0.41), (2, "hf", 0.42), (4, "ours", 0.9))))
  (tmp_path / "b.json").write_text(json.dumps(runs((3, "hf", 0.45), (3, "ours", 0.47))))
  monkeypatch.setattr(render, "RESULTS", str(tmp_path))
  assert render.multiple_choice_seeds("a.json", "b.json") == [
      "| seed | ours | Hugging Face | ours - Hugging Face (points) |",
      "| --- | --: | --: | --: |",
      "| 1 | 0.500 | 0.480 | +2.0 |",
      "| 2 | 0.410 | 0.420 | -1.0 |",
      "| 3 | 0.470 | 0.450 | +2.0 |",
      "| median | 0.470 | 0.450 | +2.0 |",
      # differences 2, -1, 2: mean 1, standard deviation sqrt(3), over sqrt(3) seeds: 1.0.
      "| mean, its standard error; range | | | +1.0 ± 1.0; -1.0 to +2.0 |"]


def test_the_training_speed_and_grouping_tables_read_their_files(tmp_path, monkeypatch):
  """model_step.py's, packed_pretraining.py's and grouping_accuracy.py's tables from small files:
  a missing Model Garden ratio prints '-', spreads are median (min-max) over rounds, and the
  grouping table gives each seed's score with the mean and standard deviation per setting."""
  import json  # pylint: disable=g-import-not-at-top
  write = lambda name, results: (tmp_path / name).write_text(json.dumps({"results": results}))
  write("step.json", {"rows": [
      dict(preset="mini", mode="train", system="ours", examples_per_second=17.614,
           tokens_per_second=2254.6, gflops=40.25, of_peak=0.5432, vs_model_garden=1.447),
      dict(preset="mini", mode="train", system="hf_torch", examples_per_second=4.5,
           tokens_per_second=576.0, gflops=10.0, of_peak=0.1, vs_model_garden=None)]})
  write("packed.json", {"rows": [
      dict(system="unpacked", instances_per_second=[10.0, 12.0, 11.0],
           real_tokens_per_second=[500.0, 600.0, 550.0], real_token_share=0.5,
           over_unpacked=None, goal=""),
      dict(system="static", instances_per_second=[18.0, 20.0, 19.0, 25.0],
           real_tokens_per_second=[900.0, 1000.0, 950.0, 1250.0], real_token_share=0.914,
           over_unpacked=[1.8, 1.667, 1.727], goal=">= 1.6x: met")]})
  write("grouping.json", {
      "settings": {"seeds": [1, 2, 3], "settings": ["group_by_length", "nogroup_by_length"]},
      "runs": {"author": [
          dict(setting="group_by_length", seed=2, eval_accuracy=0.92, examples_per_second=1.0),
          dict(setting="group_by_length", seed=1, eval_accuracy=0.91, examples_per_second=1.0),
          dict(setting="group_by_length", seed=3, eval_accuracy=0.93, examples_per_second=1.0),
          dict(setting="nogroup_by_length", seed=1, eval_accuracy=0.9, examples_per_second=1.0)],
               "squad": [dict(setting="group_by_length", seed=1, f1=40.04, exact_match=20.0,
                              examples_per_second=1.0)]}})
  monkeypatch.setattr(render, "RESULTS", str(tmp_path))
  assert render.model_step("step.json")[2:] == [
      "| mini | train | ours | 17.61 | 2,255 | 40.2 | 54% | 1.45x |",
      "| mini | train | hf_torch | 4.50 | 576 | 10.0 | 10% | - |"]
  packed = render.packed_pretraining("packed.json")
  assert packed[2] == "| ours, unpacked | 11.00 (10.00-12.00) | 550 (500-600) | 50% | | |"
  # An even count of rounds takes the mean of the middle two.
  assert packed[3] == ("| ours, static | 19.50 (18.00-25.00) | 975 (900-1,250) | 91% | "
                       "1.73 (1.67-1.80) | >= 1.6x: met |")
  assert render.grouping_accuracy("grouping.json")[2:] == [
      "| author (accuracy) | `--group_by_length` | 0.9100 | 0.9200 | 0.9300 | 0.9200 (0.0100) |",
      "| author (accuracy) | `--nogroup_by_length --packing=none` | 0.9000 | - | - | "
      "0.9000 (0.0000) |",
      "| squad (F1 / EM) | `--group_by_length` | 40.0 / 20.0 | - | - | 40.0 (0.0) / 20.0 (0.0) |"]


def test_the_distillation_sweep_table_reads_the_sweep_of_its_file(tmp_path, monkeypatch):
  """distillation.py --sweep's results: one row per (alpha, T) pair, the defaults first and
  marked, each seed's gain over the twin alone in points and their median."""
  import json  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
  import distillation  # pylint: disable=g-import-not-at-top
  student = "student (3 layers, 600 labelled) "
  rows = [dict(setting="teacher (6 layers, 2400 labelled)", seed=0, eval_accuracy=0.6)]
  for seed, (alone, default, soft) in {1: (0.30, 0.35, 0.31), 2: (0.40, 0.39, 0.44)}.items():
    rows += [dict(setting=student + "alone", seed=seed, eval_accuracy=alone),
             dict(setting=student + "distilled", seed=seed, eval_accuracy=default),
             dict(setting=student + "distilled (alpha 0, T 2)", seed=seed, eval_accuracy=soft)]
  sweep = distillation.sweep_gains(rows, [600], False, [(0.0, 2.0)])
  sweep["600"].reverse()  # the table keeps the file's order and marks the defaults by their flag
  (tmp_path / "s.json").write_text(json.dumps({"sweep": sweep}))
  monkeypatch.setattr(render, "RESULTS", str(tmp_path))
  assert render.distillation_sweep("s.json") == [
      "| labelled | `--distill_alpha` : `--distill_temperature` | dev accuracy (median) | "
      "gain, seed 1 | gain, seed 2 | gain (median) |",
      "| --: | --- | --: | --: | --: | --: |",
      "| 600 | 0:2 | 0.375 | +1.0 | +4.0 | +2.5 |",
      "| 600 | 0.5:2 (the defaults) | 0.370 | +5.0 | -1.0 | +2.0 |"]
