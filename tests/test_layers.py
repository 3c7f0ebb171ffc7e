"""Tests of bert_tf.layers, and the NumPy reference of the original BERT formulas.

The reference functions below (float64, weights keyed by the original TF1 names of spec section 6)
are the specification in code; test_encoder, test_heads and test_checkpoints import them.
"""

import inspect
import math

import keras
import numpy as np
import pytest

from bert_tf import layers
from bert_tf.checkpoints import original_variable_shapes
from bert_tf.config import BertConfig

# Tiny, odd-sized config: every dimension differs, so a transposed kernel cannot go unnoticed.
ODD_CONFIG = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=16, type_vocab_size=3)


# === NumPy reference (the original's formulas) ===
def ref_gelu(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def ref_layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(axis=-1, keepdims=True)
  var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def ref_softmax(x):
  e = np.exp(x - x.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def ref_attention(w, prefix, x, mask, num_heads):
  """Self-attention of one layer with the original's -10000 mask adder; x [B, S, H]."""
  b, s, h = x.shape
  d = h // num_heads

  def heads(name):
    y = x @ w[f"{prefix}/self/{name}/kernel"] + w[f"{prefix}/self/{name}/bias"]
    return y.reshape(b, s, num_heads, d).transpose(0, 2, 1, 3)  # [B, N, S, D]

  q, k, v = heads("query"), heads("key"), heads("value")
  scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
  scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
  context = (ref_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
  return context @ w[f"{prefix}/output/dense/kernel"] + w[f"{prefix}/output/dense/bias"]


def ref_encoder(w, config, ids, mask, types, act=ref_gelu):
  """Returns (sequence_output, pooled_output, per-layer outputs) of the original model."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  mask = np.asarray(mask, np.float64)
  s = ids.shape[1]
  x = (w["bert/embeddings/word_embeddings"][ids]
       + w["bert/embeddings/token_type_embeddings"][types]
       + w["bert/embeddings/position_embeddings"][:s][None])
  x = ref_layer_norm(x, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
  all_layers = []
  for n in range(config.num_hidden_layers):
    p = f"bert/encoder/layer_{n}"
    a = ref_attention(w, f"{p}/attention", x, mask, config.num_attention_heads)
    x = ref_layer_norm(a + x, w[f"{p}/attention/output/LayerNorm/gamma"],
                       w[f"{p}/attention/output/LayerNorm/beta"])
    f = act(x @ w[f"{p}/intermediate/dense/kernel"] + w[f"{p}/intermediate/dense/bias"])
    f = f @ w[f"{p}/output/dense/kernel"] + w[f"{p}/output/dense/bias"]
    x = ref_layer_norm(f + x, w[f"{p}/output/LayerNorm/gamma"], w[f"{p}/output/LayerNorm/beta"])
    all_layers.append(x)
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
  return x, pooled, all_layers


def ref_pretraining_heads(w, sequence_output, pooled_output, positions, act=ref_gelu):
  """Returns (masked_lm_logits [B, P, V], next_sentence_logits [B, 2]) of the original heads."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  gathered = np.take_along_axis(sequence_output, positions[:, :, None], axis=1)  # [B, P, H]
  t = act(gathered @ w["cls/predictions/transform/dense/kernel"]
          + w["cls/predictions/transform/dense/bias"])
  t = ref_layer_norm(t, w["cls/predictions/transform/LayerNorm/gamma"],
                     w["cls/predictions/transform/LayerNorm/beta"])
  mlm = t @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  nsp = (pooled_output @ w["cls/seq_relationship/output_weights"].T
         + w["cls/seq_relationship/output_bias"])
  return mlm, nsp


def random_original_weights(config, rng, heads=True):
  """Random values for every original variable; LayerNorm and biases are not left at 1 / 0."""
  values = {}
  for name, shape in original_variable_shapes(config, heads=heads).items():
    if name.endswith("gamma"):
      values[name] = 1.0 + 0.1 * rng.standard_normal(shape)
    else:
      values[name] = 0.2 * rng.standard_normal(shape)
    values[name] = values[name].astype(np.float32)
  return values


def random_inputs(config, rng, batch=3, seq=7, predictions=4):
  """Token ids, a padded mask (row lengths seq, seq - 2, 1), type ids and masked positions."""
  ids = rng.integers(0, config.vocab_size, size=(batch, seq)).astype(np.int32)
  lengths = [seq, seq - 2, 1][:batch] + [seq] * max(0, batch - 3)
  mask = np.array([[1 if j < n else 0 for j in range(seq)] for n in lengths], np.int32)
  ids = ids * mask
  types = (rng.integers(0, config.type_vocab_size, size=(batch, seq)) * mask).astype(np.int32)
  positions = rng.integers(0, seq, size=(batch, predictions)).astype(np.int32)
  return ids, mask, types, positions


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
