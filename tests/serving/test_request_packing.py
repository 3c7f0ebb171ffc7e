"""serving/request_packing.py: the in-graph plan is row_packing's, and packed batches answer
as the examples do alone."""

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import row_packing
from bert_tf.model import checkpoints, inference, layers
from bert_tf.model import encoder as encoder_lib
from bert_tf.serving import modules, request_packing
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

_PLAN = tf.function(request_packing.plan_rows, reduce_retracing=True)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([8, 16, 40, 128]), st.data())
def test_plan_is_row_packings(width, data):
  lengths = data.draw(st.lists(st.integers(1, width), min_size=1, max_size=40))
  row, slot, offset, used = [v.numpy() for v in _PLAN(tf.constant(lengths, tf.int32),
                                                      tf.constant(width))]
  plan = row_packing.pack_plan(lengths, width)
  assert used == len(plan)
  for r, placed in enumerate(plan):
    for k, (i, o) in enumerate(placed):
      assert (row[i], slot[i], offset[i]) == (r, k, o)


@pytest.mark.parametrize("needed,most", [(1, 1), (5, 5), (17, 32), (33, 40), (257, 300),
                                         (300, 300)])
def test_row_counts_follow_the_ladder(needed, most):
  got = request_packing.ladder_rows(tf.constant(needed), tf.constant(most)).numpy()
  assert got == row_packing.ladder_rows(needed, most)


def _model(kind, config):
  builders = dict(classifier=lambda: classifier_head.build_classifier_model(config, 3),
                  span=lambda: squad_head.build_span_model(config),
                  tagger=lambda: tagging_head.build_tagger_model(config, 4))
  with layers.dtype_policy("float32"):
    model = builders[kind]()
  checkpoints.set_original_weights(
      model, helpers.random_original_weights(config, np.random.default_rng(0), heads=False),
      strict=False)
  return inference.InferenceModel(model)


@pytest.mark.parametrize("kind", ["classifier", "span", "tagger"])
def test_packed_batch_answers_as_one_at_a_time(kind):
  config = helpers.tiny_config(max_position_embeddings=64)
  fast = _model(kind, config)
  rng = np.random.default_rng(5)
  lengths = [3, 11, 5, 2, 16, 7, 4, 9, 3]
  width = 16
  ids = rng.integers(5, config.vocab_size, size=(len(lengths), width)).astype(np.int32)
  mask = (np.arange(width)[None] < np.array(lengths)[:, None]).astype(np.int32)
  batch = dict(input_word_ids=ids * mask, input_mask=mask, input_type_ids=np.zeros_like(mask))
  got = modules.run_inference(fast, {k: tf.constant(v) for k, v in batch.items()}, pack=True)
  packed, _ = request_packing.pack({k: tf.constant(v) for k, v in batch.items()},
                                   max_width=64, hidden_size=config.hidden_size)
  assert packed["input_word_ids"].shape[0] < len(lengths)  # the batch was packed
  for i, n in enumerate(lengths):
    alone = fast({k: tf.constant(v[i:i + 1, :n]) for k, v in batch.items()})
    for key, value in alone.items():
      mine = got[key][i].numpy()
      value = value[0].numpy()
      if kind != "classifier":  # per position: the real ones, CUT_LOGIT at padding
        assert np.all(mine[n:] == modules.CUT_LOGIT)
        mine = mine[:n]
      np.testing.assert_allclose(mine, value, atol=2e-5, err_msg=f"{key} of example {i}")


def test_rows_of_twice_the_width_when_that_is_less_work():
  # One example of 16 positions and seven of 9: rows of 16 hold one each (8 rows of 16), rows
  # of 32 hold the 16 with a 9 and the other six three to a row (3 rows of 32).
  mask = np.zeros([8, 16], np.int32)
  mask[:, :9] = 1
  mask[0, :] = 1
  batch = dict(input_word_ids=mask * 7, input_mask=mask, input_type_ids=np.zeros_like(mask))
  packed, where = request_packing.pack({k: tf.constant(v) for k, v in batch.items()},
                                       max_width=512, hidden_size=64)
  assert packed["input_word_ids"].shape == (3, 32)
  narrow, _ = request_packing.pack({k: tf.constant(v) for k, v in batch.items()})
  assert narrow["input_word_ids"].shape == (8, 16)
  row, slot, offset, lengths = [w.numpy() for w in where]
  assert list(lengths) == [16] + [9] * 7
  for i in range(8):
    assert packed["input_mask"].numpy()[row[i], offset[i]:offset[i] + lengths[i]].tolist() == \
        [slot[i] + 1] * lengths[i]
    assert packed["packed_cls_positions"].numpy()[row[i], slot[i]] == offset[i]


def test_a_mask_with_holes_runs_unpacked():
  """Ids sent to the encoder export may carry padding inside a row: such a batch runs as it
  is, so every real position gets the model's own outputs, and the holes CUT_LOGIT."""
  config = helpers.tiny_config(max_position_embeddings=64)
  fast = _model("tagger", config)
  mask = np.array([[1, 1, 0, 1, 0, 0], [1, 1, 1, 0, 0, 0]], np.int32)
  batch = {k: tf.constant(v) for k, v in dict(
      input_word_ids=mask * 9, input_mask=mask, input_type_ids=np.zeros_like(mask)).items()}
  got = modules.run_inference(fast, batch, pack=True)["logits"].numpy()
  real = mask.astype(bool)
  np.testing.assert_allclose(got[real], fast(batch)["logits"].numpy()[real], atol=1e-6)
  assert np.all(got[~real] == modules.CUT_LOGIT)


@pytest.mark.parametrize("pack", [True, False])
def test_padding_answers_the_same_in_any_batch(pack):
  """A text's padding positions get 0 (logits: CUT_LOGIT) whether it comes alone (the
  unpacked path), in a packed batch or with packing off."""
  config = helpers.tiny_config(max_position_embeddings=64)
  with layers.dtype_policy("float32"):
    model = encoder_lib.build_encoder(config)
  fast = inference.InferenceModel(model)
  mask = np.array([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]], np.int32)
  batch = dict(input_word_ids=mask * 9, input_mask=mask, input_type_ids=np.zeros_like(mask))
  both = modules.run_inference(fast, {k: tf.constant(v) for k, v in batch.items()}, pack=pack)
  alone = modules.run_inference(fast, {k: tf.constant(v[:1]) for k, v in batch.items()},
                                pack=pack)
  for key in ("sequence_output", "encoder_outputs"):
    for got, pair in zip(tf.nest.flatten(alone[key]), tf.nest.flatten(both[key])):
      got, pair = got.numpy()[0], pair.numpy()[0]
      assert np.all(got[4:] == 0) and np.all(pair[4:] == 0), key
      assert np.any(got[:4] != 0)
      np.testing.assert_allclose(got, pair, atol=2e-5, err_msg=key)
  np.testing.assert_allclose(alone["pooled_output"].numpy()[0],
                             both["pooled_output"].numpy()[0], atol=2e-5)
