"""Packed pretraining rows (issue 37): real tokens per second of run_pretraining's training
step at --max_seq_length (512) on a corpus of short documents, packed (exact, static) against
unpacked, side by side in one process.

  python benchmarks/packed_pretraining.py --threads=2

Data: short documents cut from --corpora (one sentence per line, blank lines between
documents): each document's sentences taken in runs of --sentences_min to --sentences_max
sentences, each run a document of its own (short web pages, reviews, abstracts), --documents of
them; then our data prep (data_prep/create_pretraining_data.py, --dupe_factor, seed 12345)
makes the original's records at --max_seq_length and --max_predictions_per_seq, so instances
are as long as their short documents allow. The real lengths of the records are printed.

Systems, all our pretraining step (training.pretraining's model, prune_last_layer, and TASK,
run by loop.Trainer) on the same records in file order (shuffle buffer 1), batch
--batch_size, the --bert_config_file sizes (BERT-Mini: 4 layers, 256 hidden):
  unpacked  one instance per row of --max_seq_length (what run_pretraining did before);
  exact     --packing=exact: each step the unpacked step's instances in the fewest rows;
  static    --packing=static: row_packing.static_rows rows per step (one shape).
After --warmup_steps untimed steps each, the systems take turns for --rounds rounds of --steps
steps; instances per second count the real instances of each round (static steps vary), real
tokens per second are that times the records' mean real length. Ratios round by round.

The table goes to benchmarks/results/packed_pretraining_DATE.json (benchmarks/results_file.py).
--smoke: configs/bert_config_tiny.json, 60 documents at sequence 128, batch 4, one round of one
step; seconds.
"""

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import harness  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEMS = ("unpacked", "exact", "static")
GOAL = 1.6  # real tokens/s, packed over unpacked (issue 37)

flags.DEFINE_list("corpora", corpora.paths(),
                  "Corpora the short documents are cut from.")
flags.DEFINE_string("vocab_file", corpora.VOCAB_FILE, "Uncased vocab.")
flags.DEFINE_string("bert_config_file", os.path.join(REPO, "configs", "bert_config_mini.json"),
                    "Model sizes.")
flags.DEFINE_integer("documents", 3000, "Short documents made.")
flags.DEFINE_integer("sentences_min", 2, "Sentences per short document, at least.")
flags.DEFINE_integer("sentences_max", 6, "Sentences per short document, at most.")
flags.DEFINE_integer("max_seq_length", 512, "Record length.")
flags.DEFINE_integer("max_predictions_per_seq", 76, "Masked-LM slots per record.")
flags.DEFINE_integer("dupe_factor", 1, "Data prep's dupe_factor.")
flags.DEFINE_integer("batch_size", 32, "Instances per step.")
flags.DEFINE_integer("steps", 3, "Timed steps per round and system.")
flags.DEFINE_integer("rounds", 3, "Timed rounds.")
flags.DEFINE_integer("warmup_steps", 3, "Untimed steps per system.")
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
flags.DEFINE_integer("threads", 1, "TensorFlow intra- and inter-op threads.")
flags.DEFINE_list("systems", list(SYSTEMS), "Systems to time: " + ", ".join(SYSTEMS) + ".")
flags.DEFINE_string("hf_worker_dir", None, "Unused (harness.run's flag).")
results_file.define_flags(flags)
FLAGS = flags.FLAGS


def short_documents(paths, count, low, high, seed=0):
  """Documents of low..high consecutive sentences cut from the corpora's documents."""
  rng = random.Random(seed)
  pieces = []
  for path in paths:
    if not os.path.exists(path):
      continue
    with open(path, encoding="utf-8") as f:
      documents = [[line.strip() for line in block.splitlines() if line.strip()]
                   for block in f.read().split("\n\n")]
    for lines in documents:
      i = 0
      while i + low <= len(lines):
        n = rng.randint(low, high)
        pieces.append(lines[i:i + n])
        i += n
  if len(pieces) < count:
    raise app.UsageError(f"--corpora give {len(pieces)} short documents; --documents={count}")
  rng.shuffle(pieces)
  return pieces[:count]


