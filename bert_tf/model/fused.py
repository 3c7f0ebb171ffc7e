"""Fused elementwise kernels for training: each is an XLA-compiled forward and backward pair
joined by tf.custom_gradient, used inside otherwise ordinary (non-XLA) TensorFlow graphs.

Why: on CPU, TensorFlow runs GELU (either form), softmax, dropout and the cross-entropy as
chains of separate elementwise kernels, each a full pass over memory; they cost about a quarter
of a BERT-Mini training step. Compiling the whole step with XLA fuses them but makes the matmuls
and the column reductions (bias gradients) slower on CPU, so only these elementwise blocks are
compiled; matmuls and reductions stay with TensorFlow's own kernels (oneDNN's, which the
commands turn on on x86-64: bert_tf.cli.choose_cpu_kernels).

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

# Dropout keep decisions: each element has its own 32-bit random word, whose low 16 bits are
# compared with round(rate * 2^16); the drop probability is that over 2^16 (0.1 -> 0.1000061).
# One word per element, indexed by the element's flat position, keeps the mask one elementwise
# expression in the output's own layout: sharing a word between two elements (its two 16-bit
# halves) needs a [2, size / 2] layout that XLA's CPU code does not vectorise, and cost three
# times the whole masked softmax (benchmarks/README.md, packed rows). The backward passes
# recompute the mask from the seed rather than keep it: the hash is cheaper than a
# float mask's write and read.
DROPOUT_LEVELS = 1 << 16


# === Dropout masks ===
# Random words come from a keyed integer hash of the element counter (two rounds of the
# MurmurHash3 32-bit finalizer, keyed by the two seed words) rather than from TensorFlow's
# stateless Philox generator, which is many times slower than the hash in XLA on CPU
# (benchmarks/README.md has the measurement). The finalizer is a bijection
# with full avalanche, so the counter's words are uniform and decorrelated; the tests check the
# drop rate, neighbouring elements and consecutive seeds.
_MIX_1 = 0x85EBCA6B
_MIX_2 = 0xC2B2AE35


def _mix32(x):
  """MurmurHash3's fmix32 on a uint32 tensor."""
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
  x = x * tf.constant(_MIX_1, tf.uint32)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 13))
  x = x * tf.constant(_MIX_2, tf.uint32)
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def random_words(count, seed):
  """[1, count] pseudo-random uint32 words for int32 `seed` [2] (meant to run inside XLA)."""
  key = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
  # Spread the keys first: SeedGenerator seeds differ by 1 from call to call.
  key_0 = _mix32(tf.bitwise.bitwise_xor(key[0], tf.constant(0x243F6A88, tf.uint32)))
  key_1 = _mix32(tf.bitwise.bitwise_xor(key[1], tf.constant(0x13198A2E, tf.uint32)))
  counter = tf.bitcast(tf.range(count, dtype=tf.int32), tf.uint32)[None, :]
  return _mix32(tf.bitwise.bitwise_xor(_mix32(tf.bitwise.bitwise_xor(counter, key_0)), key_1))


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
  """A [shape] tensor of 0 (dropped) and `scale` (kept) values for int32 `seed` [2]: element i
  of the flat mask is kept when the low 16 bits of random word i are >= threshold."""
  words = random_words(tf.reduce_prod(shape), seed)
  keep = tf.bitwise.bitwise_and(words, 0xFFFF) >= threshold
  return tf.reshape(tf.cast(keep, dtype) * tf.cast(scale, dtype), shape)


def _masked32(x, seed, threshold, scale):
  """float32(x) times its dropout mask (dropout_mask of x's shape), in float32; inside XLA
  kernels, where the mask fuses into the product. Forward and backward passes both call it, so
  the backward draws the forward's mask again from the same seed.

  Every kernel here computes in float32 whatever its inputs' dtype and rounds once at the end:
  in bfloat16, XLA on CPU rounds every intermediate back to bfloat16, and those conversions
  made the kernels several times slower than in float32 (benchmarks/README.md, "Time to
  quality", the bfloat16 profile). In float32 the casts are no-ops.
  """
  return tf.cast(x, tf.float32) * dropout_mask(tf.shape(x), seed, threshold, scale, tf.float32)


@tf.function(jit_compile=True, autograph=False)
def _dropout_forward(x, seed, threshold, scale):
  return tf.cast(_masked32(x, seed, threshold, scale), x.dtype)


