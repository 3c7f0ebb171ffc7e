"""Pretraining throughput: our loop against the Model Garden pretrainer, on the same records.

For each preset (BERT-Mini, BERT-Small, ...) at batch 32, sequence 128, 20 predictions, one
process measures:
  ours, records:   bert_tf.training.pretraining.run_pretraining itself (TFRecords -> tf.data -> the
                   distributed tf.function loop), its per-loop examples/s read from its log;
  ours, records, --cpu_towers=N (with --cpu_towers=N): run_pretraining with each batch as N
                   towers side by side, in a process of its own with 1 intra-op and N inter-op
                   threads (the command's threads with that flag) instead of --threads of each;
  ours, synthetic: the same Trainer fed one batch repeated from memory (no input pipeline), so a
                   gap between the two rows is the input pipeline's cost;
  Model Garden:    official.nlp.modeling.models.BertPretrainerV2 around networks.BertEncoderV2
                   (tf_keras) with the same sizes, trained on the same records through the same
                   tf.data pipeline by a tf.function loop of the same shape as ours (loss of the
                   original, global-norm clipping at 1.0, Model Garden's AdamWeightDecay with the
                   original's decay exclusions, linear decay; its next-sentence head's dense
                   layer on [CLS] does the work of our pooler, so the FLOPs are the same).
Each row runs one warmup round (tracing) and then --rounds rounds of --steps steps; the median
round is reported. The machine's float32 matmul peak is measured first with large
tf.linalg.matmul calls, and every row says which fraction of it the model's FLOPs reach.

FLOPs of one training step (3x the forward pass: backward costs twice the forward), with B batch,
S sequence length, L layers, H hidden size, I intermediate size, P predictions, V vocab:
  forward = B*S*L*(8*H*H + 4*H*I + 4*S*H)    Q,K,V,output projections; feed-forward; QK^T and AV
          + B*P*(2*H*H + 2*H*V)              masked-LM transform and output layer
          + B*(2*H*H + 4*H)                  pooler and next-sentence layer
  step    = 3 * forward
(6 * matmul parameters * tokens plus the attention and head terms; embedding lookups, softmax,
layer norms and the optimizer are not counted.) These are the full model's FLOPs for both
systems; ours computes the last layer only at [CLS] and the masked positions, so its fraction of
the peak is an effective rate.

Usage (from the repository root):
  python benchmarks/pretraining.py --presets=mini,small --threads=1 --steps=10 --rounds=3
  python benchmarks/pretraining.py --input_file=records.tfrecord  # existing s128/p20 records
  python benchmarks/pretraining.py --presets=mini --threads=2 --cpu_towers=2

Without --input_file, records are made first with data_prep/create_pretraining_data.py
from the first --corpus_mb MB of --corpus_file.

The table goes to benchmarks/results/pretraining_DATE.json (benchmarks/results_file.py).
--smoke: the tiny preset (2 layers of 128), records of 50 kB of the corpus at sequence 64,
batch 4, one round of 2 steps, a 256^3 matmul peak; seconds.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import peers  # pylint: disable=g-import-not-at-top,wrong-import-position  (before TensorFlow)
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_string("input_file", None,
                    "Existing pretraining TFRecords (comma-separated/globs); their sequence "
                    "length and predictions must match the flags. Made from --corpus_file when "
                    "not given.")
flags.DEFINE_string("corpus_file", corpora.path("austen_moby"),
                    "Text (one sentence per line, blank lines between documents) to make "
                    "records from.")
flags.DEFINE_string("vocab_file", corpora.VOCAB_FILE,
                    "Vocab for making the records (uncased).")
flags.DEFINE_float("corpus_mb", 1.0, "Megabytes of --corpus_file used to make records.")
flags.DEFINE_list("presets", ["mini", "small"], "Config presets (bert_tf.config.PRESETS).")
flags.DEFINE_enum("threads", "1", ["1", "2"],
                  "TensorFlow inter- and intra-op threads (set before TensorFlow starts).")
flags.DEFINE_integer("steps", 10, "Training steps per timed round.")
flags.DEFINE_integer("rounds", 3, "Timed rounds per row (after one warmup round).")
flags.DEFINE_integer("batch_size", 32, "Global batch size.")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked-LM predictions per sequence.")
flags.DEFINE_integer("matmul_size", 2048, "n of the n x n float32 matmuls that measure the peak.")
flags.DEFINE_bool("model_garden", True, "Include the Model Garden rows.")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bfloat16"],
                  "Precision of every row (Model Garden's through the tf_keras global policy); "
                  "the peak stays float32's.")
flags.DEFINE_bool("jit_compile", False, "Compile every row's training step with XLA.")
flags.DEFINE_integer("cpu_towers", 0,
                     "Also run_pretraining with --cpu_towers=N (N > 1: a row of its own, in a "
                     "process of its own with 1 intra-op and N inter-op threads, as the command "
                     "sets them); 0: no such row.")
flags.DEFINE_string("towers_worker", None,
                    "Internal: print the rates of the --cpu_towers row as JSON, for "
                    "(preset, input_file, output_dir) given as JSON.")
results_file.define_flags(flags)
FLAGS = flags.FLAGS


# === FLOPs and the machine's peak ===


def step_flops(config, batch: int, seq: int, predictions: int) -> float:
  """Matmul FLOPs of one training step (see the module docstring for the formula)."""
  h, i, layers, v = (config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                     config.vocab_size)
  forward = (batch * seq * layers * (8 * h * h + 4 * h * i + 4 * seq * h)
             + batch * predictions * (2 * h * h + 2 * h * v)
             + batch * (2 * h * h + 4 * h))
  return 3.0 * forward


def measure_matmul_peak(n: int, repeats: int = 5) -> float:
  """FLOP/s of the fastest of `repeats` timed n x n float32 matmuls (after a warmup)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.random.stateless_normal([n, n], seed=[1, 2])
  b = tf.random.stateless_normal([n, n], seed=[3, 4])
  matmul = tf.function(lambda x, y: tf.reduce_sum(tf.linalg.matmul(x, y)))
  float(matmul(a, b))
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    float(matmul(a, b))  # the sum forces the result; it costs n*n, not n*n*n
    best = min(best, time.perf_counter() - start)
  return 2.0 * n ** 3 / best


