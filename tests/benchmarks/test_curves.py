"""benchmarks/curves.py: the learning-curve numbers time_to_quality.py reports (medians over
seeds, crossings, the goal rows), on hand-made curves whose answers are worked out below."""

import json
import math
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCHMARKS)
import curves  # pylint: disable=g-import-not-at-top,wrong-import-position


def _run(accuracy, loss):
  """A run evaluated at minutes 1, 2, 3, ... with 50 steps a minute."""
  return {"curve": [{"seconds": 60.0 * (i + 1), "steps": 50 * (i + 1), "accuracy": a, "loss": l}
                    for i, (a, l) in enumerate(zip(accuracy, loss))]}


# The peer: two seeds leave the first plateau, the third never does.
PEER = [_run([0.06, 0.08, 0.10, 0.12], [7.0, 6.8, 6.6, 6.4]),
        _run([0.06, 0.09, 0.11, 0.13], [7.0, 6.7, 6.5, 6.3]),
        _run([0.06, 0.06, 0.06, 0.06], [7.2, 7.2, 7.2, 7.2])]
OURS = [_run([0.07, 0.10, 0.12, 0.13], [6.9, 6.6, 6.4, 6.3]),
        _run([0.07, 0.12, 0.13, 0.14], [6.9, 6.4, 6.3, 6.2])]


def test_the_median_curve_is_taken_point_by_point_as_far_as_every_run_goes():
  short = _run([0.5, 0.7], [1.0, 0.5])
  median = curves.median_curve(PEER + [short])
  assert len(median) == 2
  assert median[1] == pytest.approx({"seconds": 120.0, "steps": 100, "accuracy": 0.085,
                                     "loss": 6.75})
  assert [p["accuracy"] for p in curves.median_curve(OURS)] == pytest.approx(
      [0.07, 0.11, 0.125, 0.135])


def test_a_crossing_is_interpolated_between_the_evaluations_around_it():
  curve = OURS[0]["curve"]
  assert curves.crossing_minutes(curve, 0.11, "accuracy", False) == pytest.approx(2.5)
  assert curves.crossing_minutes(curve, 6.5, "loss", True) == pytest.approx(2.5)
  assert curves.crossing_minutes(curve, 0.05, "accuracy", False) == 1.0  # had it at the first
  assert curves.crossing_minutes(curve, 0.2, "accuracy", False) is None
  assert curves.minutes_to(curve, 0.11) == 3.0  # the first evaluation at or past it
  assert curves.minutes_to(curve, 0.2) is None


def test_interpolation_at_steps_within_the_curve_and_none_outside_it():
  curve = OURS[1]["curve"]
  assert curves.interpolate(curve, "steps", 75) == pytest.approx(0.095)
  assert curves.interpolate(curve, "steps", 50) == 0.07
  assert curves.interpolate(curve, "steps", 150, "loss") == 6.3
  assert curves.interpolate(curve, "steps", 49) is None
  assert curves.interpolate(curve, "steps", 201) is None


def test_goal_times_are_read_off_the_median_curves_so_a_stalled_seed_counts():
  rows = {r["target"]: r for r in curves.goal_rows(PEER, OURS, 0.7)}
  assert list(rows) == ["final masked-LM accuracy", "halfway to it (masked-LM accuracy)",
                        "final eval masked-LM loss", "halfway to it (eval masked-LM loss)"]
  final = rows["final masked-LM accuracy"]
  # The peer's median curve reaches its final 0.12 at its last point. The median of the seeds'
  # own times, dropping the stalled seed, would say (4.0 + 3.5) / 2 = 3.75.
  assert final["value"] == pytest.approx(0.12)
  assert final["peer_minutes"] == pytest.approx(4.0)
  assert final["ours_minutes"] == pytest.approx(2 + 2 / 3)  # 0.11 -> 0.125 between min 2 and 3
  assert final["ratio"] == pytest.approx(2 / 3) and final["met"]
  assert (final["peer_seeds"], final["ours_seeds"]) == ("2/3", "2/2")
  assert not (final["first_plateau"] or final["plateau"] or final["ours_at_first"])
  halfway = rows["halfway to it (masked-LM accuracy)"]
  assert halfway["value"] == pytest.approx(0.09)
  assert (halfway["peer_minutes"], halfway["ours_minutes"]) == pytest.approx((2.5, 1.5))
  assert halfway["ratio"] == pytest.approx(0.6)
  loss = rows["final eval masked-LM loss"]
  assert (loss["value"], loss["peer_minutes"], loss["ours_minutes"]) == pytest.approx(
      (6.4, 4.0, 2 + 2 / 3))
  loss_halfway = rows["halfway to it (eval masked-LM loss)"]
  assert (loss_halfway["value"], loss_halfway["ratio"]) == pytest.approx((6.7, 0.6))
  assert not curves.goal_rows(PEER, OURS, 0.6)[0]["met"]  # 2/3 against a tighter bound


