"""Fused elementwise kernels for training: each is an XLA-compiled forward and backward pair
joined by tf.custom_gradient, used inside otherwise ordinary (non-XLA) TensorFlow graphs.

Why: on CPU, TensorFlow runs GELU, softmax, dropout and the cross-entropy as chains of separate
elementwise kernels, each a full pass over memory; they cost about a quarter of a BERT-Mini
training step. Compiling the whole step with XLA fuses them but makes the matmuls and the
column reductions (bias gradients) slower on CPU, so only these elementwise blocks are
compiled; matmuls and reductions stay with TensorFlow's oneDNN kernels.

The models use these only when training (training=True, and for the losses). Inference graphs,
and so every exported SavedModel, contain no XLA-compiled functions, so TF Serving builds
without XLA serve them. Set the environment variable BERT_TF_FUSED=0 before importing bert_tf
to use plain TensorFlow ops everywhere (the results agree to float rounding; tests check it).

Shape legend: B = batch, N = heads, S = sequence length, R = rows, C = classes.
"""

import math
import os

import tensorflow as tf

ENABLED = os.environ.get("BERT_TF_FUSED", "1") != "0"

GELU_TANH_COEFFICIENT = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715

# Dropout keep decisions: one uint32 random word serves two elements, each 16-bit half compared
# with round(rate * 2^16) (see layers.Dropout).
DROPOUT_LEVELS = 1 << 16


# === Dropout masks (shared by layers.Dropout and the fused attention) ===
def dropout_threshold_and_scale(rate):
  """(threshold, scale): drop a 16-bit draw below threshold, scale kept values by scale."""
  threshold = int(round(rate * DROPOUT_LEVELS))
  if threshold >= DROPOUT_LEVELS:
    return DROPOUT_LEVELS, 0.0
  return threshold, DROPOUT_LEVELS / (DROPOUT_LEVELS - threshold)


def int32_seed(seed):
  """A Keras SeedGenerator state (int32 or int64 [2]) as the int32 seed stateless ops take."""
  return tf.cast(tf.math.floormod(tf.cast(seed, tf.int64), 2 ** 31 - 1), tf.int32)


def dropout_mask(shape, seed, threshold, scale, dtype):
  """A [shape] tensor of 0 (dropped) and `scale` (kept) values for int32 `seed` [2]."""
  size = tf.reduce_prod(shape)
  words = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                      dtype=tf.uint32)
  halves = tf.concat([tf.bitwise.bitwise_and(words, 0xFFFF),
                      tf.bitwise.right_shift(words, 16)], axis=0)[:size]
  keep = tf.reshape(halves >= threshold, shape)
  return tf.cast(keep, dtype) * tf.cast(scale, dtype)


# === GELU (tanh form, the original's "gelu") ===
@tf.function(jit_compile=True, autograph=False)
def _gelu_forward(x):
  return 0.5 * x * (1.0 + tf.tanh(GELU_TANH_COEFFICIENT * (x + GELU_CUBIC * x * x * x)))


@tf.function(jit_compile=True, autograph=False)
def _gelu_backward(x, dy):
  x2 = x * x
  t = tf.tanh(GELU_TANH_COEFFICIENT * x * (1.0 + GELU_CUBIC * x2))
  slope = (0.5 * (1.0 + t)
           + 0.5 * x * (1.0 - t * t) * GELU_TANH_COEFFICIENT * (1.0 + 3.0 * GELU_CUBIC * x2))
  return dy * slope


@tf.custom_gradient
def gelu_tanh(x):
  """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with a fused analytic gradient."""
  return _gelu_forward(x), lambda dy: _gelu_backward(x, dy)


# === Masked softmax + dropout of attention scores ===
@tf.function(jit_compile=True, autograph=False)
def _attention_forward(scores, adder, seed, threshold, scale):
  logits = tf.cast(scores, tf.float32) + adder[:, None, None, :]
  probs = tf.nn.softmax(logits, axis=-1)
  mask = dropout_mask(tf.shape(scores), seed, threshold, scale, scores.dtype)
  return tf.cast(probs, scores.dtype) * mask, probs, mask


@tf.function(jit_compile=True, autograph=False)
def _attention_backward(probs, mask, dy):
  d = tf.cast(dy * mask, tf.float32)
  ds = probs * (d - tf.reduce_sum(d * probs, axis=-1, keepdims=True))
  return tf.cast(ds, dy.dtype)


def attention_probs(scores, adder, rate, seed):
  """dropout(softmax(float32(scores) + adder)) in scores' dtype.

  Args:
    scores: [B, N, S, S] raw attention scores (any float dtype).
    adder: [B, S] float32, 0 for real key positions and -10000 for padding.
    rate: the dropout rate (a Python float).
    seed: int32 [2] stateless seed (see int32_seed).

  Returns:
    [B, N, S, S] attention probabilities after dropout; the gradient flows to scores only.
  """
  threshold, scale = dropout_threshold_and_scale(rate)

  @tf.custom_gradient
  def fused(scores):
    out, probs, mask = _attention_forward(scores, adder, seed, threshold, scale)
    return out, lambda dy: _attention_backward(probs, mask, dy)

  return fused(scores)


# === Softmax cross-entropy with integer labels ===
@tf.function(jit_compile=True, autograph=False)
def _nll_forward(logits, labels):
  logits = tf.cast(logits, tf.float32)
  peak = tf.reduce_max(logits, axis=-1)
  lse = peak + tf.math.log(tf.reduce_sum(tf.exp(logits - peak[:, None]), axis=-1))
  classes = tf.shape(logits)[-1]
  valid = (labels >= 0) & (labels < classes)
  picked = tf.gather(logits, tf.clip_by_value(labels, 0, classes - 1), batch_dims=1)
  # A label outside [0, C) has an all-zero one-hot row in the original, so its loss is lse.
  return lse - tf.where(valid, picked, 0.0), lse


@tf.function(jit_compile=True, autograph=False)
def _nll_backward(logits, labels, lse, dnll):
  logits32 = tf.cast(logits, tf.float32)
  one_hot = tf.one_hot(labels, tf.shape(logits)[-1], dtype=tf.float32)
  return tf.cast((tf.exp(logits32 - lse[:, None]) - one_hot) * dnll[:, None], logits.dtype)


def sparse_softmax_nll(logits, labels):
  """-log softmax(logits)[label] per row, float32, with a fused gradient.

  Args:
    logits: [R, C] float (any float dtype; computed in float32).
    labels: [R] integer class ids; ids outside [0, C) give lse(logits) (their one-hot is 0).

  Returns:
    [R] float32. Gradients flow to logits only.
  """
  labels = tf.cast(labels, tf.int32)

  @tf.custom_gradient
  def fused(logits):
    nll, lse = _nll_forward(logits, labels)
    return nll, lambda dnll: _nll_backward(logits, labels, lse, dnll)

  return fused(logits)
