"""The fused training kernels (bert_tf/model/fused.py) against plain TensorFlow ops and autodiff."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import fused
from bert_tf.model import layers
from bert_tf.training import losses
from bert_tf.config import BertConfig
from bert_tf.model.heads import PRETRAINING_INPUTS, build_pretraining_model


def _value_and_grad(fn, x, upstream):
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = fn(x)
  return y, tape.gradient(y, x, output_gradients=upstream)


def _gelu_reference(x, upstream):
  """The tanh GELU and its derivative times upstream, in float64 NumPy."""
  x = x.astype(np.float64)
  c = np.sqrt(2.0 / np.pi)
  t = np.tanh(c * (x + 0.044715 * x ** 3))
  slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x ** 2)
  return 0.5 * x * (1.0 + t), upstream * slope


# Per GELU form: the fused kernel, a float64 reference of value and gradient, what TensorFlow
# or Keras run unfused, and golden values at -1, 0, 1, 2 (the original's tanh formula; the erf
# form's normal CDF).
GELU_FORMS = {
    "tanh": (lambda: fused.gelu_tanh, lambda x, up: _gelu_reference(x, up),
             lambda t: tf.nn.gelu(t, approximate=True),
             [-0.15880801, 0.0, 0.84119199, 1.95459769]),
    "exact": (lambda: fused.gelu_exact, lambda x, up: _gelu_exact_reference(x, up),
              lambda t: keras.activations.gelu(t, approximate=False),
              [-0.15865525, 0.0, 0.84134475, 1.95449974]),
}


@pytest.mark.parametrize("form", sorted(GELU_FORMS))
@pytest.mark.parametrize("graph", [False, True])
def test_gelu_matches_the_formula_and_the_plain_autodiff(graph, form):
  kernel, reference, plain, golden = GELU_FORMS[form]
  rng = np.random.default_rng(0)
  x = rng.normal(0, 3, (64, 96)).astype(np.float32)
  x[0, :4] = [-30.0, -9.0, 9.0, 30.0]  # the tails: 0 and x, no cancellation
  upstream = rng.normal(0, 1, (64, 96)).astype(np.float32)
  eager_run = lambda f: _value_and_grad(f, tf.constant(x), tf.constant(upstream))
  run = (lambda f: tf.function(lambda: eager_run(f))()) if graph else eager_run
  got_y, got_g = run(kernel())
  want_y, want_g = reference(x, upstream)
  np.testing.assert_allclose(got_y.numpy(), want_y, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got_g.numpy(), want_g, rtol=1e-5, atol=1e-5)
  # The unfused ops and their autodiff (float32 rounding differs slightly).
  plain_y, plain_g = run(plain)
  np.testing.assert_allclose(got_y.numpy(), plain_y.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got_g.numpy(), plain_g.numpy(), rtol=1e-4, atol=2e-5)
  np.testing.assert_allclose(kernel()(tf.constant([-1.0, 0.0, 1.0, 2.0])).numpy(), golden,
                             rtol=1e-6)


def test_gelu_in_bfloat16():
  x = tf.constant([-2.0, -0.5, 0.5, 3.0], tf.bfloat16)
  y, g = _value_and_grad(fused.gelu_tanh, x, tf.ones_like(x))
  assert y.dtype == tf.bfloat16 and g.dtype == tf.bfloat16
  want = tf.nn.gelu(tf.cast(x, tf.float32), approximate=True)
  np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), want.numpy(), rtol=1e-2, atol=1e-2)
  # Computed in float32 and rounded once: the float32 kernel's values and gradients, rounded.
  x = tf.cast(tf.constant(np.random.default_rng(4).normal(0, 3, 4096), tf.float32), tf.bfloat16)
  dy = tf.cast(tf.constant(np.random.default_rng(5).normal(0, 1, 4096), tf.float32), tf.bfloat16)
  y, g = _value_and_grad(fused.gelu_tanh, x, dy)
  y32, g32 = _value_and_grad(fused.gelu_tanh, tf.cast(x, tf.float32), tf.cast(dy, tf.float32))
  np.testing.assert_array_equal(y.numpy(), tf.cast(y32, tf.bfloat16).numpy())
  np.testing.assert_array_equal(g.numpy(), tf.cast(g32, tf.bfloat16).numpy())


def _gelu_exact_reference(x, upstream):
  """The exact (erf) GELU and its derivative times upstream, in float64."""
  x = x.astype(np.float64)
  cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x.ravel()]).reshape(x.shape)
  density = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
  return x * cdf, upstream * (cdf + x * density)


def test_exact_gelu_in_bfloat16_is_the_float32_kernel_rounded():
  x = tf.cast(tf.constant(np.random.default_rng(6).normal(0, 3, 4096), tf.float32), tf.bfloat16)
  dy = tf.cast(tf.constant(np.random.default_rng(7).normal(0, 1, 4096), tf.float32), tf.bfloat16)
  y, g = _value_and_grad(fused.gelu_exact, x, dy)
  assert y.dtype == tf.bfloat16 and g.dtype == tf.bfloat16
  y32, g32 = _value_and_grad(fused.gelu_exact, tf.cast(x, tf.float32), tf.cast(dy, tf.float32))
  np.testing.assert_array_equal(y.numpy(), tf.cast(y32, tf.bfloat16).numpy())
  np.testing.assert_array_equal(g.numpy(), tf.cast(g32, tf.bfloat16).numpy())


def test_training_activations_are_the_fused_kernels():
  assert layers.get_activation("gelu_exact", training=True) is fused.gelu_exact
  assert layers.get_activation("gelu", training=True) is fused.gelu_tanh
  x = tf.constant([-1.0, 0.5, 2.0])
  np.testing.assert_allclose(layers.get_activation("gelu_exact", training=False)(x).numpy(),
                             fused.gelu_exact(x).numpy(), rtol=1e-6)


def _attention_inputs(rng, dtype=tf.float32):
  scores = tf.constant(rng.normal(0, 2, (3, 2, 7, 7)), dtype)
  mask = np.ones((3, 7), np.float32)
  mask[1, 4:] = 0
  mask[2, 1:] = 0
  adder = tf.constant((1.0 - mask) * layers.MASK_ADDER)
  return scores, adder


def _fused_attention(rng_seed, rate, seed):
  """(scores, adder, upstream, probs, gradient) of fused.attention_probs on test inputs."""
  rng = np.random.default_rng(rng_seed)
  scores, adder = _attention_inputs(rng)
  upstream = tf.constant(rng.normal(0, 1, scores.shape).astype(np.float32))
  seed = tf.constant(seed, tf.int32)
  got_y, got_g = _value_and_grad(lambda s: fused.attention_probs(s, adder, rate, seed), scores,
                                 upstream)
  return scores, adder, upstream, got_y, got_g


def test_attention_probs_without_dropout_is_the_masked_softmax():
  scores, adder, upstream, got_y, got_g = _fused_attention(1, 0.0, [3, 4])
  plain = lambda s: tf.nn.softmax(s + adder[:, None, None, :], axis=-1)
  want_y, want_g = _value_and_grad(plain, scores, upstream)
  np.testing.assert_allclose(got_y.numpy(), want_y.numpy(), rtol=1e-6, atol=1e-7)
  # The gradient sums 7 float32 products per element in another order than autodiff does:
  # errors of a few float32 ulps of the largest term (2.4e-7 was seen on a fresh clone), so the
  # absolute tolerance is set at 1e-6 (gradient entries here are of order 0.1 to 1).
  np.testing.assert_allclose(got_g.numpy(), want_g.numpy(), rtol=1e-5, atol=1e-6)
  # Padded keys get no probability; every row sums to one.
  assert np.all(got_y.numpy()[1, :, :, 4:] == 0)
  np.testing.assert_allclose(got_y.numpy().sum(-1), 1.0, rtol=1e-6)


def test_attention_probs_with_dropout_matches_autodiff_with_the_same_mask():
  seed = tf.constant([5, 6], tf.int32)
  scores, adder, upstream, got_y, got_g = _fused_attention(2, 0.5, [5, 6])
  probs = tf.nn.softmax(scores + adder[:, None, None, :], axis=-1).numpy()
  kept = got_y.numpy() != 0
  dropped = ~kept & (probs > 0)
  assert 0.35 < dropped.sum() / (probs > 0).sum() < 0.65
  mask = tf.constant(np.where(kept, 2.0, 0.0).astype(np.float32))  # scale 1 / (1 - 0.5)
  np.testing.assert_allclose(got_y.numpy(), probs * mask.numpy(), rtol=1e-6, atol=1e-7)
  plain = lambda s: tf.nn.softmax(s + adder[:, None, None, :], axis=-1) * mask
  _, want_g = _value_and_grad(plain, scores, upstream)
  np.testing.assert_allclose(got_g.numpy(), want_g.numpy(), rtol=1e-5, atol=1e-6)
  # The same seed gives the same mask; another seed another one.
  again = fused.attention_probs(scores, adder, 0.5, seed)
  np.testing.assert_array_equal(again.numpy(), got_y.numpy())
  other = fused.attention_probs(scores, adder, 0.5, tf.constant([5, 7], tf.int32))
  assert not np.array_equal(other.numpy() != 0, kept)


def test_nll_matches_sparse_softmax_cross_entropy():
  rng = np.random.default_rng(3)
  logits = tf.constant(rng.normal(0, 4, (37, 1000)).astype(np.float32))
  labels = tf.constant(rng.integers(0, 1000, 37).astype(np.int32))
  upstream = tf.constant(rng.uniform(0, 1, 37).astype(np.float32))
  got_y, got_g = _value_and_grad(lambda l: fused.sparse_softmax_nll(l, labels), logits, upstream)
  plain = lambda l: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=l)
  want_y, want_g = _value_and_grad(plain, logits, upstream)
  np.testing.assert_allclose(got_y.numpy(), want_y.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_g.numpy(), want_g.numpy(), rtol=1e-5, atol=1e-7)


def test_nll_of_an_out_of_range_label_is_the_log_partition():
  logits = tf.constant([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
  got = fused.sparse_softmax_nll(logits, tf.constant([3, -1])).numpy()
  lse = np.log(np.exp([1.0, 2.0, 3.0]).sum())
  np.testing.assert_allclose(got, [lse, np.log(3.0)], rtol=1e-6)


def test_nll_of_bfloat16_logits_is_float32():
  logits = tf.constant([[0.5, -1.0, 2.0]], tf.bfloat16)
  got, grad = _value_and_grad(lambda l: fused.sparse_softmax_nll(l, tf.constant([2])), logits,
                              tf.ones([1]))
  assert got.dtype == tf.float32 and grad.dtype == tf.bfloat16
  want = -np.log(np.exp(2.0) / np.exp([0.5, -1.0, 2.0]).sum())
  np.testing.assert_allclose(got.numpy(), [want], rtol=1e-6)


def test_dropout_layer_rate_scale_and_reproducibility():
  layer = layers.Dropout(0.1, seed=7)
  x = tf.ones([1000, 1000])
  y = layer(x, training=True).numpy()
  dropped = np.mean(y == 0)
  # 1e6 Bernoulli(0.1000061) draws: the standard deviation of the mean is 3e-4.
  assert abs(dropped - 6554 / 65536) < 1.5e-3
  np.testing.assert_allclose(y[y != 0], 65536 / (65536 - 6554), rtol=1e-6)
  assert abs(y.mean() - 1.0) < 2e-3  # the expectation is kept
  y2 = layer(x, training=True).numpy()
  assert not np.array_equal(y == 0, y2 == 0)  # a new mask per call
  again = layers.Dropout(0.1, seed=7)(x, training=True).numpy()
  np.testing.assert_array_equal(again, y)  # same seed, same first mask
  np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
  np.testing.assert_array_equal(layers.Dropout(1.0)(x, training=True).numpy(), 0.0)
  # The backward draws the mask again from the seed: the gradient is upstream * the mask the
  # forward used.
  upstream = tf.constant(np.random.default_rng(0).normal(size=(1000, 1000)), tf.float32)
  seeded = layers.Dropout(0.1, seed=7)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = seeded(x, training=True)
  np.testing.assert_array_equal(tape.gradient(y, x, output_gradients=upstream).numpy(),
                                upstream.numpy() * y.numpy())  # y = x * mask, x all ones
  with pytest.raises(ValueError, match="noise_shape"):
    layers.Dropout(0.1, noise_shape=(1, 1000))


def _tiny_config(dropout):
  return BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64,
                    hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def _batch(rng):
  ids = rng.integers(5, 97, (4, 16)).astype(np.int32)
  mask = np.ones((4, 16), np.int32)
  mask[1, 10:] = 0
  return dict(input_word_ids=tf.constant(ids * mask), input_mask=tf.constant(mask),
              input_type_ids=tf.constant((np.arange(16) >= 8).astype(np.int32)[None].repeat(4, 0)),
              masked_lm_positions=tf.constant([[1, 2, 3]] * 4, tf.int32),
              masked_lm_ids=tf.constant(rng.integers(0, 97, (4, 3)).astype(np.int32)),
              masked_lm_weights=tf.constant([[1.0, 1.0, 0.0]] * 4),
              next_sentence_labels=tf.constant([[0], [1], [0], [1]], tf.int32))


def _loss_and_grads(model, batch):
  inputs = {k: batch[k] for k in PRETRAINING_INPUTS}
  with tf.GradientTape() as tape:
    loss = losses.pretraining_losses(model(inputs, training=True), batch)["loss"]
  return loss, tape.gradient(loss, model.trainable_variables)


@pytest.mark.slow
def test_training_step_equals_the_plain_ops_path(monkeypatch):
  """Without dropout, the fused GELU and loss give the plain graph's loss and gradients."""
  model = build_pretraining_model(_tiny_config(0.0))
  batch = _batch(np.random.default_rng(4))
  fused_loss, fused_grads = tf.function(lambda: _loss_and_grads(model, batch))()
  monkeypatch.setattr(fused, "ENABLED", False)
  plain_loss, plain_grads = tf.function(lambda: _loss_and_grads(model, batch))()
  np.testing.assert_allclose(fused_loss.numpy(), plain_loss.numpy(), rtol=1e-6)
  for variable, a, b in zip(model.trainable_variables, fused_grads, plain_grads):
    np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(),
                               rtol=1e-4, atol=1e-7, err_msg=variable.path)