# === Records ===


def make_records(directory: str) -> str:
  """Pretraining records from the first --corpus_mb MB of --corpus_file (cut at a line end)."""
  limit = int(FLAGS.corpus_mb * 1e6)
  text_path = os.path.join(directory, "corpus.txt")
  # Plain open(): the corpus is local and this runs before TensorFlow is needed.
  with open(FLAGS.corpus_file, encoding="utf-8") as source, \
       open(text_path, "w", encoding="utf-8") as target:
    size = 0
    for line in source:
      if size >= limit:
        break
      target.write(line)
      size += len(line.encode("utf-8"))
  output = os.path.join(directory, "records.tfrecord")
  # The documented command, as a subprocess: its module defines absl flags of the same names.
  command = [sys.executable, os.path.join(REPO_ROOT, "data_prep", "create_pretraining_data.py"),
             f"--input_file={text_path}", f"--output_file={output}",
             f"--vocab_file={FLAGS.vocab_file}", "--do_lower_case=True",
             f"--max_seq_length={FLAGS.max_seq_length}",
             f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}", "--dupe_factor=1"]
  subprocess.run(command, check=True, capture_output=True)
  with open(output + ".metadata.json", encoding="utf-8") as f:
    instances = json.load(f)["counts"]["instances"]
  print(f"records: {instances} instances from {size / 1e6:.2f} MB of {FLAGS.corpus_file}",
        flush=True)
  return output


# === Our loop on records: run_pretraining itself ===


