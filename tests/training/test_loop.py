"""The generic loop (bert_tf.training.loop) and the one set of loss primitives.

The pretraining run itself (resume, eval results, accumulation, export) is tested in
test_pretraining.py; here: the loop's replica loss is the loss module's loss (fused kernels on
and off, and the original's formula in NumPy), the loop runs any task given as plain
functions, and train()'s schedule (where calls end) and ETA (evaluations off the clock).
"""

import logging
import time
import types

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.data.ops import multi_device_iterator_ops

from bert_tf.model import fused
from bert_tf.model.heads import PRETRAINING_INPUTS, build_pretraining_model
from bert_tf.training import distribution, evaluation, loop, run_folder
from bert_tf.training import input_pipeline
from bert_tf.training import packed_rows
from bert_tf.training import record_files
from bert_tf.training import losses
from bert_tf.training import optimization
from bert_tf.training import pretraining
from bert_tf.training.errors import TrainingError
from tests.helpers import PREDS, SEQ, make_records, tiny_config


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
  data = make_records(str(tmp_path_factory.mktemp("loop") / "train.tfrecord"), num_examples=16)
  return next(iter(input_pipeline.pretraining_dataset(data, SEQ, PREDS, 8, is_training=False)))


def _numpy_loss(outputs, batch):
  """The original run_pretraining.py loss in float64 NumPy."""
  def nll(logits, labels):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
  weights = batch["masked_lm_weights"].numpy().astype(np.float64)
  mlm = (weights * nll(outputs["masked_lm_logits"].numpy(), batch["masked_lm_ids"].numpy())
         ).sum() / (weights.sum() + 1e-5)
  nsp = nll(outputs["next_sentence_logits"].numpy(),
            batch["next_sentence_labels"].numpy().reshape(-1)).mean()
  return mlm + nsp


@pytest.mark.parametrize("fused_on", [True, False])
def test_replica_loss_equals_the_loss_module(batch, monkeypatch, fused_on):
  monkeypatch.setattr(fused, "ENABLED", fused_on)
  strategy = distribution.select_strategy("one_device")
  with strategy.scope():
    model = build_pretraining_model(tiny_config(), prune_last_layer=True)
    optimizer = optimization.create_optimizer("adamw", 1e-3, 10, 0)
    optimizer.build(model.trainable_variables)
  trainer = loop.Trainer(strategy, model, optimizer, pretraining.TASK, train_batch_size=8)

  @tf.function
  def both():
    # One replica: the global normalizers are this batch's own sums.
    loss, sums = trainer.replica_loss(batch, pretraining.TASK.normalizers(batch))
    outputs = model({k: batch[k] for k in PRETRAINING_INPUTS}, training=True)
    return loss, sums, losses.pretraining_losses(outputs, batch)["loss"], outputs

  loss, sums, reference, outputs = both()
  np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-6)
  np.testing.assert_allclose(loss.numpy(), _numpy_loss(outputs, batch), rtol=1e-5)
  assert float(sums["examples"]) == 8
  assert float(sums["mlm_weight"]) == float(tf.reduce_sum(batch["masked_lm_weights"]))
  # The training graph uses the fused cross-entropy exactly when fused kernels are on.
  graph = tf.function(lambda: trainer.replica_loss(
      batch, pretraining.TASK.normalizers(batch))).get_concrete_function().graph
  called = {op.get_attr("f").name for op in graph.get_operations()
            if op.type in ("StatefulPartitionedCall", "PartitionedCall")}
  compiled = [name for name in called if "_nll_forward" in name]
  assert bool(compiled) == fused_on


