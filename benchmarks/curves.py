"""Learning curves of benchmarks/time_to_quality.py: medians over seeds, crossings, the goals.

Pure Python (no TensorFlow, no flags), so the numbers the benchmark reports are unit-tested
(tests/benchmarks/test_curves.py). A run is a dict with a "curve": its evaluations in order,
each a dict with "seconds" (training clock), "steps", "accuracy" and "loss".

Times to a target are read off the median curve: at each evaluation point, the median over
seeds of the clock and of the metric, the curve the plot draws. A seed that never reaches the
target counts there as later than every seed that does; a median of per-seed times would have
to drop it (it has no time), which makes a system whose seeds sometimes stall on a plateau look
as fast as its lucky seeds.
"""

import math
import random
import re
import statistics

# Each metric: its key in a curve point, whether lower is better, its label in the tables.
METRICS = (("accuracy", False, "masked-LM accuracy"), ("loss", True, "eval masked-LM loss"))
CURVE_KEYS = ("seconds", "steps", "accuracy", "loss")

# The model and recipe as a results.json's "settings" states them in its first clause (before
# the first "; ", written by recipe_text): each name with the pattern that reads its value.
# Older files do not state the LAMB values; such a file is compared on the rest.
RECIPE_PATTERNS = (
    ("layers", r"(\d+) layers"), ("hidden size", r"hidden (\d+)"),
    ("config file", r"\(([^()]+\.json)\)"), ("seq", r"seq (\d+)"),
    ("predictions", r"(\d+) predictions"), ("batch", r"batch (\d+)"),
    ("LAMB batch", r"batch \d+ \(LAMB (\d+)\)"), ("peak lr", r"peak lr ([^ ,]+)"),
    ("LAMB peak lr", r"peak lr [^ ,]+ \(LAMB ([^)]+)\)"), ("warmup", r"warmup (\d+)"),
    ("decay end step", r"decay to 0 at step (\d+)"))


def recipe_text(layers, hidden, config_file, seq, predictions, batch, lamb_batch, lr, lamb_lr,
                warmup, decay_end):
  """The first clause of a results.json's settings: the model and recipe, as recipe() reads it."""
  return (f"{layers} layers, hidden {hidden} ({config_file}), seq {seq}, {predictions} "
          f"predictions, batch {batch} (LAMB {lamb_batch}), peak lr {lr:g} (LAMB {lamb_lr:g}), "
          f"warmup {warmup}, linear decay to 0 at step {decay_end}")


def recipe(settings):
  """{name: value text} of RECIPE_PATTERNS found in a results.json's settings text."""
  head = settings.split("; ")[0]
  found = {}
  for name, pattern in RECIPE_PATTERNS:
    match = re.search(pattern, head)
    if match:
      found[name] = match.group(1)
  return found


def recipe_differences(settings_a, settings_b):
  """'name a against b' for each recipe value both settings texts state and differ in."""
  a, b = recipe(settings_a), recipe(settings_b)
  return [f"{name} {a[name]} against {b[name]}" for name, _ in RECIPE_PATTERNS
          if name in a and name in b and a[name] != b[name]]


def evaluation_points(budget_minutes, eval_points, eval_minutes=None):
  """The training-clock seconds at which a run is evaluated.

  Without eval_minutes, eval_points points spread evenly over the budget. With eval_minutes
  (minutes, ascending), those points, the budget added as the last one if they do not end
  there: the final accuracy and loss are read at the budget. Dense early points are for the
  steep first minutes, where a crossing read between evaluations 30 s apart lands late.

  Raises ValueError naming the flag for a point that is not a number, not positive, not
  ascending or past the budget.
  """
  if budget_minutes <= 0:
    raise ValueError(f"--budget_minutes must be positive, got {budget_minutes:g}")
  if not eval_minutes:
    if eval_points < 1:
      raise ValueError(f"--eval_points must be at least 1, got {eval_points}")
    return [budget_minutes * 60 * (i + 1) / eval_points for i in range(eval_points)]
  try:
    minutes = [float(m) for m in eval_minutes]
  except ValueError:
    raise ValueError(f"--eval_minutes must be numbers of minutes, got "
                     f"{','.join(map(str, eval_minutes))}") from None
  for before, after in zip([0.0] + minutes, minutes):
    if after <= before:
      raise ValueError(f"--eval_minutes must be positive and ascending: {after:g} follows "
                       f"{before:g}")
  if minutes[-1] > budget_minutes:
    raise ValueError(f"--eval_minutes: {minutes[-1]:g} is past --budget_minutes="
                     f"{budget_minutes:g}")
  if minutes[-1] < budget_minutes:
    minutes.append(float(budget_minutes))
  return [m * 60 for m in minutes]


def median_range(values):
  """'median (min-max)' to four places; one value alone; '-' for none."""
  if not values:
    return "-"
  return (f"{statistics.median(values):.4f} ({min(values):.4f}-{max(values):.4f})"
          if len(values) > 1 else f"{values[0]:.4f}")


def median_curve(runs):
  """The median over runs, point by point, of each of CURVE_KEYS (as far as every run goes)."""
  n = min(len(r["curve"]) for r in runs)
  return [{k: statistics.median([r["curve"][i][k] for r in runs]) for k in CURVE_KEYS}
          for i in range(n)]