def test_goal_rows_flag_plateaus_and_a_target_ours_never_reaches():
  stuck = [_run([0.0624] * 4, [7.3, 7.2, 7.1, 7.0]) for _ in range(2)]
  accuracy_rows = [r for r in curves.goal_rows(stuck, OURS, 0.7) if r["key"] == "accuracy"]
  assert len(accuracy_rows) == 1  # no halfway: the first evaluation had the final value
  assert accuracy_rows[0]["first_plateau"] and accuracy_rows[0]["ours_at_first"]

  flat = [_run([0.06, 0.12, 0.1205, 0.121], [7.0, 6.0, 5.99, 5.98])]
  final = curves.goal_rows(flat, OURS, 0.7)[0]
  assert final["plateau"] and not final["first_plateau"]  # within 1% of it by the middle point

  slow = [_run([0.06, 0.07, 0.08, 0.09], [7.0, 6.99, 6.98, 6.97])]
  final = curves.goal_rows(PEER, slow, 0.7)[0]
  assert final["ours_minutes"] is None and final["ratio"] is None and not final["met"]
  assert final["ours_seeds"] == "0/1"


def test_median_range_text():
  assert curves.median_range([]) == "-"
  assert curves.median_range([0.5]) == "0.5000"
  assert curves.median_range([0.3, 0.1, 0.2]) == "0.2000 (0.1000-0.3000)"


RESULTS = os.path.join(BENCHMARKS, "results")


def _settings(name):
  with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
    return json.load(f)["settings"]


def test_the_recipe_is_read_from_the_settings_the_benchmark_wrote():
  # A results file time_to_quality.py wrote (committed): its first clause states the recipe.
  assert curves.recipe(_settings("time_to_quality_bf16_warmup300_2026-12-04.json")) == {
      "layers": "4", "hidden size": "256", "config file": "bert_config_mini.json",
      "seq": "128", "predictions": "20", "batch": "32", "LAMB batch": "128",
      "peak lr": "0.001", "LAMB peak lr": "0.002", "warmup": "300", "decay end step": "2000"}


def test_results_of_another_warmup_differ_in_it_alone_and_a_value_one_file_lacks_is_skipped():
  warmup_50 = _settings("time_to_quality_bf16_2026-12-04.json")  # no LAMB values in its text
  warmup_300 = _settings("time_to_quality_bf16_warmup300_2026-12-04.json")
  assert "LAMB batch" not in curves.recipe(warmup_50)
  assert curves.recipe_differences(warmup_300, warmup_50) == ["warmup 300 against 50"]
  assert curves.recipe_differences(warmup_50, warmup_50) == []
  # Seeds, load and wall time (after the first "; ") are not the recipe.
  other_run = warmup_300.replace("seeds 4,5,6", "seeds 7").replace("load average", "load avg")
  assert other_run != warmup_300
  assert curves.recipe_differences(other_run, warmup_300) == []
  lamb = warmup_300.replace("(LAMB 128)", "(LAMB 256)").replace("lr 0.001 (", "lr 0.0005 (")
  assert curves.recipe_differences(lamb, warmup_300) == [
      "LAMB batch 256 against 128", "peak lr 0.0005 against 0.001"]


def test_the_recipe_text_the_benchmark_writes_is_the_text_recipe_reads():
  settings = _settings("time_to_quality_bf16_warmup300_2026-12-04.json")
  text = curves.recipe_text(4, 256, "bert_config_mini.json", 128, 20, 32, 128, 1e-3, 2e-3, 300,
                            2000)
  assert settings.startswith(text + "; ")
  assert curves.recipe(text + "; float32") == curves.recipe(settings)


