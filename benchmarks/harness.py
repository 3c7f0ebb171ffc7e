"""The fine-tuning throughput harness shared by finetuning.py and squad.py (imported by path).

A script names its task's pieces (our model and TASK, Model Garden's head and loss, Hugging
Face's head and label arguments, the random batch pool); this module runs them the same way for
every task:

  ours:         the model trained by bert_tf.training.loop.Trainer with the original's AdamW
                (optimization.create_optimizer("adamw"), global-norm clipping 1.0);
  Model Garden: a network over networks.BertEncoder (peers.py) with OptimizerFactory's "adamw"
                (peers.model_garden_adamw) and the step of its base_task.train_step, run by a
                tf.function loop through strategy.run over the same one-device strategy and
                distributed dataset;
  Hugging Face: a transformers PyTorch model (eager) with torch.optim.AdamW (no decay for biases
                and LayerNorm, as HF's Trainer), a linear warmup/decay schedule and
                clip_grad_norm_ 1.0, in a worker process (PyTorch and TensorFlow in one process
                crash) that runs the script itself with --hf_worker_dir.

A system is a function (config, pool, total_steps, warmup) -> (run, trainable parameters), where
run(num_steps) blocks until the steps are done (and run.close(), if there, ends what it started),
or (None, reason) when it is skipped. `settings` below are the scripts' flags (finetuning.py's
shared knobs: presets, batch_size, seq_length, steps, rounds, warmup_steps, learning_rate,
threads, systems, hf_worker_dir).
"""

import json
import os
import statistics
import sys
import tempfile
import time

from absl import app
from absl import logging

import peers  # benchmarks/peers.py, on the path as this module is; chooses the kernels (oneDNN)
import results_file  # benchmarks/results_file.py

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(main, settings, build_hf_model):
  """absl's app.run of a script: with --hf_worker_dir this process is the Hugging Face worker
  (hf_worker(settings.hf_worker_dir, build_hf_model)); otherwise main() runs after TensorFlow's
  intra- and inter-op threads are fixed to settings.threads (before TensorFlow's first op) and
  absl logging is quieted."""

  def start(argv):
    del argv
    if settings.hf_worker_dir:
      hf_worker(settings.hf_worker_dir, build_hf_model)
      return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(settings.threads)
    tf.config.threading.set_inter_op_parallelism_threads(settings.threads)
    logging.set_verbosity(logging.WARNING)
    main()
  app.run(start)


def apply_smoke(settings):
  """--smoke on a script's flags: the tiny preset (2 layers of 128), batch 4, sequence 32, one
  warm-up step and one round of one step over a pool of two batches, and no system that needs
  torch (each left out with a printed line)."""
  settings.presets, settings.batch_size, settings.seq_length = ["tiny"], 4, 32
  settings.warmup_steps, settings.steps, settings.rounds, settings.pool_batches = 1, 1, 1, 2
  settings.systems = results_file.without_torch(settings.systems, True)


def table_results(settings_text, rows):
  """A printed table (print_table's rows) as a results file's values."""
  keys = ("measurement", "system", "examples_per_second", "ratio", "goal")
  return dict(settings=settings_text, rows=[dict(zip(keys, row)) for row in rows])


def dataset_fn(pool, global_batch):
  """tf.distribute dataset function: the pool in order, repeated, in per-replica batches."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def make(ctx):
    batch = ctx.get_per_replica_batch_size(global_batch) if ctx else global_batch
    dataset = tf.data.Dataset.from_tensor_slices(pool).repeat()
    return dataset.batch(batch, drop_remainder=True).prefetch(2)
  return make


def random_inputs(np, vocab_size, n, seq, shortest, seed=0):
  """The start of a pool of n random examples (numpy): lengths uniform in [shortest, seq], word
  ids uniform in [1000, vocab_size) up to the length (zeros after), [CLS] first. Returns (the
  generator, to draw the task's features next; lengths; positions [1, seq]; {input_word_ids,
  input_mask})."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(shortest, seq + 1, size=n)
  positions = np.arange(seq)[None, :]
  mask = (positions < lengths[:, None]).astype(np.int32)
  ids = rng.integers(1000, vocab_size, size=(n, seq)).astype(np.int32) * mask
  ids[:, 0] = 101  # [CLS]
  return rng, lengths, positions, dict(input_word_ids=ids, input_mask=mask)


