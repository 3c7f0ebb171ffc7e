"""The multiple-choice loss: a softmax over each example's choices, equal on packed rows (the
choices sharing rows) and on one row per choice, and equal to its NumPy formula."""

import os
import types

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.model import heads
from bert_tf.tasks.multiple_choice import data as mc_data
from bert_tf.tasks.multiple_choice import head as mc_head
from bert_tf.tasks.multiple_choice import loss as mc_loss
from bert_tf.tasks.multiple_choice import metrics as mc_metrics
from bert_tf.training import bucketing
from bert_tf.training import input_pipeline
from bert_tf.training import packed_rows
from tests import helpers

MC = os.path.join(helpers.TEST_DATA, "multiple_choice")
VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
CONFIG = helpers.tiny_config(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                             intermediate_size=37, max_position_embeddings=64)
SEQ, COUNT, CHOICES = 48, 7, 4


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  examples = mc_data.read_examples(os.path.join(MC, "val.csv"))[:COUNT]
  path = str(tmp_path_factory.mktemp("mc") / "eval.tf_record")
  mc_data.write_records(examples, tokenizer, SEQ, path)
  return path, examples


def _batch(path, **options):
  spec = input_pipeline.parsing_spec(mc_data.record_spec(SEQ, CHOICES))
  dataset = input_pipeline.record_dataset(path, spec, 8, is_training=False, num_examples=COUNT,
                                          length_buckets=(16, 32, 48), **options)
  (batch,) = list(dataset)
  return batch


def _reference(logits, labels):
  """The mean cross-entropy of the softmax over each example's choices (NumPy)."""
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  return -log_probs[np.arange(len(labels)), labels]


def test_packed_rows_give_the_unpacked_loss_and_scores(records):
  path, examples = records
  labels = np.array([e.label for e in examples])
  unpacked = _batch(path)
  packed = _batch(path, packing=packed_rows.Packing("exact"))
  # 8 examples (one padding) of 4 choices as rows of their own; packed, choices share rows.
  assert unpacked["input_word_ids"].shape[0] == 32
  assert packed["input_word_ids"].shape[0] < COUNT * CHOICES
  assert packed["input_word_ids"].shape[1] == SEQ  # the longest choice needs the widest row
  tf.keras.utils.set_random_seed(1)
  model = mc_head.build_multiple_choice_model(CONFIG)
  packed_model = mc_head.build_multiple_choice_model(CONFIG, packed=True)
  packed_model.set_weights(model.get_weights())
  task = mc_loss.make_task(CHOICES)
  out = model(task.model_inputs(unpacked), training=False)
  packed_out = packed_model(task.model_inputs(packed), training=False)
  logits = out["logits"].numpy().reshape(8, CHOICES)[:COUNT]
  scores, score_labels, weights = mc_loss.choice_scores(packed_out["logits"], packed, CHOICES)
  np.testing.assert_allclose(scores.numpy(), logits, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(score_labels.numpy(), labels)
  np.testing.assert_array_equal(weights.numpy(), np.ones(COUNT))
  nll = _reference(logits, labels)
  loss, sums = task.replica_loss(out, unpacked, {}, COUNT)
  packed_loss, packed_sums = task.replica_loss(
      packed_out, packed, task.normalizers(packed), 10**6)  # packed: the real examples count
  assert float(loss) == pytest.approx(nll.mean(), rel=1e-5)
  assert float(packed_loss) == pytest.approx(nll.mean(), rel=1e-5)
  assert float(sums["examples"]) == float(packed_sums["examples"]) == COUNT
  correct = float((np.argmax(logits, 1) == labels).sum())
  assert float(sums["correct"]) == float(packed_sums["correct"]) == correct
  results = task.eval_results([{k: v.numpy() for k, v in task.eval_sums(packed_out, packed)
                                .items()}])
  assert results == pytest.approx(mc_metrics.eval_results(logits, labels, 8))


def test_training_unpadded_gives_the_padded_loss_and_gradients(records):
  """The model trains unpadded (heads.pooled_head_model(unpadded=True)): its training loss
  and gradients are those of the same weights computing every padding position, on a batch
  with short choices and a padding example (rows of no real token)."""
  path, _ = records
  batch = _batch(path)
  config = helpers.tiny_config(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                               intermediate_size=37, max_position_embeddings=64,
                               hidden_act="gelu_exact")
  tf.keras.utils.set_random_seed(2)
  model = mc_head.build_multiple_choice_model(config)
  padded = heads.pooled_head_model(config, 1, mc_head.HEAD_LAYER, mc_head.DROPOUT,
                                   "bert_multiple_choice")
  padded.set_weights(model.get_weights())
  mask = batch["input_mask"].numpy()
  assert mask.sum() < 0.8 * mask.size and not mask[-CHOICES:].any()
  task = mc_loss.make_task(CHOICES)

  def loss_and_grads(m):
    with tf.GradientTape() as tape:
      loss, sums = task.replica_loss(m(task.model_inputs(batch), training=True), batch, {},
                                     COUNT)
    return loss, sums, tape.gradient(loss, m.trainable_variables)

  loss, sums, grads = loss_and_grads(model)
  want_loss, want_sums, want_grads = loss_and_grads(padded)
  assert float(loss) == pytest.approx(float(want_loss), rel=1e-5)
  assert float(sums["correct"]) == float(want_sums["correct"])
  for variable, got, want in zip(model.trainable_variables, grads, want_grads):
    np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(),
                               tf.convert_to_tensor(want).numpy(), rtol=1e-4, atol=1e-6,
                               err_msg=variable.path)