def test_evaluation_points_even_or_listed_with_the_budget_last():
  assert curves.evaluation_points(2.5, 5) == [30.0, 60.0, 90.0, 120.0, 150.0]
  assert curves.evaluation_points(2.5, 5, ["0.1", "0.2", "1"]) == pytest.approx(
      [6.0, 12.0, 60.0, 150.0])
  assert curves.evaluation_points(1, 5, ["0.5", "1"]) == [30.0, 60.0]


@pytest.mark.parametrize("minutes, message", [
    (["0.2", "0.1"], "ascending: 0.1 follows 0.2"), (["0", "1"], "ascending: 0 follows 0"),
    (["0.5", "0.5"], "ascending"), (["3"], "past --budget_minutes=2.5"),
    (["0.5", "1min"], "numbers of minutes, got 0.5,1min")])
def test_evaluation_points_refuse_a_list_out_of_order_or_past_the_budget(minutes, message):
  with pytest.raises(ValueError, match=message):
    curves.evaluation_points(2.5, 5, minutes)


def test_a_target_every_system_had_at_its_first_evaluation_is_flagged():
  # The slowest system's best is the 0.06 plateau that every median curve starts on.
  runs = {"peer": PEER, "ours": OURS}
  assert curves.reached_at_first_evaluation(runs, 0.06)
  assert not curves.reached_at_first_evaluation(runs, 0.065)  # the peer starts at 0.06
  assert not curves.reached_at_first_evaluation({"peer": PEER}, 0.07)
  # Losses: lower is better; the peer's median starts at 7.0, ours at 6.9.
  assert curves.reached_at_first_evaluation(runs, 7.0, "loss", lower_is_better=True)
  assert not curves.reached_at_first_evaluation(runs, 6.95, "loss", lower_is_better=True)


def test_ratio_spread_collapses_to_the_ratio_when_every_seed_ran_alike():
  peer = [PEER[0]] * 3
  ours = [OURS[0]] * 2
  rows = {r["target"]: r for r in curves.goal_rows(peer, ours, 0.7)}
  spread = curves.ratio_spread(peer, ours, 0.7, resamples=50)
  assert set(spread) == set(rows)
  for name, row in rows.items():
    low, high, met = spread[name]
    assert low == high == pytest.approx(row["ratio"])
    assert met == (1.0 if row["met"] else 0.0)


def test_ratio_spread_matches_the_exact_distribution_over_seed_resamples():
  # Two seeds each: a resample of two draws (with replacement) is {a, a}, {a, b} or {b, b} with
  # probabilities 1/4, 1/2, 1/4, so the share of resamples meeting each goal is a weighted sum
  # over the nine pairs of resamples, worked out here with goal_rows itself.
  peer, ours = PEER[:2], OURS
  draws = [((0, 0), 0.25), ((0, 1), 0.5), ((1, 1), 0.25)]
  exact = {}
  for peer_draw, peer_p in draws:
    for ours_draw, ours_p in draws:
      for row in curves.goal_rows([peer[i] for i in peer_draw], [ours[i] for i in ours_draw],
                                  0.7):
        exact[row["target"]] = exact.get(row["target"], 0.0) + peer_p * ours_p * row["met"]
  assert any(0.0 < share < 1.0 for share in exact.values())  # seeds decide some goals
  spread = curves.ratio_spread(peer, ours, 0.7, resamples=4000, seed=3)
  assert {name: met for name, (_, _, met) in spread.items()} == pytest.approx(exact, abs=0.03)
  assert spread == curves.ratio_spread(peer, ours, 0.7, resamples=4000, seed=3)  # seeded


def test_ratio_spread_counts_a_target_ours_never_reaches_as_never_met():
  slow = [_run([0.06, 0.06, 0.07, 0.08], [7.3, 7.3, 7.2, 7.1])] * 2
  spread = curves.ratio_spread(PEER[:2], slow, 0.7, resamples=20)
  low, high, met = spread["final masked-LM accuracy"]
  assert (low, high, met) == (math.inf, math.inf, 0.0)
