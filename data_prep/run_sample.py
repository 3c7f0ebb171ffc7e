"""Runs the whole pipeline on the bundled sample corpus, step by step, with the real commands,
and shows what pretraining buys: the same fine-tuning from the pretrained model and from random
initialisation, side by side.

Learns a vocab, tokenizes the sample, makes pretraining records, pretrains a tiny BERT with
evaluation and export, asks the exported TF Serving text model to fill masks, then fine-tunes a
classifier with run_classifier on a task made from the sample (is a line dialogue or narration?
labelled by its quotation marks, which are then removed) with the same flags under each of
--seeds (run_classifier --seeds): from the pretrained checkpoint and from random
initialisation. The random initialisation's fine-tuning needs nothing that pretraining made, so
it runs in the background beside the next steps (its log in <output_dir>/
classifier_random_init.log): a tiny model's steps leave a 2-core machine's second core mostly
idle, and the two commands side by side take about as long as the longer of them alone, with
the same answers. It prints both mean dev accuracies and their difference with its standard error
(seeded_comparison), asks the first seed's raw-text classifier export, and writes the headline
figures to <output_dir>/summary.json.

  python data_prep/run_sample.py [--output_dir=sample_output] [--seeds=1,2,3,4,5]

Each step is the documented CLI run as a subprocess, printed before it runs, so what this does is
exactly what a user would type. Outputs go to --output_dir (default: sample_output/ in the
current directory), replaced on each run. Only the standard library and bert_tf.logs (itself
standard library only) are imported here.
"""

import argparse
import json
import math
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import NamedTuple, TextIO

# The commands' log filter: the standard library only (it imports no TensorFlow).
from bert_tf import logs

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
SAMPLE = os.path.join(HERE, "sample", "sample_text.txt")

# The sizes below were chosen by measurement on a 2-core machine (README, "What the main job
# shows"): a 4,000-piece vocab of the sample's own words (no [unusedN] slots), sequences of 64
# pieces (the task's lines fit), masks redrawn every batch, and, in the model, no dropout and
# initializer_range 0.05 instead of 0.02. A tiny BERT first learns to predict the frequent
# pieces (", . - the to") whatever the input, a plateau at masked-LM accuracy 0.06 that it must
# leave before its weights are worth anything to a task; with initializer_range 0.02 it was still
# there after 400 to 1,000 steps in six runs of eight, with 0.05 and no dropout it left after
# about 150 steps. dupe_factor 10 gives each document ten different next-sentence pairings: with
# 2, the 7,500 records' pairs were learnt by heart (next-sentence accuracy 0.91 on them, 0.50 on
# new pairs) and the pooled output that the classifier reads got worse with more steps. 3,000
# steps rather than 2,000 fine-tuned no better (0.69-0.70 both) and take a minute longer.
# Peak learning rate 7e-4 (the original's AdamW, no bias correction; HISTORY.md, "The peak
# learning rate"): at 2e-3 the model never left the plateau and fine-tuned 0.14 below random
# initialisation; at 1e-3 one run in thirteen ended with next-sentence accuracy 0.59 and gained
# +0.007; at 7e-4 fifteen runs gained +0.023 to +0.055 under the fine-tuning recipe of the time
# (256 lines, 24 epochs), one of them below three standard errors (2.6). At 5e-4 and at 1e-3 with
# --adam_bias_correction (two runs each) the gain was smaller, +0.028 to +0.035, though three of
# those four runs ended with masked-LM accuracy 0.21-0.24 (the 1e-3 runs: 0.161-0.215): on this
# sample, a better masked-LM score does not give the classifier a better start.
# Random initialisation gets the same config and flags, so the comparison stays like for like.
VOCAB_SIZE = 4000
MAX_SEQ_LENGTH = 64
MAX_PREDICTIONS_PER_SEQ = 10
DUPE_FACTOR = 10
PRETRAINING_STEPS = 2000
PRETRAINING_BATCH_SIZE = 32
PRETRAINING_LEARNING_RATE = 7e-4
PRETRAINING_WARMUP_STEPS = 100
# 128 labelled lines, 48 epochs of batch 32 = 192 updates at 2e-4, once per seed of SEEDS: what
# pretraining is for is the labelled data a task does not have. Both models are fine-tuned under
# each seed and the difference is their mean's (one seed's difference moves by as much as the
# smaller gains). The recipe was chosen on the fifteen pretraining checkpoints of the runs at 7e-4
# (HISTORY.md, "The fine-tuning recipe"), five seeds each: with 256 lines and 24 epochs they
# gained +0.023 to +0.055 and one stayed below three standard errors (2.6, and 2.7 under ten
# seeds: more seeds would not have saved it); with 128 lines and 48 epochs, the same 192 updates
# and time, random initialisation falls from 0.642 to 0.609 while the pretrained models keep
# 0.68-0.71: +0.067 to +0.097, 5.9 to 11.1 standard errors (the checkpoint that had missed: 11.1).
FINE_TUNING_FLAGS = ("--max_seq_length=64", "--train_batch_size=32", "--learning_rate=2e-4",
                     "--num_train_epochs=48", "--eval_batch_size=64", "--predict_batch_size=64")
