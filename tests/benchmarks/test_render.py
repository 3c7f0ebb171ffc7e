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
  lines = render.multiple_choice("multiple_choice_2026-12-06_speed.json")
  medians = render.read("multiple_choice_2026-12-06_speed.json")["medians"]
  ratio = medians["ours_bf16"]["examples_per_second"] / medians["hf"]["examples_per_second"]
  bf16 = medians["ours_bf16"]
  assert lines[3] == (f"| ours, `--mixed_precision=bfloat16` | {bf16['accuracy']:.3f} | "
                      f"{bf16['examples_per_second']:.2f} | {ratio:.2f}x |")
  # A run with --adam_bias_correction says so in ours' rows; Hugging Face's row is unchanged.
  adam_bc = render.multiple_choice("multiple_choice_2026-12-06_adam_bc.json")
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