def _parameters(model):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return sum(int(tf.size(v)) for v in model.trainable_variables)


# === The systems ===


def ours(build_model, task, pool, total_steps, warmup, settings, make_dataset=None):
  """build_model() (under the strategy's scope) trained by loop.Trainer with `task`, on the
  pool's batches in order (dataset_fn) or, with make_dataset, on the batches of
  make_dataset(input_context) (per-batch shapes, e.g. input_pipeline's dataset functions)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distribution, loop  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top

  strategy = distribution.select_strategy()
  with strategy.scope():
    model = build_model()
    optimizer = optimization.create_optimizer("adamw", settings.learning_rate, total_steps,
                                              warmup)
    optimizer.build(model.trainable_variables)
  trainer = loop.Trainer(strategy, model, optimizer, task, settings.batch_size)
  iterator = iter(strategy.distribute_datasets_from_function(
      make_dataset or dataset_fn(pool, settings.batch_size)))

  def run(num_steps):
    steps, _, totals = trainer.train_loop(iterator, tf.constant(num_steps))
    if int(steps) != num_steps:
      raise RuntimeError(f"ours: non-finite loss, stopped after {int(steps)} steps")
    # The real examples trained on: static packing's steps hold a varying number.
    return float(totals["examples"])
  return run, _parameters(model)


def sparse_crossentropy(labels, logits):
  """Per-example sparse categorical cross-entropy of float32 logits, as Model Garden's tasks."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  return tf_keras.losses.sparse_categorical_crossentropy(
      labels, tf.cast(logits, tf.float32), from_logits=True)