def make_records(directory):
  """The short-document corpus and its records (our data prep); returns the record path."""
  corpus = os.path.join(directory, "short_documents.txt")
  with open(corpus, "w", encoding="utf-8") as f:
    for lines in short_documents(FLAGS.corpora, FLAGS.documents, FLAGS.sentences_min,
                                 FLAGS.sentences_max):
      f.write("\n".join(lines) + "\n\n")
  records = os.path.join(directory, "short_documents.tfrecord")
  subprocess.run([sys.executable, os.path.join(REPO, "data_prep", "create_pretraining_data.py"),
                  f"--input_file={corpus}", f"--output_file={records}",
                  f"--vocab_file={FLAGS.vocab_file}", "--do_lower_case",
                  f"--max_seq_length={FLAGS.max_seq_length}",
                  f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
                  f"--dupe_factor={FLAGS.dupe_factor}", "--random_seed=12345"],
                 check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  return records


def main():
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf import row_packing  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import heads  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.training import bucketing, input_pipeline, packed_rows
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  unknown = sorted(set(FLAGS.systems) - set(SYSTEMS))
  if unknown:
    raise app.UsageError(f"unknown system(s) {', '.join(unknown)}")
  if FLAGS.smoke:
    FLAGS.bert_config_file = os.path.join(REPO, "configs", "bert_config_tiny.json")
    FLAGS.documents, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq = 60, 128, 20
    FLAGS.batch_size, FLAGS.steps, FLAGS.rounds, FLAGS.warmup_steps = 4, 1, 1, 1
  started, load = time.time(), os.getloadavg()
  config = BertConfig.from_json_file(FLAGS.bert_config_file)
  seq, b = FLAGS.max_seq_length, FLAGS.batch_size
  with tempfile.TemporaryDirectory() as directory:
    records = make_records(directory)
    counts = bucketing.length_counts(records, seq)
    lengths = np.repeat(np.arange(len(counts)), counts)
    mean = float(lengths.mean())
    print(f"{len(lengths)} instances at {seq}: real length mean {mean:.1f}, p50 "
          f"{np.median(lengths):.0f}, p90 {np.percentile(lengths, 90):.0f}, max "
          f"{lengths.max()}; unpacked rows are {mean / seq:.0%} real tokens", flush=True)
    static_rows = row_packing.static_rows(counts, b, seq)
    packings = {"unpacked": None, "exact": packed_rows.Packing(row_packing.EXACT),
                "static": packed_rows.Packing(row_packing.STATIC, rows=static_rows)}
    shares = {}
    for name, packing in packings.items():
      real = computed = 0
      for batch in input_pipeline.pretraining_dataset(
          records, seq, FLAGS.max_predictions_per_seq, b, is_training=True, seed=0,
          shuffle_buffer_size=1, packing=packing).take(10):
        mask = batch["input_mask"].numpy()
        real, computed = real + int((mask > 0).sum()), computed + mask.size
      shares[name] = real / computed
    print("real tokens / computed positions: " + ", ".join(
        f"{k} {v:.0%}" for k, v in shares.items()) + f" (static: {static_rows} rows a step)",
          flush=True)

    def system(name):
      def build(config_, pool, total_steps, warmup):
        del pool
        packing = packings[name]

        def make_dataset(ctx):
          return input_pipeline.pretraining_dataset(
              records, seq, FLAGS.max_predictions_per_seq, b, is_training=True,
              input_context=ctx, seed=0, shuffle_buffer_size=1, packing=packing)
        return harness.ours(
            lambda: heads.build_pretraining_model(config_, prune_last_layer=True,
                                                  packed=packing is not None),
            pretraining.TASK, None, total_steps, warmup, settings, make_dataset=make_dataset)
      return build

    settings = types.SimpleNamespace(
        systems=FLAGS.systems, warmup_steps=FLAGS.warmup_steps, steps=FLAGS.steps,
        rounds=FLAGS.rounds, batch_size=b, learning_rate=FLAGS.learning_rate,
        threads=FLAGS.threads)
    names = {name: f"ours, {name}" for name in SYSTEMS}
    rates, _ = harness.measure_training(config, None, {s: system(s) for s in SYSTEMS}, names,
                                        settings)

  def spread(values, digits=2):
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-"
            f"{max(values):.{digits}f})")

  print(f"\nL{config.num_hidden_layers} H{config.hidden_size} A{config.num_attention_heads} "
        f"I{config.intermediate_size}, records at {seq} (P {FLAGS.max_predictions_per_seq}) "
        f"from {FLAGS.documents} short documents of {FLAGS.sentences_min}-"
        f"{FLAGS.sentences_max} sentences, batch {b}, {FLAGS.threads} thread(s), "
        f"{FLAGS.warmup_steps} warm-up steps then {FLAGS.rounds} rounds x {FLAGS.steps} steps; "
        f"median (min-max) over rounds; load {load[0]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end, {time.time() - started:.0f} s")
  print("| system | instances/s | real tokens/s | real tokens / positions | "
        "real tokens/s vs unpacked | goal |")
  print("| --- | --: | --: | --: | --: | --- |")
  rows = []
  for name in FLAGS.systems:
    ratio, goal, ratios = "", "", None
    if name != "unpacked" and "unpacked" in rates:
      ratios = [a / c for a, c in zip(rates[name], rates["unpacked"])]
      ratio = spread(ratios)
      goal = harness.goal_text(statistics.median(ratios), GOAL)
    print(f"| ours, {name} | {spread(rates[name])} | "
          f"{spread([r * mean for r in rates[name]], 0)} | {shares[name]:.0%} | {ratio} | "
          f"{goal} |")
    rows.append(dict(system=name, instances_per_second=rates[name],
                     real_tokens_per_second=[r * mean for r in rates[name]],
                     real_token_share=shares[name], over_unpacked=ratios, goal=goal))
  results_file.write("packed_pretraining", dict(
      config=config.to_dict(),
      max_seq_length=seq, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      documents=FLAGS.documents, batch_size=b, threads=FLAGS.threads,
      warmup_steps=FLAGS.warmup_steps, steps=FLAGS.steps, rounds=FLAGS.rounds,
      mean_real_length=mean, static_rows=static_rows, rows=rows), FLAGS.smoke,
      FLAGS.results_file)


if __name__ == "__main__":
  harness.run(main, FLAGS, None)
