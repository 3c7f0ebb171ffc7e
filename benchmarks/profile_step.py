"""Where a training step's time goes: a TensorFlow profile of our systems of length_aware.py,
or of our pretraining step.

For one task of length_aware.py (its records, model sizes and batches), each system named in
--profile_systems trains --warmup_steps steps, then --steps steps untraced (the rate printed) and
--steps steps under tf.profiler. --profile_task=pretraining profiles instead the pretraining step
that run_pretraining and time_to_quality.py's "ours" train (--pretraining_preset, BERT-Mini by
default, the last layer pruned, loop.Trainer with the original's AdamWeightDecay) on one random
batch of --batch_size rows of --pretraining_seq_length tokens with --pretraining_predictions masked
positions (peers.random_batch, model_step.py's), repeated (benchmarks/pretraining.py shows that
records and a repeated batch train at the same rate), in float32 or --pretraining_mixed_precision.
--profile_task=multiple_choice profiles run_multiple_choice's training step as
benchmarks/multiple_choice.py runs it (all-MiniLM-L6-v2's real weights, its committed task, batch
16 examples of 4 choices, --choice_seq_length positions, --choice_flags added), in this process.
From the trace of TensorFlow's compute thread it prints the time per step by kind of op (self
time: a TensorFlow kernel, or one fusion of an XLA kernel) and by XLA-compiled function
(bert_tf/model/fused.py's forward and backward kernels), so the matmuls, the optimizer, the fused
elementwise kernels and the executor's own work are told apart.
The profile stays in --profile_dir (open it with TensorBoard's profile plugin).

  python benchmarks/profile_step.py --threads=1 --profile_task=short --examples=480 \\
      --warmup_steps=15 --steps=5
  python benchmarks/profile_step.py --threads=2 --profile_task=pretraining --steps=10
  taskset -c 1 python benchmarks/profile_step.py --threads=1 --profile_task=multiple_choice \
      --warmup_steps=10 --steps=20

The trace slows the step somewhat (the untraced rate is printed beside it): compare shares
within one profile, and rates with length_aware.py.

The profiles' tables go to benchmarks/results/profile_step_DATE.json
(benchmarks/results_file.py). --smoke: the short sentences, configs/bert_config_tiny.json, 64
examples, batch 8, one warm-up step and one step untraced and traced, ours_packed only; seconds.
"""

import collections
import glob
import gzip
import json
import os
import random
import re
import tempfile
import time
import types

from absl import flags

import harness
import length_aware
import peers

FLAGS = flags.FLAGS
flags.DEFINE_list("profile_systems", ["ours_packed", "ours"],
                  "Our systems of length_aware.py to profile (ours, ours_fixed, ours_packed, "
                  "ours_static, ours_grouped).")
PRETRAINING = "pretraining"
MULTIPLE_CHOICE = "multiple_choice"
flags.DEFINE_enum("profile_task", "short",
                  list(length_aware.TASKS) + [PRETRAINING, MULTIPLE_CHOICE], "The task profiled.")
flags.DEFINE_integer("choice_seq_length", 64, "--max_seq_length of --profile_task="
                     "multiple_choice (multiple_choice.py's default; run_multiple_choice's "
                     "is 128).")
flags.DEFINE_list("choice_flags", [], "More flags of run_multiple_choice for --profile_task="
                  "multiple_choice, e.g. --choice_flags=--mixed_precision=bfloat16.")
flags.DEFINE_string("pretraining_preset", "mini", "Model size of --profile_task=pretraining "
                    "(bert_tf.config.PRESETS).")
flags.DEFINE_integer("pretraining_seq_length", 128, "Sequence length of the pretraining rows.")
flags.DEFINE_integer("pretraining_predictions", 20, "Masked positions per pretraining row.")
flags.DEFINE_enum("pretraining_mixed_precision", "none", ["none", "bfloat16"],
                  "Compute dtype of --profile_task=pretraining (run_pretraining's "
                  "--mixed_precision).")
flags.DEFINE_string("profile_dir", "", "Where the profiles go; default a temporary folder.")
flags.DEFINE_integer("op_rows", 25, "Op kinds printed per system.")

OURS = ("ours", "ours_fixed", "ours_packed", "ours_static", "ours_grouped")


