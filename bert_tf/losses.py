"""Pretraining losses and metrics (spec section 8), always computed in float32.

Shape legend: B = batch, P = masked positions per example, V = vocab size.
Labels are the TFRecord features: masked_lm_ids [B, P], masked_lm_weights [B, P] (1.0 real,
0.0 padding), next_sentence_labels [B] or [B, 1] (0 = actual next, 1 = random next).
"""

from typing import Dict, Mapping

import tensorflow as tf

from bert_tf import fused

# Keeps the masked LM loss finite for a batch without any real prediction (as the original).
MASKED_LM_DENOMINATOR_EPSILON = 1e-5


def _nll(logits, labels):
  """Per-example negative log-likelihood of integer labels; logits [..., C] -> [...]."""
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def masked_lm_loss(logits, label_ids, label_weights):
  """sum(w * nll) / (sum(w) + 1e-5) over all prediction slots of the batch.

  Args:
    logits: [B, P, V] masked LM logits.
    label_ids: [B, P] the original token ids.
    label_weights: [B, P] 1.0 for a real prediction, 0.0 for padding.

  Returns:
    A float32 scalar.
  """
  weights = tf.cast(label_weights, tf.float32)
  if fused.ENABLED:
    # The [B * P, V] softmax is the largest elementwise work of a step: use the fused kernel.
    vocab = tf.shape(logits)[-1]
    nll = fused.sparse_softmax_nll(tf.reshape(logits, [-1, vocab]),
                                   tf.reshape(label_ids, [-1]))
    nll = tf.reshape(nll, tf.shape(weights))
  else:
    nll = _nll(logits, label_ids)
  numerator = tf.reduce_sum(weights * nll)
  return numerator / (tf.reduce_sum(weights) + MASKED_LM_DENOMINATOR_EPSILON)


def next_sentence_loss(logits, labels):
  """Mean 2-way cross-entropy. logits [B, 2]; labels [B] or [B, 1]. Returns a float32 scalar."""
  labels = tf.reshape(labels, [-1])
  return tf.reduce_mean(_nll(logits, labels))


def masked_lm_accuracy(logits, label_ids, label_weights):
  """Weighted accuracy sum(w * [argmax == label]) / sum(w); 0 when sum(w) == 0."""
  weights = tf.cast(label_weights, tf.float32)
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  correct = tf.cast(tf.equal(predictions, tf.cast(label_ids, tf.int32)), tf.float32)
  return tf.math.divide_no_nan(tf.reduce_sum(weights * correct), tf.reduce_sum(weights))


def next_sentence_accuracy(logits, labels):
  """Fraction of examples whose argmax equals the label. logits [B, 2]; labels [B] or [B, 1]."""
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
  return tf.reduce_mean(tf.cast(tf.equal(predictions, labels), tf.float32))


def pretraining_losses(outputs: Mapping[str, tf.Tensor],
                       features: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """The three losses of the original run_pretraining for one batch.

  Args:
    outputs: the pretraining model's outputs (masked_lm_logits, next_sentence_logits).
    features: the batch with masked_lm_ids, masked_lm_weights, next_sentence_labels.

  Returns:
    Dict of float32 scalars: loss (the sum), masked_lm_loss, next_sentence_loss.
  """
  mlm = masked_lm_loss(outputs["masked_lm_logits"], features["masked_lm_ids"],
                       features["masked_lm_weights"])
  nsp = next_sentence_loss(outputs["next_sentence_logits"], features["next_sentence_labels"])
  return dict(loss=mlm + nsp, masked_lm_loss=mlm, next_sentence_loss=nsp)


def pretraining_metrics(outputs: Mapping[str, tf.Tensor],
                        features: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """Per-batch eval metrics named as in the original's eval_results.txt (plus the losses).

  Averaging these per-batch values over an eval set weights batches equally, as the original's
  tf.metrics.mean does for the losses; masked_lm_accuracy there is weighted by masked_lm_weights
  across batches, so callers aggregating it should also sum masked_lm_weights (returned as
  masked_lm_weight_sum).
  """
  result = pretraining_losses(outputs, features)
  result["masked_lm_accuracy"] = masked_lm_accuracy(
      outputs["masked_lm_logits"], features["masked_lm_ids"], features["masked_lm_weights"])
  result["next_sentence_accuracy"] = next_sentence_accuracy(
      outputs["next_sentence_logits"], features["next_sentence_labels"])
  result["masked_lm_weight_sum"] = tf.reduce_sum(
      tf.cast(features["masked_lm_weights"], tf.float32))
  return result
