"""The figures the user pages quote from a benchmark come from its committed results file: the
latest time-to-quality run's goal ratios and resample shares, recomputed here from
benchmarks/results/ with the functions the script prints them with (benchmarks/curves.py)."""

import json
import os
import re
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
import curves  # pylint: disable=g-import-not-at-top,wrong-import-position

LATEST = "time_to_quality_f32_6min_2026-12-05.json"


def _read(*parts):
  with open(os.path.join(REPO_ROOT, *parts), encoding="utf-8") as f:
    return f.read()


def _latest_figures():
  saved = json.loads(_read("benchmarks", "results", LATEST))
  by_system = {}
  for run in saved["runs"]:
    by_system.setdefault(run["system"], []).append(run)
  peer, ours = by_system["model_garden"], by_system["ours_adam_bc"]
  rows = curves.goal_rows(peer, ours, 0.7)
  spread = curves.ratio_spread(peer, ours, 0.7)
  ratios = [f"{row['ratio']:.2f}" for row in rows]
  shares = [f"{spread[row['target']][2]:.0%}" for row in rows]
  return ratios, shares


def test_the_latest_time_to_quality_run_is_quoted_from_its_results_file():
  ratios, shares = _latest_figures()
  assert ratios == ["0.61", "0.64", "0.69", "0.66"]  # the order the pages give them in
  benchmarks_page = " ".join(_read("benchmarks", "README.md").split())
  assert LATEST in benchmarks_page
  row = f"**4 of 4**: {', '.join(ratios)} | {', '.join(shares)} |"
  assert row in benchmarks_page
  readme = " ".join(_read("README.md").split())
  low, high = min(ratios), max(ratios)
  assert f"met all four in {low}-{high}x, its two final values in {shares[0]} and {shares[2]}" \
      in readme
  assert re.search(r"bootstrap resamples of its seeds", readme)
