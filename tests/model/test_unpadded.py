"""The transformer layers' unpadded training path (TransformerBlock(unpadded=True), the
multiple-choice model's): the same outputs at real positions and the same gradients as the
padded computation, the padding positions 0, and the inference graph untouched."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model import heads
from bert_tf.model import layers

HIDDEN, HEADS, SEQ = 32, 4, 12


def _mask():
  mask = np.zeros((4, SEQ), np.int32)
  for row, length in enumerate((SEQ, 5, 9, 1)):  # a full row and one of [CLS] alone
    mask[row, :length] = 1
  return tf.constant(mask)


def _block(hidden_act):
  block = layers.TransformerBlock(HIDDEN, HEADS, 48, hidden_act, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, name="layer_0")
  block.build((None, None, HIDDEN))
  rng = np.random.default_rng(0)
  for weight in block.weights:  # biases and LayerNorm offsets away from their zero start
    weight.assign(weight + rng.normal(0, 0.1, weight.shape).astype(np.float32))
  return block


def _run(block, x, mask, unpadded, query_positions=None):
  upstream = tf.constant(np.random.default_rng(3).normal(
      0, 1, (4, SEQ if query_positions is None else query_positions.shape[1], HIDDEN)),
                         tf.float32)
  with tf.GradientTape() as tape:
    tape.watch(x)
    out = block(x, mask, query_positions, training=True, unpadded=unpadded)
    real = upstream if query_positions is not None else upstream * tf.cast(
        mask[:, :, None], tf.float32)
    loss = tf.reduce_sum(out * real)
  grads = tape.gradient(loss, [x] + block.trainable_variables)
  return out.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads]


# TokenRows' row-count steps: the default (48 positions: a step of 1, the 27 real tokens
# alone), and 4 (a step of 12: 36 rows, 9 of them padding positions computed and dropped).
@pytest.mark.parametrize("hidden_act", ["gelu_exact", "gelu"])
@pytest.mark.parametrize("query", [False, True])
@pytest.mark.parametrize("shapes", [layers.TOKEN_ROW_SHAPES, 4])
def test_unpadded_block_equals_the_padded_block(hidden_act, query, shapes, monkeypatch):
  monkeypatch.setattr(layers.TokenRows.__init__, "__defaults__", (shapes,))
  block = _block(hidden_act)
  x = tf.constant(np.random.default_rng(1).normal(0, 1, (4, SEQ, HIDDEN)), tf.float32)
  mask = _mask()
  assert layers.TokenRows(mask).positions.shape[0] == (27 if shapes == 32 else 36)
  positions = tf.constant([[0, 3], [0, 4], [0, 8], [0, 0]], tf.int32) if query else None
  want, want_grads = _run(block, x, mask, False, positions)
  got, got_grads = _run(block, x, mask, True, positions)
  real = np.ones(want.shape[:2], bool) if query else mask.numpy() > 0
  np.testing.assert_allclose(got[real], want[real], rtol=1e-5, atol=1e-5)
  if not query:
    assert not np.any(got[~real])  # padding positions are 0
  # The input's gradient (0 at padding in both: padding keys weigh 0) and every weight's.
  for got_grad, want_grad in zip(got_grads, want_grads):
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-4, atol=1e-5)
  assert np.abs(want_grads[1]).max() > 0.1  # the comparison is not between zeros


def test_token_rows_move_rows_and_their_gradients():
  mask = tf.constant([[1, 1, 0], [1, 0, 0]])
  rows = layers.TokenRows(mask)
  flat = tf.constant([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(flat)
    tokens = rows.gather(flat)
    back = rows.scatter(tokens * 10.0)
    loss = tf.reduce_sum(back * tf.constant([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]]))
  np.testing.assert_array_equal(tokens.numpy(), [[1.0], [2.0], [4.0]])
  np.testing.assert_array_equal(back.numpy(), [[10.0], [20.0], [0.0], [40.0], [0.0], [0.0]])
  # d loss / d flat: 10 x the weight at real positions, 0 at padding.
  np.testing.assert_array_equal(tape.gradient(loss, flat).numpy(),
                                [[10.0], [20.0], [0.0], [40.0], [0.0], [0.0]])


def test_token_rows_round_the_count_up_with_padding_rows_that_reach_nothing():
  """5 real tokens of 8 positions, steps of 8 // 3 = 2 positions: 6 rows, the last one the
  first padding position (5), left out of scatter's output and of every gradient."""
  mask = tf.constant([[1, 1, 1, 0], [1, 1, 0, 0]])
  rows = layers.TokenRows(mask, shapes=3)
  flat = tf.constant(np.arange(1.0, 9.0)[:, None], tf.float32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(flat)
    tokens = rows.gather(flat)
    tape.watch(tokens)
    back = rows.scatter(tokens * 10.0 + 1.0)
    loss = tf.reduce_sum(back * flat)
  np.testing.assert_array_equal(tokens.numpy()[:, 0], [1, 2, 3, 5, 6, 4])
  np.testing.assert_array_equal(back.numpy()[:, 0], [11, 21, 31, 0, 51, 61, 0, 0])
  # d loss / d tokens: 10 x flat at the real tokens' positions, 0 for the added row.
  np.testing.assert_array_equal(tape.gradient(loss, tokens).numpy()[:, 0],
                                [10, 20, 30, 50, 60, 0])
  # d loss / d flat: the direct term (back) plus 10 x flat through the gather, at real rows.
  np.testing.assert_array_equal(tape.gradient(loss, flat).numpy()[:, 0],
                                [21, 41, 61, 0, 101, 121, 0, 0])
  # A step never passes the positions: 5 of 8 with a step of 8 stays 8.
  assert layers.TokenRows(mask, shapes=1).positions.shape[0] == 8


def _op_types(model, inputs, training):
  function = tf.function(lambda: model(inputs, training=training))
  return {op.type for op in function.get_concrete_function().graph.get_operations()}


def test_pooled_head_model_unpads_only_when_training():
  config = BertConfig(vocab_size=50, hidden_size=HIDDEN, num_hidden_layers=2,
                      num_attention_heads=HEADS, intermediate_size=48,
                      max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, hidden_act="gelu_exact")
  padded = heads.pooled_head_model(config, 1, "classifier", "drop", "m")
  unpadded = heads.pooled_head_model(config, 1, "classifier", "drop", "m", unpadded=True)
  unpadded.set_weights(padded.get_weights())
  mask = _mask()
  rng = np.random.default_rng(2)
  inputs = dict(input_word_ids=tf.constant(rng.integers(1, 50, (4, SEQ)) * mask.numpy(),
                                           tf.int32),
                input_mask=mask, input_type_ids=tf.zeros_like(mask))
  for training in (True, False):
    np.testing.assert_allclose(unpadded(inputs, training=training)["logits"].numpy(),
                               padded(inputs, training=training)["logits"].numpy(),
                               rtol=1e-5, atol=1e-5)
  # TokenRows' cumulative sum: the training step of the unpadded model alone takes that path.
  assert "Cumsum" in _op_types(unpadded, inputs, True)
  assert "Cumsum" not in _op_types(padded, inputs, True)
  assert _op_types(unpadded, inputs, False) == _op_types(padded, inputs, False)