def test_scores_are_gathered_by_example_and_choice_whatever_the_slot_order():
  logits = tf.constant([[5.0], [1.0], [9.0], [2.0], [3.0], [7.0], [4.0]])
  batch = {bucketing.BATCH_EXAMPLE: tf.constant([1, 0, 0, 0, 1, 0, 0]),
           bucketing.SEQUENCE_INDEX: tf.constant([1, 2, 0, 1, 0, 0, 0]),
           mc_data.LABEL_IDS: tf.constant([2, 1, 1, 1, 2, 0, 0]),
           mc_data.IS_REAL_EXAMPLE: tf.constant([1, 1, 1, 1, 1, 0, 0])}  # two empty slots
  scores, labels, weights = mc_loss.choice_scores(logits, batch, 3)
  np.testing.assert_array_equal(scores.numpy(), [[9.0, 2.0, 1.0], [3.0, 5.0, 0.0]])
  np.testing.assert_array_equal(labels.numpy(), [1, 2])
  np.testing.assert_array_equal(weights.numpy(), [1.0, 1.0])


def test_training_batches_keep_an_examples_choices_together(records):
  path, _ = records
  spec = input_pipeline.parsing_spec(mc_data.record_spec(SEQ, CHOICES))
  for packing in (None, packed_rows.Packing("exact")):
    dataset = input_pipeline.record_dataset(path, spec, 3, is_training=True, seed=2,
                                            length_buckets=(16, 32, 48), packing=packing)
    for batch in dataset.take(3):
      real = batch[mc_data.IS_REAL_EXAMPLE].numpy() > 0
      examples = batch[bucketing.BATCH_EXAMPLE].numpy()[real]
      choices = batch[bucketing.SEQUENCE_INDEX].numpy()[real]
      assert sorted(zip(examples, choices)) == [(e, c) for e in range(3) for c in range(4)]
  with pytest.raises(ValueError, match="static packing would part an example's sequences"):
    input_pipeline.record_dataset(path, spec, 3, is_training=True,
                                  packing=packed_rows.Packing("static", rows=2))


def test_length_counts_count_a_record_at_its_longest_choice(records):
  path, examples = records
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  longest = [max(sum(mc_data.example_features(e, tokenizer, SEQ)["input_mask"][
      i * SEQ:(i + 1) * SEQ]) for i in range(CHOICES)) for e in examples]
  assert bucketing.sequences_per_record(path, SEQ) == CHOICES
  counts = bucketing.length_counts(path, SEQ)
  assert counts == list(np.bincount(longest, minlength=SEQ + 1))
  # Packing estimates count every choice at its own length (packed rows take them apart).
  each = [sum(mc_data.example_features(e, tokenizer, SEQ)["input_mask"][i * SEQ:(i + 1) * SEQ])
          for e in examples for i in range(CHOICES)]
  assert bucketing.length_counts(path, SEQ, per_sequence=True) == list(
      np.bincount(each, minlength=SEQ + 1))


@pytest.mark.parametrize("use_tpu,jit_compile", [(False, False), (True, False), (False, True)])
def test_a_step_compiled_whole_keeps_the_padded_layers(use_tpu, jit_compile):
  """The unpadded layers gather each batch's real tokens, a count that changes per batch: a run
  that compiles its step with XLA (--use_tpu, --jit_compile) builds the padded model, whose
  training graph has no such data-dependent shape (no Where op)."""
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.multiple_choice import run as mc_run
  config = helpers.tiny_config(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                               intermediate_size=24, max_position_embeddings=16)
  settings = mc_run.MultipleChoiceSettings(output_dir="unused", vocab_file="unused",
                                           use_tpu=use_tpu, jit_compile=jit_compile)
  unpadded = not (use_tpu or jit_compile)
  inputs = types.SimpleNamespace(data={"unpadded": mc_run.unpadded_layers(settings)})
  assert inputs.data["unpadded"] == unpadded
  model = mc_run.TASK.build_model(config, inputs)
  batch = {name: tf.TensorSpec([None, 8], tf.int32)
           for name in ("input_word_ids", "input_mask", "input_type_ids")}
  graph = tf.function(lambda x: model(x, training=True)).get_concrete_function(batch).graph
  assert any(op.type == "Where" for op in graph.get_operations()) == unpadded
