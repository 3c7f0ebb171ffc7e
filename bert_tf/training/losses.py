"""Loss and metric primitives, always computed in float32.

One set of primitives for the training loop, the eval step, the benchmarks and every task:
`sparse_nll` is the per-example cross-entropy (the fused XLA kernel of model/fused.py when
fused kernels are on, the plain TensorFlow op otherwise), and the `*_sums` functions give the
sums a distributed step adds over replicas before dividing. The original's formulas
(run_pretraining.py:get_masked_lm_output, get_next_sentence_output) are these sums divided.

Shape legend: B = batch, P = masked positions per example, V = vocab size, C = classes.
Labels are the TFRecord features: masked_lm_ids [B, P], masked_lm_weights [B, P] (1.0 real,
0.0 padding), next_sentence_labels [B] or [B, 1] (0 = actual next, 1 = random next).
"""

from typing import Dict, Mapping

import tensorflow as tf

from bert_tf.model import fused

# Keeps the masked LM loss finite for a batch without any real prediction (as the original).
MASKED_LM_DENOMINATOR_EPSILON = 1e-5


def sparse_nll(logits, labels):
  """Per-example -log softmax(logits)[label]: logits [..., C], labels [...] -> float32 [...].

  Uses the fused kernel (one pass, fused gradient) when fused kernels are enabled; the values
  agree with tf.nn.sparse_softmax_cross_entropy_with_logits to float rounding.
  """
  labels = tf.cast(labels, tf.int32)
  if fused.ENABLED:
    classes = tf.shape(logits)[-1]
    nll = fused.sparse_softmax_nll(tf.reshape(logits, [-1, classes]), tf.reshape(labels, [-1]))
    return tf.reshape(nll, tf.shape(labels))
  return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                        logits=tf.cast(logits, tf.float32))


def correct(logits, labels):
  """1.0 where argmax(logits) == label, else 0.0 (float32, the labels' shape)."""
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return tf.cast(tf.equal(predictions, tf.cast(labels, tf.int32)), tf.float32)


def masked_lm_sums(logits, label_ids, label_weights) -> Dict[str, tf.Tensor]:
  """Weighted sums over the prediction slots of a batch.

  Args:
    logits: [B, P, V] masked LM logits.
    label_ids: [B, P] the original token ids.
    label_weights: [B, P] 1.0 for a real prediction, 0.0 for padding.

  Returns:
    float32 scalars: nll = sum(w * nll), weight = sum(w), correct = sum(w * [argmax == id]).
  """
  weights = tf.cast(label_weights, tf.float32)
  return dict(nll=tf.reduce_sum(weights * sparse_nll(logits, label_ids)),
              weight=tf.reduce_sum(weights),
              correct=tf.reduce_sum(weights * correct(logits, label_ids)))


def classification_sums(logits, labels) -> Dict[str, tf.Tensor]:
  """Sums over the examples of a batch: logits [B, C], labels [B] or [B, 1].

  Returns:
    float32 scalars: nll (summed cross-entropy), correct (argmax hits), examples (B).
  """
  labels = tf.reshape(labels, [-1])
  return dict(nll=tf.reduce_sum(sparse_nll(logits, labels)),
              correct=tf.reduce_sum(correct(logits, labels)),
              examples=tf.cast(tf.shape(labels)[0], tf.float32))


def masked_lm_loss(logits, label_ids, label_weights):
  """sum(w * nll) / (sum(w) + 1e-5) over all prediction slots of the batch (float32 scalar)."""
  weights = tf.cast(label_weights, tf.float32)
  numerator = tf.reduce_sum(weights * sparse_nll(logits, label_ids))
  return numerator / (tf.reduce_sum(weights) + MASKED_LM_DENOMINATOR_EPSILON)


def next_sentence_loss(logits, labels):
  """Mean 2-way cross-entropy. logits [B, 2]; labels [B] or [B, 1]. Returns a float32 scalar."""
  return tf.reduce_mean(sparse_nll(logits, tf.reshape(labels, [-1])))


def masked_lm_accuracy(logits, label_ids, label_weights):
  """Weighted accuracy sum(w * [argmax == label]) / sum(w); 0 when sum(w) == 0."""
  sums = masked_lm_sums(logits, label_ids, label_weights)
  return tf.math.divide_no_nan(sums["correct"], sums["weight"])


def next_sentence_accuracy(logits, labels):
  """Fraction of examples whose argmax equals the label. logits [B, 2]; labels [B] or [B, 1]."""
  return tf.reduce_mean(correct(logits, tf.reshape(labels, [-1])))


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