class _RateCollector(logging.logging.Handler):
  """Collects the examples/s that run_pretraining logs at the end of every tf.function call
  (a step that is a multiple of the steps per call; the progress lines that a long call logs
  on its way, such as the first one's, which traces, cover part of a call and are left out)."""

  PATTERN = re.compile(r"step (\d+)/\d+ .*examples/s = ([0-9.]+)")

  def __init__(self, steps_per_call: int):
    super().__init__()
    self.steps_per_call = steps_per_call
    self.rates = []

  def emit(self, record):
    match = self.PATTERN.search(record.getMessage())
    if match and int(match.group(1)) % self.steps_per_call == 0:
      self.rates.append(float(match.group(2)))


def ours_records(config, input_file: str, output_dir: str, cpu_towers: int = 1):
  """Per-round examples/s of pretraining.run_pretraining; the first call (tracing) is dropped."""
  from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  total = FLAGS.steps * (FLAGS.rounds + 1)
  settings = pretraining.PretrainingSettings(
      input_file=input_file, output_dir=output_dir, do_train=True,
      max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      train_batch_size=FLAGS.batch_size, learning_rate=1e-4, num_train_steps=total,
      num_warmup_steps=FLAGS.steps, save_checkpoints_steps=total,
      iterations_per_loop=FLAGS.steps, export_at_end=False, seed=1,
      mixed_precision=FLAGS.mixed_precision, jit_compile=FLAGS.jit_compile,
      cpu_towers=cpu_towers)
  collector = _RateCollector(FLAGS.steps)
  absl_logger = logging.get_absl_logger()
  absl_logger.addHandler(collector)
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.INFO)  # the step lines are INFO
  try:
    pretraining.run_pretraining(config, settings, distribution.select_strategy("one_device"))
  finally:
    logging.set_verbosity(verbosity)
    absl_logger.removeHandler(collector)
  if len(collector.rates) != FLAGS.rounds + 1:
    raise RuntimeError(f"expected {FLAGS.rounds + 1} step log lines from run_pretraining, got "
                       f"{len(collector.rates)}")
  return collector.rates[1:]


def ours_towers(preset: str, input_file: str, output_dir: str):
  """ours_records with --cpu_towers, in a new process (TensorFlow's threads are set once)."""
  argv = [sys.executable, os.path.abspath(__file__),
          f"--towers_worker={json.dumps([preset, input_file, output_dir])}"]
  argv += [f"--{name}={FLAGS[name].value}" for name in (
      "cpu_towers", "steps", "rounds", "batch_size", "max_seq_length",
      "max_predictions_per_seq", "mixed_precision", "jit_compile")]
  done = subprocess.run(argv, capture_output=True, text=True, check=False)
  if done.returncode:
    raise RuntimeError(f"the --cpu_towers row failed:\n{done.stderr[-3000:]}")
  return json.loads(done.stdout.strip().splitlines()[-1])


def _towers_worker():
  from bert_tf import config as config_lib  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
  if not distribution.use_cpu_towers(FLAGS.cpu_towers):
    raise RuntimeError("TensorFlow's threads were set up before the towers'")
  logging.set_verbosity(logging.WARNING)
  preset, input_file, output_dir = json.loads(FLAGS.towers_worker)
  print(json.dumps(ours_records(config_lib.preset(preset), input_file, output_dir,
                                cpu_towers=FLAGS.cpu_towers)))


# === Our loop on synthetic data ===


def _first_batch(input_file: str):
  from bert_tf.training import input_pipeline  # pylint: disable=g-import-not-at-top
  return next(iter(input_pipeline.pretraining_dataset(
      input_file, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.batch_size,
      is_training=False)))


def _time_rounds(run_round):
  """Examples/s of --rounds calls of run_round() after one warmup call."""
  run_round()
  rates = []
  for _ in range(FLAGS.rounds):
    start = time.perf_counter()
    run_round()
    rates.append(FLAGS.steps * FLAGS.batch_size / (time.perf_counter() - start))
  return rates


