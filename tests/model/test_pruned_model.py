"""The pruned-last-layer pretraining model and name-keyed training checkpoints."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model import conversion
from bert_tf.training import losses
from bert_tf.config import BertConfig
from bert_tf.model.heads import PRETRAINING_INPUTS, build_pretraining_model

CONFIG = BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=48, max_position_embeddings=40, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  mask = np.ones((5, 24), np.int32)
  mask[1, 13:] = 0
  mask[3, 7:] = 0
  positions = np.sort(rng.integers(1, 7, (5, 4)), axis=1).astype(np.int32)
  positions[2, 3] = 0  # a padding slot, as in the records
  return dict(
      input_word_ids=(rng.integers(1, 101, (5, 24)) * mask).astype(np.int32), input_mask=mask,
      input_type_ids=((np.arange(24) >= 10) * mask).astype(np.int32),
      masked_lm_positions=positions,
      masked_lm_ids=rng.integers(0, 101, (5, 4)).astype(np.int32),
      masked_lm_weights=np.where(positions > 0, 1.0, 0.0).astype(np.float32),
      next_sentence_labels=rng.integers(0, 2, (5, 1)).astype(np.int32))


def _models():
  full = build_pretraining_model(CONFIG)
  pruned = build_pretraining_model(CONFIG, prune_last_layer=True)
  assert [w.path for w in pruned.weights] == [w.path for w in full.weights]
  pruned.set_weights(full.get_weights())
  return full, pruned


def _inputs(batch):
  return {k: batch[k] for k in PRETRAINING_INPUTS}


def test_pruned_logits_equal_the_full_model():
  full, pruned = _models()
  batch = _batch()
  want, got = full(_inputs(batch)), pruned(_inputs(batch))
  for key in want:
    np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-5, atol=1e-6,
                               err_msg=key)
  # Fewer matmul rows in the last layer: its output is [B, 1 + P, H].
  assert pruned.get_layer("layer_2").output.shape[1] is None
  assert full.count_params() == pruned.count_params()


@pytest.mark.slow
def test_pruned_gradients_equal_the_full_model():
  full, pruned = _models()
  batch = _batch(1)

  def grads(model):
    with tf.GradientTape() as tape:
      loss = losses.pretraining_losses(model(_inputs(batch), training=True), batch)["loss"]
    return loss, tape.gradient(loss, model.trainable_variables)

  want_loss, want = grads(full)
  got_loss, got = grads(pruned)
  np.testing.assert_allclose(got_loss.numpy(), want_loss.numpy(), rtol=1e-6)
  for variable, a, b in zip(full.trainable_variables, got, want):
    np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(),
                               rtol=1e-4, atol=1e-7, err_msg=variable.path)


@pytest.mark.slow
def test_training_checkpoint_restores_across_graph_layouts(tmp_path):
  full, pruned = _models()
  for w in pruned.weights:
    w.assign(w + 0.5)
  prefix = tf.train.Checkpoint(model=checkpoints.checkpointable(pruned),
                               step=tf.Variable(3, dtype=tf.int64)).write(str(tmp_path / "ckpt"))
  assert checkpoints.is_training_checkpoint(prefix)
  assert checkpoints.detect_format(prefix) == "bert_tf"
  # Keys name the layers, not their position in the graph.
  names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  assert any(n.startswith("model/layer_2/attention/query/") for n in names)
  checkpoints.restore_training_checkpoint(full, prefix)
  for a, b in zip(full.weights, pruned.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
  values = checkpoints.read_training_checkpoint(prefix, CONFIG)
  np.testing.assert_array_equal(values["bert/encoder/layer_2/output/dense/kernel"],
                                full.get_layer("layer_2").output_dense.kernel.numpy())


@pytest.mark.slow
def test_a_checkpoint_keyed_by_graph_position_is_refused(tmp_path):
  full, _ = _models()
  prefix = tf.train.Checkpoint(model=full, step=tf.Variable(1, dtype=tf.int64)).write(
      str(tmp_path / "old"))
  with pytest.raises(ValueError, match="does not hold this model's weights"):
    checkpoints.restore_training_checkpoint(build_pretraining_model(CONFIG), prefix)


@pytest.mark.slow
def test_convert_a_training_output_dir_to_tf1(tmp_path):
  _, pruned = _models()
  out = tmp_path / "run"
  out.mkdir()
  CONFIG.to_json_file(str(out / "bert_config.json"))
  checkpoint = tf.train.Checkpoint(model=checkpoints.checkpointable(pruned),
                                   step=tf.Variable(7, dtype=tf.int64))
  tf.train.CheckpointManager(checkpoint, str(out), max_to_keep=1).save()
  conversion.convert_checkpoint(str(out), str(tmp_path / "tf1" / "bert_model.ckpt"))
  converted = checkpoints.read_tf1_checkpoint(str(tmp_path / "tf1" / "bert_model.ckpt"))
  original = checkpoints.get_original_weights(pruned)
  assert set(converted) == set(original)
  for name, value in original.items():
    np.testing.assert_array_equal(converted[name], value, err_msg=name)