def correct_count(logits, labels):
  """How many argmax predictions equal the labels (float32), as Model Garden's accuracy."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.reduce_sum(tf.cast(tf.equal(
      tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32))


def model_garden(config, pool, total_steps, warmup, settings, build_head, losses, metrics):
  """Model Garden: build_head(encoder, initializer) over networks.BertEncoder of config's sizes,
  trained by base_task.train_step's steps: losses(outputs, batch) -> the task's build_losses
  (the optimizer clips to gradient_clip_norm before applying), then metrics(outputs, batch)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import networks as mg_networks  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top

  strategy = distribution.select_strategy()  # the same one-device strategy as ours
  with strategy.scope():
    initializer = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    encoder = peers.model_garden_encoder(config, mg_networks.BertEncoder, initializer)
    model = build_head(encoder, initializer)
    optimizer = peers.model_garden_adamw(settings.learning_rate, total_steps, warmup)
  iterator = iter(strategy.distribute_datasets_from_function(
      dataset_fn(pool, settings.batch_size)))

  def replica_step(batch):
    features = {k: batch[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    with tf.GradientTape() as tape:
      outputs = model(features, training=True)
      loss = losses(outputs, batch)
      scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
    return loss, metrics(outputs, batch)

  @tf.function
  def train_loop(num_steps):
    total = tf.constant(0.0)
    for _ in tf.range(num_steps):
      loss, _ = strategy.run(replica_step, args=(next(iterator),))
      total += strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
    return total

  def run(num_steps):
    if not tf.math.is_finite(train_loop(tf.constant(num_steps))):
      raise RuntimeError("Model Garden: non-finite loss")
  return run, _parameters(model)


def hf_torch_model(spec, pool, build_model, labels, dynamic_padding=False):
  """In the Hugging Face worker: build_model() (after the thread count and seed are fixed)
  trained eagerly on spec's batches of pool, cycled; `labels` maps the model's label arguments
  to pool keys. With dynamic_padding every batch is cut to its longest row (the last
  input_mask 1), as transformers' DataCollatorWithPadding pads. Returns (run, trainable
  parameters)."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(spec["threads"])
  torch.manual_seed(0)
  model = build_model()
  model.train()
  optimizer, scheduler = peers.hf_adamw(model, spec["learning_rate"], spec["warmup"],
                                        spec["total_steps"])
  b = spec["batch_size"]
  arguments = dict(input_ids="input_word_ids", attention_mask="input_mask",
                   token_type_ids="input_type_ids", **labels)
  batches = [{arg: torch.as_tensor(pool[key][i:i + b]).long() for arg, key in arguments.items()}
             for i in range(0, len(pool["input_word_ids"]), b)]
  if dynamic_padding:
    for batch in batches:
      mask = batch["attention_mask"]
      width = int((mask * torch.arange(1, mask.shape[1] + 1)).max())
      for arg, value in batch.items():
        if value.dim() == 2 and value.shape[1] == mask.shape[1]:
          batch[arg] = value[:, :width].contiguous()
  position = [0]

  def step(batch):
    out = model(**batch)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return out.loss

  def run(num_steps):
    for _ in range(num_steps):
      loss = step(batches[position[0] % len(batches)])
      position[0] += 1
    if not torch.isfinite(loss):
      raise RuntimeError("Hugging Face: non-finite loss")
  return run, sum(p.numel() for p in model.parameters() if p.requires_grad)


def hf_worker(directory, build):
  """The worker process of a Hugging Face row: build(spec, pool) from spec.json and pool.npz
  gives (run, parameters); it then runs the number of steps read from each line of stdin and
  answers "done" (the parent times the round trip, as for the other rows)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  with open(os.path.join(directory, "spec.json")) as f:
    spec = json.load(f)
  pool = dict(np.load(os.path.join(directory, "pool.npz")))
  run, params = build(spec, pool)
  print(f"params {params}", flush=True)
  for line in sys.stdin:
    run(int(line))
    print("done", flush=True)


def hf_torch(script, prefix, config, pool, total_steps, warmup, settings, **extra):
  """A Hugging Face row through `script --hf_worker_dir=<a new directory named prefix...>`
  holding spec.json (config, the shared settings and `extra`) and pool.npz; (None, reason)
  without torch or transformers, or when the worker fails to start."""
  import importlib.util as util  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  missing = [m for m in ("torch", "transformers") if util.find_spec(m) is None]
  if missing:
    return None, f"{' and '.join(missing)} not installed"
  directory = tempfile.mkdtemp(prefix=prefix)
  spec = dict(config=config.to_dict(), threads=settings.threads,
              learning_rate=settings.learning_rate, warmup=warmup, total_steps=total_steps,
              batch_size=settings.batch_size, **extra)
  with open(os.path.join(directory, "spec.json"), "w") as f:
    json.dump(spec, f)
  np.savez(os.path.join(directory, "pool.npz"), **pool)
  worker = subprocess.Popen([sys.executable, os.path.abspath(script),
                             f"--hf_worker_dir={directory}"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
  first = worker.stdout.readline().split()
  if not first or first[0] != "params":
    worker.kill()
    return None, "the Hugging Face worker failed to start"

  def run(num_steps):
    worker.stdin.write(f"{num_steps}\n")
    worker.stdin.flush()
    if worker.stdout.readline().strip() != "done":
      raise RuntimeError("the Hugging Face worker stopped")

  def close():  # end of input: the worker returns
    worker.stdin.close()
    worker.wait()
  run.close = close
  return run, int(first[1])


# === Timing and rows ===


def measure_training(config, pool, systems, names, settings):
  """{system: per-round examples/s} and {system: reason skipped} for one config (a system's
  run(steps) may return the real examples it trained on; else steps x batch_size): each of
  settings.systems runs settings.warmup_steps untimed steps (tracing, allocation), then all take
  turns for settings.rounds rounds of settings.steps steps."""
  total_steps = settings.warmup_steps + settings.steps * settings.rounds
  warmup = max(1, total_steps // 10)  # the original's warmup_proportion 0.1
  runs, rates, skipped = {}, {}, {}
  for system in settings.systems:
    if system not in systems:
      raise app.UsageError(f"unknown system {system!r}; choose from {', '.join(systems)}")
    run, params = systems[system](config, pool, total_steps, warmup)
    if run is None:
      skipped[system] = params
      print(f"  {names[system]}: skipped, {params}", flush=True)
      continue
    start = time.perf_counter()
    run(settings.warmup_steps)  # tracing, allocation; not timed
    print(f"  {names[system]}: {params:,} parameters, warm-up {time.perf_counter() - start:.1f} s",
          flush=True)
    runs[system] = run
    rates[system] = []
  for r in range(settings.rounds):
    for system, run in runs.items():
      start = time.perf_counter()
      examples = run(settings.steps)
      elapsed = time.perf_counter() - start
      # A run may say how many real examples it trained on (static packing varies them);
      # otherwise every step holds batch_size.
      rates[system].append((examples or settings.steps * settings.batch_size) / elapsed)
    print(f"  round {r + 1}: " + ", ".join(f"{s} {v[-1]:.2f}" for s, v in rates.items()),
          flush=True)
  for run in runs.values():  # Hugging Face workers end here, not when the script does
    getattr(run, "close", lambda: None)()
  return rates, skipped


def goal_text(ratio, goal):
  return f">= {goal:g}x: {'met' if ratio >= goal else 'NOT met'}"


def training_rows(settings, make_pool, systems, names, goals, what, skipped_goal=False):
  """Table rows (what, system, examples/s text, ratio text, goal text) of every preset of
  settings.presets (configs/bert_config_<preset>.json): the median round, the range and ours /
  peer of the medians. make_pool(config) gives the batch pool, what(preset) the measurement;
  with skipped_goal, a skipped row's goal says "not measured"."""
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  rows = []
  for preset in settings.presets:
    config = BertConfig.from_json_file(
        os.path.join(REPO_ROOT, "configs", f"bert_config_{preset}.json"))
    print(f"fine-tuning {preset}", flush=True)
    rates, skipped = measure_training(config, make_pool(config), systems, names, settings)
    ours_rate = statistics.median(rates["ours"]) if "ours" in rates else None
    for system in settings.systems:
      if system in skipped:
        rows.append((what(preset), names[system], f"skipped: {skipped[system]}", "",
                     f">= {goals[system]:g}x: not measured" if skipped_goal else ""))
        continue
      median = statistics.median(rates[system])
      text = f"{median:.2f} ({min(rates[system]):.2f}-{max(rates[system]):.2f})"
      if system == "ours" or ours_rate is None:
        rows.append((what(preset), names[system], text, "", ""))
      else:
        ratio = ours_rate / median
        rows.append((what(preset), names[system], text, f"{ratio:.2f}x",
                     goal_text(ratio, goals[system])))
  return rows


def rounds_text(settings, after_sequence=""):
  """The training settings for the line above the table: "batch B, sequence S, <after_sequence>T
  thread(s), W warm-up steps then R rounds x N steps (median round, min-max)"."""
  return (f"batch {settings.batch_size}, sequence {settings.seq_length}, {after_sequence}"
          f"{settings.threads} thread(s), {settings.warmup_steps} warm-up steps then "
          f"{settings.rounds} rounds x {settings.steps} steps (median round, min-max)")


def print_table(settings_text, ratio_header, rows):
  """A blank line, settings_text with the machine's CPUs and load average, and the Markdown
  table of rows under | measurement | system | examples/s | <ratio_header> | goal |."""
  load = os.getloadavg()
  print(f"\n{settings_text}; {peers.kernels_text()}; {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
  print(f"| measurement | system | examples/s | {ratio_header} | goal |")
  print("| --- | --- | --: | --: | --- |")
  for row in rows:
    print("| " + " | ".join(row) + " |")