def ours_synthetic(config, batch):
  """Per-round examples/s of our Trainer on one batch repeated from memory (constant tensors)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distribution, loop  # pylint: disable=g-import-not-at-top
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  from bert_tf.model.heads import build_pretraining_model  # pylint: disable=g-import-not-at-top
  strategy = distribution.select_strategy("one_device")
  with distribution.dtype_policy(FLAGS.mixed_precision), strategy.scope():
    model = build_pretraining_model(config, prune_last_layer=True)  # as run_pretraining
    optimizer = optimization.create_optimizer(
        "adamw", 1e-4, FLAGS.steps * (FLAGS.rounds + 1), FLAGS.steps)
    optimizer.build(model.trainable_variables)
  trainer = loop.Trainer(strategy, model, optimizer, pretraining.TASK, FLAGS.batch_size,
                         jit_compile=FLAGS.jit_compile)
  dataset = tf.data.Dataset.from_tensors(batch).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(dataset))
  num_steps = tf.constant(FLAGS.steps)
  return _time_rounds(lambda: int(trainer.train_loop(iterator, num_steps)[0]))


# === Model Garden ===


def model_garden(config, input_file: str):
  """Per-round examples/s of Model Garden's BertPretrainerV2 on the same records."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from official.modeling.optimization import legacy_adamw  # pylint: disable=g-import-not-at-top
  from bert_tf.training import input_pipeline  # pylint: disable=g-import-not-at-top

  if FLAGS.mixed_precision == "bfloat16":
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  initializer = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
  model = peers.model_garden_pretrainer(config, initializer)
  total_steps = FLAGS.steps * (FLAGS.rounds + 1)
  schedule = tf_keras.optimizers.schedules.PolynomialDecay(1e-4, total_steps, 0.0)
  optimizer = legacy_adamw.AdamWeightDecay(
      learning_rate=schedule, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])

  dataset = input_pipeline.pretraining_dataset(
      input_file, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.batch_size,
      is_training=True, seed=1)
  iterator = iter(dataset)

  def train_step(batch):
    inputs = dict(input_word_ids=batch["input_word_ids"], input_mask=batch["input_mask"],
                  input_type_ids=batch["input_type_ids"],
                  masked_lm_positions=batch["masked_lm_positions"])
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)
    with tf.GradientTape() as tape:
      outputs = model(inputs, training=True)
      mlm_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=batch["masked_lm_ids"], logits=tf.cast(outputs["mlm_logits"], tf.float32))
      nsp_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=tf.reshape(batch["next_sentence_labels"], [-1]),
          logits=tf.cast(outputs["next_sentence"], tf.float32))
      loss = (tf.reduce_sum(weights * mlm_nll) / (tf.reduce_sum(weights) + 1e-5)
              + tf.reduce_mean(nsp_nll))
    grads = tape.gradient(loss, model.trainable_variables)
    grads, _ = tf.clip_by_global_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  # As ours: with --jit_compile XLA compiles the step; the loop and the iterator stay outside.
  train_step_fn = tf.function(train_step, jit_compile=True) if FLAGS.jit_compile else train_step

  @tf.function
  def train_loop(num_steps):
    loss = tf.constant(0.0)
    for _ in tf.range(num_steps):
      loss = train_step_fn(next(iterator))
    return loss

  num_steps = tf.constant(FLAGS.steps)
  try:
    rates = _time_rounds(lambda: float(train_loop(num_steps)))
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  params = sum(int(tf.size(v)) for v in model.trainable_variables)
  return rates, params


# === Main ===


