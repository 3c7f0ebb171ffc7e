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
  lines = render.multiple_choice("multiple_choice_2026-12-06.json")
  medians = render.read("multiple_choice_2026-12-06.json")["medians"]
  ratio = medians["ours_bf16"]["examples_per_second"] / medians["hf"]["examples_per_second"]
  bf16 = medians["ours_bf16"]
  assert lines[3] == (f"| ours, `--mixed_precision=bfloat16` | {bf16['accuracy']:.3f} | "
                      f"{bf16['examples_per_second']:.2f} | {ratio:.2f}x |")
  serving = render.read("serving_peers_2026-12-06.json")["summary"]["1"]
  figures = render.serving_figures("serving_peers_2026-12-06.json")
  onnx = [line for line in figures if line.startswith("| ONNX Runtime |")][0]
  assert onnx.split(" | ")[1] == (f"{serving['ONNX Runtime']['short']['p50_ms']:.2f} / "
                                  f"{serving['ONNX Runtime']['short']['p99_ms']:.2f}")
