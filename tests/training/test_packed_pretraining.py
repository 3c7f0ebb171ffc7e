"""Packed pretraining rows (run_pretraining --packing): instances moved into rows with their
masked positions, the heads per instance, and training equal to the unpacked run (exact)."""

import numpy as np
import pytest

from bert_tf import row_packing
from bert_tf.model import checkpoints
from bert_tf.model import heads
from bert_tf.training import input_pipeline
from bert_tf.training import packed_rows
from bert_tf.training import pretraining
from bert_tf.training.errors import TrainingError
from tests import helpers

K = row_packing.MAX_EXAMPLES_PER_ROW


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  return helpers.make_records(str(tmp_path_factory.mktemp("packed_pt") / "data.tfrecord"),
                              num_examples=64)


def _batches(data, packing, count=4):
  return list(input_pipeline.pretraining_dataset(
      data, helpers.SEQ, helpers.PREDS, 16, is_training=False, packing=packing).take(count))


def test_packed_instances_keep_their_tokens_and_predictions(data):
  plain = _batches(data, None)
  packed = _batches(data, packed_rows.Packing(row_packing.EXACT))
  slots = input_pipeline.predictions_per_row(helpers.PREDS)
  for a, b in zip(plain, packed):
    b = {k: v.numpy() for k, v in b.items()}
    rows = b["input_word_ids"].shape[0]
    assert b["masked_lm_positions"].shape == (rows, slots)
    assert b["next_sentence_labels"].shape == (rows * K, 1)
    assert rows < 16  # 16 short instances share rows of 16
    # Every instance once: its tokens (the masked ones included) and its next-sentence label.
    found = []
    for slot in np.flatnonzero(b[input_pipeline.NEXT_SENTENCE_WEIGHTS]):
      r, j = divmod(slot, K)
      found.append((tuple(b["input_word_ids"][r][b["input_mask"][r] == j + 1]),
                    int(b["next_sentence_labels"][slot, 0])))
    mask = a["input_mask"].numpy()
    expected = [(tuple(a["input_word_ids"].numpy()[i][mask[i] > 0]),
                 int(a["next_sentence_labels"].numpy()[i, 0])) for i in range(16)]
    assert sorted(found) == sorted(expected)
    # The masked positions point at [MASK]-replaced tokens whose labels came along.
    weights = b["masked_lm_weights"] > 0
    assert int(weights.sum()) == int((a["masked_lm_weights"].numpy() > 0).sum())
    for r in range(rows):
      positions = b["masked_lm_positions"][r][weights[r]]
      assert np.all(b["input_mask"][r][positions] > 0)
    assert sorted(b["masked_lm_ids"][weights].tolist()) == sorted(
        a["masked_lm_ids"].numpy()[a["masked_lm_weights"].numpy() > 0].tolist())


def test_rows_never_hold_more_predictions_than_their_slots():
  # Two instances of 2 predictions each in rows of 3 prediction slots: two rows, though their
  # tokens would fit in one.
  ids = np.array([[2, 4, 4, 3, 0, 0], [2, 4, 4, 3, 0, 0]], np.int32)
  features = dict(input_word_ids=ids, input_mask=(ids > 0).astype(np.int32))
  predictions = dict(masked_lm_positions=np.array([[1, 2], [1, 2]], np.int32),
                     masked_lm_ids=np.array([[7, 8], [9, 10]], np.int32),
                     masked_lm_weights=np.ones((2, 2), np.float32))
  out = row_packing.pack_arrays(features, {}, 12, prediction_features=predictions,
                                predictions_per_row=3)
  assert out["input_mask"].shape[0] == 2
  out = row_packing.pack_arrays(features, {}, 12, prediction_features=predictions,
                                predictions_per_row=4)
  assert out["input_mask"].shape[0] == 1
  np.testing.assert_array_equal(out["masked_lm_positions"][0], [1, 2, 5, 6])
  np.testing.assert_array_equal(out["masked_lm_ids"][0], [7, 8, 9, 10])


def test_packed_heads_equal_unpacked(data):
  config = helpers.tiny_config()
  plain = heads.build_pretraining_model(config, prune_last_layer=True)
  packed = heads.build_pretraining_model(config, prune_last_layer=True, packed=True)
  checkpoints.set_original_weights(packed, checkpoints.get_original_weights(plain), "plain")
  a = _batches(data, None, 1)[0]
  b = _batches(data, packed_rows.Packing(row_packing.EXACT), 1)[0]
  out_a = plain(pretraining.model_inputs(a))
  out_b = packed(pretraining.model_inputs(b))
  # The losses and metric sums of the batch are the unpacked ones.
  for name, value in pretraining.eval_sums(out_a, a).items():
    assert float(pretraining.eval_sums(out_b, b)[name]) == pytest.approx(float(value), rel=1e-5)


@pytest.mark.slow
def test_exact_packed_pretraining_trains_and_evaluates_as_unpacked(data, tmp_path):
  config = helpers.tiny_config()
  results = {}
  for mode in ("none", "exact"):  # static packing's batches: test_static_rows_have_one_shape
    settings = helpers.tiny_settings(data, str(tmp_path / mode), packing=mode, do_eval=True)
    results[mode] = pretraining.run_pretraining(config, settings)
  a = checkpoints.get_original_weights(results["none"]["model"])
  b = checkpoints.get_original_weights(results["exact"]["model"])
  for name in a:
    np.testing.assert_allclose(b[name], a[name], atol=1e-5, rtol=1e-4, err_msg=name)
  for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
              "next_sentence_loss", "loss", "train_loss"):
    assert results["exact"][key] == pytest.approx(results["none"][key], rel=1e-5), key
  assert "input_position_ids" not in results["exact"]["model"].input  # the unpacked model


def test_static_rows_have_one_shape_and_every_prediction(data):
  packing = packed_rows.Packing(row_packing.STATIC, rows=3)
  batches = list(input_pipeline.pretraining_dataset(
      data, helpers.SEQ, helpers.PREDS, 16, is_training=True, seed=1, shuffle_buffer_size=1,
      packing=packing).take(4))
  slots = input_pipeline.predictions_per_row(helpers.PREDS)
  for batch in batches:
    assert batch["input_word_ids"].shape == (3, helpers.SEQ)
    assert batch["masked_lm_positions"].shape == (3, slots)
    assert batch["next_sentence_labels"].shape == (3 * K, 1)
    weights = batch["masked_lm_weights"].numpy()
    instances = int(batch[input_pipeline.NEXT_SENTENCE_WEIGHTS].numpy().sum())
    # make_records gives every instance PREDS predictions: none was dropped.
    assert int(weights.sum()) == instances * helpers.PREDS


def test_packing_flag_is_checked(data, tmp_path):
  settings = helpers.tiny_settings(data, str(tmp_path), packing="loose")
  with pytest.raises(TrainingError, match="--packing must be one of"):
    settings.check()