def dropout(x, rate, seed):
  """Inverted dropout of x with the hashed 16-bit draws; the gradient is dy * mask."""
  threshold, scale = dropout_threshold_and_scale(rate)

  @tf.custom_gradient
  def fused(x):
    # The backward is the forward applied to dy: the same seed draws the same mask.
    return (_dropout_forward(x, seed, threshold, scale),
            lambda dy: _dropout_forward(dy, seed, threshold, scale))

  return fused(x)


# === GELU (tanh form, the original's "gelu") ===
# Computed in float32 whatever the input's dtype, rounded once at the end (see _masked32).
@tf.function(jit_compile=True, autograph=False)
def _gelu_forward(x):
  x32 = tf.cast(x, tf.float32)
  y = 0.5 * x32 * (1.0 + tf.tanh(GELU_TANH_COEFFICIENT * (x32 + GELU_CUBIC * x32 * x32 * x32)))
  return tf.cast(y, x.dtype)


@tf.function(jit_compile=True, autograph=False)
def _gelu_backward(x, dy):
  x32 = tf.cast(x, tf.float32)
  x2 = x32 * x32
  t = tf.tanh(GELU_TANH_COEFFICIENT * x32 * (1.0 + GELU_CUBIC * x2))
  slope = (0.5 * (1.0 + t)
           + 0.5 * x32 * (1.0 - t * t) * GELU_TANH_COEFFICIENT * (1.0 + 3.0 * GELU_CUBIC * x2))
  return tf.cast(tf.cast(dy, tf.float32) * slope, dy.dtype)


@tf.custom_gradient
def gelu_tanh(x):
  """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with a fused analytic gradient."""
  return _gelu_forward(x), lambda dy: _gelu_backward(x, dy)


# === GELU (exact erf form: Hugging Face's "gelu", all-MiniLM-L6-v2's hidden_act) ===
# TensorFlow runs the exact GELU and its gradient as about ten elementwise kernels over the
# [rows, intermediate_size] activations; fused, one pass each way. The erfc form is
# TensorFlow's own (tf.nn.gelu), exact for large negative x where 1 + erf(x) cancels.
GELU_ERF_SCALE = 1.0 / math.sqrt(2.0)
GELU_DENSITY = 1.0 / math.sqrt(2.0 * math.pi)


@tf.function(jit_compile=True, autograph=False)
def _gelu_exact_forward(x):
  x32 = tf.cast(x, tf.float32)
  return tf.cast(0.5 * x32 * tf.math.erfc(-GELU_ERF_SCALE * x32), x.dtype)


@tf.function(jit_compile=True, autograph=False)
def _gelu_exact_backward(x, dy):
  x32 = tf.cast(x, tf.float32)
  # d/dx x Phi(x) = Phi(x) + x phi(x), Phi the normal CDF and phi its density.
  slope = (0.5 * tf.math.erfc(-GELU_ERF_SCALE * x32)
           + x32 * GELU_DENSITY * tf.exp(-0.5 * x32 * x32))
  return tf.cast(tf.cast(dy, tf.float32) * slope, dy.dtype)


@tf.custom_gradient
def gelu_exact(x):
  """0.5 x erfc(-x / sqrt(2)) = 0.5 x (1 + erf(x / sqrt(2))), with a fused analytic gradient."""
  return _gelu_exact_forward(x), lambda dy: _gelu_exact_backward(x, dy)


# === Masked softmax + dropout of attention scores ===
def broadcast_adder(adder):
  """The attention mask adder [B, S] (per key) or [B, Q, S] (per query and key, packed rows)
  shaped to add to scores [B, N, Q, S]."""
  if adder.shape.rank == 3:
    return adder[:, None, :, :]
  return adder[:, None, None, :]


@tf.function(jit_compile=True, autograph=False)
def _attention_forward(scores, adder, seed, threshold, scale):
  logits = tf.cast(scores, tf.float32) + broadcast_adder(adder)
  probs = tf.nn.softmax(logits, axis=-1)
  return tf.cast(_masked32(probs, seed, threshold, scale), scores.dtype), probs


@tf.function(jit_compile=True, autograph=False)
def _attention_backward(probs, dy, seed, threshold, scale):
  d = _masked32(dy, seed, threshold, scale)
  ds = probs * (d - tf.reduce_sum(d * probs, axis=-1, keepdims=True))
  return tf.cast(ds, dy.dtype)