@pytest.mark.slow
def test_gradients_with_dropout_are_those_of_the_loss_computed():
  """With dropout on, every fused kernel's backward uses the mask its forward drew: the
  gradient along a random direction equals the central difference of the same loss (the seed
  generators reset before each evaluation, so each sees the same masks)."""
  keras.utils.set_random_seed(0)
  model = build_pretraining_model(_tiny_config(0.3))
  batch = _batch(np.random.default_rng(4))
  inputs = {k: batch[k] for k in PRETRAINING_INPUTS}
  seeds = [v for v in model.variables if "seed_generator" in v.path]
  assert len(seeds) == 7  # embeddings, and per layer attention probs + two sublayer ends
  start = [v.numpy() for v in seeds]

  def loss():
    for v, value in zip(seeds, start):
      v.assign(value)
    return losses.pretraining_losses(model(inputs, training=True), batch)["loss"]

  @tf.function
  def loss_and_grads():
    with tf.GradientTape() as tape:
      value = loss()
    return value, tape.gradient(value, model.trainable_variables)

  _, grads = loss_and_grads()
  # Along the gradient's own direction the derivative is its norm.
  grads = [tf.convert_to_tensor(g).numpy() for g in grads]
  norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
  weights = [v.numpy() for v in model.trainable_variables]
  at, eps = tf.function(loss), 1e-2
  ends = []
  for sign in (1.0, -1.0):
    for v, w, g in zip(model.trainable_variables, weights, grads):
      v.assign(w + sign * eps * g / norm)
    ends.append(float(at()))
  # Float32 loss differences agree to a fraction of a percent; a backward that drew other
  # masks than its forward is off by tens of percent.
  np.testing.assert_allclose((ends[0] - ends[1]) / (2 * eps), norm, rtol=0.02)