def main(argv):
  del argv
  if FLAGS.towers_worker:
    return _towers_worker()
  # Threading must be fixed before TensorFlow runs its first op.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  threads = int(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  logging.set_verbosity(logging.WARNING)
  from bert_tf import config as config_lib  # pylint: disable=g-import-not-at-top
  if FLAGS.smoke:
    FLAGS.presets, FLAGS.corpus_mb, FLAGS.max_seq_length = ["tiny"], 0.05, 64
    FLAGS.max_predictions_per_seq, FLAGS.batch_size, FLAGS.steps, FLAGS.rounds = 10, 4, 2, 1
    FLAGS.matmul_size = 256

  peak = measure_matmul_peak(FLAGS.matmul_size)
  print(f"float32 matmul peak ({FLAGS.matmul_size}^3, {threads} thread(s)): "
        f"{peak / 1e9:.1f} GFLOP/s", flush=True)
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    input_file = FLAGS.input_file or make_records(tmp)
    batch = _first_batch(input_file)
    for name in FLAGS.presets:
      config = config_lib.preset(name)
      flops = step_flops(config, FLAGS.batch_size, FLAGS.max_seq_length,
                         FLAGS.max_predictions_per_seq)
      print(f"{name}: {flops / 1e9:.1f} GFLOP per step", flush=True)
      measured = {"ours, records": ours_records(config, input_file, os.path.join(tmp, name))}
      print(f"  ours, records: {measured['ours, records']}", flush=True)
      if FLAGS.cpu_towers > 1:
        towers_row = f"ours, records, --cpu_towers={FLAGS.cpu_towers}"
        measured[towers_row] = ours_towers(name, input_file, os.path.join(tmp, name + "_towers"))
        print(f"  {towers_row}: {measured[towers_row]}", flush=True)
      measured["ours, synthetic"] = ours_synthetic(config, batch)
      print(f"  ours, synthetic: {measured['ours, synthetic']}", flush=True)
      if FLAGS.model_garden:
        measured["Model Garden, records"], mg_params = model_garden(config, input_file)
        print(f"  Model Garden, records: {measured['Model Garden, records']} "
              f"({mg_params} parameters)", flush=True)
      reference = statistics.median(measured.get("Model Garden, records", [float("nan")]))
      for row, rates in measured.items():
        examples = statistics.median(rates)
        steps = examples / FLAGS.batch_size
        rows.append((name, row, steps, examples, min(rates), max(rates),
                     steps * flops / peak, examples / reference))

  load = os.getloadavg()
  print(f"\nbatch {FLAGS.batch_size}, seq {FLAGS.max_seq_length}, {FLAGS.max_predictions_per_seq}"
        f" predictions, mixed precision {FLAGS.mixed_precision}, jit {FLAGS.jit_compile}, "
        f"{threads} thread(s), {peers.kernels_text()}, {FLAGS.steps} steps x {FLAGS.rounds} "
        f"rounds (median), matmul peak {peak / 1e9:.1f} GFLOP/s, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
  print("| preset | run | steps/s | examples/s (min-max) | fraction of matmul peak | "
        "ours / Model Garden |")
  print("| --- | --- | --- | --- | --- | --- |")
  for name, row, steps, examples, low, high, fraction, ratio in rows:
    print(f"| {name} | {row} | {steps:.3f} | {examples:.1f} ({low:.1f}-{high:.1f}) | "
          f"{fraction:.2f} | {ratio:.2f} |")
  keys = ("preset", "run", "steps_per_second", "examples_per_second", "min", "max",
          "fraction_of_peak", "ours_over_model_garden")
  results_file.write("pretraining", dict(
      batch_size=FLAGS.batch_size, max_seq_length=FLAGS.max_seq_length,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      mixed_precision=FLAGS.mixed_precision, jit_compile=FLAGS.jit_compile, threads=threads,
      cpu_towers=FLAGS.cpu_towers, steps=FLAGS.steps, rounds=FLAGS.rounds,
      matmul_peak_gflops=peak / 1e9, kernels=peers.kernels_text(),
      rows=[{k: (v if v == v else None) for k, v in zip(keys, row)} for row in rows]),
      FLAGS.smoke, FLAGS.results_file)


if __name__ == "__main__":
  app.run(main)
