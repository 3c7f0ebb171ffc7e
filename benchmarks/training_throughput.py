"""Throughput of the pretraining loop (bert_tf.training) on this machine.

For each preset it runs the real loop twice in one process:
  records: training.run_pretraining on TFRecords (input pipeline included);
  synthetic: the same Trainer on one batch repeated in memory (no input pipeline),
and prints examples/s and steps/s of `--measure_steps` steps (after as many steps of warmup),
so that an input-pipeline bottleneck shows as a gap between the two rows.

Usage:
  python benchmarks/training_throughput.py \
      --input_file=/work/shared/data/golden/austen_s128_d2.tfrecord --presets=tiny,mini
"""

import os
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

flags.DEFINE_string("input_file", None, "Pretraining TFRecords (seq 128, 20 predictions).")
flags.DEFINE_string("presets", "tiny,mini", "Comma-separated config presets.")
flags.DEFINE_integer("batch_size", 32, "Global batch size.")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Predictions per sequence of the records.")
flags.DEFINE_integer("measure_steps", 30,
                     "Steps measured, after as many steps of warmup (tracing, caches).")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bfloat16", "float16"], "Precision.")
flags.DEFINE_bool("jit_compile", False, "XLA.")
FLAGS = flags.FLAGS


def _records_rate(config, preset_dir):
  from bert_tf import training  # pylint: disable=g-import-not-at-top
  # Two tf.function calls of measure_steps each: the first warms up, the rate logged last is
  # the second one's.
  total = 2 * FLAGS.measure_steps
  settings = training.PretrainingSettings(
      input_file=FLAGS.input_file, output_dir=preset_dir, do_train=True,
      max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      train_batch_size=FLAGS.batch_size, learning_rate=1e-4, num_train_steps=total,
      num_warmup_steps=0, save_checkpoints_steps=total, iterations_per_loop=FLAGS.measure_steps,
      export_at_end=False,
      mixed_precision=FLAGS.mixed_precision, jit_compile=FLAGS.jit_compile)
  result = training.run_pretraining(config, settings,
                                    training.select_strategy("one_device"))
  return result["examples_per_second"]


def _synthetic_rate(config):
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf import input_pipeline, optimization, training  # pylint: disable=g-import-not-at-top
  from bert_tf.heads import build_pretraining_model  # pylint: disable=g-import-not-at-top
  batch = next(iter(input_pipeline.pretraining_dataset(
      FLAGS.input_file, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.batch_size,
      is_training=False)))
  strategy = training.select_strategy("one_device")
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(training.MIXED_PRECISION_POLICIES[FLAGS.mixed_precision])
  try:
    with strategy.scope():
      model = build_pretraining_model(config)
      optimizer = optimization.create_optimizer(
          "adamw", 1e-4, 1000, 0, loss_scale=FLAGS.mixed_precision == "float16")
      optimizer.build(model.trainable_variables)
  finally:
    keras.config.set_dtype_policy(previous)
  trainer = training.Trainer(strategy, model, optimizer, FLAGS.batch_size,
                             jit_compile=FLAGS.jit_compile)
  dataset = tf.data.Dataset.from_tensors(batch).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(dataset))
  trainer.train_loop(iterator, tf.constant(FLAGS.measure_steps))
  start = time.time()
  steps, _, _ = trainer.train_loop(iterator, tf.constant(FLAGS.measure_steps))
  int(steps)
  return FLAGS.measure_steps * FLAGS.batch_size / (time.time() - start)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  from bert_tf import config as config_lib  # pylint: disable=g-import-not-at-top
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name in FLAGS.presets.split(","):
      config = config_lib.preset(name)
      records = _records_rate(config, os.path.join(tmp, name))
      synthetic = _synthetic_rate(config)
      rows.append((name, records, synthetic))
  print(f"batch {FLAGS.batch_size}, seq {FLAGS.max_seq_length}, precision "
        f"{FLAGS.mixed_precision}, jit {FLAGS.jit_compile}, {os.cpu_count()} CPUs")
  print("| preset | records examples/s | steps/s | synthetic examples/s | records / synthetic |")
  print("| --- | --- | --- | --- | --- |")
  for name, records, synthetic in rows:
    print(f"| {name} | {records:.1f} | {records / FLAGS.batch_size:.2f} | {synthetic:.1f} | "
          f"{records / synthetic:.2f} |")


if __name__ == "__main__":
  flags.mark_flag_as_required("input_file")
  app.run(main)