def trace_events(profile_dir):
  """The trace viewer's events of the profile in profile_dir (its newest xplane file)."""
  # pylint: disable=g-import-not-at-top
  from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin
  paths = sorted(glob.glob(os.path.join(profile_dir, "**", "*.xplane.pb"), recursive=True),
                 key=os.path.getmtime)
  if not paths:
    raise RuntimeError(f"no profile was written under {profile_dir}")
  data, ok = plugin.xspace_to_tools_data(paths[-1:], "trace_viewer@", {})
  if not ok:
    raise RuntimeError(f"the profiler could not read {paths[-1]}")
  if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
  return json.loads(data)["traceEvents"]


def compute_thread_times(events):
  """({op kind: self microseconds}, {XLA function: microseconds}, span in microseconds) of the
  complete events on TensorFlow's compute threads (tf_Compute*)."""
  names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
           if e.get("ph") == "M" and e.get("name") == "thread_name"}
  spans = sorted((e for e in events if e.get("ph") == "X"
                  and names.get((e["pid"], e["tid"]), "").startswith("tf_Compute")),
                 key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
  if not spans:
    raise RuntimeError("the profile has no events on TensorFlow's compute thread")
  own = collections.Counter()  # an event's duration less its children's
  stack = []
  for index, event in enumerate(spans):
    while stack and (spans[stack[-1]]["tid"] != event["tid"]
                     or spans[stack[-1]]["ts"] + spans[stack[-1]]["dur"] <= event["ts"]):
      stack.pop()
    if stack:
      own[stack[-1]] -= event["dur"]
    own[index] += event["dur"]
    stack.append(index)
  kinds, functions = collections.Counter(), collections.Counter()
  for index, event in enumerate(spans):
    # Names: "scope/.../Kind" for TensorFlow kernels, "kind_fusion.3" inside XLA functions,
    # "ExecutorState::..." for the executor's own work (e.g. calling an XLA function).
    name = event["name"] if "::" in event["name"] else event["name"].split("/")[-1]
    kinds[re.sub(r"\.\d+$", "", name.split(":")[-1] if "::" not in name else name)] += own[index]
    module = event.get("args", {}).get("hlo_module")
    if module and event["name"] != module:  # an XLA op; its module is the compiled function
      functions[re.sub(r"^a_inference_|_\d+__\.\d+$", "", module)] += own[index]
  start = min(e["ts"] for e in spans)
  return kinds, functions, max(e["ts"] + e["dur"] for e in spans) - start


def print_profile(system, rate, traced_seconds, steps, events):
  kinds, functions, span = compute_thread_times(events)
  per_step = lambda micros: micros / 1e3 / steps
  total = sum(kinds.values())
  print(f"\n{system}: {rate:.2f} examples/s untraced; traced {traced_seconds / steps * 1e3:.0f} "
        f"ms a step, the compute thread busy {per_step(total):.0f} ms of its "
        f"{per_step(span):.0f} ms span")
  print("| op (self time) | ms a step | share |")
  print("| --- | --: | --: |")
  for kind, micros in kinds.most_common(FLAGS.op_rows):
    print(f"| {kind} | {per_step(micros):.1f} | {100 * micros / total:.1f}% |")
  if functions:
    print(f"| XLA functions (fused.py), all | {per_step(sum(functions.values())):.1f} | "
          f"{100 * sum(functions.values()) / total:.1f}% |")
    for function, micros in functions.most_common():
      print(f"| - {function} | {per_step(micros):.1f} | {100 * micros / total:.1f}% |")
  return dict(system=system, examples_per_second_untraced=rate,
              traced_ms_a_step=traced_seconds / steps * 1e3, busy_ms_a_step=per_step(total),
              span_ms_a_step=per_step(span),
              ops=[dict(op=kind, ms_a_step=per_step(micros), share=micros / total)
                   for kind, micros in kinds.most_common(FLAGS.op_rows)],
              xla_functions=[dict(function=function, ms_a_step=per_step(micros),
                                  share=micros / total)
                             for function, micros in functions.most_common()])


def pretraining_run(tf):
  """run(steps) -> examples of our pretraining step (see the module docstring), and its name."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf.config import preset  # pylint: disable=g-import-not-at-top
  from bert_tf.model.heads import build_pretraining_model  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distribution, loop  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  config = preset(FLAGS.pretraining_preset)
  b, s, p = FLAGS.batch_size, FLAGS.pretraining_seq_length, FLAGS.pretraining_predictions
  if not 0 < p or s < 4:
    raise ValueError(f"--pretraining_predictions must be positive and "
                     f"--pretraining_seq_length at least 4, got {p} and {s}")
  strategy = distribution.select_strategy("one_device")
  with strategy.scope():
    model = build_pretraining_model(config, prune_last_layer=True)
    optimizer = optimization.create_optimizer("adamw", FLAGS.learning_rate, 10 ** 6, 100)
    optimizer.build(model.trainable_variables)
  trainer = loop.Trainer(strategy, model, optimizer, pretraining.TASK, b)
  batch = peers.random_batch(np, config, b, s, p, np.random.default_rng(FLAGS.data_seed))
  iterator = iter(strategy.experimental_distribute_dataset(
      tf.data.Dataset.from_tensors(batch).repeat()))

  def run(steps):
    trainer.train_loop(iterator, tf.constant(steps))
    return steps * b
  precision = ("" if FLAGS.pretraining_mixed_precision == "none"
               else f", mixed {FLAGS.pretraining_mixed_precision}")
  return run, (f"ours, pretraining {FLAGS.pretraining_preset} (batch {b}, sequence {s}, "
                f"{p} predictions{precision})")


def multiple_choice_profile(tf, directory):
  """run_multiple_choice as multiple_choice.py runs it (all-MiniLM-L6-v2, its committed task,
  batch 16, learning rate 5e-5, seed 1), in this process with its own flag values, one step per
  training call: --warmup_steps steps, --steps steps timed untraced, --steps steps traced (the
  run's batches in its order, so the later steps see other batches). Returns the profile."""
  import multiple_choice as script  # pylint: disable=g-import-not-at-top
  from bert_tf import cli, run_multiple_choice  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.multiple_choice import run as mc_run  # pylint: disable=g-import-not-at-top
  from bert_tf.training import loop  # pylint: disable=g-import-not-at-top
  batch, steps, warmup = 16, FLAGS.steps, FLAGS.warmup_steps
  train = script.DATA["train"]
  if FLAGS.smoke:  # the first 32 training examples, batches of 8
    train = os.path.join(directory, "train.jsonl")
    with open(script.DATA["train"], encoding="utf-8") as f, open(train, "w",
                                                                  encoding="utf-8") as out:
      out.writelines(f.readlines()[:32])
    batch = 8
  with open(train, encoding="utf-8") as f:
    examples = sum(1 for line in f if line.strip())
  needed = warmup + 2 * steps
  model = script.minilm()
  flag_values = flags.FlagValues()
  run_multiple_choice.define_flags(flag_values)
  flag_values([
      "run_multiple_choice", f"--train_file={train}", f"--init_checkpoint={model}",
      f"--vocab_file={model}", "--do_train", f"--max_seq_length={FLAGS.choice_seq_length}",
      f"--train_batch_size={batch}", "--learning_rate=5e-5", "--seed=1", "--noexport",
      f"--num_train_epochs={(needed + 1) * batch / examples}", "--iterations_per_loop=1",
      f"--output_dir={os.path.join(directory, 'run')}"] + FLAGS.choice_flags)
  phases = dict(done=0, untraced=0.0, traced=0.0)
  profile_dir = FLAGS.profile_dir or os.path.join(directory, MULTIPLE_CHOICE)
  made = loop.Trainer.__init__

  def init(trainer, *args, **kwargs):
    made(trainer, *args, **kwargs)
    inner = trainer.train_loop

    def timed_loop(iterator, count):
      done = phases["done"]
      if done == warmup + steps:
        tf.profiler.experimental.start(profile_dir)
      started = time.perf_counter()
      result = inner(iterator, count)
      result[0].numpy()  # the steps run: the call has finished
      seconds = time.perf_counter() - started
      phases["done"] = done + int(count)
      if warmup <= done < warmup + steps:
        phases["untraced"] += seconds
      elif warmup + steps <= done < needed:
        phases["traced"] += seconds
        if phases["done"] >= needed:
          tf.profiler.experimental.stop()
      return result
    trainer.train_loop = timed_loop

  loop.Trainer.__init__ = init
  try:
    cli.apply_runtime_flags(flag_values)
    config = cli.config_from_flags(flag_values)
    settings = run_multiple_choice.settings_from_flags(flag_values)
    mc_run.run_multiple_choice(config, settings,
                               cli.checked_strategy(settings, config, flag_values))
  finally:
    loop.Trainer.__init__ = made
  if phases["done"] < needed:
    raise RuntimeError(f"run_multiple_choice ran {phases['done']} steps, not {needed}")
  extra = "".join(f", {flag}" for flag in FLAGS.choice_flags)
  name = (f"ours, multiple choice (all-MiniLM-L6-v2, batch {batch} x 4 choices, "
          f"--max_seq_length={FLAGS.choice_seq_length}{extra})")
  return print_profile(name, steps * batch / phases["untraced"], phases["traced"], steps,
                       trace_events(profile_dir))


def profile(tf, run, name, profile_dir):
  """Warms run up, times --steps untraced, traces --steps more and prints the profile."""
  run(FLAGS.warmup_steps)
  started = time.perf_counter()
  examples = run(FLAGS.steps)
  rate = examples / (time.perf_counter() - started)
  tf.profiler.experimental.start(profile_dir)
  started = time.perf_counter()
  run(FLAGS.steps)
  traced = time.perf_counter() - started
  tf.profiler.experimental.stop()
  return print_profile(name, rate, traced, FLAGS.steps, trace_events(profile_dir))


def write_results(profiles):
  length_aware.finetuning.results_file.write("profile_step", dict(
      task=FLAGS.profile_task, warmup_steps=FLAGS.warmup_steps, steps=FLAGS.steps,
      batch_size=FLAGS.batch_size, threads=FLAGS.threads, profiles=profiles), FLAGS.smoke,
      FLAGS.results_file)


def main():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if FLAGS.smoke:
    length_aware.apply_smoke()
    if FLAGS.profile_task != PRETRAINING:
      FLAGS.profile_systems = ["ours_packed"]
    FLAGS.pretraining_preset, FLAGS.pretraining_seq_length = "tiny", 64
    FLAGS.pretraining_predictions = 10
  if FLAGS.profile_task == MULTIPLE_CHOICE:
    with tempfile.TemporaryDirectory() as directory:
      write_results([multiple_choice_profile(tf, directory)])
    return
  if FLAGS.profile_task == PRETRAINING:
    if FLAGS["profile_systems"].present:
      raise ValueError("--profile_systems names systems of length_aware.py's tasks; "
                       "--profile_task=pretraining profiles our pretraining step only")
    from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory() as directory, distribution.dtype_policy(
        FLAGS.pretraining_mixed_precision):
      run, name = pretraining_run(tf)
      write_results([profile(tf, run, name,
                             FLAGS.profile_dir or os.path.join(directory, PRETRAINING))])
    return
  from bert_tf import length_buckets  # pylint: disable=g-import-not-at-top
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  from bert_tf.training import bucketing  # pylint: disable=g-import-not-at-top
  unknown = sorted(set(FLAGS.profile_systems) - set(OURS))
  if unknown:
    raise ValueError(f"--profile_systems: {', '.join(unknown)} not among {', '.join(OURS)}")
  corpora = length_aware.corpus_documents(FLAGS.corpora)
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=True)
  config = length_aware.model_config()
  task = FLAGS.profile_task
  with tempfile.TemporaryDirectory() as directory:
    profile_root = FLAGS.profile_dir or os.path.join(directory, "profiles")
    rng = random.Random(f"{FLAGS.data_seed}-{task}")
    path, seq, what = length_aware.write_records(task, corpora, tokenizer, directory, rng)
    print(f"{task}: {what}", flush=True)
    buckets = length_buckets.parse(FLAGS.length_buckets, seq)
    fitted = bucketing.fitted_buckets(path, seq, FLAGS.batch_size)
    settings = types.SimpleNamespace(batch_size=FLAGS.batch_size,
                                     learning_rate=FLAGS.learning_rate)
    systems = length_aware.task_systems(task, path, seq, buckets, {}, settings, fitted)
    profiles = []
    for system in FLAGS.profile_systems:
      run, _ = systems[system](config, None, FLAGS.warmup_steps + 2 * FLAGS.steps, 2)
      profiles.append(profile(tf, run, system, os.path.join(profile_root, system)))
  write_results(profiles)


if __name__ == "__main__":
  harness.run(main, FLAGS, length_aware.hf_model)