def test_loss_primitives_agree_with_each_other(batch):
  rng = np.random.default_rng(0)
  logits = tf.constant(rng.normal(0, 3, (8, PREDS, 64)).astype(np.float32))
  sums = losses.masked_lm_sums(logits, batch["masked_lm_ids"], batch["masked_lm_weights"])
  np.testing.assert_allclose(
      losses.masked_lm_loss(logits, batch["masked_lm_ids"], batch["masked_lm_weights"]),
      sums["nll"] / (sums["weight"] + losses.MASKED_LM_DENOMINATOR_EPSILON), rtol=1e-6)
  np.testing.assert_allclose(
      losses.masked_lm_accuracy(logits, batch["masked_lm_ids"], batch["masked_lm_weights"]),
      sums["correct"] / sums["weight"], rtol=1e-6)
  nsp_logits = tf.constant(rng.normal(0, 1, (8, 2)).astype(np.float32))
  cls = losses.classification_sums(nsp_logits, batch["next_sentence_labels"])
  np.testing.assert_allclose(losses.next_sentence_loss(nsp_logits, batch["next_sentence_labels"]),
                             cls["nll"] / cls["examples"], rtol=1e-6)
  np.testing.assert_allclose(
      losses.next_sentence_accuracy(nsp_logits, batch["next_sentence_labels"]),
      cls["correct"] / cls["examples"], rtol=1e-6)


# === Any task: a toy regression-as-classification task through the same loop ===


def _toy_task():
  """Classify whether the sum of 4 features is positive: plain functions, no BERT."""
  def model_inputs(b):
    return {"x": b["x"]}

  def normalizers(b):
    return {}

  def replica_loss(outputs, b, global_normalizers, examples_per_update):
    del global_normalizers
    sums = losses.classification_sums(outputs, b["label"])
    return sums["nll"] / float(examples_per_update), dict(correct=sums["correct"],
                                                          examples=sums["examples"])

  def train_metrics(totals, good_steps):
    return dict(loss=totals["loss"] / good_steps,
                accuracy=totals["correct"] / max(totals["examples"], 1))

  def eval_sums(outputs, b):
    return losses.classification_sums(outputs, b["label"])

  def eval_results(batch_sums):
    total = evaluation.sum_batches(batch_sums)
    return dict(accuracy=total["correct"] / total["examples"],
                loss=total["nll"] / total["examples"])

  return loop.Task(model_inputs, normalizers, replica_loss, ("correct", "examples"),
                   train_metrics, eval_sums, eval_results)