SEEDS = (1, 2, 3, 4, 5)
# Dev is nearly as large as the sample's dialogue lines allow (balanced: 2,650 dialogue lines of
# four words or more; 4,900 was the most beside 256 training lines, and was kept), so that a
# difference of a few points is beyond noise: the standard error of an accuracy near 0.7 on
# 4,900 examples is 0.0065. Every run predicts the dev lines too, so the difference is also
# judged example by example (seeded_comparison), as the models answer the same lines.
TASK_EXAMPLES = {"train": 128, "dev": 4900, "test": 64}

# Loads an exported text model the way a server does (no bert_tf import) and fills masks; the
# last line it prints is the answers as JSON, for summary.json.
FILL_MASK_TEXTS = (
    "she was the youngest of the two [MASK] of a most affectionate father.",
    "i do not [MASK] what you mean.",
    "emma could not [MASK] a doubt of her being in love.",
    "mr. [MASK] was a sensible man.",
)
QUERY_EXPORT = """
import json
import sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops
model = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.argv[2])
out = model.signatures["fill_mask"](text=tf.constant(texts))
answers = []
for text, tokens, probs in zip(texts, out["top_tokens"].numpy(), out["top_probabilities"].numpy()):
  top = [(t.decode(), float(p)) for t, p in zip(tokens[0], probs[0])]
  print(text)
  print("  [MASK] ->", ", ".join(f"{t} ({p:.3f})" for t, p in top))
  answers.append({"text": text, "top": [t for t, _ in top]})
print(json.dumps(answers))
"""

# Loads the exported classifier the way a server does and classifies two sentences.
QUERY_CLASSIFIER = """
import sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops
model = tf.saved_model.load(sys.argv[1])
texts = ["I cannot agree with you, papa; you know I cannot.",
         "The real evils of Emma's situation were the power of having rather too much her own way."]
out = model.signatures["serving_default"](text=tf.constant(texts))
for text, label, p in zip(texts, out["label"].numpy(), out["probabilities"].numpy()):
  print(f"  {text!r}: {label.decode()} (P(dialogue) = {p[0]:.3f})")
"""

# run_pretraining's progress line: "step 250/1000 loss = ... examples/s = 123.4 ETA ...".
STEP_LINE = re.compile(r"step (\d+)/\d+ .*examples/s = ([0-9.]+)")


