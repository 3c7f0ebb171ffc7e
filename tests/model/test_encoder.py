"""Tests of bert_tf.model.encoder: parity with the NumPy reference, golden values, save/reload,
sizes."""

import keras
import numpy as np
import pytest

from bert_tf.model import checkpoints
from bert_tf.config import BertConfig, preset
from bert_tf.model.encoder import build_encoder
from tests.helpers import ODD_CONFIG, random_inputs, random_original_weights, ref_encoder


def _encoder_inputs(ids, mask, types):
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=types)


def test_matches_numpy_reference_with_padding():
  rng = np.random.default_rng(1)
  model = build_encoder(ODD_CONFIG)
  weights = random_original_weights(ODD_CONFIG, rng, heads=False)
  checkpoints.set_original_weights(model, weights)
  ids, mask, types, _ = random_inputs(ODD_CONFIG, rng)
  out = model(_encoder_inputs(ids, mask, types), training=False)
  seq, pooled, per_layer = ref_encoder(weights, ODD_CONFIG, ids, mask, types)
  np.testing.assert_allclose(np.asarray(out["sequence_output"]), seq, atol=1e-5)
  np.testing.assert_allclose(np.asarray(out["pooled_output"]), pooled, atol=1e-5)
  assert len(out["encoder_outputs"]) == ODD_CONFIG.num_hidden_layers
  for got, want in zip(out["encoder_outputs"], per_layer):
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


def test_other_activations_follow_the_config():
  rng = np.random.default_rng(2)
  config = ODD_CONFIG.replace(hidden_act="relu")
  model = build_encoder(config)
  weights = random_original_weights(config, rng, heads=False)
  checkpoints.set_original_weights(model, weights)
  ids, mask, types, _ = random_inputs(config, rng)
  out = model(_encoder_inputs(ids, mask, types))
  seq, _, _ = ref_encoder(weights, config, ids, mask, types, act=lambda x: np.maximum(x, 0))
  np.testing.assert_allclose(np.asarray(out["sequence_output"]), seq, atol=1e-5)


def test_dynamic_batch_and_sequence_sizes():
  model = build_encoder(ODD_CONFIG)
  for batch, seq in ((1, 3), (5, 16)):
    ones = np.ones((batch, seq), np.int32)
    out = model(_encoder_inputs(ones, ones, 0 * ones))
    assert out["sequence_output"].shape == (batch, seq, 32)
    assert out["pooled_output"].shape == (batch, 32)


def test_input_and_output_names():
  model = build_encoder(ODD_CONFIG)
  assert sorted(t.name for t in model.inputs) == ["input_mask", "input_type_ids", "input_word_ids"]
  assert all(t.dtype == "int32" for t in model.inputs)
  assert sorted(model.output) == ["encoder_outputs", "pooled_output", "sequence_output"]


def test_dropout_only_in_training():
  model = build_encoder(ODD_CONFIG)
  ids, mask, types, _ = random_inputs(ODD_CONFIG, np.random.default_rng(3))
  inputs = _encoder_inputs(ids, mask, types)
  a = np.asarray(model(inputs, training=False)["sequence_output"])
  b = np.asarray(model(inputs, training=False)["sequence_output"])
  c = np.asarray(model(inputs, training=True)["sequence_output"])
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - c).max() > 1e-3


def test_golden_values_with_fixed_seed():
  """Pins the initialisation and the forward pass: a refactor that changes numbers fails."""
  keras.utils.set_random_seed(1234)
  config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=24, max_position_embeddings=12, initializer_range=0.5)
  model = build_encoder(config)
  ids = np.array([[2, 7, 11, 3, 0], [2, 40, 3, 9, 3]], np.int32)
  mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], np.int32)
  types = np.array([[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]], np.int32)
  out = model(_encoder_inputs(ids, mask, types))
  seq = np.asarray(out["sequence_output"])
  pooled = np.asarray(out["pooled_output"])
  np.testing.assert_allclose(seq[0, 0, :4], GOLDEN_SEQ_0_0, atol=1e-4)
  np.testing.assert_allclose(seq[1, 3, -4:], GOLDEN_SEQ_1_3, atol=1e-4)
  np.testing.assert_allclose(pooled[:, :3], GOLDEN_POOLED, atol=1e-4)


# Recorded from this implementation (keras 3.15.1, TF 2.20 CPU) after checking its parity with the
# NumPy reference above; they pin the seeded initialisation too.
GOLDEN_SEQ_0_0 = [0.573745, -0.856688, -0.748753, -0.441180]
GOLDEN_SEQ_1_3 = [-0.638245, -1.615437, 1.703158, -0.598922]
GOLDEN_POOLED = [[-0.751386, -0.844032, 0.792876], [-0.185777, -0.318942, 0.998208]]


def test_save_and_reload_keras_format(tmp_path):
  model = build_encoder(ODD_CONFIG)
  ids, mask, types, _ = random_inputs(ODD_CONFIG, np.random.default_rng(4))
  inputs = _encoder_inputs(ids, mask, types)
  before = model(inputs)
  path = str(tmp_path / "encoder.keras")
  model.save(path)
  restored = keras.models.load_model(path)
  after = restored(inputs)
  for key in ("sequence_output", "pooled_output"):
    np.testing.assert_array_equal(np.asarray(before[key]), np.asarray(after[key]))
  assert [v.path for v in restored.weights] == [v.path for v in model.weights]


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_variables_equal_the_original_for_presets(name):
  config = preset(name)
  model = build_encoder(config)
  ours = {checkpoints.original_name(v.path)[0]: tuple(v.shape) for v in model.weights}
  expected = checkpoints.original_variable_shapes(config, heads=False)
  assert ours == dict(expected)
  assert model.count_params() == sum(int(np.prod(s)) for s in expected.values())


def test_variable_path_table():
  """Our paths for layer 1 and the pooler, exactly, and their original names."""
  model = build_encoder(ODD_CONFIG)
  paths = [v.path for v in model.weights]
  expected = [
      ("word_embeddings/embeddings", "bert/embeddings/word_embeddings"),
      ("embeddings/token_type_embeddings", "bert/embeddings/token_type_embeddings"),
      ("embeddings/position_embeddings", "bert/embeddings/position_embeddings"),
      ("embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/gamma"),
      ("layer_1/attention/query/kernel", "bert/encoder/layer_1/attention/self/query/kernel"),
      ("layer_1/attention/value/bias", "bert/encoder/layer_1/attention/self/value/bias"),
      ("layer_1/attention_output/kernel", "bert/encoder/layer_1/attention/output/dense/kernel"),
      ("layer_1/attention_LayerNorm/beta", "bert/encoder/layer_1/attention/output/LayerNorm/beta"),
      ("layer_1/intermediate/kernel", "bert/encoder/layer_1/intermediate/dense/kernel"),
      ("layer_1/output_dense/bias", "bert/encoder/layer_1/output/dense/bias"),
      ("layer_1/output_LayerNorm/gamma", "bert/encoder/layer_1/output/LayerNorm/gamma"),
      ("pooler/dense/kernel", "bert/pooler/dense/kernel"),
  ]
  for ours, original in expected:
    assert ours in paths
    assert checkpoints.original_name(ours) == (original, False)