def _toy_data(batch_size, accumulation=1):
  rng = np.random.default_rng(1)
  x = rng.normal(0, 1, (256, 4)).astype(np.float32)
  label = (x.sum(1) > 0).astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(dict(x=x, label=label)).repeat()
  dataset = dataset.batch(batch_size // accumulation, drop_remainder=True)
  if accumulation > 1:
    dataset = dataset.batch(accumulation, drop_remainder=True)
  return dataset


def _toy_run(tmp_path, accumulation, steps=30):
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(2)
  strategy = distribution.select_strategy("one_device")
  with strategy.scope():
    inputs = {"x": keras.Input((4,), name="x")}
    model = keras.Model(inputs, keras.layers.Dense(2, name="logits")(inputs["x"]))
    optimizer = optimization.create_optimizer("adamw", 0.1, steps, 0)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
  task = _toy_task()
  trainer = loop.Trainer(strategy, model, optimizer, task, train_batch_size=32,
                         gradient_accumulation_steps=accumulation)
  state = run_folder.checkpoint_state(model, optimizer, step, str(tmp_path), True, strategy)
  iterator = iter(strategy.experimental_distribute_dataset(_toy_data(32, accumulation)))
  metrics = loop.train(trainer, iterator, step, state.manager, steps, 10, steps, None, True)
  results = evaluation.evaluate(trainer, iter(_toy_data(32)), 4, int(step.numpy()), str(tmp_path),
                          True)
  return model, metrics, results


@pytest.mark.slow
def test_the_loop_trains_any_task_and_accumulation_equals_the_full_batch(tmp_path):
  model, metrics, results = _toy_run(tmp_path / "full", accumulation=1)
  assert results["accuracy"] > 0.9 and metrics["train_accuracy"] > 0.8
  assert evaluation.read_eval_results(str(tmp_path / "full" / evaluation.EVAL_RESULTS_FILE)) == (
      pytest.approx(dict(results)))
  model_acc, _, _ = _toy_run(tmp_path / "acc", accumulation=4)
  for a, b in zip(model.get_weights(), model_acc.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_select_strategy():
  assert isinstance(distribution.select_strategy(), tf.distribute.OneDeviceStrategy)
  assert isinstance(distribution.select_strategy("mirrored"), tf.distribute.MirroredStrategy)
  with pytest.raises(TrainingError, match="--strategy must be one of"):
    distribution.select_strategy("horovod")
  # No TPU here: the resolver fails and the message names the flags.
  with pytest.raises(TrainingError, match=r"--use_tpu.*cannot reach a TPU.*my-tpu"):
    distribution.select_strategy(use_tpu=True, tpu_name="my-tpu")


def test_data_iterators_keep_tf_datas_autotuning_model_off_and_give_the_same_batches(tmp_path):
  """distribution.data_iterator (record_files.prefetched says why the model must be off): a
  OneDeviceStrategy gets the dataset's own iterator, holding the batches tf.distribute's
  iterator gives; other strategies get tf.distribute's iterator, whose per-device datasets
  have the model off too. A caller's own dataset, with tf.data's default options (the model
  on), is read with the model off both ways."""
  data = make_records(str(tmp_path / "train.tfrecord"), num_examples=24)

  def dataset_fn(ctx):
    return input_pipeline.pretraining_dataset(data, SEQ, PREDS, 8, is_training=False,
                                              input_context=ctx)

  def own_fn(ctx):
    del ctx
    return tf.data.Dataset.range(24).map(lambda i: {"input_word_ids": tf.fill([SEQ], i)},
                                         num_parallel_calls=tf.data.AUTOTUNE).batch(8)

  assert own_fn(None).options().autotune.enabled is None  # TensorFlow's default: on
  # pylint: disable=protected-access
  one = distribution.select_strategy("one_device")
  plain = distribution.data_iterator(one, dataset_fn)
  assert isinstance(plain, tf.data.Iterator)
  assert not isinstance(plain, tf.distribute.DistributedIterator)
  own = distribution.data_iterator(one, own_fn)
  assert own._dataset.options().autotune.enabled is False
  np.testing.assert_array_equal(next(own)["input_word_ids"].numpy()[:, 0], np.arange(8))
  with distribution._device_datasets_without_autotuning():  # this test's own iterator too
    distributed = iter(one.distribute_datasets_from_function(dataset_fn))
  for index in range(3):
    a, b = next(plain), next(distributed)
    if index == 0:
      first = a
    assert sorted(a) == sorted(b)
    for key in a:
      np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
  mirrored = distribution.data_iterator(distribution.select_strategy("mirrored"), dataset_fn)
  assert isinstance(mirrored, tf.distribute.DistributedIterator)
  # Its per-device datasets (TensorFlow's, reached through private attributes) have the model
  # off too, and TensorFlow's helper is itself again afterwards.
  assert multi_device_iterator_ops._create_device_dataset.__name__ == "_create_device_dataset"
  mirrored_strategy = distribution.select_strategy("mirrored")
  own_mirrored = distribution.data_iterator(mirrored_strategy, own_fn)
  for iterator in (mirrored, own_mirrored):
    device_iterators = [device for worker in iterator._iterators
                        for device in worker._iterator._device_iterators]
    assert device_iterators
    assert all(device._dataset.options().autotune.enabled is False
               for device in device_iterators)
  np.testing.assert_array_equal(
      tf.concat(mirrored_strategy.experimental_local_results(
          next(own_mirrored)["input_word_ids"]), 0).numpy()[:, 0], np.arange(8))
  plain_again = distribution.data_iterator(one, dataset_fn)
  for batch in (next(mirrored), next(plain_again)):
    np.testing.assert_array_equal(batch["input_word_ids"].numpy(),
                                  first["input_word_ids"].numpy())


def _training_run(num_train_steps, on_eval, step=0, **schedule):
  """A _TrainingRun over stand-ins: the schedule and clock logic need no model."""
  task = types.SimpleNamespace(train_metrics=lambda totals, good_steps: dict(
      loss=totals["loss"] / good_steps))
  trainer = types.SimpleNamespace(strategy=tf.distribute.get_strategy(), task=task,
                                  optimizer=types.SimpleNamespace(learning_rate=0.5))
  return loop._TrainingRun(trainer, None, tf.Variable(step, dtype=tf.int64), None,
                           num_train_steps, on_checkpoint=None, on_eval=on_eval, **schedule)


@pytest.mark.parametrize("evaluating, ends", [
    (True, [5, 6, 7, 12, 14, 18, 21, 24, 25]),
    (False, [5, 7, 12, 14, 19, 21, 25])])
def test_intervals_end_at_log_lines_checkpoints_evaluations_and_the_end(evaluating, ends):
  # Log lines every 5 steps at most, checkpoints at multiples of 7, evaluations at multiples
  # of 6 (only when there is something to call), the end at 25.
  run = _training_run(25, (lambda step: None) if evaluating else None, iterations_per_loop=5,
                      save_checkpoints_steps=7, eval_every_n_steps=6)
  reached = []
  while run.step < 25:
    run.step += run.interval()
    reached.append(run.step)
  assert reached == ends


def test_the_eta_keeps_evaluations_off_the_clock_and_adds_the_ones_to_come(caplog, monkeypatch):
  monkeypatch.setattr(time, "time", lambda: 1000.0)
  run = _training_run(110, lambda step: None, step=10, iterations_per_loop=10,
                      save_checkpoints_steps=50, eval_every_n_steps=25)
  run.start_step = 0
  # 100 s since the start, 20 of them in 2 evaluations: 8 s a training step; 100 steps and
  # 4 evaluations (at 25, 50, 75, 100) to come: 800 s + 40 s.
  run.start_time, run.eval_seconds, run.evals = 900.0, 20.0, 2
  with caplog.at_level(logging.INFO):
    metrics = run.progress(dict(loss=6.0, examples=40.0), done=3, elapsed=2.0)
  assert metrics == dict(loss=2.0, learning_rate=0.5, examples_per_second=20.0)
  assert caplog.records[-1].getMessage() == (
      "step 10/110 loss = 2.0000 learning_rate = 0.5 examples/s = 20.0 ETA 0:14:00")


# === CPU towers ===


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_cpu_towers_split_the_batch_and_draw_their_own_dropout_masks(batch, dropout):
  # Two towers of one graph, fed the same four rows: with dropout each tower draws its own
  # masks (the layers' seed generators advance once per tower), without it they agree.
  config = tiny_config(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
  model = build_pretraining_model(config, prune_last_layer=True)
  optimizer = optimization.create_optimizer("adamw", 1e-3, 10, 0)
  trainer = loop.Trainer(distribution.select_strategy("one_device"), model, optimizer,
                         pretraining.TASK, 8, towers=2)
  doubled = {k: tf.concat([v[:4], v[:4]], 0) for k, v in batch.items()}

  @tf.function(autograph=False)
  def towers(rows):
    parts = trainer._tower_batches(rows, training=True)
    return [model(pretraining.TASK.model_inputs(part), training=True)["masked_lm_logits"]
            for part in parts]
  first, second = towers(doubled)
  assert first.shape == second.shape == (4, PREDS, config.vocab_size)
  assert np.allclose(first, second, atol=1e-5) == (dropout == 0.0)


def test_cpu_towers_need_a_static_divisible_training_batch(batch):
  model = build_pretraining_model(tiny_config(), prune_last_layer=True)
  trainer = loop.Trainer(distribution.select_strategy("one_device"), model,
                         optimization.create_optimizer("adamw", 1e-3, 10, 0), pretraining.TASK,
                         8, towers=3)
  with pytest.raises(TrainingError, match=r"--cpu_towers=3 splits each replica's training "
                     r"batch into that many equal towers, but its batches have first axes of 8"):
    trainer._tower_batches(batch, training=True)
  # Evaluation batches the towers do not divide are computed as one.
  assert trainer._tower_batches(batch, training=False) == [batch]
  unknown = tf.function(lambda rows: len(trainer._tower_batches(rows, training=False)),
                        autograph=False)
  specs = {k: tf.TensorSpec([None] + v.shape[1:].as_list(), v.dtype) for k, v in batch.items()}
  assert unknown.get_concrete_function(specs) is not None
  with pytest.raises(TrainingError, match="a number of rows that changes from step to step"):
    tf.function(lambda rows: trainer._tower_batches(rows, training=True), autograph=False
                ).get_concrete_function(specs)
  with pytest.raises(ValueError, match="towers must be >= 1, got 0"):
    loop.Trainer(trainer.strategy, model, trainer.optimizer, pretraining.TASK, 8, towers=0)


def test_cpu_towers_are_for_cpus_only():
  def strategy(*devices):
    return types.SimpleNamespace(extended=types.SimpleNamespace(worker_devices=devices))
  distribution.check_cpu_only(strategy("/job:localhost/replica:0/task:0/device:CPU:0"), 2)
  distribution.check_cpu_only(strategy("/job:localhost/replica:0/task:0/device:GPU:0"), 1)
  with pytest.raises(TrainingError, match=r"--cpu_towers=2 is for training on CPUs; this "
                     r"run's strategy places replicas on /job:localhost/replica:0/task:0/"
                     r"device:GPU:0: leave it at 1"):
    distribution.check_cpu_only(strategy("/job:localhost/replica:0/task:0/device:GPU:0"), 2)


def test_use_cpu_towers_sets_the_threads_before_tensorflow_starts(caplog):
  # In a new process it sets one intra-op thread and one inter-op thread per tower ...
  import subprocess
  import sys
  from tests import helpers
  code = ("from bert_tf.training import distribution; import tensorflow as tf; "
          "assert distribution.use_cpu_towers(3); tf.constant(1.0) + 1.0; "
          "print(tf.config.threading.get_intra_op_parallelism_threads(), "
          "tf.config.threading.get_inter_op_parallelism_threads())")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env=helpers.subprocess_env(), cwd=helpers.REPO_ROOT, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split()[-2:] == ["1", "3"]
  # ... and here, where TensorFlow runs already, it says so and changes nothing.
  tf.constant(1.0).numpy()
  before = (tf.config.threading.get_intra_op_parallelism_threads(),
            tf.config.threading.get_inter_op_parallelism_threads())
  caplog.set_level(logging.WARNING, logger="absl")
  assert not distribution.use_cpu_towers(2)
  assert "--cpu_towers=2: TensorFlow's threads are already set up" in caplog.text
  assert (tf.config.threading.get_intra_op_parallelism_threads(),
          tf.config.threading.get_inter_op_parallelism_threads()) == before
  assert distribution.use_cpu_towers(1)


def test_cpu_towers_split_static_packed_rows_into_aligned_halves(tmp_path):
  # Static packed rows carry per-row tensors [rows, ...] and per-slot ones [rows * K, ...]
  # (row-major): each is halved along its own first axis, and the towers' losses and sums add
  # up to the whole batch's.
  from bert_tf import row_packing  # pylint: disable=g-import-not-at-top
  data = make_records(str(tmp_path / "train.tfrecord"), num_examples=32)
  batch = next(iter(input_pipeline.pretraining_dataset(
      data, SEQ, PREDS, 16, is_training=True, seed=1, shuffle_buffer_size=1,
      packing=packed_rows.Packing(row_packing.STATIC, rows=4))))
  model = build_pretraining_model(tiny_config(), prune_last_layer=True, packed=True)
  optimizer = optimization.create_optimizer("adamw", 1e-3, 10, 0)
  strategy = distribution.select_strategy("one_device")
  one, two = (loop.Trainer(strategy, model, optimizer, pretraining.TASK, 16, towers=towers)
              for towers in (1, 2))
  parts = two._tower_batches(batch, training=True)
  slots = row_packing.MAX_EXAMPLES_PER_ROW
  for part in parts:
    assert part["input_word_ids"].shape[0] == 2
    assert part["next_sentence_labels"].shape[0] == 2 * slots
  normalizers = pretraining.TASK.normalizers(batch)  # one replica: its sums are the global ones
  whole_loss, whole_sums = one._tower_loss(batch, normalizers)
  towers_loss, towers_sums = two._tower_loss(batch, normalizers)
  assert float(towers_loss) == pytest.approx(float(whole_loss), rel=1e-5)
  for key, value in whole_sums.items():
    assert float(towers_sums[key]) == pytest.approx(float(value), rel=1e-5, abs=1e-6), key
  assert float(whole_sums["examples"]) > 4  # several instances in the four rows
