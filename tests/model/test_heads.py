"""Tests of bert_tf.model.heads: the pretraining model against the NumPy reference, sizes, save/reload,
mixed precision."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.training import losses
from bert_tf.config import BertConfig, preset
from bert_tf.model.heads import PRETRAINING_INPUTS, build_pretraining_model
from tests.helpers import (ODD_CONFIG, random_inputs, random_original_weights, ref_encoder,
                         ref_pretraining_heads)


def _features(config, rng, batch=3, seq=7, predictions=4):
  ids, mask, types, positions = random_inputs(config, rng, batch, seq, predictions)
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=types,
              masked_lm_positions=positions)


def _labels(config, rng, batch=3, predictions=4):
  weights = np.ones((batch, predictions), np.float32)
  weights[1, 2:] = 0.0
  return dict(masked_lm_ids=rng.integers(0, config.vocab_size, (batch, predictions)),
              masked_lm_weights=weights,
              next_sentence_labels=rng.integers(0, 2, (batch, 1)))


def test_matches_numpy_reference():
  rng = np.random.default_rng(5)
  model = build_pretraining_model(ODD_CONFIG)
  weights = random_original_weights(ODD_CONFIG, rng)
  report = checkpoints.set_original_weights(model, weights)
  assert not (report.missing or report.unexpected or report.mismatched)
  features = _features(ODD_CONFIG, rng)
  out = model(features, training=False)
  seq, pooled, _ = ref_encoder(weights, ODD_CONFIG, features["input_word_ids"],
                               features["input_mask"], features["input_type_ids"])
  mlm, nsp = ref_pretraining_heads(weights, seq, pooled, features["masked_lm_positions"])
  assert out["masked_lm_logits"].shape == (3, 4, ODD_CONFIG.vocab_size)
  np.testing.assert_allclose(np.asarray(out["masked_lm_logits"]), mlm, atol=1e-5)
  np.testing.assert_allclose(np.asarray(out["next_sentence_logits"]), nsp, atol=1e-5)


def test_input_names_are_the_encoders_tf_hub_names_plus_positions():
  model = build_pretraining_model(ODD_CONFIG)
  assert sorted(t.name for t in model.inputs) == sorted(PRETRAINING_INPUTS)
  assert set(PRETRAINING_INPUTS) == {"input_word_ids", "input_mask", "input_type_ids",
                                     "masked_lm_positions"}
  assert sorted(model.output) == ["masked_lm_logits", "next_sentence_logits"]


def test_output_layer_is_tied_to_word_embeddings():
  model = build_pretraining_model(ODD_CONFIG)
  rng = np.random.default_rng(6)
  features = _features(ODD_CONFIG, rng)
  table = model.get_layer("word_embeddings").embeddings
  assert sum(v is table for v in model.weights) == 1
  assert not any(tuple(v.shape) == (ODD_CONFIG.hidden_size, ODD_CONFIG.vocab_size)
                 for v in model.weights)
  before = np.asarray(model(features)["masked_lm_logits"])
  table.assign(table.numpy() * 2.0)
  after = np.asarray(model(features)["masked_lm_logits"])
  assert np.abs(before - after).max() > 1e-3


def test_save_and_reload_keeps_outputs_and_tying(tmp_path):
  model = build_pretraining_model(ODD_CONFIG)
  features = _features(ODD_CONFIG, np.random.default_rng(7))
  before = model(features)
  path = str(tmp_path / "pretraining.keras")
  model.save(path)
  restored = keras.models.load_model(path)
  after = restored(features)
  for key in before:
    np.testing.assert_array_equal(np.asarray(before[key]), np.asarray(after[key]))
  assert len(restored.weights) == len(model.weights)
  # Still tied after reloading: changing the table changes the logits.
  table = restored.get_layer("word_embeddings").embeddings
  table.assign(table.numpy() * 2.0)
  changed = restored(features)["masked_lm_logits"]
  assert np.abs(np.asarray(changed) - np.asarray(after["masked_lm_logits"])).max() > 1e-3


@pytest.mark.slow
def test_bert_base_has_the_original_parameter_count():
  config = preset("base")
  expected = checkpoints.original_variable_shapes(config, heads=True)
  assert len(expected) == 206
  assert sum(int(np.prod(s)) for s in expected.values()) == 110_106_428
  model = build_pretraining_model(config)
  assert len(model.weights) == 206
  assert model.count_params() == 110_106_428
  ours = {checkpoints.original_name(v.path)[0]:
          tuple(reversed(v.shape)) if checkpoints.original_name(v.path)[1] else tuple(v.shape)
          for v in model.weights}
  assert ours == dict(expected)


@pytest.mark.parametrize("name", ["mini", pytest.param("medium", marks=pytest.mark.slow)])
def test_presets_with_heads_have_the_original_shapes(name):
  config = preset(name)
  model = build_pretraining_model(config)
  expected = checkpoints.original_variable_shapes(config, heads=True)
  assert checkpoints.get_original_weights(model).keys() == expected.keys()
  assert {k: v.shape for k, v in checkpoints.get_original_weights(model).items()} == dict(expected)


def test_large_shape_table():
  # BERT-Large is only counted from the table (building it takes too long for a unit test); the
  # table itself is checked against real models above.
  expected = checkpoints.original_variable_shapes(preset("large"), heads=True)
  assert len(expected) == 16 * 24 + 5 + 2 + 7
  encoder = checkpoints.original_variable_shapes(preset("large"), heads=False)
  # 335,141,888 is the published size of bert-large-uncased without heads (e.g. Hugging Face's
  # BertModel); the heads add 1,084,220.
  assert sum(int(np.prod(s)) for s in encoder.values()) == 335_141_888
  assert sum(int(np.prod(s)) for s in expected.values()) == 336_226_108


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_training_step(policy):
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(policy)
  try:
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=24, max_position_embeddings=16)
    model = build_pretraining_model(config)
  finally:
    keras.config.set_dtype_policy(previous)
  compute = policy.split("_")[1]
  assert model.get_layer("layer_0").compute_dtype == compute
  assert all(v.dtype == "float32" for v in model.weights)
  rng = np.random.default_rng(8)
  features = _features(config, rng, batch=4, seq=9, predictions=3)
  labels = _labels(config, rng, batch=4, predictions=3)
  optimizer = keras.optimizers.Adam(1e-3)
  if policy == "mixed_float16":
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  with tf.GradientTape() as tape:
    outputs = model(features, training=True)
    assert outputs["masked_lm_logits"].dtype == "float32"
    assert outputs["next_sentence_logits"].dtype == "float32"
    loss = losses.pretraining_losses(outputs, labels)["loss"]
    scaled = optimizer.scale_loss(loss)
  assert loss.dtype == tf.float32 and np.isfinite(loss.numpy())
  grads = tape.gradient(scaled, model.trainable_variables)
  assert all(g is not None for g in grads)
  before = [v.numpy().copy() for v in model.trainable_variables]
  optimizer.apply_gradients(zip(grads, model.trainable_variables))
  changed = sum(np.abs(b - v.numpy()).max() > 0 for b, v in zip(before, model.trainable_variables))
  assert changed == len(before)
