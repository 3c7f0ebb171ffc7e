"""Tests of bert_tf.training.losses against direct NumPy formulas (the original
run_pretraining.py: get_masked_lm_output, get_next_sentence_output)."""

import numpy as np
import tensorflow as tf

from bert_tf.training import losses
from tests import helpers


def _log_softmax(x):
  x = x - x.max(axis=-1, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def test_masked_lm_loss_formula():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((3, 4, 11)).astype(np.float32) * 3
  ids = rng.integers(0, 11, (3, 4))
  weights = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], np.float32)
  nll = -np.take_along_axis(_log_softmax(logits.astype(np.float64)), ids[..., None], -1)[..., 0]
  expected = (weights * nll).sum() / (weights.sum() + 1e-5)
  got = losses.masked_lm_loss(logits, ids, weights)
  assert got.dtype == tf.float32
  np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
  # Padded slots do not count, whatever their label.
  ids2 = ids.copy()
  ids2[1, 2:] = 0
  np.testing.assert_allclose(losses.masked_lm_loss(logits, ids2, weights).numpy(), got.numpy())


def test_masked_lm_loss_without_predictions_is_zero_not_nan():
  logits = np.zeros((2, 3, 5), np.float32)
  got = losses.masked_lm_loss(logits, np.zeros((2, 3)), np.zeros((2, 3), np.float32))
  assert got.numpy() == 0.0


def test_next_sentence_loss_and_accuracy():
  logits = np.array([[2.0, -1.0], [0.5, 0.25], [-3.0, 1.0], [0.0, 0.0]], np.float32)
  labels = np.array([[0], [1], [1], [1]])
  lsm = _log_softmax(logits.astype(np.float64))
  expected = -np.mean([lsm[0, 0], lsm[1, 1], lsm[2, 1], lsm[3, 1]])
  np.testing.assert_allclose(losses.next_sentence_loss(logits, labels).numpy(), expected, rtol=1e-6)
  # argmax: 0, 0, 1, 0 (a tie picks class 0) against labels 0, 1, 1, 1.
  assert losses.next_sentence_accuracy(logits, labels).numpy() == 0.5
  assert losses.next_sentence_accuracy(logits, labels[:, 0]).numpy() == 0.5


def test_masked_lm_accuracy_is_weighted():
  logits = np.zeros((2, 3, 4), np.float32)
  logits[0, 0, 1] = logits[0, 1, 2] = logits[0, 2, 3] = logits[1, 0, 0] = 1.0
  ids = np.array([[1, 2, 0], [0, 3, 3]])
  weights = np.array([[1, 1, 1], [1, 0, 0]], np.float32)
  # Correct: (0,0), (0,1), (1,0); wrong: (0,2); (1,1) and (1,2) have weight 0.
  assert losses.masked_lm_accuracy(logits, ids, weights).numpy() == 0.75
  assert losses.masked_lm_accuracy(logits, ids, 0 * weights).numpy() == 0.0


def test_float16_logits_are_computed_in_float32():
  rng = np.random.default_rng(1)
  logits = (rng.standard_normal((2, 3, 7)) * 4).astype(np.float16)
  ids = rng.integers(0, 7, (2, 3))
  weights = np.ones((2, 3), np.float32)
  got = losses.masked_lm_loss(tf.constant(logits), ids, weights)
  want = losses.masked_lm_loss(logits.astype(np.float32), ids, weights)
  assert got.dtype == tf.float32
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_pretraining_losses_and_metrics():
  rng = np.random.default_rng(2)
  outputs = dict(masked_lm_logits=rng.standard_normal((2, 3, 5)).astype(np.float32),
                 next_sentence_logits=rng.standard_normal((2, 2)).astype(np.float32))
  features = dict(masked_lm_ids=rng.integers(0, 5, (2, 3)),
                  masked_lm_weights=np.array([[1, 1, 0], [1, 0, 0]], np.float32),
                  next_sentence_labels=np.array([[1], [0]]))
  result = helpers.pretraining_metrics(outputs, features)
  mlm = losses.masked_lm_loss(outputs["masked_lm_logits"], features["masked_lm_ids"],
                              features["masked_lm_weights"])
  nsp = losses.next_sentence_loss(outputs["next_sentence_logits"],
                                  features["next_sentence_labels"])
  np.testing.assert_allclose(result["loss"].numpy(), (mlm + nsp).numpy())
  np.testing.assert_allclose(result["masked_lm_loss"].numpy(), mlm.numpy())
  np.testing.assert_allclose(result["next_sentence_loss"].numpy(), nsp.numpy())
  assert result["masked_lm_weight_sum"].numpy() == 3.0
  assert set(result) == {"loss", "masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy",
                         "next_sentence_accuracy", "masked_lm_weight_sum"}
