"""Packed rows (--packing): each example's outputs in a shared row equal its outputs alone.

The packed and unpacked models are built from one config and share weights (moved by name);
rows are made by bert_tf.row_packing.pack_arrays, as the input pipeline makes them.
"""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import row_packing
from bert_tf.model import checkpoints
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

CONFIG = helpers.tiny_config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=37, max_position_embeddings=64)
SEQ = 32
K = row_packing.MAX_EXAMPLES_PER_ROW
MODEL_INPUTS = ("input_word_ids", "input_mask", "input_type_ids") + (
    row_packing.POSITION_IDS, row_packing.CLS_POSITIONS)


def _examples(lengths, seed=0, pair=True):
  """[B, SEQ] ids, mask, types of examples of these lengths ([CLS] first; a second segment in
  the second half of each example when pair)."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((len(lengths), SEQ), np.int32)
  mask, types = np.zeros_like(ids), np.zeros_like(ids)
  for i, n in enumerate(lengths):
    ids[i, :n] = rng.integers(5, CONFIG.vocab_size, n)
    ids[i, 0] = 2  # [CLS]
    mask[i, :n] = 1
    if pair and n > 2:
      types[i, n // 2:n] = 1
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=types)


def _pack(features, rows=None):
  count = len(features["input_mask"])
  return row_packing.pack_arrays(features, dict(index=np.arange(count)), SEQ, rows=rows,
                                 fill=dict(index=-1))


def _pair_models(build):
  plain, packed = build(False), build(True)
  checkpoints.set_original_weights(packed, checkpoints.get_original_weights(plain), "plain")
  return plain, packed


@pytest.fixture(scope="module")
def classifiers():
  return _pair_models(
      lambda packed: classifier_head.build_classifier_model(CONFIG, 3, packed=packed))


@pytest.fixture(scope="module")
def taggers():
  return _pair_models(lambda packed: tagging_head.build_tagger_model(CONFIG, 5, packed=packed))


# Lengths of the cases the issue names: pairs cut at max_seq_length (a full row, alone), rows
# filled exactly (20 + 12), K one-piece examples ([CLS] alone) sharing a row, an example alone
# in a row, padding examples (length 0: no slot).
CASES = {
    "full_rows": [SEQ, SEQ, 5],
    "filled_exactly": [20, 12, 20, 12],
    "one_piece": [1] * (K + 1),
    "alone": [30],
    "mixed": [7, 0, 19, 3, 11, 2, 25, 1, 9, 0],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_classifier_logits_equal_unpacked(classifiers, case):
  plain, packed = classifiers
  features = _examples(CASES[case])
  expected = plain(features)["logits"].numpy()
  rows = _pack(features)
  got = packed({k: rows[k] for k in MODEL_INPUTS})["logits"].numpy()
  assert got.shape == (rows["input_mask"].shape[0] * K, 3)
  index = rows["index"]
  real = index >= 0
  assert sorted(index[real]) == [i for i, n in enumerate(CASES[case]) if n > 0]
  np.testing.assert_allclose(got[real], expected[index[real]], atol=1e-5, rtol=1e-5)
  assert np.all(np.isfinite(got))  # empty slots read a padding position: finite too


@pytest.mark.parametrize("case", ["mixed", "one_piece", "full_rows"])
def test_tagger_logits_equal_unpacked_at_every_real_position(taggers, case):
  plain, packed = taggers
  lengths = CASES[case]
  features = _examples(lengths, seed=1)
  expected = plain(features)["logits"].numpy()
  rows = _pack(features, rows=6)  # two rows more than needed: all-padding rows
  inputs = {k: rows[k] for k in MODEL_INPUTS if k != row_packing.CLS_POSITIONS}
  got = packed(inputs)["logits"].numpy()
  assert np.all(np.isfinite(got))
  for slot, index in enumerate(rows["index"]):
    if index < 0:
      continue
    r, j = divmod(slot, K)
    start, n = rows[row_packing.CLS_POSITIONS][r, j], lengths[index]
    np.testing.assert_allclose(got[r, start:start + n], expected[index, :n], atol=1e-5,
                               rtol=1e-5)


def test_training_pass_is_finite_with_fused_dropout():
  config = helpers.tiny_config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=37, max_position_embeddings=64,
                               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  model = classifier_head.build_classifier_model(config, 2, packed=True)
  rows = _pack(_examples(CASES["mixed"]), rows=4)
  inputs = {k: tf.constant(rows[k]) for k in MODEL_INPUTS}
  with tf.GradientTape() as tape:
    logits = model(inputs, training=True)["logits"]
    loss = tf.reduce_sum(tf.where(rows["index"][:, None] >= 0, logits, 0.0) ** 2)
  grads = tape.gradient(loss, model.trainable_variables)
  assert np.all(np.isfinite(logits.numpy()))
  assert all(np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g in grads)


def test_unpacked_rows_keep_the_originals_mask(classifiers):
  # The packed model on rows of one example each (slots 0/1, positions 0..n-1) is the unpacked
  # model: PackedAttentionMask of a 0/1 mask is the original's key mask for every query.
  plain, packed = classifiers
  features = _examples([9, 31, 4])
  rows = dict(features)
  rows[row_packing.POSITION_IDS] = np.tile(np.arange(SEQ, dtype=np.int32), (3, 1))
  rows[row_packing.CLS_POSITIONS] = np.zeros((3, K), np.int32)
  got = packed(rows)["logits"].numpy().reshape(3, K, 3)[:, 0]
  np.testing.assert_allclose(got, plain(features)["logits"].numpy(), atol=1e-5, rtol=1e-5)


def test_packed_and_plain_models_share_checkpoint_names(classifiers):
  plain, packed = classifiers
  assert sorted(checkpoints.get_original_weights(plain)) == sorted(
      checkpoints.get_original_weights(packed))
