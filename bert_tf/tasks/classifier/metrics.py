"""The classifier's metrics from counts and predictions, as GLUE reports them.

F1 (of label 1) and the Matthews correlation from the binary confusion counts (MRPC and QQP
report F1, CoLA the Matthews correlation), Pearson's r from moment sums and Spearman's rank
correlation from every prediction (STS-B). Plain Python and NumPy; classifier.py computes the
counts and sums in the eval step (its TASK) and calls these.
"""

import math
from typing import Dict, Mapping

import numpy as np


def binary_scores(tp: float, fp: float, fn: float, tn: float) -> Dict[str, float]:
  """F1 (of label 1) and the Matthews correlation from confusion counts (0 when undefined)."""
  f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
  denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  mcc = (tp * tn - fp * fn) / denominator if denominator else 0.0
  return dict(eval_f1=f1, eval_matthews_corrcoef=mcc)


def pearson_from_sums(s: Mapping[str, float]) -> float:
  """Pearson's r from weighted moment sums (examples, p, t, pp, tt, pt; 0 when undefined)."""
  n = max(s["examples"], 1.0)
  covariance = s["pt"] / n - (s["p"] / n) * (s["t"] / n)
  variance_p = s["pp"] / n - (s["p"] / n) ** 2
  variance_t = s["tt"] / n - (s["t"] / n) ** 2
  denominator = math.sqrt(max(variance_p, 0.0) * max(variance_t, 0.0))
  return covariance / denominator if denominator else 0.0


def average_ranks(values: np.ndarray) -> np.ndarray:
  """1-based ranks, ties sharing their average rank (for Spearman's correlation)."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="mergesort")
  sorted_values = values[order]
  ranks = np.empty(len(values), np.float64)
  start = 0
  for end in range(1, len(values) + 1):
    if end == len(values) or sorted_values[end] != sorted_values[start]:
      ranks[order[start:end]] = (start + end + 1) / 2.0
      start = end
  return ranks


def spearman(predictions: np.ndarray, targets: np.ndarray) -> float:
  """Spearman's rank correlation: Pearson's r of the average ranks (0 when undefined)."""
  p, t = average_ranks(predictions), average_ranks(targets)
  if len(p) < 2 or np.std(p) == 0 or np.std(t) == 0:
    return 0.0
  return float(np.corrcoef(p, t)[0, 1])