@pytest.mark.slow
def test_training_with_dropout_uses_the_fused_kernels_and_inference_does_not():
  model = build_pretraining_model(_tiny_config(0.1))
  batch = _batch(np.random.default_rng(5))
  inputs = {k: batch[k] for k in PRETRAINING_INPUTS}
  train_graph = tf.function(lambda: _loss_and_grads(model, batch)).get_concrete_function().graph
  infer_graph = tf.function(lambda: model(inputs, training=False)).get_concrete_function().graph

  def compiled_calls(graph):
    found = set()
    for op in graph.get_operations():
      if op.type in ("StatefulPartitionedCall", "PartitionedCall"):
        name = op.get_attr("f").name
        function = graph._get_function(name)  # pylint: disable=protected-access
        if function is not None and function.cached_definition.attr.get("_XlaMustCompile"):
          found.add(name.split("_")[1] if name.startswith("__inference") else name)
    return found

  assert compiled_calls(train_graph)  # the fused kernels are there when training
  assert not compiled_calls(infer_graph)  # and inference graphs (exports) need no XLA
  loss, grads = _loss_and_grads(model, batch)
  assert np.isfinite(loss.numpy()) and all(g is not None for g in grads)


@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_dropout_add_layer_norm_matches_keras_layer_norm_and_autodiff(rate):
  rng = np.random.default_rng(6)
  x = tf.constant(rng.normal(0, 1, (2, 5, 16)).astype(np.float32))
  residual = tf.constant(rng.normal(0, 1, (2, 5, 16)).astype(np.float32))
  upstream = tf.constant(rng.normal(0, 1, (2, 5, 16)).astype(np.float32))
  norm = layers.layer_norm("LayerNorm", "float32")
  norm.build((None, None, 16))
  norm.gamma.assign(rng.uniform(0.5, 1.5, 16).astype(np.float32))
  norm.beta.assign(rng.normal(0, 0.1, 16).astype(np.float32))
  seed = tf.constant([8, 9], tf.int32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([x, residual])
    got = fused.dropout_add_layer_norm(x, residual, tf.convert_to_tensor(norm.gamma),
                                       tf.convert_to_tensor(norm.beta), rate, seed, 1e-12)
  got_grads = tape.gradient(got, [x, residual, norm.gamma, norm.beta],
                            output_gradients=upstream)
  # The mask the kernel used: x's gradient is zero exactly where x was dropped.
  kept = got_grads[0].numpy() != 0
  if rate == 0:
    assert kept.all()
  else:
    assert 0.15 < 1 - kept.mean() < 0.45
  mask = tf.constant(np.where(kept, 1 / (1 - 19661 / 65536), 0.0).astype(np.float32)
                     if rate else np.ones(kept.shape, np.float32))
  with tf.GradientTape() as tape:
    tape.watch([x, residual])
    want = norm(x * mask + residual)
  want_grads = tape.gradient(want, [x, residual, norm.gamma, norm.beta],
                             output_gradients=upstream)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
  for name, a, b in zip(["x", "residual", "gamma", "beta"], got_grads, want_grads):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def _assert_rounded_once(got, want):
  """bfloat16 `got` is float32 `want` rounded: within half a bfloat16 ulp (8 significant bits)
  of it, allowing float32 noise in `want`."""
  want = want.numpy().astype(np.float64)
  _, exponent = np.frexp(want)  # |want| = m * 2**exponent, 0.5 <= m < 1
  half_ulp = np.ldexp(1.0, exponent - 9)
  error = np.abs(tf.cast(got, tf.float32).numpy().astype(np.float64) - want)
  assert got.dtype == tf.bfloat16
  np.testing.assert_array_less(error, half_ulp * (1 + 1e-4) + 1e-6 * np.abs(want) + 1e-30)


def test_dropout_kernels_in_bfloat16_are_the_float32_kernels_rounded_once():
  # bfloat16 inputs are computed in float32 and rounded once at the end (the old kernels masked
  # and added in bfloat16, rounding at every step). XLA may sum a row in another order when the
  # inputs' dtype differs, so the float32 kernel's values are known to a few float32 ulps: a
  # bfloat16 result is within half a bfloat16 ulp of them, a float32 one within 1e-5.
  rng = np.random.default_rng(9)
  as_bf16 = lambda shape, sd=1.0: tf.cast(tf.constant(rng.normal(0, sd, shape), tf.float32),
                                          tf.bfloat16)
  as_f32 = lambda t: tf.cast(t, tf.float32)
  seed = tf.constant([3, 4], tf.int32)
  x, dy = as_bf16((4, 8, 64)), as_bf16((4, 8, 64))
  y, g = _value_and_grad(lambda t: fused.dropout(t, 0.1, seed), x, dy)
  y32, g32 = _value_and_grad(lambda t: fused.dropout(t, 0.1, seed), as_f32(x), as_f32(dy))
  _assert_rounded_once(y, y32)
  _assert_rounded_once(g, g32)
  scores, upstream = as_bf16((2, 2, 16, 16), 2.0), as_bf16((2, 2, 16, 16))
  adder = tf.constant(np.where(rng.random((2, 16)) < 0.2, -10000.0, 0.0), tf.float32)
  probs = lambda t: fused.attention_probs(t, adder, 0.1, seed)
  y, g = _value_and_grad(probs, scores, upstream)
  y32, g32 = _value_and_grad(probs, as_f32(scores), as_f32(upstream))
  _assert_rounded_once(y, y32)
  _assert_rounded_once(g, g32)
  residual = as_bf16((4, 8, 64))
  gamma = tf.constant(rng.uniform(0.5, 1.5, 64), tf.float32)
  beta = tf.constant(rng.normal(0, 0.1, 64), tf.float32)
  upstream = tf.constant(rng.normal(0, 1, (4, 8, 64)), tf.float32)

  def norm_and_grads(x, residual):
    with tf.GradientTape() as tape:
      tape.watch([x, residual])
      y = fused.dropout_add_layer_norm(x, residual, gamma, beta, 0.1, seed, 1e-12)
    return y, tape.gradient(y, [x, residual], output_gradients=upstream)

  y, (dx, dresidual) = norm_and_grads(x, residual)
  y32, (dx32, dresidual32) = norm_and_grads(as_f32(x), as_f32(residual))
  assert y.dtype == tf.float32 and dx.dtype == tf.bfloat16 and dresidual.dtype == tf.bfloat16
  np.testing.assert_allclose(y.numpy(), y32.numpy(), rtol=1e-5, atol=1e-5)
  _assert_rounded_once(dx, dx32)
  _assert_rounded_once(dresidual, dresidual32)


def test_hashed_dropout_draws_look_independent():
  """Bit balance, neighbours and consecutive seeds of the hashed 16-bit draws."""
  draw = tf.function(lambda seed: fused.dropout_mask(tf.constant([400, 1000]), seed, 6554, 1.0,
                                                     tf.float32), jit_compile=True)
  masks = [draw(tf.constant([11, k], tf.int32)).numpy() == 0 for k in range(4)]
  for dropped in masks:
    rate = dropped.mean()  # 4e5 draws: standard deviation 4.7e-4
    assert abs(rate - 6554 / 65536) < 2.5e-3
    # Neighbours (in a row, and the two halves of one word) are independent: P(both) = p^2.
    flat = dropped.reshape(-1)
    both_next = np.mean(flat[1:] & flat[:-1])
    both_halves = np.mean(flat[:200000] & flat[200000:])
    for both in (both_next, both_halves):
      assert abs(both - rate * rate) < 1.5e-3
  # Consecutive seeds (as a SeedGenerator hands them out) give unrelated masks.
  for a, b in zip(masks, masks[1:]):
    assert abs(np.mean(a & b) - a.mean() * b.mean()) < 1.5e-3
  # Bit balance of the raw words.
  words = tf.function(lambda: fused.random_words(100000, tf.constant([3, 4])),
                      jit_compile=True)().numpy()
  bits = (words[0][:, None] >> np.arange(32, dtype=np.uint32)) & 1
  np.testing.assert_allclose(bits.mean(0), 0.5, atol=0.01)


def test_dropout_falls_back_to_keras_when_fusion_is_off(monkeypatch):
  monkeypatch.setattr(fused, "ENABLED", False)
  layer = layers.Dropout(0.5, seed=3)
  x = tf.ones([100, 100])
  want = keras.layers.Dropout(0.5, seed=3)(x, training=True)
  np.testing.assert_array_equal(layer(x, training=True).numpy(), want.numpy())