def interpolate(curve, x_key, x, y_key="accuracy"):
  """y_key at x (seconds or steps) by linear interpolation within the curve; None outside.
  Before the first evaluation there is nothing to interpolate from, so x there gives None."""
  if not curve or x > curve[-1][x_key] + 1e-9 or x < curve[0][x_key] - 1e-9:
    return None
  previous = None
  for p in curve:
    if p[x_key] >= x:
      if previous is None or p[x_key] == previous[x_key]:
        return p[y_key]
      w = (x - previous[x_key]) / (p[x_key] - previous[x_key])
      return previous[y_key] + w * (p[y_key] - previous[y_key])
    previous = p
  return None


def reaches(value, target, lower_is_better):
  return value <= target + 1e-12 if lower_is_better else value >= target - 1e-12


def minutes_to(curve, target, key="accuracy", lower_is_better=False):
  """Training-clock minutes of the first evaluation at or past target (None: never)."""
  for p in curve:
    if reaches(p[key], target, lower_is_better):
      return p["seconds"] / 60
  return None


def reached_at_first_evaluation(runs_by_system, target, key="accuracy", lower_is_better=False):
  """Whether every system's median curve is at or past target at its first evaluation: then
  minutes to the target measure the first evaluation's time, not the systems' speed."""
  return all(curve and reaches(curve[0][key], target, lower_is_better)
             for curve in (median_curve(runs) for runs in runs_by_system.values()))


def crossing_minutes(curve, target, key, lower_is_better):
  """Training-clock minutes at which the curve of `key` first reaches target, interpolated
  linearly between the evaluations around the crossing (the first evaluation's time when it is
  reached there already); None: never."""
  previous = None
  for p in curve:
    if reaches(p[key], target, lower_is_better):
      if previous is None or p[key] == previous[key]:
        return p["seconds"] / 60
      w = (target - previous[key]) / (p[key] - previous[key])
      return (previous["seconds"] + w * (p["seconds"] - previous["seconds"])) / 60
    previous = p
  return None


def goal_rows(peer_runs, ours_runs, bound):
  """The goal rows for one peer: for each metric, the peer's final value (its median curve's
  last point) and the value halfway from its first evaluation to that (which lies on the
  curve's slope when the final one is on a plateau; left out when the first evaluation already
  had the final value). Each row: target, key, value, the minutes at which the peer's and ours'
  median curves reach it (None: never), ratio (None unless both reach it), met (ratio <=
  bound), the seeds of each whose own curve reaches it, and flags:
    first_plateau  the peer's final value is its first evaluation's (a ratio says nothing);
    plateau        the peer's curve was within 1% of its final value by its middle point, so
                   the minute it is crossed is within the noise;
    ours_at_first  ours had it at its first evaluation (ours' time is an upper bound)."""
  peer, ours = median_curve(peer_runs), median_curve(ours_runs)
  rows = []
  for key, lower, label in METRICS:
    first, middle, final = peer[0][key], peer[(len(peer) - 1) // 2][key], peer[-1][key]
    stalled = reaches(first, final, lower)  # the first evaluation had the final value already
    targets = [(f"final {label}", final, True)]
    if not stalled:
      targets.append((f"halfway to it ({label})", (first + final) / 2, False))
    for name, target, is_final in targets:
      times = [crossing_minutes(c, target, key, lower) for c in (peer, ours)]
      ratio = times[1] / times[0] if None not in times and times[0] > 0 else None
      rows.append(dict(
          target=name, key=key, value=target, peer_minutes=times[0], ours_minutes=times[1],
          ratio=ratio, met=ratio is not None and ratio <= bound,
          peer_seeds=_seeds_reaching(peer_runs, target, key, lower),
          ours_seeds=_seeds_reaching(ours_runs, target, key, lower),
          first_plateau=is_final and stalled,
          plateau=is_final and not stalled and abs(middle - final) <= 0.01 * abs(final),
          ours_at_first=times[1] is not None and abs(times[1] - ours[0]["seconds"] / 60) < 1e-9))
  return rows


def ratio_spread(peer_runs, ours_runs, bound, resamples=1000, seed=0):
  """How much the goal ratios owe to which seeds ran: goal_rows again on `resamples` resamples of
  each system's runs (drawn with replacement, as many as ran, the target recomputed from the
  resampled peer), a bootstrap over seeds. Returns {target name: (5th percentile of its ratio,
  95th percentile, share of the resamples in which it is met)}; a resample whose median curve of
  ours never reaches the target counts as an infinite ratio, not met. Seeded, so a table prints
  the same twice. With three to five seeds a resample holds only seeds that ran, so this
  understates the spread a new set of seeds would show: a reading of the noise, not a test."""
  rng = random.Random(seed)
  ratios = {}
  for _ in range(resamples):
    peer = [rng.choice(peer_runs) for _ in peer_runs]
    ours = [rng.choice(ours_runs) for _ in ours_runs]
    for row in goal_rows(peer, ours, bound):
      ratios.setdefault(row["target"], []).append(
          math.inf if row["ratio"] is None else row["ratio"])
  return {name: (_percentile(values, 5), _percentile(values, 95),
                 sum(r <= bound for r in values) / len(values))
          for name, values in ratios.items()}


def _percentile(values, percent):
  """The nearest-rank percentile of values (infinite values allowed)."""
  ordered = sorted(values)
  return ordered[min(len(ordered) - 1, max(0, math.ceil(percent / 100 * len(ordered)) - 1))]


def _seeds_reaching(runs, target, key, lower):
  """'k/n': how many of the runs' own curves reach target."""
  k = sum(crossing_minutes(r["curve"], target, key, lower) is not None for r in runs)
  return f"{k}/{len(runs)}"
