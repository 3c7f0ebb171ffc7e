"""The classifier's GLUE metrics (tasks.classifier.metrics) against NumPy's formulas."""

import math

import numpy as np
import pytest

from bert_tf.tasks.classifier import metrics as classifier_metrics


def test_binary_scores_are_f1_and_matthews_of_the_counts():
  rng = np.random.default_rng(3)
  labels = rng.integers(0, 2, 200)
  predictions = np.where(rng.random(200) < 0.7, labels, 1 - labels)
  tp = float(np.sum((labels == 1) & (predictions == 1)))
  fp = float(np.sum((labels == 0) & (predictions == 1)))
  fn = float(np.sum((labels == 1) & (predictions == 0)))
  tn = float(np.sum((labels == 0) & (predictions == 0)))
  scores = classifier_metrics.binary_scores(tp, fp, fn, tn)
  precision, recall = tp / (tp + fp), tp / (tp + fn)
  assert scores["eval_f1"] == pytest.approx(2 * precision * recall / (precision + recall))
  # Matthews' correlation is Pearson's r of the two 0/1 vectors.
  assert scores["eval_matthews_corrcoef"] == pytest.approx(np.corrcoef(labels, predictions)[0, 1])
  # Undefined (no positive prediction, no positive label): 0, as GLUE's scorers.
  assert classifier_metrics.binary_scores(0.0, 0.0, 0.0, 10.0) == dict(
      eval_f1=0.0, eval_matthews_corrcoef=0.0)


def test_pearson_from_sums_is_numpys():
  rng = np.random.default_rng(4)
  p, t = rng.normal(size=64), rng.normal(size=64)
  t = 0.6 * p + 0.4 * t
  sums = dict(examples=64.0, p=p.sum(), t=t.sum(), pp=(p * p).sum(), tt=(t * t).sum(),
              pt=(p * t).sum())
  assert classifier_metrics.pearson_from_sums(sums) == pytest.approx(np.corrcoef(p, t)[0, 1])
  constant = dict(sums, p=64.0, pp=64.0, pt=t.sum())  # p == 1 everywhere: no variance
  assert classifier_metrics.pearson_from_sums(constant) == 0.0
  assert not math.isnan(classifier_metrics.pearson_from_sums(dict.fromkeys(sums, 0.0)))


def test_spearman_equals_pearson_of_average_ranks():
  values = np.array([3.0, 1.0, 2.0, 2.0, 5.0])
  np.testing.assert_array_equal(classifier_metrics.average_ranks(values), [4, 1, 2.5, 2.5, 5])
  rng = np.random.default_rng(0)
  p, t = rng.normal(size=50), rng.normal(size=50)
  t[:10] = t[0]  # ties
  expected = np.corrcoef(classifier_metrics.average_ranks(p),
                         classifier_metrics.average_ranks(t))[0, 1]
  assert classifier_metrics.spearman(p, t) == pytest.approx(expected)
  assert classifier_metrics.spearman(p, np.exp(p)) == pytest.approx(1.0)  # monotone: rank-perfect
  assert classifier_metrics.spearman(p, np.ones(50)) == 0.0