def write_dialogue_task(sample, output_dir, examples=None, seed=12345):
  """A labelled-by-construction task from the sample: is a line spoken (it holds a quotation
  mark) or narration? The quotation marks are removed, so the model has to tell from the
  words. TSV files with a header: sentence, label (dialogue / narration), each split balanced
  and no line in two splits. Returns {split: number of rows}."""
  examples = examples or TASK_EXAMPLES
  by_label = {"dialogue": [], "narration": []}
  with open(sample, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      text = line.replace('"', "").strip()
      if len(text.split()) >= 4:
        by_label["dialogue" if '"' in line else "narration"].append(text.replace("\t", " "))
  needed = sum(count // 2 for count in examples.values())
  for label, texts in by_label.items():
    if len(texts) < needed:
      raise ValueError(f"{sample}: {len(texts)} {label} lines, the splits need {needed}")
  rng = random.Random(seed)
  for texts in by_label.values():
    rng.shuffle(texts)
  os.makedirs(output_dir, exist_ok=True)
  start = 0
  sizes = {}
  for split, count in examples.items():
    rows = [(text, label) for label, texts in by_label.items()
            for text in texts[start:start + count // 2]]
    start += count // 2
    rng.shuffle(rows)
    with open(os.path.join(output_dir, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n")
      f.writelines(f"{text}\t{label}\n" for text, label in rows)
    sizes[split] = len(rows)
  return sizes


def run_step(title, args, capture=False, plain_tensorflow=False):
  """Prints and runs one command; exits on failure. With capture, its output (stdout and
  stderr, still echoed) is returned as a list of lines. plain_tensorflow marks a script that
  imports TensorFlow without bert_tf (the queries, as a server would run them): TensorFlow's
  start-up lines are hidden from it as the bert_tf commands hide them (bert_tf.logs: its C++
  INFO lines and the known harmless ones; BERT_TF_VERBOSE=1 shows everything)."""
  announce(title, args)
  started = time.time()
  lines = []
  env = None
  line_filter = None
  if plain_tensorflow and os.environ.get(logs.VERBOSE_ENV, "") in ("", "0"):
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    line_filter = logs.LineFilter()
    capture = True
  if capture:
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", env=env) as process:
      for line in process.stdout:
        if line_filter is None or line_filter.keep(line.rstrip("\n").encode()):
          sys.stdout.write(line)
        lines.append(line)
    returncode = process.returncode
  else:
    returncode = subprocess.run(args).returncode
  if returncode != 0:
    sys.exit(f"run_sample: step '{title}' failed with exit code {returncode}")
  print(f"({title}: {time.time() - started:.1f} s)", flush=True)
  return lines


def announce(title, args, note=""):
  """Prints a step's title (and note) and its command line, as the user would type it."""
  print(f"\n=== {title}{note}\n$ {' '.join(shlex.quote(a) for a in args)}", flush=True)


class BackgroundStep(NamedTuple):
  """A command of start_step running in the background, its output going to log."""
  title: str
  process: subprocess.Popen
  log: TextIO
  started: float


def start_step(title, args, log_path) -> BackgroundStep:
  """Prints and starts one command in the background, its output (stdout and stderr) going to
  log_path; finish_step waits for it."""
  announce(title, args, f" (in the background, beside the next steps; its log: {log_path})")
  log = open(log_path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
  process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
  return BackgroundStep(title, process, log, time.time())


def finish_step(step: BackgroundStep, tail=30):
  """Waits for a step of start_step; exits with its log's last `tail` lines if it failed."""
  returncode = step.process.wait()
  step.log.close()
  if returncode != 0:
    with open(step.log.name, encoding="utf-8", errors="replace") as f:
      sys.stdout.writelines(f.readlines()[-tail:])
    sys.exit(f"run_sample: step '{step.title}' failed with exit code {returncode} (its log: "
             f"{step.log.name})")
  print(f"\n({step.title}: finished in the background, {time.time() - step.started:.1f} s "
        "after it started)", flush=True)


def stop_step(step: BackgroundStep):
  """Ends a background step that is still running (the job stopped before it was waited for)."""
  process, log = step.process, step.log
  if process.poll() is None:
    process.terminate()
    try:
      process.wait(timeout=30)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
  log.close()


def read_results(path):
  """eval_results.txt ("key = value" lines) as {key: float}."""
  results = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      key, sep, value = line.partition(" = ")
      if sep:
        try:
          results[key.strip()] = float(value)
        except ValueError:
          pass
  return results


def seconds_per_step(lines, batch_size):
  """Mean training seconds per step from run_pretraining's progress lines (the first, which
  includes tracing and compilation, left out); None without two such lines."""
  rates = [float(m.group(2)) for m in map(STEP_LINE.search, lines) if m]
  rates = [r for r in rates[1:] if r > 0]
  if not rates:
    return None
  return batch_size * len(rates) / sum(rates)


def read_dev_labels(path):
  """The labels of dev.tsv (sentence, label), in file order."""
  with open(path, encoding="utf-8") as f:
    header, *rows = f.read().splitlines()
  if header.split("\t") != ["sentence", "label"]:
    raise ValueError(f"{path}: expected the header sentence<TAB>label, got {header!r}")
  return [row.rsplit("\t", 1)[1] for row in rows]


def read_predicted_labels(path):
  """The predicted labels of run_classifier's test_predictions.tsv (guid, label, one column per
  class), in file order."""
  with open(path, encoding="utf-8") as f:
    header, *rows = f.read().splitlines()
  if header.split("\t")[:2] != ["guid", "label"]:
    raise ValueError(f"{path}: expected the columns guid, label, ..., got {header!r}")
  return [row.split("\t")[1] for row in rows]


def seeded_comparison(labels, pretrained, random_init):
  """The pretrained-vs-random figures over several fine-tuning seeds.

  pretrained and random_init hold one list of predicted dev labels per seed, in the same seed
  order (seed k of one side is paired with seed k of the other: the same data order and head
  initialisation). The difference is that of the mean accuracies; its standard error has two
  parts, added in quadrature: the seeds' (the sample standard deviation of the per-seed
  differences over sqrt(seeds): how far another set of seeds would move it; 0 for one seed)
  and the dev lines' (the sample standard deviation over the lines of the per-line difference
  of the seed-averaged correctness, over sqrt(lines): how far other dev lines would move it).
  """
  if len(pretrained) != len(random_init) or not pretrained:
    raise ValueError(f"{len(pretrained)} pretrained and {len(random_init)} random runs: one "
                     "of each per seed")
  n = len(labels)
  for answers in (*pretrained, *random_init):
    if len(answers) != n:
      raise ValueError(f"{n} dev labels but {len(answers)} predictions")

  def correct(runs):  # per line, the share of the runs that got it right
    return [sum(run[i] == labels[i] for run in runs) / len(runs) for i in range(n)]

  per_line = [p - r for p, r in zip(correct(pretrained), correct(random_init))]
  accuracies_p = [sum(map(str.__eq__, labels, run)) / n for run in pretrained]
  accuracies_r = [sum(map(str.__eq__, labels, run)) / n for run in random_init]
  per_seed = [p - r for p, r in zip(accuracies_p, accuracies_r)]
  seeds = len(per_seed)
  difference = sum(per_line) / n
  line_variance = sum((d - difference) ** 2 for d in per_line) / max(n - 1, 1)
  seed_variance = (sum((d - difference) ** 2 for d in per_seed) / (seeds - 1)
                   if seeds > 1 else 0.0)
  se_lines = math.sqrt(line_variance / n)
  se_seeds = math.sqrt(seed_variance / seeds)
  return dict(
      dev_examples=n,
      dev_accuracies_pretrained=accuracies_p, dev_accuracies_random_init=accuracies_r,
      dev_accuracy_pretrained=sum(accuracies_p) / seeds,
      dev_accuracy_random_init=sum(accuracies_r) / seeds,
      difference=difference, seed_differences=per_seed,
      standard_error_lines=se_lines, standard_error_seeds=se_seeds,
      standard_error_difference=math.sqrt(se_lines ** 2 + se_seeds ** 2),
      dev_lines_pretrained_ahead=sum(d > 0 for d in per_line),
      dev_lines_random_init_ahead=sum(d < 0 for d in per_line))


def write_json(path, value):
  """Writes value as JSON under a temporary name, then renames it (never a partial file)."""
  temp = f"{path}.incomplete-{os.getpid()}"
  with open(temp, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(temp, path)


def seed_list(text):
  """--seeds: distinct non-negative integers, comma-separated."""
  try:
    seeds = tuple(int(part) for part in text.split(","))
  except ValueError:
    raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")
  if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
    raise argparse.ArgumentTypeError(f"give each seed once, none below 0: {text!r}")
  return seeds


def build_parser():
  """The job's command-line flags (the README's commands are checked against them)."""
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--output_dir", default="sample_output")
  parser.add_argument("--pretraining_steps", type=int, default=PRETRAINING_STEPS,
                      help="masked-LM / next-sentence updates (default %(default)s)")
  parser.add_argument("--seeds", type=seed_list, default=SEEDS,
                      help="the fine-tuning seeds, comma-separated: both models are fine-tuned "
                           "under each (default " + ",".join(map(str, SEEDS)) + ")")
  return parser


def main():
  parser = build_parser()
  args = parser.parse_args()
  if args.pretraining_steps < 1:
    parser.error(f"--pretraining_steps must be at least 1, got {args.pretraining_steps}")
  job_started = time.time()
  os.makedirs(args.output_dir, exist_ok=True)
  vocab = os.path.join(args.output_dir, "vocab.txt")
  python = sys.executable
  steps = args.pretraining_steps

  run_step("learn a WordPiece vocab from the sample", [
      python, os.path.join(HERE, "build_vocab.py"), f"--input_file={SAMPLE}",
      f"--vocab_file={vocab}", f"--vocab_size={VOCAB_SIZE}", "--num_unused=0",
      "--do_lower_case=True", "--overwrite"])
  run_step("tokenize the sample with it", [
      python, os.path.join(HERE, "tokenize_text.py"), f"--input_file={SAMPLE}",
      f"--vocab_file={vocab}", "--do_lower_case=True",
      f"--output_file={os.path.join(args.output_dir, 'sample_tokens.txt')}", "--overwrite"])
  records = os.path.join(args.output_dir, "pretraining_data.tfrecord")
  run_step("make masked-LM / next-sentence pretraining records", [
      python, os.path.join(HERE, "create_pretraining_data.py"), f"--input_file={SAMPLE}",
      f"--output_file={records}", f"--vocab_file={vocab}", "--do_lower_case=True",
      f"--max_seq_length={MAX_SEQ_LENGTH}",
      f"--max_predictions_per_seq={MAX_PREDICTIONS_PER_SEQ}", f"--dupe_factor={DUPE_FACTOR}",
      "--overwrite"])

  # A tiny BERT whose vocab_size is the learned vocab's, without dropout and with wider initial
  # weights (see the top).
  with open(os.path.join(REPO_ROOT, "configs", "bert_config_tiny.json")) as f:
    config = json.load(f)
  with open(vocab, encoding="utf-8") as f:
    config["vocab_size"] = sum(1 for _ in f)
  config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                initializer_range=0.05)
  config_file = os.path.join(args.output_dir, "bert_config.json")
  write_json(config_file, config)
  train_dir = os.path.join(args.output_dir, "pretraining")
  shutil.rmtree(train_dir, ignore_errors=True)  # otherwise the run would resume the last one
  lines = run_step(f"pretrain a tiny BERT for {steps} steps, evaluate and export it", [
      python, "-m", "bert_tf.run_pretraining", f"--bert_config_file={config_file}",
      f"--input_file={records}", f"--output_dir={train_dir}", f"--vocab_file={vocab}",
      "--do_lower_case=True", "--do_train", "--do_eval", "--dynamic_masking",
      f"--max_seq_length={MAX_SEQ_LENGTH}", f"--max_predictions_per_seq={MAX_PREDICTIONS_PER_SEQ}",
      f"--train_batch_size={PRETRAINING_BATCH_SIZE}", f"--num_train_steps={steps}",
      f"--num_warmup_steps={min(PRETRAINING_WARMUP_STEPS, steps // 10)}",
      f"--learning_rate={PRETRAINING_LEARNING_RATE}", f"--save_checkpoints_steps={steps}",
      "--iterations_per_loop=50", "--max_eval_steps=50", "--eval_batch_size=32"],
      capture=True)
  pretraining = read_results(os.path.join(train_dir, "eval_results.txt"))
  step_seconds = seconds_per_step(lines, PRETRAINING_BATCH_SIZE)
  task_dir = os.path.join(args.output_dir, "dialogue_task")
  sizes = write_dialogue_task(SAMPLE, task_dir)
  print(f"\nWrote a classification task from the sample to {task_dir}/ (train/dev/test.tsv: "
        f"{sizes['train']}/{sizes['dev']}/{sizes['test']} lines, sentence, label = dialogue or "
        "narration, quotation marks removed)")
  classifier = ["-m", "bert_tf.run_classifier", "--task_name=generic", f"--data_dir={task_dir}",
                "--text_a_column=sentence", "--label_column=label",
                f"--bert_config_file={config_file}", f"--vocab_file={vocab}",
                "--do_lower_case=True", "--do_train", "--do_eval", *FINE_TUNING_FLAGS,
                "--iterations_per_loop=16",
                # The dev lines as the prediction file: each line's answer, for the paired
                # comparison.
                "--do_predict", "--test_file=dev.tsv"]
  classifier_dir = os.path.join(args.output_dir, "classifier")
  random_dir = os.path.join(args.output_dir, "classifier_random_init")
  for directory in (classifier_dir, random_dir):
    shutil.rmtree(directory, ignore_errors=True)
  seeds = f"--seeds={','.join(map(str, args.seeds))}"
  # Started after pretraining, not beside it, so that the pretraining step time it reports is
  # the machine's alone.
  random_init = start_step(
      f"fine-tune from random initialisation (no --init_checkpoint) under {len(args.seeds)} "
      "seed(s): train, evaluate, predict dev",
      [python, *classifier, seeds, "--noexport", f"--output_dir={random_dir}"],
      os.path.join(args.output_dir, "classifier_random_init.log"))
  try:
    text_model = os.path.join(train_dir, "export", "bert", str(steps))
    lines = run_step("ask the exported text model (TensorFlow + tensorflow-text only) to fill "
                     "masks", [python, "-c", QUERY_EXPORT, text_model,
                               json.dumps(FILL_MASK_TEXTS)],
                     capture=True, plain_tensorflow=True)
    fill_mask = json.loads(next(line for line in reversed(lines) if line.startswith("[{")))
    run_step("the same fine-tuning from the pretrained model under the same seed(s), each in "
             "its folder: train, evaluate, predict dev, export", [
                 python, *classifier, seeds, f"--init_checkpoint={train_dir}",
                 f"--output_dir={classifier_dir}"])
    finish_step(random_init)
  finally:
    stop_step(random_init)

  def predictions(directory):
    return [read_predicted_labels(os.path.join(directory, f"seed_{seed}", "test_predictions.tsv"))
            for seed in args.seeds]

  figures = seeded_comparison(read_dev_labels(os.path.join(task_dir, "dev.tsv")),
                              predictions(classifier_dir), predictions(random_dir))
  first_seed = os.path.join(classifier_dir, f"seed_{args.seeds[0]}")
  fine_tuning_steps = int(read_results(os.path.join(first_seed, "eval_results.txt"))["global_step"])
  run_step("ask the exported classifier (TensorFlow + tensorflow-text only)", [
      python, "-c", QUERY_CLASSIFIER,
      os.path.join(first_seed, "export", "classifier", str(fine_tuning_steps))],
      plain_tensorflow=True)

  summary = dict(
      pretraining_steps=steps,
      pretraining_batch_size=PRETRAINING_BATCH_SIZE,
      max_seq_length=MAX_SEQ_LENGTH,
      vocab_size=config["vocab_size"],
      seconds_per_pretraining_step=step_seconds,
      masked_lm_accuracy=pretraining.get("masked_lm_accuracy"),
      masked_lm_loss=pretraining.get("masked_lm_loss"),
      next_sentence_accuracy=pretraining.get("next_sentence_accuracy"),
      fill_mask=fill_mask,
      fine_tuning_steps=fine_tuning_steps,
      fine_tuning_seeds=list(args.seeds),
      train_examples=sizes["train"],
      **figures,
      wall_time_seconds=time.time() - job_started)
  write_json(os.path.join(args.output_dir, "summary.json"), summary)

  print(f"\n=== what pretraining bought (the same fine-tuning: {fine_tuning_steps} steps on "
        f"{sizes['train']} training lines, under seeds {', '.join(map(str, args.seeds))})")
  print(f"  masked-LM accuracy after {steps} pretraining steps: "
        f"{pretraining.get('masked_lm_accuracy', float('nan')):.3f}")
  for name, key in (("the pretrained model", "pretrained"),
                    ("random initialisation", "random_init")):
    print(f"  dev accuracy, fine-tuned from {name}: {figures['dev_accuracy_' + key]:.3f} (per "
          f"seed: {', '.join(f'{a:.3f}' for a in figures['dev_accuracies_' + key])})")
  print(f"  difference: {figures['difference']:+.3f} (per seed: "
        f"{', '.join(f'{d:+.3f}' for d in figures['seed_differences'])}); standard error "
        f"{figures['standard_error_difference']:.4f} ({figures['standard_error_seeds']:.4f} "
        f"from the seeds, {figures['standard_error_lines']:.4f} from the {sizes['dev']} dev "
        f"lines): {figures['difference'] / figures['standard_error_difference']:.1f} standard "
        f"errors ({figures['dev_lines_pretrained_ahead']} lines the pretrained runs got right "
        f"more often, {figures['dev_lines_random_init_ahead']} the random ones)")
  print(f"\nSample pipeline done in {summary['wall_time_seconds'] / 60:.1f} min; outputs are in "
        f"{args.output_dir}/ (headline figures: {args.output_dir}/summary.json)")


if __name__ == "__main__":
  main()