def attention_probs(scores, adder, rate, seed):
  """dropout(softmax(float32(scores) + adder)) in scores' dtype.

  Args:
    scores: [B, N, S, S] raw attention scores (any float dtype).
    adder: [B, S] float32, 0 for real key positions and -10000 for padding; or [B, S, S]
      (query, key) for packed rows, -10000 where a query must not see a key.
    rate: the dropout rate (a Python float).
    seed: int32 [2] stateless seed (see int32_seed).

  Returns:
    [B, N, S, S] attention probabilities after dropout; the gradient flows to scores only.
  """
  threshold, scale = dropout_threshold_and_scale(rate)

  @tf.custom_gradient
  def fused(scores):
    out, probs = _attention_forward(scores, adder, seed, threshold, scale)
    return out, lambda dy: _attention_backward(probs, dy, seed, threshold, scale)

  return fused(scores)


# === Softmax cross-entropy with integer labels ===
@tf.function(jit_compile=True, autograph=False)
def _nll_forward(logits, labels, peak):
  logits = tf.cast(logits, tf.float32)
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
    # The row maximum (for a stable exponent) is cheaper in TensorFlow than in XLA on CPU,
    # which splits long reductions into windows.
    peak = tf.reduce_max(tf.cast(logits, tf.float32), axis=-1)
    nll, lse = _nll_forward(logits, labels, peak)
    return nll, lambda dnll: _nll_backward(logits, labels, lse, dnll)

  return fused(logits)


# === Dropout + residual + LayerNorm ===
@tf.function(jit_compile=True, autograph=False)
def _layer_norm_forward(x, residual, gamma, beta, seed, threshold, scale, epsilon):
  z = _masked32(x, seed, threshold, scale) + tf.cast(residual, tf.float32)
  mean = tf.reduce_mean(z, axis=-1, keepdims=True)
  centered = z - mean
  variance = tf.reduce_mean(centered * centered, axis=-1, keepdims=True)
  rstd = tf.math.rsqrt(variance + epsilon)
  normalized = centered * rstd
  return normalized * gamma + beta, normalized, rstd


@tf.function(jit_compile=True, autograph=False)
def _layer_norm_backward(dy, normalized, rstd, gamma, seed, threshold, scale, dtype):
  """(dx, dresidual, dy * normalized); dtype is x's, the mask drawn again from the seed."""
  dy = tf.cast(dy, tf.float32)
  g = dy * gamma
  dz = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
               - normalized * tf.reduce_mean(g * normalized, axis=-1, keepdims=True))
  dx = tf.cast(_masked32(dz, seed, threshold, scale), dtype)
  return dx, tf.cast(dz, dtype), dy * normalized


def dropout_add_layer_norm(x, residual, gamma, beta, rate, seed, epsilon):
  """LayerNorm(dropout(x) + residual) * gamma + beta, in float32 (the post-LN sublayer end).

  Args:
    x: [..., H] the sublayer output (compute dtype).
    residual: [..., H] the sublayer input (compute dtype).
    gamma, beta: [H] float32 LayerNorm scale and offset (tensors read from the variables).
    rate: dropout rate on x (a Python float).
    seed: int32 [2] stateless seed.
    epsilon: the LayerNorm epsilon added to the variance.

  Returns:
    [..., H] float32. The column sums for the gamma and beta gradients run as TensorFlow
    reductions (faster than XLA's on CPU).
  """
  threshold, scale = dropout_threshold_and_scale(rate)

  @tf.custom_gradient
  def fused(x, residual, gamma, beta):
    y, normalized, rstd = _layer_norm_forward(x, residual, gamma, beta, seed, threshold, scale,
                                              epsilon)

    def grad(dy):
      dx, dresidual, dy_normalized = _layer_norm_backward(dy, normalized, rstd, gamma, seed,
                                                          threshold, scale, x.dtype)
      rows = tf.range(tf.rank(dy) - 1)
      return (dx, tf.cast(dresidual, residual.dtype), tf.reduce_sum(dy_normalized, rows),
              tf.reduce_sum(tf.cast(dy, tf.float32), rows))

    return y, grad

  return fused(x, residual, gamma, beta)
