"""Tests of bert_tf.model.layers, and the NumPy reference of the original BERT formulas.

The reference functions (float64, weights keyed by the original TF1 names) live in
tests/helpers.py; test_encoder, test_heads and test_checkpoints use them too.
"""

import inspect
import math

import keras
import numpy as np
import pytest

from bert_tf.model import layers
from tests.helpers import ref_gelu

# === Tests of the layers ===
@pytest.mark.parametrize("name, expected", [
    ("gelu", ref_gelu),
    ("gelu_new", ref_gelu),
    ("gelu_exact", lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))),
    ("relu", lambda x: np.maximum(x, 0.0)),
    ("tanh", np.tanh),
    ("silu", lambda x: x / (1.0 + np.exp(-x))),
    ("swish", lambda x: x / (1.0 + np.exp(-x))),
    ("linear", lambda x: x),
])
def test_activations_match_their_formulas(name, expected):
  x = np.linspace(-5.0, 5.0, 41).astype(np.float32)
  got = np.asarray(layers.get_activation(name)(keras.ops.convert_to_tensor(x)))
  np.testing.assert_allclose(got, expected(x.astype(np.float64)), atol=1e-6)


def test_gelu_variants_differ():
  # The tanh and erf forms differ by ~1e-3 somewhere in [-3, 3]: a mix-up would fail parity.
  x = keras.ops.convert_to_tensor(np.linspace(-3, 3, 61).astype(np.float32))
  diff = np.abs(np.asarray(layers.get_activation("gelu")(x))
                - np.asarray(layers.get_activation("gelu_exact")(x)))
  assert diff.max() > 1e-4


def test_unknown_activation_is_an_error():
  with pytest.raises(ValueError, match="hidden_act 'gelu2'"):
    layers.get_activation("gelu2")


def test_attention_masks_padding_keys():
  """Changing a padded token's hidden state must not change the real tokens' outputs."""
  rng = np.random.default_rng(0)
  layer = layers.SelfAttention(32, 4, attention_probs_dropout_prob=0.0)
  x = rng.standard_normal((2, 5, 32)).astype(np.float32)
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
  out1 = np.asarray(layer(x, mask))
  x2 = x.copy()
  x2[0, 3:] += 5.0
  out2 = np.asarray(layer(x2, mask))
  np.testing.assert_allclose(out1[0, :3], out2[0, :3], atol=1e-5)
  assert np.abs(out1[0, 3:] - out2[0, 3:]).max() > 1e-3  # padded queries do see their change


@pytest.mark.parametrize("layer", [
    layers.WordEmbedding(11, 8, 0.05, name="word_embeddings"),
    layers.EmbeddingPostprocessor(8, 3, 9, 0.2, 0.05, name="embeddings"),
    layers.SelfAttention(8, 2, 0.3, 0.05, name="attention"),
    layers.TransformerBlock(8, 2, 13, "relu", 0.2, 0.3, 0.05, name="layer_0"),
    layers.Pooler(8, 0.05, name="pooler"),
], ids=lambda layer: type(layer).__name__)
def test_layer_config_round_trips(layer):
  config = layer.get_config()
  restored = type(layer).from_config(config)
  assert restored.get_config() == config
  # Every constructor argument appears in the config.
  for arg in inspect.signature(type(layer).__init__).parameters:
    if arg not in ("self", "kwargs"):
      assert arg in config, arg
  # And the registered name lets Keras find the class from the serialised form.
  again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
  assert type(again) is type(layer)


def test_sequence_longer_than_position_table_is_a_clear_error():
  layer = layers.EmbeddingPostprocessor(8, 2, 4, 0.0, name="embeddings")
  words = np.zeros((1, 5, 8), np.float32)
  with pytest.raises(Exception, match="longer than max_position_embeddings"):
    layer(words, np.zeros((1, 5), np.int32))


def test_zero_initial_values_builds_zeros_where_the_original_draws_random_values():
  """Within layers.zero_initial_values() the truncated-normal weights of a model start at zero
  (a teacher whose every weight is loaded next); outside, and after it, they are random again;
  the other initializers (LayerNorm's ones) are untouched."""
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import head  # pylint: disable=g-import-not-at-top
  config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)

  def kernels(model):
    return {v.path: np.asarray(v) for v in model.weights
            if v.path.endswith(("kernel", "embeddings", "output_weights"))}

  with layers.zero_initial_values():
    zeroed = head.build_classifier_model(config, 3)
  random = head.build_classifier_model(config, 3)
  assert len(kernels(zeroed)) >= 8 and set(kernels(zeroed)) == set(kernels(random))
  assert all(not value.any() for value in kernels(zeroed).values())
  assert all(value.std() > 0.005 for value in kernels(random).values())
  gammas = [np.asarray(v) for v in zeroed.weights if v.path.endswith("gamma")]
  assert gammas and all((g == 1).all() for g in gammas)
